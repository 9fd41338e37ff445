"""edged mirroring and sourcing hub streams across the leafnode link (`external.api: $JS.hub.API`), with a
real nats-server hub: the same scenario with a nats-server leaf and with edged (stream info, messages,
sequences, headers), the outages (hub stopped, link cut while the hub takes commands, edged killed), a KV
bucket read from its mirror while the hub is down, and bad input."""

from __future__ import annotations

import asyncio
import base64
import tempfile
import time
from collections.abc import Callable
from typing import Any

import nats
import nats.js.errors
import pytest

from tests.support.aio import eventually as _wait
from tests.support.aio import run
from tests.support.jsutil import api as _req
from tests.support.jsutil import read_stream
from tests.support.leaf import Hub, hub_binary
from tests.support.servers import KINDS, ServerProcess, free_port
from tests.support.tcpproxy import TCPProxy

HUB_JS_CONF = """
server_name: hub1
jetstream { store_dir: "./js", domain: hub }
leafnodes { port: $LEAF_PORT }
accounts { APP { jetstream: enabled, users: [ {user: leaf, password: s3cret}, {user: app, password: app} ] } }
"""

# ignore_discovered_servers: the hub advertises its own leafnode URL, and a leaf that learned it would
# reconnect around a cutting proxy (the outage would not happen)
LEAF_CONF = """
server_name: leaf1
jetstream {{ store_dir: "{store}", domain: leaf }}
leafnodes {{ reconnect: 1s, remotes: [ {{ urls: ["nats://leaf:s3cret@127.0.0.1:{leaf_port}"], account: APP,
  ignore_discovered_servers: true }} ] }}
accounts {{ APP {{ jetstream: enabled, users: [ {{user: app, password: app}} ] }} }}
"""

MIRROR = {"name": "commands", "mirror": {"name": "commands", "external": {"api": "$JS.hub.API", "deliver": ""}}}


def _leaf(start_server: Callable[..., ServerProcess], kind: str, leaf_port: int) -> ServerProcess:
    store = tempfile.mkdtemp(prefix=f"leafjs-{kind}-")
    return start_server(kind, config=LEAF_CONF.format(store=store, leaf_port=leaf_port))


async def _connect(srv: ServerProcess) -> Any:
    return await nats.connect(f"nats://app:app@127.0.0.1:{srv.port}", max_reconnect_attempts=-1,
                              reconnect_time_wait=0.2)




async def _linked(nc: Any) -> bool:
    """The leaf reaches the hub's JetStream."""
    r = await _req(nc, "$JS.hub.API.INFO", {}, timeout=1)
    return "error" not in r


async def _last(nc: Any, stream: str, seq: int) -> dict[str, Any] | None:
    info = await _req(nc, f"$JS.API.STREAM.INFO.{stream}", {}, timeout=1)
    return info if info.get("state", {}).get("last_seq", -1) >= seq else None


async def _count(nc: Any, stream: str, n: int) -> dict[str, Any] | None:
    info = await _req(nc, f"$JS.API.STREAM.INFO.{stream}", {}, timeout=1)
    return info if info.get("state", {}).get("messages", -1) >= n else None


async def _msgs(nc: Any, stream: str, first: int, last: int) -> list[tuple[Any, ...]]:
    out = []
    for seq in range(first, last + 1):
        r = await _req(nc, f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})
        if "error" in r:
            out.append((seq, r["error"]["err_code"]))
            continue
        m = r["message"]
        hdrs = base64.b64decode(m.get("hdrs", "")).decode()
        # the origin stream's identity (a 2.15 hub's 6th field) is the hub's, the same for both leaves
        out.append((m["seq"], m["subject"], base64.b64decode(m.get("data", "")), hdrs, m["time"]))
    return out


def _sync_view(d: dict[str, Any] | None) -> dict[str, Any] | None:
    if d is None:
        return None
    d = dict(d)
    d["active"] = d["active"] >= 0
    return d


async def _publish_commands(hc: Any, first: int, n: int) -> None:
    js = hc.jetstream()
    for i in range(first, first + n):
        await js.publish(f"cmd.dev{i % 3}", b"command %d" % i, headers={"Cmd-Id": str(i), "Nats-Msg-Id": f"c{i}"})


# ---------------------------------------------------------------------------------- differential


def test_mirror_and_sources_from_hub_same_as_nats_server_leaf(
        hub_bin: str, start_hub: Callable[..., Hub], start_server: Callable[..., ServerProcess]) -> None:
    """The hub's `commands` mirrored into domain leaf, and two hub streams sourced into one leaf stream
    with subject transforms: the leaf's stream info, messages, sequences and headers are the same with a
    nats-server leaf as with edged."""
    results: dict[str, Any] = {}
    for kind in KINDS:
        hub = start_hub(hub_bin, HUB_JS_CONF)
        leaf = _leaf(start_server, kind, hub.leaf_port)

        async def scenario(hub: Hub, leaf: ServerProcess) -> list[Any]:
            hc = await nats.connect(f"nats://app:app@127.0.0.1:{hub.port}")
            lc = await _connect(leaf)
            out: list[Any] = []
            try:
                await _req(hc, "$JS.API.STREAM.CREATE.commands", {"name": "commands", "subjects": ["cmd.>"]})
                await _req(hc, "$JS.API.STREAM.CREATE.alerts", {"name": "alerts", "subjects": ["alert.>"]})
                await _publish_commands(hc, 0, 5)
                await hc.jetstream().publish("alert.fire", b"hot", headers={"Level": "9"})
                # an origin gap the mirror keeps
                await _req(hc, "$JS.API.STREAM.MSG.DELETE.commands", {"seq": 2})
                await _wait(lambda: _linked(lc), 15, "leaf linked")
                r = await _req(lc, "$JS.API.STREAM.CREATE.commands", MIRROR)
                out.append(("created", "error" in r, r.get("config", {}).get("mirror")))
                info = await _wait(lambda: _count(lc, "commands", 4), 15, "mirror synced")
                st = {k: v for k, v in info["state"].items() if not k.endswith("_ts")}
                out.append(("mirror", st, _sync_view(info.get("mirror"))))
                mine, theirs = await _msgs(lc, "commands", 1, 5), await _msgs(hc, "commands", 1, 5)
                out.append(("msgs", [m[:4] for m in mine]))
                out.append(("origin's times kept", mine == theirs))
                await _publish_commands(hc, 5, 2)
                info = await _wait(lambda: _count(lc, "commands", 6), 15, "mirror follows")
                out.append(("follow", info["state"]["last_seq"]))
                agg = {"name": "agg", "sources": [
                    {"name": "commands", "external": {"api": "$JS.hub.API", "deliver": ""},
                     "subject_transforms": [{"src": "cmd.*", "dest": "hub.cmd.{{wildcard(1)}}"}]},
                    # a delivery prefix, as across accounts: deliveries come on `<prefix>.S.<token>`
                    {"name": "alerts", "external": {"api": "$JS.hub.API", "deliver": "dlv.leaf"},
                     "filter_subject": "alert.>"}]}
                r = await _req(lc, "$JS.API.STREAM.CREATE.agg", agg)
                out.append(("agg created", r.get("error"), r.get("config", {}).get("sources")))
                try:
                    info = await _wait(lambda: _count(lc, "agg", 7), 15, "sources synced")
                except AssertionError:
                    raise AssertionError(f"{leaf.kind}: {await _req(lc, '$JS.API.STREAM.INFO.agg', {})}\n"
                                         f"{leaf.log_tail(3000)}") from None
                srcs = sorted((_sync_view(s) for s in info["sources"]), key=lambda s: s["name"])
                out.append(("agg", info["state"]["messages"], srcs))
                msgs = await _msgs(lc, "agg", 1, 7)
                # two origins interleave in no fixed order; each one's in order, headers as written
                per = sorted((m[1], m[2], "\r\n".join(
                    " ".join(h.split(" ")[:6]) if h.startswith("Nats-Stream-Source") else h
                    for h in m[3].split("\r\n"))) for m in msgs)
                out.append(("agg msgs", per))
                for name in ("commands", "alerts"):
                    seqs = [int(h.split(" ")[2]) for m in msgs for h in m[3].split("\r\n")
                            if h.startswith(f"Nats-Stream-Source: {name}:")]
                    out.append((name, "in order", seqs == sorted(seqs)))
            finally:
                await lc.close()
                await hc.close()
            return out

        results[kind] = run(scenario(hub, leaf), timeout=100)
        leaf.stop()
        hub.stop()
    for a, b in zip(results["edged"], results["nats-server"], strict=True):
        assert a == b, f"\nedged:       {a}\nnats-server: {b}"


async def _hub_backlog(hc: Any, lc: Any, n: int, msg: Callable[[int], tuple[str, bytes, Any]]) -> None:
    """The hub's stream `commands` holding n messages (`msg(i)`: subject, data, headers), 500 publishes in
    flight at a time, and the leaf linked."""
    await _req(hc, "$JS.API.STREAM.CREATE.commands", {"name": "commands", "subjects": ["cmd.>"]})
    js = hc.jetstream()
    acks = []
    for i in range(1, n + 1):
        subject, data, hdrs = msg(i)
        acks.append(js.publish(subject, data, headers=hdrs))
    for i in range(0, n, 500):
        await asyncio.gather(*acks[i:i + 500])
    await _wait(lambda: _linked(lc), 15, "leaf linked")


def _on_each_leaf(hub_bin: str, start_hub: Callable[..., Hub], start_server: Callable[..., ServerProcess],
                  scenario: Callable[[Any, Any], Any], timeout: float,
                  check: Callable[[str, ServerProcess], None] | None = None) -> dict[str, Any]:
    """`scenario(hub client, leaf client)` with a fresh hub and a leaf of each kind: {kind: its result};
    `check(kind, leaf)` looks at the leaf before it stops."""
    results: dict[str, Any] = {}
    for kind in KINDS:
        hub = start_hub(hub_bin, HUB_JS_CONF)
        leaf = _leaf(start_server, kind, hub.leaf_port)

        async def main(hub: Hub = hub, leaf: ServerProcess = leaf) -> Any:
            hc = await nats.connect(f"nats://app:app@127.0.0.1:{hub.port}")
            lc = await _connect(leaf)
            try:
                return await scenario(hc, lc)
            finally:
                await lc.close()
                await hc.close()

        results[kind] = run(main(), timeout=timeout)
        if check is not None:
            check(kind, leaf)
        leaf.stop()
        hub.stop()
    return results


def _source_identity_masked(hdrs: dict[str, str]) -> dict[str, str]:
    """`Nats-Stream-Source` without its 6th field (a 2.15 hub's identity of its stream, new per stream)."""
    v = hdrs.get("Nats-Stream-Source")
    if v is not None:
        hdrs = {**hdrs, "Nats-Stream-Source": " ".join(v.split(" ")[:5])}
    return hdrs


def _command(i: int) -> tuple[str, bytes, dict[str, str] | None]:
    """Command i: every fifth with an id header, every seventh else with an expectation (which a mirror
    drops) beside a header it keeps."""
    hdrs = None
    if i % 5 == 0:
        hdrs = {"Cmd-Id": str(i), "Nats-Msg-Id": f"c{i}"}
    elif i % 7 == 0:
        hdrs = {"Nats-Expected-Stream": "commands", "Keep": "yes"}
    return f"cmd.dev{i % 4}", b"command %d " % i + b"x" * (i % 300), hdrs


def test_backlog_drain_same_as_nats_server_leaf(
        hub_bin: str, start_hub: Callable[..., Hub], start_server: Callable[..., ServerProcess]) -> None:
    """A backlog of thousands of hub messages (the deliveries reach the leaf in runs of hundreds, stored
    a run at a time), some with headers the mirror strips or keeps, with gaps deleted at the origin: a
    mirror and a source with a subject transform hold the same messages, sequences and headers with edged
    as with a nats-server leaf, and the mirror's lag ends at 0."""
    n = 3000

    async def scenario(hc: Any, lc: Any) -> dict[str, Any]:
        await _hub_backlog(hc, lc, n, _command)
        for seq in (10, 11, 1500):
            await _req(hc, "$JS.API.STREAM.MSG.DELETE.commands", {"seq": seq})
        await _req(lc, "$JS.API.STREAM.CREATE.commands", MIRROR)
        await _req(lc, "$JS.API.STREAM.CREATE.agg", {"name": "agg", "sources": [
            {"name": "commands", "external": {"api": "$JS.hub.API", "deliver": ""},
             "subject_transforms": [{"src": "cmd.*", "dest": "hub.{{wildcard(1)}}"}]}]})
        m = await _wait(lambda: _count(lc, "commands", n - 3), 60, "mirror drained")
        s = await _wait(lambda: _count(lc, "agg", n - 3), 60, "source drained")
        out: dict[str, Any] = {"mirror state": m["state"], "lag": m["mirror"]["lag"],
                               "source seq": s["sources"][0]["seq"], "agg state": s["state"]}
        for k in ("first_ts", "last_ts"):
            out["mirror state"].pop(k, None)
            out["agg state"].pop(k, None)
        out["mirror"] = await read_stream(lc, "commands", n - 3)
        out["agg"] = [(q, subj, _source_identity_masked(h), d) for q, subj, h, d in await read_stream(lc, "agg", n - 3)]
        return out

    results = _on_each_leaf(hub_bin, start_hub, start_server, scenario, 150)
    e, ref = results["edged"], results["nats-server"]
    assert [q for q, *_ in ref["mirror"]] == [q for q in range(1, n + 1) if q not in (10, 11, 1500)]
    assert ref["lag"] == 0
    for key in ("mirror state", "lag", "source seq", "agg state", "mirror", "agg"):
        assert e[key] == ref[key], key


def test_backlog_past_the_mirrors_limit(hub_bin: str, start_hub: Callable[..., Hub],
                                        start_server: Callable[..., ServerProcess]) -> None:
    """A mirror with `max_msgs` and `discard: new` fed a backlog bigger than its limit: the run that
    reaches the limit stores up to it, the rest is refused, nothing is stored twice or out of order, and
    the leaf keeps serving; compared with a nats-server leaf."""
    n, limit = 2000, 700

    async def scenario(hc: Any, lc: Any) -> dict[str, Any]:
        await _hub_backlog(hc, lc, n, lambda i: (f"cmd.{i % 3}", b"c%d" % i, None))
        r = await _req(lc, "$JS.API.STREAM.CREATE.commands", {**MIRROR, "max_msgs": limit, "discard": "new"})
        assert "error" not in r, r
        await _wait(lambda: _count(lc, "commands", limit), 30, "mirror at its limit")
        await asyncio.sleep(1.5)  # what more would come, and retries
        info = await _req(lc, "$JS.API.STREAM.INFO.commands", {})
        msgs = await read_stream(lc, "commands", limit)
        return {"state": (info["state"]["messages"], info["state"]["first_seq"], info["state"]["last_seq"]),
                "msgs": [(q, subj, d) for q, subj, _, d in msgs]}

    def refused(kind: str, leaf: ServerProcess) -> None:
        if kind == "edged":
            assert "maximum messages exceeded" in leaf.log_tail(20000)  # the store refused, and said so

    results = _on_each_leaf(hub_bin, start_hub, start_server, scenario, 90, refused)
    e, ref = results["edged"], results["nats-server"]
    assert ref["state"] == (limit, 1, limit)
    assert e == ref


# ---------------------------------------------------------------------------------- outages


@pytest.mark.parametrize("outage", ["hub-stopped", "hub-killed", "link-cut", "edged-killed"])
def test_mirror_resyncs_after_outage(outage: str, start_hub: Callable[..., Hub],
                                     start_server: Callable[..., ServerProcess]) -> None:
    """A device keeps reading and acking the mirrored commands while the hub is unreachable; when the link
    is back the mirror catches up with what the hub took meanwhile, within 5 s, in order, with no loss
    and no duplicates."""
    hub_port = free_port()
    hub = start_hub(hub_binary("2.15"), HUB_JS_CONF, port=hub_port)
    proxy = TCPProxy("127.0.0.1", hub.leaf_port).start()
    try:
        leaf = _leaf(start_server, "edged", proxy.port)

        async def main() -> None:
            hc = await nats.connect(f"nats://app:app@127.0.0.1:{hub.port}", max_reconnect_attempts=-1,
                                    reconnect_time_wait=0.2)
            lc = await _connect(leaf)
            await _req(hc, "$JS.API.STREAM.CREATE.commands", {"name": "commands", "subjects": ["cmd.>"]})
            await _publish_commands(hc, 0, 5)
            await _wait(lambda: _linked(lc), 15, "leaf linked")
            await _req(lc, "$JS.API.STREAM.CREATE.commands", MIRROR)
            await _wait(lambda: _count(lc, "commands", 5), 10, "mirror synced")
            ljs = lc.jetstream()
            sub = await ljs.pull_subscribe("cmd.>", durable="device", stream="commands")
            got = []
            for m in await sub.fetch(2, timeout=2):
                got.append(m.data)
                await m.ack_sync()
            # the outage
            if outage == "hub-stopped":
                hub.stop()
            elif outage == "hub-killed":
                hub.kill9()
            elif outage == "link-cut":
                proxy.block()
            else:
                proxy.block()
                await asyncio.sleep(0.3)
                leaf.kill9()
                leaf.start()
                await lc.close()
            lc2 = await _connect(leaf) if outage == "edged-killed" else lc
            ljs = lc2.jetstream()
            sub = await ljs.pull_subscribe("cmd.>", durable="device", stream="commands")
            # devices read every command already mirrored, and local request/reply works
            for m in await sub.fetch(10, timeout=2):
                got.append(m.data)
                await m.ack_sync()
            assert got == [b"command %d" % i for i in range(5)]
            local = await lc2.subscribe("local.echo", cb=_echo(lc2))
            assert (await lc2.request("local.echo", b"ping", timeout=2)).data == b"ping"
            await local.unsubscribe()
            if outage == "link-cut":
                await _publish_commands(hc, 5, 5)  # the hub keeps taking commands
                await asyncio.sleep(0.5)
                held = await _req(lc2, "$JS.API.STREAM.INFO.commands", {})
                assert held["state"]["messages"] == 5, "the link was not cut"
            if outage in ("hub-stopped", "hub-killed"):
                hub.stop()  # (closes the log of a killed one)
                hub.start()
                await _wait(lambda: _hub_js_up(hc), 15, "hub JetStream back")
                await _publish_commands(hc, 5, 5)
            elif outage == "link-cut":
                proxy.unblock()
            else:
                await _publish_commands(hc, 5, 5)
                proxy.unblock()
            await _wait(lambda: _linked(lc2), 15, "leaf linked again")
            back = time.monotonic()
            info = await _wait(lambda: _count(lc2, "commands", 10), 15, "mirror caught up")
            took = time.monotonic() - back
            assert took < 5.0, f"resync took {took:.1f} s\n{leaf.log_tail()}"
            assert info["state"]["last_seq"] == 10 and info["state"]["messages"] == 10, info["state"]
            msgs = await _msgs(lc2, "commands", 1, 10)
            assert [m[2] for m in msgs] == [b"command %d" % i for i in range(10)]
            # the device goes on from where it acked
            rest = [m.data for m in await sub.fetch(10, timeout=2)]
            assert rest == [b"command %d" % i for i in range(5, 10)]
            await lc2.close()
            await hc.close()

        run(main(), timeout=100)
    finally:
        proxy.stop()


def _echo(nc: Any) -> Any:
    async def cb(m: Any) -> None:
        await nc.publish(m.reply, m.data)
    return cb


async def _hub_js_up(hc: Any) -> bool:
    r = await _req(hc, "$JS.API.INFO", {}, timeout=1)
    return "error" not in r


# ---------------------------------------------------------------------------------- KV and bad input


def test_kv_mirror_read_while_hub_down(start_hub: Callable[..., Hub],
                                       start_server: Callable[..., ServerProcess]) -> None:
    """A hub-managed config bucket mirrored onto edged: a device reads it from edged while the hub is
    down, with nats-py's KV API."""
    hub = start_hub(hub_binary("2.15"), HUB_JS_CONF)
    leaf = _leaf(start_server, "edged", hub.leaf_port)

    async def main() -> None:
        hc = await nats.connect(f"nats://app:app@127.0.0.1:{hub.port}")
        lc = await _connect(leaf)
        kv = await hc.jetstream().create_key_value(bucket="cfg", history=2)
        await kv.put("rate", b"10")
        await kv.put("rate", b"20")
        await kv.put("mode", b"eco")
        await kv.put("old", b"1")
        await kv.put("old", b"2")
        await kv.purge("old")  # a rollup: the mirror rolls up too
        await _wait(lambda: _linked(lc), 15, "leaf linked")
        r = await _req(lc, "$JS.API.STREAM.CREATE.KV_cfg", {
            "name": "KV_cfg", "max_msgs_per_subject": 2, "allow_rollup_hdrs": True, "deny_delete": True,
            "mirror_direct": True,
            "mirror": {"name": "KV_cfg", "external": {"api": "$JS.hub.API", "deliver": ""}}})
        assert "error" not in r, r
        await _wait(lambda: _last(lc, "KV_cfg", 6), 10, "bucket mirrored")
        await hc.close()
        hub.stop()
        ekv = await lc.jetstream().key_value("cfg")
        assert (await ekv.get("rate")).value == b"20"
        assert (await ekv.get("mode")).value == b"eco"
        assert sorted(await ekv.keys()) == ["mode", "rate"]
        with pytest.raises(nats.js.errors.KeyNotFoundError):
            await ekv.get("old")
        info = await _req(lc, "$JS.API.STREAM.INFO.KV_cfg", {"subjects_filter": "$KV.cfg.old"})
        assert info["state"]["subjects"] == {"$KV.cfg.old": 1} and info["state"]["messages"] == 4, info["state"]
        info = await _req(lc, "$JS.API.STREAM.INFO.KV_cfg", {})
        assert info["mirror"]["name"] == "KV_cfg" and info["config"]["mirror_direct"] is True
        # mirror_direct: the mirror answers direct gets for its origin's name
        r = await lc.request("$JS.API.DIRECT.GET.KV_cfg.$KV.cfg.rate", b"", timeout=2)
        assert r.data == b"20" and r.headers["Nats-Sequence"] == "2", (r.data, r.headers)
        await lc.close()

    run(main(), timeout=60)


def test_bad_mirrors_across_the_link(start_hub: Callable[..., Hub],
                                     start_server: Callable[..., ServerProcess]) -> None:
    """A mirror of a hub stream that does not exist reports the hub's 10059; one of a domain nobody serves
    stays empty and inactive without an error; neither disturbs the rest (a local stream, a good mirror),
    and neither floods the link with create requests."""
    hub = start_hub(hub_binary("2.15"), HUB_JS_CONF)
    leaf = _leaf(start_server, "edged", hub.leaf_port)

    async def main() -> None:
        hc = await nats.connect(f"nats://app:app@127.0.0.1:{hub.port}")
        lc = await _connect(leaf)
        await _req(hc, "$JS.API.STREAM.CREATE.commands", {"name": "commands", "subjects": ["cmd.>"]})
        await _publish_commands(hc, 0, 3)
        creates: list[str] = []

        async def seen(m: Any) -> None:
            creates.append(m.subject)
        # the hub maps its domain's API onto its own: the requests show there
        spy = await hc.subscribe("$JS.API.CONSUMER.CREATE.>", cb=seen)
        await _wait(lambda: _linked(lc), 15, "leaf linked")
        r = await _req(lc, "$JS.API.STREAM.CREATE.ghost", {
            "name": "ghost", "mirror": {"name": "nope", "external": {"api": "$JS.hub.API", "deliver": ""}}})
        assert "error" not in r
        r = await _req(lc, "$JS.API.STREAM.CREATE.far", {
            "name": "far", "mirror": {"name": "commands", "external": {"api": "$JS.nobody.API", "deliver": ""}}})
        assert "error" not in r
        await _req(lc, "$JS.API.STREAM.CREATE.commands", MIRROR)
        await _req(lc, "$JS.API.STREAM.CREATE.local", {"name": "local", "subjects": ["loc.>"]})
        await _wait(lambda: _count(lc, "commands", 3), 10, "good mirror synced")
        ghost = await _wait(lambda: _with_error(lc, "ghost"), 5, "ghost error")
        assert ghost["mirror"]["error"] == {"code": 404, "err_code": 10059, "description": "stream not found"}
        far = await _req(lc, "$JS.API.STREAM.INFO.far", {})
        assert far["state"]["messages"] == 0 and far["mirror"]["active"] == -1 and "error" not in far["mirror"]
        ack = await lc.jetstream().publish("loc.a", b"x")
        assert ack.stream == "local"
        await asyncio.sleep(3)
        await spy.unsubscribe()
        ghost_creates = [s for s in creates if s.endswith(".nope")]
        assert 1 <= len(ghost_creates) <= 2, creates  # paced: 2 s, then 10 s more per failure
        await lc.close()
        await hc.close()

    run(main(), timeout=60)


async def _with_error(nc: Any, stream: str) -> dict[str, Any] | None:
    info = await _req(nc, f"$JS.API.STREAM.INFO.{stream}", {}, timeout=1)
    return info if info.get("mirror", {}).get("error") else None


def test_large_backlog_drains_through_flow_control(start_hub: Callable[..., Hub],
                                                   start_server: Callable[..., ServerProcess]) -> None:
    """3 MB of hub messages (past the origin's 2 MiB first flow-control window, so it asks for flow
    control replies and stalls without them): the mirror and a source both take all of them, in order."""
    hub = start_hub(hub_binary("2.15"), HUB_JS_CONF)
    leaf = _leaf(start_server, "edged", hub.leaf_port)
    n, payload = 3000, b"x" * 1024

    async def main() -> None:
        hc = await nats.connect(f"nats://app:app@127.0.0.1:{hub.port}")
        lc = await _connect(leaf)
        await _req(hc, "$JS.API.STREAM.CREATE.commands", {"name": "commands", "subjects": ["cmd.>"]})
        js = hc.jetstream()
        acks = [js.publish(f"cmd.{i % 10}", payload) for i in range(n)]
        for i in range(0, n, 500):
            await asyncio.gather(*acks[i:i + 500])
        await _wait(lambda: _linked(lc), 15, "leaf linked")
        await _req(lc, "$JS.API.STREAM.CREATE.commands", MIRROR)
        await _req(lc, "$JS.API.STREAM.CREATE.copy", {"name": "copy", "sources": [
            {"name": "commands", "external": {"api": "$JS.hub.API", "deliver": ""}}]})
        m = await _wait(lambda: _count(lc, "commands", n), 30, "mirror drained")
        s = await _wait(lambda: _count(lc, "copy", n), 30, "source drained")
        assert m["state"]["last_seq"] == n and m["state"]["messages"] == n
        assert s["state"]["last_seq"] == n and s["state"]["messages"] == n
        assert s["sources"][0]["seq"] == n and m["mirror"]["lag"] == 0
        last = await _req(lc, "$JS.API.STREAM.MSG.GET.copy", {"seq": n})
        hdrs = base64.b64decode(last["message"]["hdrs"]).decode()
        assert "Nats-Stream-Source: commands:" in hdrs and f" {n} > > cmd.9" in hdrs, hdrs
        await lc.close()
        await hc.close()

    run(main(), timeout=90)


def test_source_follows_a_recreated_origin(start_hub: Callable[..., Hub],
                                           start_server: Callable[..., ServerProcess]) -> None:
    """The hub's stream is deleted and created again: its sequences start over, and a 2.15 hub says so
    with a new `Nats-Stream-Identity`; the source takes the new stream from its start instead of waiting
    for it to pass the old sequences."""
    hub = start_hub(hub_binary("2.15"), HUB_JS_CONF)
    leaf = _leaf(start_server, "edged", hub.leaf_port)

    async def main() -> None:
        hc = await nats.connect(f"nats://app:app@127.0.0.1:{hub.port}")
        lc = await _connect(leaf)
        js = hc.jetstream()
        await _req(hc, "$JS.API.STREAM.CREATE.tele", {"name": "tele", "subjects": ["t.>"]})
        for i in range(3):
            await js.publish("t.a", b"old %d" % i)
        await _wait(lambda: _linked(lc), 15, "leaf linked")
        await _req(lc, "$JS.API.STREAM.CREATE.agg", {"name": "agg", "sources": [
            {"name": "tele", "external": {"api": "$JS.hub.API", "deliver": ""}}]})
        await _wait(lambda: _count(lc, "agg", 3), 10, "sourced")
        await _req(hc, "$JS.API.STREAM.DELETE.tele", {})
        await _req(hc, "$JS.API.STREAM.CREATE.tele", {"name": "tele", "subjects": ["t.>"]})
        for i in range(2):
            await js.publish("t.a", b"new %d" % i)
        info = await _wait(lambda: _count(lc, "agg", 5), 20, "new origin sourced")
        msgs = await _msgs(lc, "agg", 1, 5)
        assert [m[2] for m in msgs] == [b"old 0", b"old 1", b"old 2", b"new 0", b"new 1"]
        assert info["sources"][0]["seq"] == 2
        await lc.close()
        await hc.close()

    run(main(), timeout=60)
