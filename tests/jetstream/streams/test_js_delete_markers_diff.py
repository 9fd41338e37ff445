"""Subject delete markers (nats-server 2.11, `subject_delete_marker_ttl`), differential: the config rules,
the marker a max-age or TTL expiry leaves on the last message of a subject (its headers, subject, sequence,
its own expiry), the TTL floor it puts on published messages, what a nats-py KV watcher makes of it, and
that markers are stored and still placed across a restart and a kill -9."""

from __future__ import annotations

import asyncio
import base64
import tempfile
import time
from collections.abc import Callable
from typing import Any

import nats
import pytest

from tests.support.aio import eventually, run
from tests.support.jsutil import api, session
from tests.support.servers import KINDS, ServerProcess

S = 1_000_000_000


def _hdrs(m: dict[str, Any]) -> dict[str, str]:
    """The headers of a STREAM.MSG.GET message as a dict (status line left out)."""
    raw = base64.b64decode(m.get("hdrs", "")).decode()
    return dict(line.split(": ", 1) for line in raw.split("\r\n")[1:] if ": " in line)


async def _state(nc: Any, stream: str) -> dict[str, Any]:
    st = (await api(nc, f"$JS.API.STREAM.INFO.{stream}", {}))["state"]
    return {k: st.get(k, 0) for k in ("messages", "first_seq", "last_seq", "num_subjects")}


async def _get(nc: Any, stream: str, seq: int) -> Any:
    r = await api(nc, f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})
    if "error" in r:
        return r["error"]["err_code"]
    m = r["message"]
    return m["subject"], m["seq"], _hdrs(m), m.get("data", "")


def test_config_rules(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        out: list[Any] = []
        for name, extra in (("OK", {}), ("SUB", {"subject_delete_marker_ttl": S // 2}),
                            ("NEG", {"subject_delete_marker_ttl": -S}),
                            ("PED", {"pedantic": True}), ("PEDR", {"pedantic": True, "allow_msg_ttl": True}),
                            ("PEDOK", {"pedantic": True, "allow_msg_ttl": True, "allow_rollup_hdrs": True}),
                            ("DP", {"deny_purge": True})):
            cfg = {"name": name, "subjects": [f"{name}.>"], "subject_delete_marker_ttl": 5 * S, **extra}
            r = await api(nc, "$JS.API.STREAM.CREATE." + name, cfg)
            if "error" in r:
                out.append((r["error"]["err_code"], r["error"]["description"]))
            else:
                c = r["config"]
                out.append({k: c.get(k) for k in ("subject_delete_marker_ttl", "allow_msg_ttl",
                                                  "allow_rollup_hdrs", "deny_purge")})
        r = await api(nc, "$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "OK"},
                                                     "subject_delete_marker_ttl": 5 * S})
        out.append((r["error"]["err_code"], r["error"]["description"]))
        # an update may change the marker TTL, or drop it; message TTLs stay on
        r = await api(nc, "$JS.API.STREAM.UPDATE.OK", {"name": "OK", "subjects": ["OK.>"], "allow_msg_ttl": True,
                                                      "allow_rollup_hdrs": True, "subject_delete_marker_ttl": 9 * S})
        out.append(r["config"].get("subject_delete_marker_ttl"))
        r = await api(nc, "$JS.API.STREAM.UPDATE.OK", {"name": "OK", "subjects": ["OK.>"], "allow_msg_ttl": True,
                                                      "allow_rollup_hdrs": True})
        out.append((r["config"].get("subject_delete_marker_ttl"), r["config"].get("allow_msg_ttl")))
        r = await api(nc, "$JS.API.STREAM.UPDATE.OK", {"name": "OK", "subjects": ["OK.>"]})
        out.append((r["error"]["err_code"], r["error"]["description"]))
        return out

    got = run(session(js_server, body))
    on = {"subject_delete_marker_ttl": 5 * S, "allow_msg_ttl": True, "allow_rollup_hdrs": True, "deny_purge": False}
    assert got == [
        on,
        (10052, "subject delete marker TTL must be at least 1 second"),
        (10052, "subject delete marker TTL must not be negative"),
        (10052, "subject delete marker cannot be set if message TTLs are disabled"),
        (10052, "subject delete marker cannot be set if roll-ups are disabled"),
        on,
        on,  # deny_purge gives way to the roll-ups markers need
        (10052, "subject delete markers forbidden on mirrors"),
        9 * S,
        (None, True),
        (10052, "message TTL status can not be disabled"),
    ]


async def _age_scenario(nc: Any, js: Any, storage: str = "file") -> list[Any]:
    """max_age 1 s, markers living 2 s: the last message of each subject is replaced by a marker, an older
    one of the same subject just goes; then the markers expire by age and by their TTL with no new marker."""
    await api(nc, "$JS.API.STREAM.CREATE.AGE", {"name": "AGE", "subjects": ["age.>"], "max_age": S,
                                                "subject_delete_marker_ttl": 2 * S, "storage": storage})
    sub = await js.subscribe("age.>", ordered_consumer=True)
    for subj in ("age.a", "age.a", "age.b"):
        await js.publish(subj, b"v")
    out: list[Any] = []

    async def two_markers() -> Any:
        st = await _state(nc, "AGE")
        return st if st["last_seq"] == 5 and st["messages"] == 2 else None

    out.append(await eventually(two_markers, 10, "markers placed"))
    out.append([await _get(nc, "AGE", seq) for seq in range(1, 6)])
    seen = []
    for _ in range(5):
        m = await sub.next_msg(5)
        h = dict(m.headers or {})
        h.pop("Nats-Sequence", None)
        seen.append((m.subject, m.data, h))
    out.append(seen)

    async def all_gone() -> Any:
        st = await _state(nc, "AGE")
        return st if st["messages"] == 0 else None

    out.append(await eventually(all_gone, 10, "markers expired"))
    await asyncio.sleep(1.5)  # a marker that expires leaves no marker of its own
    out.append(await _state(nc, "AGE"))
    return out


@pytest.mark.parametrize("storage", ["file", "memory"])
def test_max_age_leaves_markers(storage: str) -> None:
    res = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-js", "-sd", tempfile.mkdtemp(prefix="sdm-")]) as p:
            res[kind] = run(session(p, lambda nc, js: _age_scenario(nc, js, storage)))
    assert res["edged"] == res["nats-server"]
    got = res["edged"]
    marker = {"Nats-Marker-Reason": "MaxAge", "Nats-TTL": "2s", "Nats-Rollup": "sub"}
    assert got[0] == {"messages": 2, "first_seq": 4, "last_seq": 5, "num_subjects": 2}
    assert got[1] == [10037, 10037, 10037, ("age.a", 4, marker, ""), ("age.b", 5, marker, "")]
    assert [s[0] for s in got[2]] == ["age.a", "age.a", "age.b", "age.a", "age.b"]
    assert got[2][3][2] == marker
    assert got[3]["messages"] == 0 and got[4] == got[3]


async def _ttl_scenario(nc: Any, js: Any) -> list[Any]:
    """Per-message TTLs on a stream with markers of 2 s: a shorter TTL is raised to 2 s (its header says so,
    in seconds), `never` stays, the expiry of the last message of a subject leaves a marker."""
    await api(nc, "$JS.API.STREAM.CREATE.TTL", {"name": "TTL", "subjects": ["ttl.>"], "allow_msg_ttl": True,
                                                "subject_delete_marker_ttl": 2 * S})
    await js.publish("ttl.a", b"1", headers={"Nats-TTL": "1s"})
    await js.publish("ttl.b", b"2", headers={"Nats-TTL": "never"})
    await js.publish("ttl.c", b"3", headers={"Nats-TTL": "5"})
    out: list[Any] = [[await _get(nc, "TTL", s) for s in (1, 2, 3)]]

    async def marker() -> Any:
        return (await _state(nc, "TTL"))["last_seq"] == 4

    await eventually(marker, 10, "marker placed")
    out.append(await _get(nc, "TTL", 4))
    out.append(await _state(nc, "TTL"))
    return out


def test_ttl_floor_and_ttl_markers() -> None:
    res = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-js", "-sd", tempfile.mkdtemp(prefix="sdm-")]) as p:
            res[kind] = run(session(p, _ttl_scenario))
    assert res["edged"] == res["nats-server"]
    got = res["edged"]
    assert got[0][0][2] == {"Nats-TTL": "2"}  # raised to the marker TTL, in seconds
    assert got[0][1][2] == {"Nats-TTL": "never"} and got[0][2][2] == {"Nats-TTL": "5"}
    assert got[1] == ("ttl.a", 4, {"Nats-Marker-Reason": "MaxAge", "Nats-TTL": "2s", "Nats-Rollup": "sub"}, "")


async def _kv_scenario(nc: Any, js: Any) -> list[Any]:
    """A KV bucket with limit markers (the stream config nats-py's `limit_marker_ttl` makes, sent raw: nats-py
    asks for an API level first): a watcher sees a key that aged out as purged."""
    from nats.js.api import DiscardPolicy, StreamConfig

    await js.add_stream(StreamConfig(
        name="KV_LM", subjects=["$KV.LM.>"], allow_rollup_hdrs=True, allow_msg_ttl=True, deny_delete=True,
        discard=DiscardPolicy.NEW, duplicate_window=1, max_age=1, max_msgs_per_subject=1, allow_direct=True,
        subject_delete_marker_ttl=2))
    kv = await js.key_value("LM")
    w = await kv.watchall()
    assert await w.updates(timeout=2) is None  # no initial values
    await kv.put("k", b"v")
    out: list[Any] = []
    for _ in range(2):
        e = await w.updates(timeout=10)
        out.append((e.key, e.value, e.operation, e.revision))
    out.append(await _get(nc, "KV_LM", 2))
    await w.stop()
    return out


def test_kv_watcher_sees_limit_marker(js_server: ServerProcess) -> None:
    got = run(session(js_server, _kv_scenario))
    assert got == [("k", b"v", None, 1), ("k", b"", "PURGE", 2),
                   ("$KV.LM.k", 2, {"Nats-Marker-Reason": "MaxAge", "Nats-TTL": "2s", "Nats-Rollup": "sub"}, "")]


async def _kv_api_scenario(nc: Any, js: Any) -> list[Any]:
    """The same through nats-py's own API: `create_key_value(limit_marker_ttl=...)` asks the server's API
    level first (at least 1) and then makes the bucket with subject delete markers."""
    from nats.js.api import KeyValueConfig

    kv = await js.create_key_value(KeyValueConfig(bucket="LMA", ttl=1, limit_marker_ttl=2))
    cfg = (await js.stream_info("KV_LMA")).config
    w = await kv.watchall()
    assert await w.updates(timeout=2) is None
    await kv.put("k", b"v")
    out: list[Any] = [(cfg.subject_delete_marker_ttl, cfg.allow_msg_ttl, cfg.max_age)]
    for _ in range(2):
        e = await w.updates(timeout=10)
        out.append((e.key, e.value, e.operation, e.revision))
    await w.stop()
    return out


def test_natspy_kv_with_limit_marker_ttl(js_server: ServerProcess) -> None:
    got = run(session(js_server, _kv_api_scenario))
    assert got == [(2.0, True, 1.0), ("k", b"v", None, 1), ("k", b"", "PURGE", 2)]


@pytest.mark.parametrize("kind", KINDS)
def test_markers_survive_kill9_and_are_placed_after_restart(kind: str,
                                                           start_server: Callable[..., ServerProcess]) -> None:
    """A marker is stored like any message: there after kill -9. A message whose TTL ran out while the server
    was down gets its marker after the restart, not a silent removal. (One message per subject: the only
    case where a TTL below the marker's is kept.)"""
    p = start_server(kind, ["-js", "-sd", tempfile.mkdtemp(prefix="sdm-")])

    async def first() -> Any:
        nc = await nats.connect(p.url)
        js = nc.jetstream()
        await api(nc, "$JS.API.STREAM.CREATE.K", {"name": "K", "subjects": ["k.>"], "max_msgs_per_subject": 1,
                                                  "subject_delete_marker_ttl": 60 * S})
        await js.publish("k.a", b"1", headers={"Nats-TTL": "1s"})

        async def marked() -> Any:
            return (await _state(nc, "K"))["last_seq"] == 2

        await eventually(marked, 10, "marker placed")
        await js.publish("k.b", b"2", headers={"Nats-TTL": "1s"})
        await nc.close()

    run(first())
    p.kill9()
    time.sleep(1.5)  # k.b's TTL runs out while the server is down
    p.start()

    async def second() -> Any:
        nc = await nats.connect(p.url)
        try:
            async def marked() -> Any:
                return (await _state(nc, "K"))["last_seq"] == 4

            await eventually(marked, 10, "marker placed after restart")
            return [await _get(nc, "K", s) for s in (2, 3, 4)], await _state(nc, "K")
        finally:
            await nc.close()

    got = run(second())
    marker = {"Nats-Marker-Reason": "MaxAge", "Nats-TTL": "1m0s", "Nats-Rollup": "sub"}
    assert got[0] == [("k.a", 2, marker, ""), 10037, ("k.b", 4, marker, "")]
    assert got[1] == {"messages": 2, "first_seq": 2, "last_seq": 4, "num_subjects": 2}


async def _kv_purge_scenario(nc: Any, js: Any) -> list[Any]:
    """A KV purge marker with a TTL (nats-py `purge(key, msg_ttl=...)`) on a bucket with limit markers and a
    history of 5: it counts as a marker, so when it expires no MaxAge marker replaces it; a value whose
    history is longer than one message gets its marker only for the last of them."""
    from nats.js.api import DiscardPolicy, StreamConfig

    await js.add_stream(StreamConfig(
        name="KV_PM", subjects=["$KV.PM.>"], allow_rollup_hdrs=True, allow_msg_ttl=True, deny_delete=True,
        discard=DiscardPolicy.NEW, duplicate_window=1, max_msgs_per_subject=5, allow_direct=True,
        subject_delete_marker_ttl=1))
    kv = await js.key_value("PM")
    await kv.put("gone", b"1")
    await kv.purge("gone", msg_ttl=1)
    await kv.put("short", b"1")
    await kv.put("short", b"2")
    await js.publish("$KV.PM.short", b"3", headers={"Nats-TTL": "1"})
    out: list[Any] = [await _get(nc, "KV_PM", 2), await _get(nc, "KV_PM", 5)]

    async def settled() -> Any:
        st = await _state(nc, "KV_PM")
        return st if st["messages"] == 2 else None

    out.append(await eventually(settled, 15, "purge marker and the TTL'd value expired"))
    await asyncio.sleep(1.5)  # and nothing takes their place
    out.append(await _state(nc, "KV_PM"))
    out.append([(e.key, e.value, e.operation) async for e in _updates(await kv.watchall(include_history=True))])
    return out


async def _updates(w: Any) -> Any:
    for _ in range(20):
        e = await w.updates(timeout=2)
        if e is None:
            break
        yield e
    await w.stop()


def test_kv_purge_marker_with_ttl_is_a_marker() -> None:
    res = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-js", "-sd", tempfile.mkdtemp(prefix="sdm-")]) as p:
            res[kind] = run(session(p, _kv_purge_scenario))
    assert res["edged"] == res["nats-server"]
    got = res["edged"]
    assert got[0] == ("$KV.PM.gone", 2, {"KV-Operation": "PURGE", "Nats-Rollup": "sub", "Nats-TTL": "1"}, "")
    assert got[1] == ("$KV.PM.short", 5, {"Nats-TTL": "1"}, "Mw==")
    assert got[2] == got[3] == {"messages": 2, "first_seq": 3, "last_seq": 5, "num_subjects": 1}
    assert got[4] == [("short", b"1", None), ("short", b"2", None)]


async def _mirror_scenario(nc: Any, js: Any) -> list[Any]:
    """An origin with markers, its mirrors and a stream sourcing it: a copy expires by its `Nats-TTL` where
    the copying stream allows TTLs (the marker too), and is kept where it does not."""
    await api(nc, "$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"], "subject_delete_marker_ttl": 2 * S})
    for name, extra in (("M", {"mirror": {"name": "O"}, "allow_msg_ttl": True}), ("MN", {"mirror": {"name": "O"}}),
                        ("SRC", {"sources": [{"name": "O"}], "allow_msg_ttl": True})):
        await api(nc, f"$JS.API.STREAM.CREATE.{name}", {"name": name, **extra})
    await js.publish("o.a", b"1", headers={"Nats-TTL": "1"})
    await js.publish("o.b", b"2")

    async def copied() -> Any:
        return all([(await _state(nc, n))["last_seq"] >= 2 for n in ("M", "MN", "SRC")])

    await eventually(copied, 10, "copied")

    async def settled() -> Any:
        states = {n: await _state(nc, n) for n in ("O", "M", "MN", "SRC")}
        done = states["O"]["last_seq"] == 3 and all(states[n]["messages"] == 1 for n in ("O", "M", "SRC")) \
            and states["M"]["last_seq"] == 3 and states["SRC"]["last_seq"] == 3
        return states if done else None

    out: list[Any] = [await eventually(settled, 15, "expired everywhere")]
    out.append([await _get(nc, "MN", s) for s in (1, 3)])
    return out


def test_mirrors_and_sources_expire_copies_with_ttls() -> None:
    res = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-js", "-sd", tempfile.mkdtemp(prefix="sdm-")]) as p:
            res[kind] = run(session(p, _mirror_scenario))
    assert res["edged"] == res["nats-server"]
    got = res["edged"]
    assert got[0]["MN"] == {"messages": 3, "first_seq": 1, "last_seq": 3, "num_subjects": 2}
    marker = {"Nats-Marker-Reason": "MaxAge", "Nats-TTL": "2s", "Nats-Rollup": "sub"}
    assert got[1][1][2] == marker
