"""nats-py against edged and nats-server: the same scenarios, the same observable results."""

from __future__ import annotations

import asyncio
import socket
import time

import nats
import pytest
from nats.errors import NoRespondersError, TimeoutError

from tests.support.aio import run
from tests.support.servers import KINDS, ServerProcess


@pytest.fixture(scope="module", params=KINDS)
def srv(request):
    p = ServerProcess(request.param).start()
    yield p
    p.stop()


def test_pub_sub_wildcards_and_order(srv):
    async def main():
        nc = await nats.connect(srv.url)
        got: dict[str, list] = {"lit": [], "star": [], "gt": []}
        await nc.subscribe("a.b", cb=collector(got["lit"]))
        await nc.subscribe("a.*", cb=collector(got["star"]))
        await nc.subscribe("a.>", cb=collector(got["gt"]))
        for i in range(50):
            await nc.publish("a.b", str(i).encode())
        await nc.publish("a.b.c", b"deep")
        await nc.flush()
        await asyncio.sleep(0.1)
        await nc.close()
        return got

    got = run(main())
    assert [m for m in got["lit"]] == [str(i).encode() for i in range(50)]
    assert got["star"] == got["lit"]
    assert got["gt"] == got["lit"] + [b"deep"]


def collector(lst: list):
    async def cb(m):
        lst.append(m.data)

    return cb


def test_queue_groups_split_work(srv):
    async def main():
        nc = await nats.connect(srv.url)
        counts = [0, 0, 0]

        def make(i):
            async def cb(m):
                counts[i] += 1

            return cb

        for i in range(3):
            await nc.subscribe("work", queue="workers", cb=make(i))
        plain = []
        await nc.subscribe("work", cb=collector(plain))
        for _ in range(300):
            await nc.publish("work", b"x")
        await nc.flush()
        await asyncio.sleep(0.2)
        await nc.close()
        return counts, len(plain)

    counts, nplain = run(main())
    assert sum(counts) == 300 and nplain == 300
    assert all(c > 30 for c in counts), counts  # random choice spreads the load


def test_request_reply_headers_no_responders(srv):
    async def main():
        nc = await nats.connect(srv.url)

        async def echo(m):
            if m.headers:
                await nc.publish(m.reply, m.data, headers={"X-Echo": m.headers.get("X-In", "")})
            else:
                await m.respond(m.data.upper())

        await nc.subscribe("svc.echo", cb=echo)
        r1 = await nc.request("svc.echo", b"hello", timeout=2)
        r2 = await nc.request("svc.echo", b"hdr", timeout=2, headers={"X-In": "v1"})
        try:
            await nc.request("svc.none", b"x", timeout=2)
            nr = "no error"
        except NoRespondersError:
            nr = "no responders"
        await nc.close()
        return r1.data, r2.data, r2.headers, nr

    d1, d2, h2, nr = run(main())
    assert d1 == b"HELLO"
    assert d2 == b"hdr" and h2 == {"X-Echo": "v1"}
    assert nr == "no responders"


def test_drain_delivers_pending_then_closes(srv):
    async def main():
        nc = await nats.connect(srv.url)
        pub = await nats.connect(srv.url)
        got = []

        async def cb(m):
            got.append(m.data)

        await nc.subscribe("drain.x", cb=cb)
        await nc.flush()
        for i in range(100):
            await pub.publish("drain.x", b"%d" % i)
        await pub.flush()
        for _ in range(500):  # every message has been delivered, in order
            if len(got) >= 100:
                break
            await asyncio.sleep(0.01)
        await nc.drain()  # then drain unsubscribes and closes cleanly
        await pub.close()
        return got, nc.is_closed

    got, closed = run(main())
    assert closed and got == [b"%d" % i for i in range(100)]


def test_unsubscribe_with_max(srv):
    async def main():
        nc = await nats.connect(srv.url)
        sub = await nc.subscribe("max.x")
        await sub.unsubscribe(limit=3)
        for _ in range(10):
            await nc.publish("max.x", b"m")
        await nc.flush()
        got = []
        try:
            while True:
                got.append(await sub.next_msg(timeout=0.3))
        except (TimeoutError, Exception):
            pass
        await nc.close()
        return len(got)

    assert run(main()) == 3


def test_no_echo(srv):
    async def main():
        nc = await nats.connect(srv.url, no_echo=True)
        other = await nats.connect(srv.url)
        mine, theirs = [], []
        await nc.subscribe("echo.x", cb=collector(mine))
        await other.subscribe("echo.x", cb=collector(theirs))
        await nc.flush()
        await other.flush()
        await nc.publish("echo.x", b"1")
        await nc.flush()
        await asyncio.sleep(0.2)
        await nc.close()
        await other.close()
        return mine, theirs

    mine, theirs = run(main())
    assert mine == [] and theirs == [b"1"]


def test_max_payload_reported_and_enforced_client_side(srv):
    async def main():
        nc = await nats.connect(srv.url)
        mp = nc.max_payload
        try:
            await nc.publish("big", b"x" * (mp + 1))
            err = None
        except Exception as e:
            err = type(e).__name__
        await nc.close()
        return mp, err

    mp, err = run(main())
    assert mp == 1024 * 1024 and err == "MaxPayloadError"


def test_slow_consumer_is_disconnected():
    """A subscriber that never reads is detected once max_pending is exceeded and counted in /varz;
    others are unaffected."""
    import json
    import urllib.request

    from tests.support.servers import free_port

    results = {}
    for kind in KINDS:
        http = free_port()
        with ServerProcess(kind, config="max_pending: 65536\nmax_payload: 32768\n", http_port=http) as p:
            slow = socket.create_connection(("127.0.0.1", p.port))
            slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            slow.recv(4096)
            slow.sendall(b'CONNECT {"verbose":false}\r\nSUB flood 1\r\nPING\r\n')
            time.sleep(0.2)

            async def main(p=p):
                nc = await nats.connect(p.url)
                ok = []
                await nc.subscribe("flood", cb=collector(ok))
                payload = b"x" * 1024
                for _ in range(5000):
                    await nc.publish("flood", payload)
                await nc.flush()
                for _ in range(200):  # under a loaded machine the subscriber may take a while to catch up
                    if len(ok) >= 5000:
                        break
                    await asyncio.sleep(0.05)
                await nc.close()
                return len(ok)

            delivered = run(main())
            varz = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{http}/varz", timeout=5).read())
            slow.close()
            results[kind] = (varz["slow_consumers"], delivered)
    for kind, (slow_consumers, delivered) in results.items():
        assert slow_consumers == 1, kind
        assert delivered == 5000, (kind, delivered)


def test_reconnect_after_restart(start_server):
    p = start_server("edged")

    async def main():
        reconnected = asyncio.Event()

        async def on_rc():
            reconnected.set()

        nc = await nats.connect(p.url, reconnected_cb=on_rc, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        got = []
        await nc.subscribe("rc.x", cb=collector(got))
        await nc.flush()
        await asyncio.to_thread(p.restart)
        await asyncio.wait_for(reconnected.wait(), 15)
        await nc.flush()
        pub = await nats.connect(p.url)
        await pub.publish("rc.x", b"after")
        await pub.flush()
        await asyncio.sleep(0.3)
        await pub.close()
        await nc.close()
        return got

    assert run(main()) == [b"after"]
