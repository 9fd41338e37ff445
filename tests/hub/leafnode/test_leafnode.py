"""edged as a leafnode of a real nats-server hub (2.15 from the venv, 2.10 from a cached wheel):
messages, requests, queue groups and interest across the link, both ways; link permissions;
JetStream domain denies; reconnect after the hub goes away."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import nats
import pytest

from edged.settings.options import RemoteLeafOpts
from tests.support.aio import run, until
from tests.support.inbox import Inbox, propagated
from tests.support.leaf import HUB_CONF, Hub, edge, edge_client, hub_client, leaf_remote, linked
from tests.support.tcpproxy import TCPProxy


def test_messages_both_ways_with_headers_and_replies(hub: Hub) -> None:
    async def main() -> None:
        async with linked(hub) as (srv, hc, ec):
            at_hub, at_edge = Inbox(), Inbox()
            await hc.subscribe("up.>", cb=at_hub.cb)
            await ec.subscribe("down.*", cb=at_edge.cb)
            await hc.flush()
            await ec.flush()
            await propagated(ec, "up.probe", at_hub)
            await propagated(hc, "down.probe", at_edge)
            await ec.publish("up.a", b"hello", headers={"X-K": "v1"})
            await hc.publish("down.b", b"world", reply="r.1", headers={"H": "2"})
            big = os.urandom(200_000)
            await ec.publish("up.big", big)
            await ec.flush()
            await hc.flush()
            await until(lambda: "up.big" in at_hub.subjects() and "down.b" in at_edge.subjects())
            m = next(m for m in at_hub.msgs if m.subject == "up.a")
            assert m.data == b"hello" and m.headers == {"X-K": "v1"}
            assert next(m for m in at_hub.msgs if m.subject == "up.big").data == big
            m = next(m for m in at_edge.msgs if m.subject == "down.b")
            assert (m.data, m.reply, m.headers) == (b"world", "r.1", {"H": "2"})

            # request/reply both directions
            async def echo(m: Any) -> None:
                await m.respond(b"edge:" + m.data)

            async def echo_hub(m: Any) -> None:
                await m.respond(b"hub:" + m.data)

            await ec.subscribe("svc.edge", cb=echo)
            await hc.subscribe("svc.hub", cb=echo_hub)
            await ec.flush()
            await hc.flush()
            await asyncio.sleep(0.2)
            assert (await hc.request("svc.edge", b"x", timeout=3)).data == b"edge:x"
            assert (await ec.request("svc.hub", b"y", timeout=3)).data == b"hub:y"

            # LS-: the hub forgets edge interest when the edge unsubscribes
            sub = await ec.subscribe("gone", cb=at_edge.cb)
            await ec.flush()
            await propagated(hc, "gone", at_edge)
            await sub.unsubscribe()
            await ec.flush()
            await asyncio.sleep(0.3)
            n = len(at_edge.msgs)
            await hc.publish("gone", b"late")
            await hc.flush()
            await asyncio.sleep(0.3)
            assert len(at_edge.msgs) == n

            # /leafz reports the link
            lz = srv.leafnodes.leafz(subs=True)
            assert lz["leafnodes"] == 1 and lz["server_id"] == srv.server_id
            leaf = lz["leafs"][0]
            assert leaf["name"] == "hub1" and leaf["is_spoke"] is True and leaf["account"] == "$G"
            assert leaf["out_msgs"] >= 3 and leaf["in_msgs"] >= 2
            assert "up.>" in leaf["subscriptions_list"]

    run(main())


def test_one_message_per_link_for_overlapping_hub_interest(hub: Hub) -> None:
    """Hub interest `a.*`, `a.>` and a queue group on `a.b`: the hub's plain subscribers must see each
    edge publish exactly once and the queue group once (one LMSG with the queue name)."""

    async def main() -> None:
        async with linked(hub) as (srv, hc, ec):
            p1, p2, q = Inbox(), Inbox(), Inbox()
            await hc.subscribe("a.*", cb=p1.cb)
            await hc.subscribe("a.>", cb=p2.cb)
            await hc.subscribe("a.b", queue="workers", cb=q.cb)
            await hc.subscribe("a.b", queue="workers", cb=q.cb)
            await hc.flush()
            await propagated(ec, "a.b", p1)
            await asyncio.sleep(0.2)
            p1.msgs.clear()
            p2.msgs.clear()
            q.msgs.clear()
            for i in range(50):
                await ec.publish("a.b", str(i).encode())
            await ec.flush()
            await until(lambda: len(p1.msgs) >= 50 and len(p2.msgs) >= 50 and len(q.msgs) >= 50)
            await asyncio.sleep(0.3)
            assert [m.data for m in p1.msgs] == [str(i).encode() for i in range(50)]
            assert len(p2.msgs) == 50 and len(q.msgs) == 50

    run(main())


def test_bursts_on_one_subject_both_ways(hub: Hub) -> None:
    """Long runs of messages on one subject (edged routes a run as a whole where that changes nothing):
    every message arrives once, in order, with its own payload and size; an auto-unsubscribe limit, two
    subscriptions on one connection and a local subscriber next to the link each get what they would get
    one message at a time."""

    async def main() -> None:
        async with linked(hub) as (srv, hc, ec):
            at_hub, local = Inbox(), Inbox()
            await hc.subscribe("burst.up", cb=at_hub.cb)
            await hc.flush()
            await ec.subscribe("burst.up", cb=local.cb)
            await ec.flush()
            await propagated(ec, "burst.up", at_hub)
            await asyncio.sleep(0.2)
            at_hub.msgs.clear()
            local.msgs.clear()
            payloads = [str(i).encode() * (i % 5) for i in range(3000)]
            for p in payloads:
                await ec.publish("burst.up", p)
            await ec.flush()
            await until(lambda: len(at_hub.msgs) >= 3000 and len(local.msgs) >= 3000, timeout=15)
            assert [m.data for m in at_hub.msgs] == payloads
            assert [m.data for m in local.msgs] == payloads

            plain, limited, one, other = Inbox(), Inbox(), Inbox(), Inbox()
            await ec.subscribe("burst.down", cb=plain.cb)
            ec2 = await edge_client(srv)
            await ec2.subscribe("burst.down", cb=one.cb)
            await ec2.subscribe("burst.*", cb=other.cb)
            await ec.flush()
            await ec2.flush()
            await propagated(hc, "burst.down", plain)
            await until(lambda: len(one.msgs) and len(other.msgs))
            await ec.subscribe("burst.down", cb=limited.cb, max_msgs=10)
            await ec.flush()
            await asyncio.sleep(0.2)
            for box in (plain, one, other):
                box.msgs.clear()
            for p in payloads:
                await hc.publish("burst.down", p)
            await hc.flush()
            await until(lambda: all(len(b.msgs) >= 3000 for b in (plain, one, other)), timeout=15)
            await asyncio.sleep(0.2)
            for box in (plain, one, other):
                assert [m.data for m in box.msgs] == payloads
            assert [m.data for m in limited.msgs] == payloads[:10]
            await ec2.close()

    run(main())


def test_queue_groups_across_the_link(hub: Hub) -> None:
    async def main() -> None:
        async with linked(hub) as (srv, hc, ec):
            # members only on the edge: hub publishes reach exactly one of them
            e1, e2 = Inbox(), Inbox()
            await ec.subscribe("work", queue="q", cb=e1.cb)
            await ec.subscribe("work", queue="q", cb=e2.cb)
            await ec.flush()
            probe = Inbox()
            await ec.subscribe("work.ready", cb=probe.cb)
            await ec.flush()
            await propagated(hc, "work.ready", probe)
            await asyncio.sleep(0.2)
            for i in range(100):
                await hc.publish("work", str(i).encode())
            await hc.flush()
            await until(lambda: len(e1.msgs) + len(e2.msgs) >= 100)
            await asyncio.sleep(0.2)
            assert len(e1.msgs) + len(e2.msgs) == 100
            assert sorted(int(m.data) for m in e1.msgs + e2.msgs) == list(range(100))

            # members only on the hub: edge publishes reach exactly one, requests get one answer
            h1, h2 = Inbox(), Inbox()

            async def worker(m: Any) -> None:
                if m.reply:
                    await m.respond(b"done")

            await hc.subscribe("job", queue="hq", cb=h1.cb)
            await hc.subscribe("job", queue="hq", cb=h2.cb)
            await hc.subscribe("rpc", queue="hq", cb=worker)
            await hc.flush()
            await until(lambda: srv.accounts["$G"].sublist.has_interest("job"))
            await until(lambda: srv.accounts["$G"].sublist.has_interest("rpc"))
            for i in range(100):
                await ec.publish("job", str(i).encode())
            await ec.flush()
            await until(lambda: len(h1.msgs) + len(h2.msgs) >= 100)
            await asyncio.sleep(0.2)
            assert len(h1.msgs) + len(h2.msgs) == 100
            assert (await ec.request("rpc", b"?", timeout=3)).data == b"done"

            # a group with members on both sides: every message delivered exactly once in total
            both_e, both_h = Inbox(), Inbox()
            await ec.subscribe("mix", queue="m", cb=both_e.cb)
            await hc.subscribe("mix", queue="m", cb=both_h.cb)
            await ec.flush()
            await hc.flush()
            await until(lambda: srv.accounts["$G"].sublist.match("mix")[1]
                        and len(srv.accounts["$G"].sublist.match("mix")[1][0]) == 2)
            for _ in range(50):
                await ec.publish("mix", b"e")
                await hc.publish("mix", b"h")
            await ec.flush()
            await hc.flush()
            await until(lambda: len(both_e.msgs) + len(both_h.msgs) >= 100)
            await asyncio.sleep(0.3)
            assert len(both_e.msgs) + len(both_h.msgs) == 100

    run(main())


def test_queue_weights_sent_to_hub(hub: Hub) -> None:
    """LS+ carries the local member count (weight), LS- goes out when the last member leaves; the hub's
    own view (its -DV trace of the link) shows exactly that sequence."""

    async def main() -> None:
        async with edge([leaf_remote(hub)]) as srv:
            assert await srv.leafnodes.wait_connected(5)
            ec = await edge_client(srv)
            subs = [await ec.subscribe("qw", queue="g", cb=Inbox().cb) for _ in range(3)]
            await ec.flush()
            for s in subs:
                await s.unsubscribe()
            await ec.flush()
            hc = await hub_client(hub)
            got = Inbox()
            await ec.subscribe("qw.done", cb=got.cb)
            await ec.flush()
            await propagated(hc, "qw.done", got)
            await hc.close()
            await ec.close()

    run(main())
    trace = [ln.split("<<- [", 1)[1].rstrip("]") for ln in hub.log_tail(200_000).splitlines()
             if "<<- [LS" in ln and " qw" in ln]
    assert trace[:7] == ["LS+ qw g 1", "LS+ qw g 2", "LS+ qw g 3", "LS+ qw g 2", "LS+ qw g 1", "LS- qw g",
                     "LS+ qw.done"]


def test_link_permissions_from_connect_info(hub_bin: str, start_hub: Callable[..., Hub]) -> None:
    """The hub user may publish only `up.>` and subscribe only `down.>`: edged sends no other LS+ and no
    other message (a 2.14+ hub would close the link for either), and the link stays up."""
    conf = """
server_name: hub1
leafnodes { port: $LEAF_PORT }
accounts {
  APP { users: [
    {user: leaf, password: s3cret, permissions: {publish: {allow: ["up.>"]}, subscribe: {allow: ["down.>", "_INBOX.>"]}}},
    {user: app, password: app} ] }
}
"""
    hub = start_hub(hub_bin, conf)

    async def main() -> None:
        async with linked(hub) as (srv, hc, ec):
            conn = srv.leafnodes.connections[0]
            at_hub, at_edge = Inbox(), Inbox()
            await hc.subscribe(">", cb=at_hub.cb)
            await ec.subscribe("down.x", cb=at_edge.cb)
            await ec.subscribe("other", cb=at_edge.cb)  # literal outside import perms: never advertised
            await hc.flush()
            await ec.flush()
            await propagated(hc, "down.x", at_edge)
            assert ("other", None) not in conn.smap and ("down.x", None) in conn.smap
            await ec.publish("nope", b"1")
            await ec.publish("up.ok", b"2")
            await ec.flush()
            await until(lambda: "up.ok" in at_hub.subjects())
            await asyncio.sleep(0.2)
            assert "nope" not in at_hub.subjects()
            assert srv.leafnodes.connections and srv.leafnodes.connections[0] is conn

    run(main())
    assert "Permissions Violation" not in hub.log_tail(200_000)


def test_jetstream_api_stays_local(hub_bin: str, start_hub: Callable[..., Hub]) -> None:
    """The hub advertises `LS+ $JS.API.>`; an edge client's `$JS.API.INFO` must not be answered by the hub
    (no responders locally), while `$JS.hub.API.INFO` does reach the hub's JetStream."""
    conf = """
server_name: hub1
jetstream { store_dir: "./js", domain: hub }
leafnodes { port: $LEAF_PORT }
accounts {
  APP { jetstream: enabled, users: [ {user: leaf, password: s3cret}, {user: app, password: app} ] }
}
"""
    hub = start_hub(hub_bin, conf)

    async def main() -> None:
        async with edge([leaf_remote(hub)]) as srv:
            assert await srv.leafnodes.wait_connected(5)
            ec = await edge_client(srv)
            await until(lambda: srv.accounts["$G"].sublist.has_interest("$JS.hub.API.INFO"), 5)
            r = await ec.request("$JS.hub.API.INFO", b"", timeout=3)
            assert b"io.nats.jetstream.api.v1.account_info_response" in r.data
            assert b'"domain":"hub"' in r.data
            with pytest.raises((nats.errors.NoRespondersError, nats.errors.TimeoutError)):
                await ec.request("$JS.API.INFO", b"", timeout=1)
            with pytest.raises((nats.errors.NoRespondersError, nats.errors.TimeoutError)):
                await ec.request("$KV.bucket.key", b"", timeout=1)
            await ec.close()

    run(main())


def test_bad_credentials_logged_and_retried(hub: Hub, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with edge([leaf_remote(hub, password="wrong")], reconnect=0.2) as srv:
            link = srv.leafnodes.links[0]
            await until(lambda: link.attempts >= 2 and "Authorization Violation" in link.last_error, 8)
            assert not link.is_connected
            ok, err = srv.leafnodes.healthz()
            assert not ok and "Authorization Violation" in err
            ec = await edge_client(srv)  # local service unaffected
            got = Inbox()
            await ec.subscribe("local", cb=got.cb)
            await ec.publish("local", b"1")
            await ec.flush()
            await until(lambda: got.msgs)
            await ec.close()

    import logging

    caplog.set_level(logging.ERROR, logger="edged")
    logger = logging.getLogger("edged")
    logger.addHandler(caplog.handler)
    try:
        run(main())
    finally:
        logger.removeHandler(caplog.handler)
    assert any("authentication failed" in r.getMessage() for r in caplog.records)


def test_wrong_port_detected(hub: Hub) -> None:
    async def main() -> None:
        wrong = RemoteLeafOpts(urls=[f"nats://leaf:s3cret@127.0.0.1:{hub.port}"])  # the client port
        async with edge([wrong], reconnect=0.3) as srv:
            link = srv.leafnodes.links[0]
            await until(lambda: "wrong port" in link.last_error, 5)
            assert not link.is_connected

    run(main())


def test_loop_detected(hub: Hub, hub_bin: str, start_hub: Callable[..., Hub]) -> None:
    """edged links the same account to hub1 and to hub2 while hub2 is itself a leaf of hub1: hub1 hands
    edged's own `$LDS.` subject back, edged detects the loop, says so and backs off 30 s."""
    hub2_conf = HUB_CONF.replace("hub1", "hub2").replace(
        "leafnodes { port: $LEAF_PORT }",
        f'leafnodes {{ port: $LEAF_PORT, remotes: [ {{ urls: ["nats://leaf:s3cret@127.0.0.1:{hub.leaf_port}"], '
        "account: APP } ] }",
    )
    hub2 = start_hub(hub_bin, hub2_conf)

    async def main() -> None:
        async with edge([leaf_remote(hub), leaf_remote(hub2)]) as srv:
            links = srv.leafnodes.links
            await until(lambda: any("Loop detected" in lk.last_error for lk in links), 8)

    run(main())


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_hub_goes_away_and_returns(hub: Hub, how: str) -> None:
    """While the hub is gone edged keeps serving local clients; when it returns, the link and all interest
    (both directions) are back within 2 s."""

    async def main() -> None:
        async with edge([leaf_remote(hub)]) as srv:
            assert await srv.leafnodes.wait_connected(5)
            ec = await edge_client(srv)
            at_edge, at_hub, local = Inbox(), Inbox(), Inbox()
            await ec.subscribe("down.>", cb=at_edge.cb)
            await ec.subscribe("local", cb=local.cb)
            await ec.flush()
            hc = await hub_client(hub)
            await hc.subscribe("up", cb=at_hub.cb)
            await hc.flush()
            await propagated(hc, "down.1", at_edge)
            await propagated(ec, "up", at_hub)
            await hc.close()

            if how == "stop":
                await asyncio.to_thread(hub.stop)
            else:
                await asyncio.to_thread(hub.kill9)
            link = srv.leafnodes.links[0]
            await until(lambda: not link.is_connected, 5)
            assert not srv.leafnodes.healthz()[0]
            # local traffic unaffected while the hub is away
            for i in range(20):
                await ec.publish("local", str(i).encode())
                await ec.publish("up", b"lost")  # no hub interest any more: dropped, never blocks
            await ec.flush()
            await until(lambda: len(local.msgs) == 20)
            await asyncio.sleep(1.5)
            t0 = time.monotonic()
            await asyncio.to_thread(hub.start)
            assert await link.wait_connected(4)
            hc = await hub_client(hub)
            at_hub2 = Inbox()
            await hc.subscribe("up", cb=at_hub2.cb)
            await hc.flush()
            await propagated(hc, "down.2", at_edge, 4)
            await propagated(ec, "up", at_hub2, 4)
            elapsed = time.monotonic() - t0
            assert elapsed < 2.0 + 1.0, f"link back after {elapsed:.2f}s"  # 2 s target + hub start time
            assert srv.leafnodes.healthz()[0]
            await hc.close()
            await ec.close()

    run(main())


def test_link_cut_by_proxy_and_stale_link(hub: Hub) -> None:
    """A TCP proxy between edged and the hub: cut -> reconnect with interest restored within 2 s;
    a frozen (silent) link is detected by PING/PONG and replaced."""

    async def main() -> None:
        remote = RemoteLeafOpts(urls=[f"nats://leaf:s3cret@127.0.0.1:{proxy.port}"], ignore_discovered_urls=True)
        async with linked(hub, remote, ping_interval=0.5) as (srv, hc, ec):
            link = srv.leafnodes.links[0]
            at_edge = Inbox()
            await ec.subscribe("d", cb=at_edge.cb)
            await ec.flush()
            await propagated(hc, "d", at_edge)
            first = link.conn
            proxy.cut()
            await until(lambda: link.conn is not first or not link.is_connected, 3)
            t0 = time.monotonic()
            await propagated(hc, "d", at_edge, 4)
            assert time.monotonic() - t0 < 2.0
            # freeze: bytes swallowed, sockets open -> stale detection (ping 0.5 s, 2 missed)
            second = link.conn
            assert second is not None and second is not first
            proxy.freeze()
            await until(lambda: link.conn is not second, 5)
            proxy.unblock()
            await propagated(hc, "d", at_edge, 4)
            assert "Stale" in link.last_error or link.connects >= 3

    with TCPProxy("127.0.0.1", hub.leaf_port) as proxy:
        run(main())


def test_hub_restart_signal_does_not_block_local_clients(hub: Hub) -> None:
    """Publishing at full speed towards hub interest while the hub disappears never blocks locally."""

    async def main() -> None:
        async with linked(hub) as (srv, hc, ec):
            got = Inbox()
            await hc.subscribe("fire", cb=got.cb)
            await hc.flush()
            await propagated(ec, "fire", got)
            hub.signal(signal.SIGSTOP)  # hub frozen: TCP buffers fill, edged must not stall
            try:
                t0 = time.monotonic()
                payload = b"x" * 1024
                for _ in range(20_000):
                    await ec.publish("fire", payload)
                rtt_start = time.monotonic()
                await ec.flush(timeout=5)
                assert time.monotonic() - rtt_start < 2.0
                assert time.monotonic() - t0 < 15
            finally:
                hub.signal(signal.SIGCONT)

    run(main())


def test_deny_imports_and_exports(hub: Hub) -> None:
    async def main() -> None:
        remote = leaf_remote(hub, deny_exports=["up.secret", "priv.>"], deny_imports=["down.secret"])
        async with linked(hub, remote) as (srv, hc, ec):
            at_hub, at_edge = Inbox(), Inbox()
            await hc.subscribe("up.*", cb=at_hub.cb)
            await hc.subscribe("priv.x", cb=at_hub.cb)
            await ec.subscribe("down.*", cb=at_edge.cb)
            await hc.flush()
            await ec.flush()
            await propagated(ec, "up.ok", at_hub)
            await propagated(hc, "down.ok", at_edge)
            for s in ("up.secret", "priv.x", "up.fine"):
                await ec.publish(s, b"1")
            for s in ("down.secret", "down.fine"):
                await hc.publish(s, b"1")
            await ec.flush()
            await hc.flush()
            await until(lambda: "up.fine" in at_hub.subjects() and "down.fine" in at_edge.subjects())
            await asyncio.sleep(0.2)
            assert "up.secret" not in at_hub.subjects() and "priv.x" not in at_hub.subjects()
            assert "down.secret" not in at_edge.subjects()

    run(main())


def test_several_remotes_each_bound_to_its_account(hub_bin: str, start_hub: Callable[..., Hub]) -> None:
    """Local accounts A and B linked to hub accounts APP and OTHER: traffic stays inside each pair."""
    from edged.settings.options import AccountConfig

    conf = """
server_name: hub1
leafnodes { port: $LEAF_PORT }
accounts {
  APP { users: [ {user: leaf, password: s3cret}, {user: app, password: app} ] }
  OTHER { users: [ {user: leaf2, password: s3cret}, {user: other, password: other} ] }
}
"""
    hub = start_hub(hub_bin, conf)

    async def main() -> None:
        async with edge([leaf_remote(hub, account="A"), leaf_remote(hub, user="leaf2", account="B")],
                        accounts=[AccountConfig(name="A"), AccountConfig(name="B")]) as srv:
            assert await srv.leafnodes.wait_connected(5), [lk.last_error for lk in srv.leafnodes.links]
            assert sorted((c.account.name, c.remote_account) for c in srv.leafnodes.connections) == [
                ("A", "APP"), ("B", "OTHER")]
            got_a: list[str] = []
            got_b: list[str] = []
            ia, ib = srv.accounts["A"].internal, srv.accounts["B"].internal
            ia.subscribe("x", lambda s, subj, r, h, p: got_a.append(p.decode()))
            ib.subscribe("x", lambda s, subj, r, h, p: got_b.append(p.decode()))
            app, other = await hub_client(hub), await hub_client(hub, "other", "other")
            await until(lambda: srv.leafnodes.connections and all(("x", None) in c.smap
                                                                  for c in srv.leafnodes.connections))
            await asyncio.sleep(0.2)
            await app.publish("x", b"app")
            await other.publish("x", b"other")
            await app.flush()
            await other.flush()
            await until(lambda: got_a and got_b)
            await asyncio.sleep(0.2)
            assert got_a == ["app"] and got_b == ["other"]
            # and upwards: an internal publish in A reaches only APP
            at_app, at_other = Inbox(), Inbox()
            await app.subscribe("y", cb=at_app.cb)
            await other.subscribe("y", cb=at_other.cb)
            await app.flush()
            await other.flush()
            await until(lambda: srv.accounts["A"].sublist.has_interest("y"))
            ia.publish("y", b"from-a")
            await until(lambda: at_app.msgs)
            await asyncio.sleep(0.2)
            assert not at_other.msgs
            await app.close()
            await other.close()

    run(main())


def test_discovered_leafnode_urls_used_after_failover(hub_bin: str, start_hub: Callable[..., Hub]) -> None:
    """edged knows only hub A; A's INFO lists B's leaf URL (cluster). With A gone edged moves to B —
    unless `ignore_discovered_urls`."""
    from tests.support.servers import free_port

    ports = {"a": free_port(), "b": free_port()}
    leaf = {"a": free_port(), "b": free_port()}

    def conf(me: str, peer: str) -> str:
        return f"""
server_name: hub_{me}
leafnodes {{ port: {leaf[me]}, advertise: "127.0.0.1:{leaf[me]}" }}
cluster {{ name: C, port: {ports[me]}, routes: ["nats://127.0.0.1:{ports[peer]}"] }}
accounts {{ APP {{ users: [ {{user: leaf, password: s3cret}}, {{user: app, password: app}} ] }} }}
"""

    hub_a = start_hub(hub_bin, conf("a", "b"), leaf_port=leaf["a"])
    hub_b = start_hub(hub_bin, conf("b", "a"), leaf_port=leaf["b"])

    async def main() -> None:
        plain = RemoteLeafOpts(urls=[f"nats://leaf:s3cret@127.0.0.1:{leaf['a']}"])
        pinned = RemoteLeafOpts(urls=[f"nats://leaf:s3cret@127.0.0.1:{leaf['a']}"], ignore_discovered_urls=True,
                                account="P")
        from edged.settings.options import AccountConfig

        async with edge([plain, pinned], accounts=[AccountConfig(name="P")], reconnect=0.2) as srv:
            assert await srv.leafnodes.wait_connected(5)
            free, fixed = srv.leafnodes.links
            await until(lambda: any(u.port == leaf["b"] for u in free.discovered), 10)
            assert not fixed.discovered
            await asyncio.to_thread(hub_a.stop)
            await until(lambda: free.is_connected and free.conn is not None and free.conn.url.port == leaf["b"], 10)
            await asyncio.sleep(1.0)
            assert not fixed.is_connected
            hc = await hub_client(hub_b)
            got = Inbox()
            ec = await edge_client(srv)
            await ec.subscribe("after.failover", cb=got.cb)
            await ec.flush()
            await propagated(hc, "after.failover", got)
            await hc.close()
            await ec.close()

    run(main())


def test_monitoring_endpoints(hub: Hub) -> None:
    """/leafz in nats-server's shape, the link in /varz, and /healthz?leafnodes=true follows the link."""
    import json
    import urllib.error
    import urllib.request

    from tests.support.servers import free_port

    http_port = free_port()

    def get(path: str) -> tuple[int, dict[str, Any]]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}{path}", timeout=5) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    async def main() -> None:
        async with edge([leaf_remote(hub)], http_port=http_port, http_host="127.0.0.1", reconnect=0.2) as srv:
            if srv.monitor is None:
                pytest.skip("monitoring (edged.monitor) not available")
            assert await srv.leafnodes.wait_connected(5)
            for _ in range(60):  # until the first PING is answered and the RTT is known
                code, lz = await asyncio.to_thread(get, "/leafz?subs=1")
                if code == 200 and lz.get("leafs") and lz["leafs"][0].get("rtt") != "0s":
                    break
                await asyncio.sleep(0.05)
            assert code == 200 and lz["leafnodes"] == 1
            leaf = lz["leafs"][0]
            assert {"id", "name", "is_spoke", "account", "ip", "port", "rtt", "in_msgs", "out_msgs", "in_bytes",
                    "out_bytes", "subscriptions"} <= set(leaf)
            assert leaf["rtt"] != "0s"  # first PING answered
            code, vz = await asyncio.to_thread(get, "/varz")
            assert code == 200 and vz["leafnodes"] == 1
            assert vz["leaf"]["remotes"][0]["connected"] is True
            assert (await asyncio.to_thread(get, "/healthz?leafnodes=true"))[0] == 200
            await asyncio.to_thread(hub.stop)
            await until(lambda: not srv.leafnodes.links[0].is_connected, 5)
            code, hz = await asyncio.to_thread(get, "/healthz?leafnodes=true")
            assert code == 503 and "leafnode" in json.dumps(hz)
            assert (await asyncio.to_thread(get, "/healthz"))[0] == 200  # local service is fine
            code, vz = await asyncio.to_thread(get, "/varz")
            assert vz["leafnodes"] == 0 and not vz["leaf"]["remotes"][0].get("connected")

    run(main())


@pytest.mark.parametrize("scheme", ["nats", "ws"])
def test_silent_peer_times_out_and_is_retried(scheme: str) -> None:
    """A peer that accepts and says nothing (no INFO, no WebSocket upgrade answer) is given up after the
    first_info_timeout and retried, and never blocks edged."""

    async def main() -> None:
        accepted: list[Any] = []

        async def silent(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            accepted.append(w)

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        remote = RemoteLeafOpts(urls=[f"{scheme}://u:p@127.0.0.1:{port}"], first_info_timeout=0.3)
        try:
            async with edge([remote], reconnect=0.1) as srv:
                link = srv.leafnodes.links[0]
                want = "no INFO" if scheme == "nats" else "websocket upgrade timeout"
                await until(lambda: len(accepted) >= 2 and want in link.last_error, 8)
                assert not link.is_connected
        finally:
            server.close()
            for w in accepted:
                w.close()

    run(main())
