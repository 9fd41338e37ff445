"""The leaf as the origin: a hub stream that mirrors or sources a stream of the leaf's JetStream domain
(`$JS.edge.API`), and a hub client pulling from a leaf consumer, with edged in the leaf's place and with
a nats-server leaf in the same place (differential: the same hub sees the same messages, sequences and
headers), across a link cut and a hub restart while the leaf keeps storing
(../shared/docs/leafnode-protocol.md §3.4, §8.8)."""

from __future__ import annotations

import asyncio
import json
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import nats
import pytest
from nats.js.api import ExternalStream, StreamConfig, StreamSource

from tests.support.aio import run
from tests.support.jsutil import read_stream
from tests.support.leaf import Hub
from tests.support.servers import KINDS, ServerProcess
from tests.support.tcpproxy import TCPProxy

HUB_JS = """
server_name: hub1
jetstream { store_dir: "./js", domain: hub }
leafnodes { port: $LEAF_PORT }
accounts { APP { jetstream: enabled, users: [ {user: leaf, password: s3cret}, {user: app, password: app} ] } }
"""

LEAF_JS = """
server_name: edge1
jetstream { store_dir: "./js", domain: edge }
leafnodes { remotes: [ { urls: ["nats://leaf:s3cret@127.0.0.1:%d"], ignore_discovered_servers: true } ] }
"""
# (the hub advertises its own leafnode URL: without ignore_discovered_servers a leaf would go round a proxy
# that cuts its link)

EDGE_API = "$JS.edge.API"


@pytest.fixture
def start_leaf() -> Iterator[Callable[[str, int], ServerProcess]]:
    """`start_leaf(kind, port)`: a started leaf of that kind (edged or nats-server, same config) with
    JetStream domain `edge` and one remote to `port`, stopped when the test is done."""
    leaves: list[ServerProcess] = []

    def start(kind: str, port: int) -> ServerProcess:
        leaf = ServerProcess(kind, config=LEAF_JS % port)
        leaves.append(leaf)
        return leaf.start()

    yield start
    for leaf in leaves:
        leaf.stop()


async def edge_domain_up(hc: Any, timeout: float = 10.0) -> None:
    """Until the hub reaches the leaf's JetStream through `$JS.edge.API` (the link is up, its interest in)."""
    js = hc.jetstream(domain="edge")
    for _ in range(int(timeout / 0.1)):
        try:
            await js.account_info()
            return
        except Exception:
            await asyncio.sleep(0.1)
    raise TimeoutError("the leaf's JetStream domain is not reachable from the hub")


async def wait_count(js: Any, stream: str, n: int, timeout: float = 15.0) -> int:
    """The stream's message count once it is `n` (or whatever it is at the timeout)."""
    got = -1
    for _ in range(int(timeout / 0.1)):
        try:
            got = (await js.stream_info(stream)).state.messages
        except Exception:
            got = -1
        if got >= n:
            return got
        await asyncio.sleep(0.1)
    return got


def _source_header(value: str) -> str:
    """`Nats-Stream-Source` with its origin stream identity (2.15: a hash of the origin stream's creation
    time, different for every stream) replaced by its length."""
    parts = value.split(" ")
    if len(parts) == 6:
        parts[5] = f"<identity of {len(parts[5])}>"
    return " ".join(parts)


async def stream_view(js: Any, stream: str) -> dict[str, Any]:
    """What a hub client sees of a stream: its state and every message (sequence, subject, headers, data)."""
    si = await js.stream_info(stream)
    msgs = []
    for seq in range(si.state.first_seq, si.state.last_seq + 1):
        m = await js.get_msg(stream, seq)
        hdrs = dict(m.headers or {})
        if "Nats-Stream-Source" in hdrs:
            hdrs["Nats-Stream-Source"] = _source_header(hdrs["Nats-Stream-Source"])
        msgs.append((m.seq, m.subject, hdrs, m.data))
    return {"messages": si.state.messages, "first": si.state.first_seq, "last": si.state.last_seq, "msgs": msgs}


async def origin_state(hc: Any, stream: str) -> list[dict[str, Any]]:
    """What the hub reports of a stream's mirror or sources (its STREAM.INFO `mirror`/`sources`), without
    the time since the last contact."""
    r = json.loads((await hc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=5)).data)
    infos = [r["mirror"]] if r.get("mirror") else r.get("sources") or []
    return [{k: v for k, v in i.items() if k != "active"} for i in infos]


async def consumer_names(nc: Any, stream: str) -> list[str]:
    r = await nc.request(f"$JS.API.CONSUMER.NAMES.{stream}", b"", timeout=5)
    return json.loads(r.data)["consumers"]


def mirror_and_source() -> list[StreamConfig]:
    ext = ExternalStream(api=EDGE_API)
    return [StreamConfig(name="MIR", mirror=StreamSource(name="ESTREAM", external=ext)),
            StreamConfig(name="SRC", sources=[StreamSource(name="ESTREAM", external=ext)]),
            StreamConfig(name="SRCF", sources=[StreamSource(name="ESTREAM", filter_subject="e.one.>",
                                                            external=ext)])]


def publishes(first: int, n: int) -> list[tuple[str, bytes, dict[str, str] | None]]:
    """n publishes numbered from `first`: alternating subjects, every third one with a header."""
    out = []
    for i in range(first, first + n):
        subj = f"e.one.{i}" if i % 2 else f"e.two.{i}"
        out.append((subj, b"m%d" % i, {"X-N": str(i)} if i % 3 == 0 else None))
    return out


async def publish_all(js: Any, msgs: list[tuple[str, bytes, dict[str, str] | None]]) -> None:
    for subj, data, hdrs in msgs:
        await js.publish(subj, data, headers=hdrs)


async def basic(place: Place) -> dict[str, Any]:
    """Hub streams mirroring and sourcing (all, and filtered) an edge stream, then a hub client pulling
    from an edge durable and acking: what the hub and its client see."""
    hc = await nats.connect(f"nats://app:app@127.0.0.1:{place.hub.port}")
    ec = await nats.connect(place.leaf.url)
    try:
        await edge_domain_up(hc)
        ejs, hjs = ec.jetstream(), hc.jetstream()
        await ejs.add_stream(name="ESTREAM", subjects=["e.>"])
        await publish_all(ejs, publishes(1, 6))
        for cfg in mirror_and_source():
            await hjs.add_stream(cfg)
        await publish_all(ejs, publishes(7, 4))
        out: dict[str, Any] = {}
        for name, n in (("MIR", 10), ("SRC", 10), ("SRCF", 5)):
            await wait_count(hjs, name, n)
            out[name] = await stream_view(hjs, name)
            out[f"{name} state"] = await origin_state(hc, name)
        # a hub client pulls from an edge durable through the edge's domain, and acks
        await ejs.add_consumer("ESTREAM", durable_name="D", ack_policy="explicit", filter_subject="e.two.>")
        hej = hc.jetstream(domain="edge")
        psub = await hej.pull_subscribe_bind("D", stream="ESTREAM")
        got = await psub.fetch(3, timeout=5)
        out["pulled"] = [(m.subject, m.data, m.metadata.sequence.stream, m.metadata.sequence.consumer,
                          m.metadata.num_pending) for m in got]
        for m in got:
            await m.ack_sync()
        ci = await hej.consumer_info("ESTREAM", "D")
        out["consumer"] = (ci.delivered.consumer_seq, ci.delivered.stream_seq, ci.ack_floor.consumer_seq,
                           ci.ack_floor.stream_seq, ci.num_ack_pending, ci.num_pending)
        # the hub's mirror and source consumers are the origin's business only: not counted, not listed
        si = await ejs.stream_info("ESTREAM")
        out["edge consumers"] = (si.state.consumer_count, await consumer_names(ec, "ESTREAM"))
        return out
    finally:
        await ec.close()
        await hc.close()


@dataclass
class Place:
    """One side of a differential run: a hub and a leaf of `kind` linked to it through a proxy."""

    kind: str
    hub: Hub
    proxy: TCPProxy
    leaf: ServerProcess


def _places(kinds: tuple[str, ...], hub_bin: str, start_hub: Callable[..., Hub],
            start_leaf: Callable[[str, int], ServerProcess]) -> Iterator[dict[str, Place]]:
    out: dict[str, Place] = {}
    try:
        for kind in kinds:
            hub = start_hub(hub_bin, HUB_JS)
            proxy = TCPProxy("127.0.0.1", hub.leaf_port).start()
            out[kind] = Place(kind, hub, proxy, start_leaf(kind, proxy.port))
        yield out
    finally:
        for p in out.values():
            p.proxy.stop()


@pytest.fixture
def places(hub_bin: str, start_hub: Callable[..., Hub],
           start_leaf: Callable[[str, int], ServerProcess]) -> Iterator[dict[str, Place]]:
    """A hub of the version under test for each leaf kind (nats-server, edged), each with its leaf."""
    yield from _places(KINDS, hub_bin, start_hub, start_leaf)


@pytest.fixture
def edged_place(hub_bin: str, start_hub: Callable[..., Hub],
                start_leaf: Callable[[str, int], ServerProcess]) -> Iterator[dict[str, Place]]:
    """`places` with edged's only: for what nats-server does not do (or does too slowly to wait for)."""
    yield from _places(("edged",), hub_bin, start_hub, start_leaf)


def on_both(places: dict[str, Place], scenario: Callable[..., Any], *args: Any,
            timeout: float = 100.0) -> dict[str, Any]:
    """`scenario(place, *args)` with each leaf kind at once (their hubs are apart): {kind: result}."""

    async def main() -> list[Any]:
        return await asyncio.gather(*(scenario(p, *args) for p in places.values()))

    return dict(zip(places, run(main(), timeout=timeout), strict=True))


def test_hub_mirrors_and_sources_an_edge_stream(places: dict[str, Place]) -> None:
    """The same hub mirrors and sources a stream of a nats-server leaf and of edged in its place: the same
    messages, at the same sequences, with the same headers (`Nats-Stream-Source` as the hub writes it)."""
    res = on_both(places, basic)
    ref = res["nats-server"]
    assert ref["MIR"]["messages"] == 10 and ref["SRCF"]["messages"] == 5
    for key in ("MIR", "SRC", "SRCF", "MIR state", "SRC state", "SRCF state", "pulled", "consumer",
                "edge consumers"):
        assert res["edged"][key] == ref[key], key


async def big_backlog(place: Place, n: int) -> dict[str, Any]:
    """An edge stream of n messages of about 1 KB (past the 1 MB at which the origin's flow control asks
    the hub, so runs end where a request is due), every third with headers, mirrored and sourced (all, and
    filtered) by the hub: what the hub's streams hold, read through one consumer each."""
    hc = await nats.connect(f"nats://app:app@127.0.0.1:{place.hub.port}")
    ec = await nats.connect(place.leaf.url)
    try:
        await edge_domain_up(hc)
        ejs, hjs = ec.jetstream(), hc.jetstream()
        await ejs.add_stream(name="ESTREAM", subjects=["e.>"])
        acks = [ejs.publish(subj, data + b"." * (1000 + i % 50), headers=hdrs)
                for i, (subj, data, hdrs) in enumerate(publishes(1, n))]
        for i in range(0, n, 500):
            await asyncio.gather(*acks[i:i + 500])
        for cfg in mirror_and_source():
            await hjs.add_stream(cfg)
        out: dict[str, Any] = {}
        for name, k in (("MIR", n), ("SRC", n), ("SRCF", (n + 1) // 2)):
            assert await wait_count(hjs, name, k, timeout=60) == k, name
            msgs = await read_stream(hc, name, k)
            out[name] = [(q, subj, {h: (_source_header(v) if h == "Nats-Stream-Source" else v)
                                    for h, v in hdrs.items()}, data) for q, subj, hdrs, data in msgs]
            out[f"{name} state"] = await origin_state(hc, name)
        return out
    finally:
        await ec.close()
        await hc.close()


def test_hub_drains_a_large_edge_backlog(places: dict[str, Place]) -> None:
    """A backlog of thousands of edge messages drains to the hub's mirror and sources (delivered in runs,
    framed as one write each, flow control asked for on the way) exactly as from a nats-server leaf: the
    same messages, sequences and headers, every one once and in order."""
    n = 2500
    res = on_both(places, big_backlog, n, timeout=150)
    ref = res["nats-server"]
    assert [m[3][:8] for m in ref["MIR"]] == [b"m%d" % i + b"." * (8 - len(b"m%d" % i)) for i in range(1, n + 1)]
    for key in ("MIR", "SRC", "SRCF", "MIR state", "SRC state", "SRCF state"):
        assert res["edged"][key] == ref[key], key


async def outage(place: Place, mode: str) -> dict[str, Any]:
    """Hub streams mirror and source an edge stream; the link goes (`cut`: the proxy drops it and refuses
    reconnects; `kill`: the same, and the leaf is killed with SIGKILL and started again before the link
    returns; `restart`: the hub stops) while the edge keeps storing; the link comes back. What the hub
    holds then, and how long it took to hold all of it."""
    hub, proxy = place.hub, place.proxy
    hc = await nats.connect(f"nats://app:app@127.0.0.1:{hub.port}")
    ec = await nats.connect(place.leaf.url)
    try:
        await edge_domain_up(hc)
        ejs, hjs = ec.jetstream(), hc.jetstream()
        await ejs.add_stream(name="ESTREAM", subjects=["e.>"])
        await publish_all(ejs, publishes(1, 5))
        for cfg in mirror_and_source():
            await hjs.add_stream(cfg)
        for name, n in (("MIR", 5), ("SRC", 5), ("SRCF", 3)):
            assert await wait_count(hjs, name, n) == n, name
        if mode in ("cut", "kill"):
            await asyncio.to_thread(proxy.block)
        else:
            await hc.close()
            await asyncio.to_thread(hub.stop)
        await publish_all(ejs, publishes(6, 40))
        await asyncio.sleep(1.0)
        if mode == "kill":
            await asyncio.to_thread(place.leaf.kill9)
            await asyncio.to_thread(place.leaf.start)
        if mode in ("cut", "kill"):
            await asyncio.to_thread(proxy.unblock)
        else:
            await asyncio.to_thread(hub.start)
            hc = await nats.connect(f"nats://app:app@127.0.0.1:{hub.port}")
            hjs = hc.jetstream()
        back = time.monotonic()
        out: dict[str, Any] = {}
        for name, n in (("MIR", 45), ("SRC", 45), ("SRCF", 23)):
            await wait_count(hjs, name, n, timeout=70)
            out[f"{name} after"] = time.monotonic() - back
            out[name] = await stream_view(hjs, name)
        return out
    finally:
        await ec.close()
        await hc.close()


def check_outage(res: dict[str, Any]) -> None:
    """Every message once, in order, on both; the same as with nats-server's leaf."""
    for kind, r in res.items():
        assert [m[3] for m in r["MIR"]["msgs"]] == [b"m%d" % i for i in range(1, 46)], kind
        assert [m[3] for m in r["SRC"]["msgs"]] == [b"m%d" % i for i in range(1, 46)], kind
        assert [m[3] for m in r["SRCF"]["msgs"]] == [b"m%d" % i for i in range(1, 46) if i % 2], kind
    for key in ("MIR", "SRC", "SRCF"):
        assert res["edged"][key] == res["nats-server"][key], key


def test_hub_catches_up_after_a_link_cut(places: dict[str, Place]) -> None:
    """The link cut (and refused) while the edge stores on: once it is back, the hub's mirror and sources
    hold every message once and in order, within seconds, as with a nats-server leaf; the hub never had a
    consumer create refused (10012 and the like)."""
    res = on_both(places, outage, "cut")
    check_outage(res)
    for name in ("MIR", "SRC", "SRCF"):
        assert res["edged"][f"{name} after"] < 5.0, res["edged"]
    assert "can not be updated" not in places["edged"].hub.log_tail(10**7)  # 10012's texts


@pytest.mark.slow
def test_hub_catches_up_after_the_edge_is_killed(places: dict[str, Place]) -> None:
    """The link cut while the edge stores on, the edge killed (SIGKILL) and started again, the link back:
    the hub's mirror and sources hold every message once and in order, the same as with a nats-server
    leaf. Slow because of nats-server's leaf: it does not keep the hub's consumers, so the hub asks again
    only after its 10 s stall check (about 19 s)."""
    check_outage(on_both(places, outage, "kill"))


def test_edge_killed_resumes_the_hubs_consumers(edged_place: dict[str, Place]) -> None:
    """Beyond nats-server: edged keeps the consumers a hub's mirror and sources made, so after a kill -9
    and a restart during an outage they go on where they stopped once the link is back, and the hub holds
    everything within seconds (a nats-server leaf: about 19 s, see above)."""
    res = on_both(edged_place, outage, "kill")
    r = res["edged"]
    assert [m[3] for m in r["SRC"]["msgs"]] == [b"m%d" % i for i in range(1, 46)]
    assert [m[3] for m in r["MIR"]["msgs"]] == [b"m%d" % i for i in range(1, 46)]
    assert [m[3] for m in r["SRCF"]["msgs"]] == [b"m%d" % i for i in range(1, 46) if i % 2]
    for name in ("MIR", "SRC", "SRCF"):
        assert r[f"{name} after"] < 5.0, {k: v for k, v in r.items() if k.endswith("after")}


@pytest.mark.slow
def test_hub_catches_up_after_a_hub_restart(places: dict[str, Place]) -> None:
    """The hub stopped while the edge stores on, then started again: its mirror and sources catch up,
    once and in order. Slow because of the hub: it asks for its consumers before the leaf is back and
    waits 30 s for that answer (nats-server's srcConsumerWaitTime), with a nats-server leaf as well."""
    check_outage(on_both(places, outage, "restart", timeout=110))


def _delivery(m: Any) -> tuple[Any, ...]:
    """A push delivery as the hub's client sees it, without what differs by nature (consumer name,
    timestamp): kind, subject, payload, and the ack reply's counts or the status headers."""
    hdrs = dict(m.headers or {})
    if m.reply.startswith("$JS.ACK."):
        t = m.reply.split(".")
        return ("msg", m.subject, m.data, t[4], t[5], t[6], t[8])
    if m.reply.startswith("$JS.FC."):
        return ("fc", m.subject, len(m.reply.split(".")[-1]), hdrs.get("Description"))
    return ("status", m.subject, hdrs.get("Status"), hdrs.get("Description"), hdrs.get("Nats-Last-Consumer"),
            hdrs.get("Nats-Last-Stream"), hdrs.get("Nats-Consumer-Stalled"))


async def push_over_link(place: Place) -> dict[str, Any]:
    """A hub client makes a flow-controlled push consumer with heartbeats on an edge stream through
    `$JS.edge.API` (as a hub's mirror does) and subscribes its deliver subject only afterwards: what it gets.
    Then a backlog of 3 MiB through one, which needs its flow control answered."""
    hc = await nats.connect(f"nats://app:app@127.0.0.1:{place.hub.port}")
    ec = await nats.connect(place.leaf.url)
    try:
        await edge_domain_up(hc)
        ejs = ec.jetstream()
        await ejs.add_stream(name="ESTREAM", subjects=["e.>"])
        await publish_all(ejs, publishes(1, 6))
        cfg = {"deliver_subject": "dlv.a", "ack_policy": "none", "max_deliver": 1, "idle_heartbeat": 400_000_000,
               "flow_control": True, "filter_subject": "e.one.>", "inactive_threshold": 10_000_000_000,
               "direct": True}
        r = await hc.request(f"{EDGE_API}.CONSUMER.CREATE.ESTREAM", json.dumps(
            {"stream_name": "ESTREAM", "config": cfg}).encode(), timeout=5)
        created = json.loads(r.data)
        await asyncio.sleep(0.5)  # nothing may be sent before the hub's interest in dlv.a has come
        got: list[Any] = []

        async def on_a(m: Any) -> None:
            got.append(m)

        sub = await hc.subscribe("dlv.a", cb=on_a)
        for _ in range(50):  # three messages and two heartbeats (400 ms apart): at most 5 s on a loaded machine
            if len(got) >= 5:
                break
            await asyncio.sleep(0.1)
        await sub.unsubscribe()
        out: dict[str, Any] = {"created": (created["delivered"], created["config"]["deliver_subject"])}
        out["a"] = [_delivery(m) for m in got][:5]  # three messages, then heartbeats
        # a backlog larger than the first flow control window (2 MiB): the client answers each request
        await ejs.add_stream(name="BIG", subjects=["big"])
        chunk = b"x" * 65536
        for _ in range(48):
            await ejs.publish("big", chunk)
        big: list[Any] = []
        done = asyncio.Event()

        async def on_big(m: Any) -> None:
            big.append(_delivery(m))
            if m.reply.startswith("$JS.FC."):
                await hc.publish(m.reply, b"")
            if sum(1 for d in big if d[0] == "msg") == 48:
                done.set()

        await hc.subscribe("dlv.b", cb=on_big)
        cfg = dict(cfg, deliver_subject="dlv.b")
        del cfg["filter_subject"]
        await hc.request(f"{EDGE_API}.CONSUMER.CREATE.BIG", json.dumps(
            {"stream_name": "BIG", "config": cfg}).encode(), timeout=5)
        await asyncio.wait_for(done.wait(), 20)
        await asyncio.sleep(0.5)  # a flow control request that follows the last message is counted too
        msgs = [d for d in big if d[0] == "msg"]
        out["b"] = ([d[4:6] for d in msgs] == [(str(i), str(i)) for i in range(1, 49)],
                    sum(1 for d in big if d[0] == "fc"))
        return out
    finally:
        await ec.close()
        await hc.close()


def test_push_consumer_served_over_the_link(places: dict[str, Place]) -> None:
    """What a hub's mirror relies on, seen by a hub client: no delivery before its interest arrives, then
    every message with contiguous consumer sequences and the original subject, idle heartbeats with exact
    Nats-Last-Consumer / Nats-Last-Stream (past what the filter skips), flow control requests whose answers
    let a 3 MiB backlog through. The same as from a nats-server leaf."""
    res = on_both(places, push_over_link)
    ref = res["nats-server"]
    assert [d[0] for d in ref["a"]] == ["msg", "msg", "msg", "status", "status"], ref["a"]
    assert ref["b"][0] and ref["b"][1] > 0, ref["b"]
    assert res["edged"] == ref


def test_drain_waits_for_a_slow_link(start_hub: Callable[..., Hub]) -> None:
    """A hub that stops reading (SIGSTOP) while four flow-controlled push consumers drain 6 MiB each to
    it: edged keeps at most about BACKLOG_BYTES queued on the link (its PINGs and interest never wait
    behind a whole backlog, and the link is not dropped as a slow consumer), and once the hub reads again
    every message arrives, in order, over the same link."""
    from edged.leafnode.connection import BACKLOG_BYTES
    from edged.settings.options import JetStreamConfig
    from tests.support.leaf import edge, hub_binary, leaf_remote

    hub = start_hub(hub_binary("2.15"), HUB_JS)
    store = tempfile.mkdtemp(prefix="edgejs-")

    async def main() -> None:
        async with edge([leaf_remote(hub)], jetstream=JetStreamConfig(enabled=True, store_dir=store,
                                                                      domain="edge")) as srv:
            link = srv.leafnodes.links[0]
            assert await link.wait_connected(5)
            hc = await nats.connect(f"nats://app:app@127.0.0.1:{hub.port}")
            ec = await nats.connect(f"nats://127.0.0.1:{srv.client_port}")
            try:
                await edge_domain_up(hc)
                ejs = ec.jetstream()
                await ejs.add_stream(name="BIG", subjects=["big"])
                got: dict[str, list[int]] = {}

                def on(name: str) -> Callable[[Any], Any]:
                    async def cb(m: Any) -> None:
                        if m.reply.startswith("$JS.FC."):
                            await hc.publish(m.reply, b"")
                        elif m.reply.startswith("$JS.ACK."):
                            got[name].append(int(m.reply.split(".")[5]))
                    return cb

                for i in range(4):
                    got[f"c{i}"] = []
                    await hc.subscribe(f"dlv.{i}", cb=on(f"c{i}"))
                    cfg = {"deliver_subject": f"dlv.{i}", "ack_policy": "none", "idle_heartbeat": 1_000_000_000,
                           "flow_control": True}
                    await hc.request(f"{EDGE_API}.CONSUMER.CREATE.BIG", json.dumps(
                        {"stream_name": "BIG", "config": cfg}).encode(), timeout=5)
                await hc.flush()
                await asyncio.sleep(0.3)  # the deliver subjects' interest is at the edge
                hub.signal(signal.SIGSTOP)
                try:
                    chunk = b"x" * 65536
                    for _ in range(96):
                        await ejs.publish("big", chunk)
                    queued = 0
                    for _ in range(200):
                        c = link.conn
                        if c is not None and c.transport is not None:
                            queued = max(queued, c.pending + c.transport.get_write_buffer_size())
                        await asyncio.sleep(0.01)
                finally:
                    hub.signal(signal.SIGCONT)
                for _ in range(300):
                    if all(len(v) == 96 for v in got.values()):
                        break
                    await asyncio.sleep(0.05)
                assert queued <= BACKLOG_BYTES + 2 * 65536 + 4096, queued
                assert {k: v for k, v in got.items() if v != list(range(1, 97))} == {}
                assert link.connects == 1 and link.is_connected
            finally:
                await ec.close()
                await hc.close()

    run(main())


async def missing_origin(place: Place) -> dict[str, Any]:
    """A hub mirror and source of an edge stream that does not exist: what the hub reports."""
    hc = await nats.connect(f"nats://app:app@127.0.0.1:{place.hub.port}")
    try:
        await edge_domain_up(hc)
        hjs = hc.jetstream()
        ext = ExternalStream(api=EDGE_API)
        await hjs.add_stream(StreamConfig(name="MIR", mirror=StreamSource(name="NOPE", external=ext)))
        await hjs.add_stream(StreamConfig(name="SRC", sources=[StreamSource(name="NOPE", external=ext)]))
        out: dict[str, Any] = {}
        for _ in range(50):
            out = {s: await origin_state(hc, s) for s in ("MIR", "SRC")}
            if all(st and st[0].get("error") for st in out.values()):
                break
            await asyncio.sleep(0.1)
        return out
    finally:
        await hc.close()


def test_hub_mirror_of_a_missing_edge_stream(places: dict[str, Place]) -> None:
    """Bad input: a hub mirror and source of an edge stream nobody has get nats-server's answer (10059),
    which the hub reports in its stream info, as with a nats-server leaf."""
    res = on_both(places, missing_origin)
    err = res["nats-server"]["MIR"][0]["error"]
    assert err["err_code"] == 10059, res
    assert res["edged"] == res["nats-server"]


async def kv_over_link(place: Place) -> dict[str, Any]:
    """A key-value bucket written at the edge and read by a hub client through the edge's domain: gets,
    history, and a watcher (an ordered push consumer delivering over the link under each key's own
    subject). (nats-py's KV puts go to `$KV.<bucket>` even with a domain, so the edge writes.)"""
    hc = await nats.connect(f"nats://app:app@127.0.0.1:{place.hub.port}")
    ec = await nats.connect(place.leaf.url)
    try:
        await edge_domain_up(hc)
        ekv = await ec.jetstream().create_key_value(bucket="CFG", history=5)
        for i in range(3):
            await ekv.put("mode", b"m%d" % i)
        await ekv.put("rate", b"10")
        kv = await hc.jetstream(domain="edge").key_value("CFG")
        out: dict[str, Any] = {"get": (await kv.get("mode")).value}
        out["history"] = [(e.key, e.value, e.revision) for e in await kv.history("mode")]
        w = await kv.watchall()
        seen = []
        for _ in range(20):
            e = await w.updates(timeout=5)
            if e is None:
                break
            seen.append((e.key, e.value, e.revision, e.delta))
        await ekv.put("rate", b"20")
        e = await w.updates(timeout=5)
        seen.append((e.key, e.value, e.revision))
        await w.stop()
        out["watch"] = seen
        return out
    finally:
        await ec.close()
        await hc.close()


def test_hub_client_uses_an_edge_kv_bucket(places: dict[str, Place]) -> None:
    """A KV bucket of the edge's domain from the hub: a watcher and an ordered consumer get each entry
    under its key's subject, as from a nats-server leaf."""
    res = on_both(places, kv_over_link)
    assert res["nats-server"]["watch"][-1][:2] == ("rate", b"20"), res["nats-server"]
    assert res["edged"] == res["nats-server"]
