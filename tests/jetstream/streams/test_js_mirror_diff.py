"""Mirrors and sources within one server, the same scenario against edged and nats-server: configs as
reported, validation errors, the mirror's sequences (gaps included), the sources' `Nats-Stream-Source`
headers and subject transforms, stream info's `mirror` / `sources` state, and where a source resumes
after a restart."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import pytest

from tests.support.aio import run
from tests.support.jsutil import api as _req
from tests.support.jsutil import replies_of_both


def _state(info: dict[str, Any]) -> dict[str, Any]:
    st = dict(info["state"])
    st.pop("first_ts", None)
    st.pop("last_ts", None)
    return st


def _cfg(resp: dict[str, Any]) -> Any:
    """A create response's config without nats-server's own `_nats.*` metadata."""
    cfg = dict(resp.get("config") or resp)
    cfg.pop("metadata", None)
    cfg.pop("allow_msg_ttl", None)  # 2.15 reports it false; edged (like 2.10) leaves it out
    return cfg


def _sync_info(d: dict[str, Any] | None) -> dict[str, Any] | None:
    """A mirror's or source's info without its timing; `active` says only whether it was heard from."""
    if d is None:
        return None
    d = dict(d)
    d["active"] = d["active"] >= 0
    return d


async def _msgs(nc: Any, stream: str, last: int) -> list[tuple[Any, ...]]:
    """(seq, subject, data, headers without the origin's stream identity) of every stored message."""
    out = []
    for seq in range(1, last + 1):
        r = await _req(nc, f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})
        if "error" in r:
            out.append((seq, r["error"]["err_code"]))
            continue
        m = r["message"]
        hdrs = base64.b64decode(m.get("hdrs", "")).decode()
        # nats-server 2.15 appends the origin's stream identity (6th field); edged's origins send none
        hdrs = "\r\n".join(" ".join(line.split(" ")[:6]) if line.startswith("Nats-Stream-Source:") else line
                           for line in hdrs.split("\r\n"))
        out.append((m["seq"], m["subject"], base64.b64decode(m.get("data", "")), hdrs))
    return out


async def _until_msgs(nc: Any, stream: str, n: int, timeout: float = 10.0) -> dict[str, Any]:
    """The stream's info once it holds `n` messages (polled, bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        info = await _req(nc, f"$JS.API.STREAM.INFO.{stream}", {})
        if info["state"]["messages"] >= n:
            return info
        if time.monotonic() > deadline:
            raise AssertionError(f"{stream}: {info['state']['messages']} of {n} messages: {info}")
        await asyncio.sleep(0.05)


def test_mirror_and_sources_same_as_nats_server() -> None:
    async def scenario(url: str) -> list[Any]:
        import nats
        nc = await nats.connect(url)
        out: list[Any] = []
        try:
            await _req(nc, "$JS.API.STREAM.CREATE.ORIGIN", {"name": "ORIGIN", "subjects": ["o.>"]})
            await _req(nc, "$JS.API.STREAM.CREATE.OTHER", {"name": "OTHER", "subjects": ["p.>"]})
            js = nc.jetstream()
            for i in range(6):
                await js.publish(f"o.{i % 2}", b"m%d" % i, headers={"Nats-Msg-Id": f"id{i}", "X-K": str(i)})
            await js.publish("p.a", b"other")
            # the origin's own gap: the mirror keeps its sequences
            await _req(nc, "$JS.API.STREAM.MSG.DELETE.ORIGIN", {"seq": 3})
            r = await _req(nc, "$JS.API.STREAM.CREATE.MIR", {"name": "MIR", "mirror": {"name": "ORIGIN"}})
            out.append(("mirror config", _cfg(r)))
            info = await _until_msgs(nc, "MIR", 5)
            out.append(("mirror state", _state(info), _sync_info(info.get("mirror"))))
            out.append(("mirror msgs", await _msgs(nc, "MIR", 6)))
            # more after the mirror caught up, and a publish nobody takes
            await js.publish("o.9", b"late")
            info = await _until_msgs(nc, "MIR", 6)
            out.append(("mirror after", _state(info)))
            try:
                await nc.request("MIR", b"x", timeout=1)
                out.append("publish into a mirror answered")
            except Exception as e:
                out.append(("publish into a mirror", type(e).__name__))
            # a filtered mirror with transforms: the origin's sequences, what it does not take left as gaps
            r = await _req(nc, "$JS.API.STREAM.CREATE.MIRT", {"name": "MIRT", "mirror": {
                "name": "ORIGIN", "subject_transforms": [{"src": "o.1", "dest": "m.one"}, {"src": "o.9", "dest": ""}]}})
            out.append(("filtered mirror config", _cfg(r)))
            info = await _until_msgs(nc, "MIRT", 4)
            out.append(("filtered mirror", _state(info), _sync_info(info.get("mirror"))))
            out.append(("filtered mirror msgs", await _msgs(nc, "MIRT", info["state"]["last_seq"])))
            src_cfg = {"name": "AGG", "subjects": ["agg.>"], "sources": [
                {"name": "ORIGIN", "subject_transforms": [{"src": "o.0", "dest": "agg.zero"},
                                                           {"src": "o.1", "dest": "agg.one"}]},
                {"name": "OTHER", "filter_subject": "p.>"}]}
            r = await _req(nc, "$JS.API.STREAM.CREATE.AGG", src_cfg)
            out.append(("sources config", _cfg(r)))
            info = await _until_msgs(nc, "AGG", 6)
            srcs = sorted((_sync_info(s) for s in info.get("sources", [])), key=lambda s: s["name"])
            out.append(("sources state", info["state"]["messages"], srcs))
            msgs = await _msgs(nc, "AGG", info["state"]["last_seq"])
            # two origins interleave in no fixed order: per origin, in order
            out.append(("sources msgs", sorted(m[1:] for m in msgs)))
            # the stream's own subjects still take publishes
            ack = await js.publish("agg.own", b"own")
            out.append(("own publish", ack.stream))
        finally:
            await nc.close()
        return out

    res = replies_of_both(scenario, "mirror-")
    for a, b in zip(res["edged"], res["nats-server"], strict=True):
        assert a == b, f"\n{a}\n!=\n{b}"


def test_bad_mirror_and_source_configs_same_errors() -> None:
    bad = [
        {"name": "B1", "mirror": {"name": "ORIGIN"}, "subjects": ["x"]},
        {"name": "B2", "mirror": {"name": "B2"}},
        {"name": "B3", "mirror": {"name": "ORIGIN"}, "sources": [{"name": "ORIGIN"}]},
        {"name": "B4", "mirror": {"name": "a.b"}},
        {"name": "B5", "sources": [{"name": "ORIGIN"}, {"name": "ORIGIN"}]},
        {"name": "B6", "sources": [{"name": "a*"}]},
        {"name": "B7", "mirror": {"name": "ORIGIN", "filter_subject": "o.1",
                                  "subject_transforms": [{"src": "o.1", "dest": "x"}]}},
        {"name": "B8", "mirror": {"name": "ORIGIN", "opt_start_seq": 2,
                                  "opt_start_time": "2024-01-01T00:00:00Z"}},
        {"name": "B9", "mirror": {"name": "ORIGIN", "external": {"api": "$JS.API"}}},
        {"name": "B10", "mirror": {"name": "ORIGIN", "external": {"api": "$JS.*.API"}}},
        {"name": "B11", "mirror": {"name": "ORIGIN"}, "first_seq": 5},
        {"name": "B12", "mirror": {"name": "ORIGIN", "subject_transforms": [
            {"src": "o.*", "dest": "x.{{wildcard(1)}}"}, {"src": "o.1", "dest": "y"}]}},
    ]

    async def scenario(url: str) -> list[Any]:
        import nats
        nc = await nats.connect(url)
        try:
            await _req(nc, "$JS.API.STREAM.CREATE.ORIGIN", {"name": "ORIGIN", "subjects": ["o.>"]})
            out = []
            for cfg in bad:
                r = await _req(nc, f"$JS.API.STREAM.CREATE.{cfg['name']}", cfg)
                out.append((cfg["name"], r.get("error")))
            # a mirror may not change its mirror, but it may be promoted
            await _req(nc, "$JS.API.STREAM.CREATE.MM", {"name": "MM", "mirror": {"name": "ORIGIN"}})
            r = await _req(nc, "$JS.API.STREAM.UPDATE.MM", {"name": "MM", "mirror": {"name": "OTHER"}})
            out.append(("update", r.get("error")))
            return out
        finally:
            await nc.close()

    res = replies_of_both(scenario, "mirror-bad-")
    assert res["edged"] == res["nats-server"]
    assert sum(e is None for _, e in res["edged"]) == 1  # B8: start seq and time together pass (2.11+)


def test_mirror_of_missing_stream_reports_the_error(start_server: Any) -> None:
    """A mirror of a stream that does not exist: its info carries the origin's answer, 10059, and it keeps
    retrying, one request per backoff step (2 s, then 10 s more per failure), not a flood."""
    async def main(url: str) -> None:
        import nats
        nc = await nats.connect(url)
        try:
            creates: list[str] = []
            async def seen(m: Any) -> None:
                creates.append(m.subject)
            spy = await nc.subscribe("$JS.API.CONSUMER.CREATE.>", cb=seen)
            r = await _req(nc, "$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "NOPE"}})
            assert r["mirror"] == {"name": "NOPE", "lag": 0, "active": -1}  # as nats-server: not tried yet
            for _ in range(100):
                r = await _req(nc, "$JS.API.STREAM.INFO.M", {})
                if "error" in r["mirror"]:
                    break
                await asyncio.sleep(0.02)
            assert r["mirror"]["error"] == {"code": 404, "err_code": 10059, "description": "stream not found"}
            await _req(nc, "$JS.API.STREAM.CREATE.NOPE", {"name": "NOPE", "subjects": ["n"]})
            await nc.jetstream().publish("n", b"1")
            await spy.unsubscribe()
            assert len(creates) == 1  # the second attempt waits its backoff (2 s + 10 s)
        finally:
            await nc.close()

    import tempfile
    p = start_server("edged", ["-js", "-sd", tempfile.mkdtemp(prefix="mir-")])
    run(main(p.url))


@pytest.mark.parametrize("kill", [False, True])
def test_source_resumes_after_restart_without_duplicates(start_server: Any, kill: bool) -> None:
    """A source remembers nothing but its stored messages: after a restart (or kill -9) it resumes after
    the origin sequence in the last `Nats-Stream-Source` header, and the mirror after its last sequence."""
    import tempfile

    import nats
    p = start_server("edged", ["-js", "-sd", tempfile.mkdtemp(prefix="mir-rs-")])

    async def phase1() -> None:
        nc = await nats.connect(p.url)
        js = nc.jetstream()
        await _req(nc, "$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"]})
        for i in range(5):
            await js.publish("o.x", b"%d" % i)
        await _req(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "sources": [{"name": "O"}]})
        await _req(nc, "$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "O"}})
        await _until_msgs(nc, "S", 5)
        await _until_msgs(nc, "M", 5)
        await nc.flush()
        await nc.close()

    async def phase2() -> None:
        nc = await nats.connect(p.url)
        js = nc.jetstream()
        for i in range(5, 8):
            await js.publish("o.x", b"%d" % i)
        s = await _until_msgs(nc, "S", 8)
        m = await _until_msgs(nc, "M", 8)
        assert s["state"]["messages"] == 8 and s["state"]["last_seq"] == 8, s["state"]
        assert m["state"]["last_seq"] == 8
        got = [x[2] for x in await _msgs(nc, "S", 8)]
        assert got == [b"%d" % i for i in range(8)]
        await nc.close()

    run(phase1())
    if kill:
        import time
        time.sleep(0.3)  # the last commit (sync_interval is about fsync, rows are committed at once)
        p.kill9()
    else:
        p.stop()
    p.start()
    run(phase2())


def test_mirror_front_sources_update_and_dedupe_same_as_nats_server() -> None:
    """A mirror of an origin whose front was purged starts at the origin's first sequence; a source added
    by an update starts syncing; a sourcing stream with a duplicate window drops a Nats-Msg-Id it has
    seen from another origin."""

    async def scenario(url: str) -> list[Any]:
        import nats
        nc = await nats.connect(url)
        out: list[Any] = []
        try:
            js = nc.jetstream()
            await _req(nc, "$JS.API.STREAM.CREATE.A", {"name": "A", "subjects": ["a.>"]})
            await _req(nc, "$JS.API.STREAM.CREATE.B", {"name": "B", "subjects": ["b.>"]})
            for i in range(5):
                await js.publish("a.x", b"%d" % i, headers={"Nats-Msg-Id": f"m{i}"})
            await _req(nc, "$JS.API.STREAM.PURGE.A", {})
            for i in range(5, 7):
                await js.publish("a.x", b"%d" % i, headers={"Nats-Msg-Id": f"m{i}"})
            await js.publish("b.x", b"dup", headers={"Nats-Msg-Id": "m6"})
            await js.publish("b.x", b"new", headers={"Nats-Msg-Id": "b1"})
            await _req(nc, "$JS.API.STREAM.CREATE.MA", {"name": "MA", "mirror": {"name": "A"}})
            info = await _until_msgs(nc, "MA", 2)
            out.append(("purged front", _state(info)))
            r = await _req(nc, "$JS.API.STREAM.CREATE.D", {"name": "D", "duplicate_window": 60_000_000_000,
                                                           "sources": [{"name": "A"}]})
            out.append(("dedupe config", _cfg(r).get("duplicate_window")))
            await _until_msgs(nc, "D", 2)
            r = await _req(nc, "$JS.API.STREAM.UPDATE.D", {"name": "D", "duplicate_window": 60_000_000_000,
                                                           "sources": [{"name": "A"}, {"name": "B"}]})
            out.append(("update", r.get("error"), len(_cfg(r).get("sources", []))))
            info = await _until_msgs(nc, "D", 3)
            await asyncio.sleep(0.5)  # a duplicate stored late would show now
            info = await _req(nc, "$JS.API.STREAM.INFO.D", {})
            msgs = await _msgs(nc, "D", info["state"]["last_seq"])
            out.append(("dedupe", info["state"]["messages"], sorted(m[2] for m in msgs)))
        finally:
            await nc.close()
        return out

    res = replies_of_both(scenario, "mirror-more-")
    for a, b in zip(res["edged"], res["nats-server"], strict=True):
        assert a == b, f"\n{a}\n!=\n{b}"
