"""JetStream consumers, differential: nats-py push, pull, ordered consumers, acks and status codes against
nats-server and edged with the same assertions."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import Callable
from typing import Any

from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from tests.support.aio import run
from tests.support.jsutil import err, session
from tests.support.servers import ServerProcess


async def fill(js: Any, n: int, stream: str = "S", subjects: list[str] | None = None) -> None:
    await js.add_stream(name=stream, subjects=subjects or ["s.>"])
    for i in range(n):
        await js.publish(f"s.{i % 3}", f"m{i}".encode())



def test_pull_fetch_ack_and_info(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await fill(js, 10)
        psub = await js.pull_subscribe("s.>", durable="P")
        msgs = await psub.fetch(4, timeout=2)
        out: list[Any] = [[m.data for m in msgs], [m.subject for m in msgs],
                          [(m.metadata.sequence.stream, m.metadata.sequence.consumer, m.metadata.num_pending)
                           for m in msgs]]
        for m in msgs[:3]:
            await m.ack_sync()
        ci = await js.consumer_info("S", "P")
        out.append((ci.delivered.consumer_seq, ci.delivered.stream_seq, ci.ack_floor.consumer_seq,
                    ci.ack_floor.stream_seq, ci.num_ack_pending, ci.num_pending, ci.num_redelivered))
        rest = await psub.fetch(100, timeout=1)
        out.append(len(rest))
        for m in rest:
            await m.ack_sync()
        await msgs[3].ack_sync()
        ci = await js.consumer_info("S", "P")
        out.append((ci.ack_floor.stream_seq, ci.num_ack_pending, ci.num_pending))
        try:
            await psub.fetch(1, timeout=0.5)
            out.append("got")
        except NatsTimeout:
            out.append("timeout")
        return out

    got = run(session(js_server, body))
    assert got[0] == [b"m0", b"m1", b"m2", b"m3"]
    assert got[1] == ["s.0", "s.1", "s.2", "s.0"]
    assert got[2] == [(1, 1, 9), (2, 2, 8), (3, 3, 7), (4, 4, 6)]
    assert got[3] == (4, 4, 3, 3, 1, 6, 0)
    assert got[4] == 6
    assert got[5] == (10, 0, 0)
    assert got[6] == "timeout"


def test_pull_status_codes(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await fill(js, 2)
        await js.add_consumer("S", ConsumerConfig(durable_name="C", ack_policy=AckPolicy.EXPLICIT, max_waiting=1))
        out: list[Any] = []
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.C", b'{"batch":5,"no_wait":true}', reply=inbox)
        statuses: list[Any] = []
        for _ in range(4):
            try:
                m = await sub.next_msg(1)
            except NatsTimeout:
                break
            statuses.append((m.headers or {}).get("Status") or m.data)
        out.append(statuses)
        inbox2 = nc.new_inbox()
        sub2 = await nc.subscribe(inbox2)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.C", b'{"batch":1,"expires":300000000}', reply=inbox2)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.C", b'{"batch":1,"expires":300000000}', reply=inbox2)
        got = []
        for _ in range(2):
            m = await sub2.next_msg(2)
            got.append(((m.headers or {}).get("Status"), (m.headers or {}).get("Description")))
        out.append(sorted(got))
        await sub.unsubscribe()
        await sub2.unsubscribe()
        return out

    got = run(session(js_server, body))
    assert got[0] == [b"m0", b"m1", "404"]  # what there is, then 404 ends the no_wait request
    assert got[1] == [("408", "Request Timeout"), ("409", "Exceeded MaxWaiting")]


def test_push_durable_and_redelivery(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await fill(js, 6)
        seen: list[tuple[bytes, int]] = []
        done = asyncio.Event()

        async def cb(m: Any) -> None:
            seen.append((m.data, m.metadata.num_delivered))
            if m.data == b"m1" and m.metadata.num_delivered == 1:
                await m.nak()
            elif m.data == b"m2" and m.metadata.num_delivered == 1:
                pass  # no ack: redelivered after ack_wait
            else:
                await m.ack()
            if len(seen) >= 8:
                done.set()

        await js.subscribe("s.>", cb=cb, durable="PUSHER", manual_ack=True, config=ConsumerConfig(ack_wait=1.0))
        try:
            await asyncio.wait_for(done.wait(), 10)
        except TimeoutError:
            pass
        await asyncio.sleep(0.3)
        ci = await js.consumer_info("S", "PUSHER")
        return [sorted(seen), ci.num_redelivered, ci.num_ack_pending]

    got = run(session(js_server, body))
    assert got[0] == sorted([(b"m0", 1), (b"m1", 1), (b"m1", 2), (b"m2", 1), (b"m2", 2), (b"m3", 1), (b"m4", 1),
                             (b"m5", 1)])
    assert got[1:] == [0, 0]


def test_deliver_policies_and_filters(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await fill(js, 9)
        out = []
        for policy, extra in ((DeliverPolicy.LAST, {}), (DeliverPolicy.NEW, {}),
                              (DeliverPolicy.BY_START_SEQUENCE, {"opt_start_seq": 7}),
                              (DeliverPolicy.LAST_PER_SUBJECT, {"filter_subject": "s.>"})):
            name = policy.value.upper().replace("_", "")
            await js.add_consumer("S", ConsumerConfig(durable_name=name, deliver_policy=policy,
                                                      ack_policy=AckPolicy.EXPLICIT, **extra))
            ci = await js.consumer_info("S", name)
            out.append(ci.num_pending)
        await js.add_consumer("S", ConsumerConfig(durable_name="F", filter_subjects=["s.1", "s.2"],
                                                  ack_policy=AckPolicy.EXPLICIT))
        out.append((await js.consumer_info("S", "F")).num_pending)
        psub = await js.pull_subscribe_bind("F", "S")
        out.append([m.subject for m in await psub.fetch(3, timeout=2)])
        out.append(await err(js.add_consumer("S", ConsumerConfig(durable_name="BAD", filter_subject="s..x"))))
        out.append(await err(js.consumer_info("S", "NOPE")))
        out.append(sorted(await js.consumers_info("S") and [c.name for c in await js.consumers_info("S")]))
        out.append(await js.delete_consumer("S", "F"))
        out.append(await err(js.delete_consumer("S", "F")))
        return out

    got = run(session(js_server, body))
    assert got[0:4] == [1, 0, 3, 3]
    assert got[4] == 6
    assert got[5] == ["s.1", "s.2", "s.1"]
    assert got[6] == (10052, "invalid subject")
    assert got[7] == (10014, "consumer not found")
    assert got[8] == ["ALL" if False else "BYSTARTSEQUENCE", "F", "LAST", "LASTPERSUBJECT", "NEW"]
    assert got[9] is True
    assert got[10] == (10014, "consumer not found")


def test_create_actions(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await fill(js, 1)

        async def create(cfg: dict[str, Any], action: str = "") -> Any:
            req = {"stream_name": "S", "config": cfg}
            if action:
                req["action"] = action
            r = await nc.request(f"$JS.API.CONSUMER.CREATE.S.{cfg['name']}", json.dumps(req).encode(), timeout=2)
            d = json.loads(r.data)
            return d.get("error", {}).get("err_code") or d["type"]

        base = {"name": "A", "durable_name": "A", "ack_policy": "explicit"}
        return [await create(base, "update"), await create(base, "create"), await create(base, "create"),
                await create({**base, "max_deliver": 5}, "create"), await create({**base, "max_deliver": 5}),
                await create({**base, "deliver_policy": "new"})]

    got = run(session(js_server, body))
    t = "io.nats.jetstream.api.v1.consumer_create_response"
    assert got == [10149, t, t, 10148, t, 10012]


def test_ordered_consumer_and_heartbeats(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await fill(js, 30)
        sub = await js.subscribe("s.>", ordered_consumer=True, idle_heartbeat=0.2)
        data = [(await sub.next_msg(2)).data for _ in range(30)]
        inbox = nc.new_inbox()
        raw = await nc.subscribe(inbox)
        await js.add_consumer("S", ConsumerConfig(name="HB", deliver_subject=inbox, idle_heartbeat=0.2,
                                                  flow_control=True, deliver_policy=DeliverPolicy.NEW))
        m = await raw.next_msg(2)
        return [data == [f"m{i}".encode() for i in range(30)], m.headers.get("Status"),
                m.headers.get("Description"), "Nats-Last-Consumer" in m.headers]

    got = run(session(js_server, body))
    assert got == [True, "100", "Idle Heartbeat", True]


def test_workqueue_and_interest_retention(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="WQ", subjects=["wq.>"], retention="workqueue")
        out: list[Any] = []
        for i in range(4):
            await js.publish(f"wq.{i}", b"job")
        psub = await js.pull_subscribe("wq.>", durable="W")
        for m in await psub.fetch(3, timeout=2):
            await m.ack_sync()
        out.append((await js.stream_info("WQ")).state.messages)
        out.append(await err(js.add_consumer("WQ", ConsumerConfig(durable_name="W2",
                                                                  ack_policy=AckPolicy.EXPLICIT))))
        await js.add_stream(name="IN", subjects=["in.>"], retention="interest")
        await js.publish("in.x", b"nobody listens")
        out.append((await js.stream_info("IN")).state.messages)
        a = await js.pull_subscribe("in.>", durable="A")
        b = await js.pull_subscribe("in.>", durable="B")
        await js.publish("in.y", b"two listeners")
        for m in await a.fetch(1, timeout=2):
            await m.ack_sync()
        out.append((await js.stream_info("IN")).state.messages)
        for m in await b.fetch(1, timeout=2):
            await m.ack_sync()
        await asyncio.sleep(0.1)
        out.append((await js.stream_info("IN")).state.messages)
        return out

    got = run(session(js_server, body))
    assert got == [1, (10099, "multiple non-filtered consumers not allowed on workqueue stream"), 0, 1, 0]


def test_durable_resumes_after_restart(start_server: Callable[..., ServerProcess]) -> None:
    d = tempfile.mkdtemp(prefix="jsc-restart-")
    p = start_server("edged", ["-js", "-sd", d])

    async def before(nc: Any, js: Any) -> None:
        await fill(js, 10)
        psub = await js.pull_subscribe("s.>", durable="D", config=ConsumerConfig(ack_wait=3))
        msgs = await psub.fetch(6, timeout=2)
        for m in msgs[:4]:
            await m.ack_sync()

    run(session(p, before))
    p.kill9()
    p.start()

    async def after(nc: Any, js: Any) -> list[Any]:
        ci = await js.consumer_info("S", "D")
        psub = await js.pull_subscribe_bind("D", "S")
        msgs: list[Any] = []
        t0 = time.monotonic()
        while len(msgs) < 6 and time.monotonic() - t0 < 12:
            try:
                msgs += await psub.fetch(10, timeout=1)
            except (TimeoutError, NatsTimeout):
                pass
        return [ci.ack_floor.stream_seq, ci.num_ack_pending,
                sorted((m.data, m.metadata.num_delivered) for m in msgs)]

    got = run(session(p, after))
    assert got[0] == 4 and got[1] == 2
    # acked stays acked; the two pending are redelivered (second delivery) once ack_wait has run from
    # their first delivery, as nats-server does, the rest come once
    assert got[2] == sorted([(b"m4", 2), (b"m5", 2), (b"m6", 1), (b"m7", 1), (b"m8", 1), (b"m9", 1)])


def test_kill9_under_consume_and_ack(start_server: Callable[..., ServerProcess]) -> None:
    d = tempfile.mkdtemp(prefix="jsc-kill-")
    p = start_server("edged", ["-js", "-sd", d])
    acked: set[bytes] = set()
    async def setup(nc: Any, js: Any) -> None:
        await js.add_stream(name="K", subjects=["k"])
        for i in range(3000):
            await js.publish("k", str(i).encode())

    run(session(p, setup))

    async def consume(nc: Any, js: Any) -> None:
        psub = await js.pull_subscribe("k", durable="KC")
        t0 = time.monotonic()
        while len(acked) < 1500 and time.monotonic() - t0 < 30:
            for m in await psub.fetch(100, timeout=2):
                await m.ack_sync()
                acked.add(m.data)

    run(session(p, consume))
    p.kill9()
    p.start()

    async def rest(nc: Any, js: Any) -> list[bytes]:
        psub = await js.pull_subscribe_bind("KC", "K")
        out = []
        while True:
            try:
                msgs = await psub.fetch(500, timeout=1)
            except (NatsTimeout, TimeoutError):
                # nats-py raises the plain TimeoutError when the server's 408 lands in the last moment
                # before its own deadline
                break
            for m in msgs:
                await m.ack()
                out.append(m.data)
        return out

    after = run(session(p, rest))
    assert not acked & set(after)  # no acked message comes back
    assert acked | set(after) == {str(i).encode() for i in range(3000)}  # no unacked one is lost


def test_replay_original_rate_limit_and_ack_samples(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="R", subjects=["r"])
        for i in range(3):
            await js.publish("r", str(i).encode())
            await asyncio.sleep(0.4)
        metrics = await nc.subscribe("$JS.EVENT.METRIC.CONSUMER.ACK.R.>")
        times = []
        done = asyncio.Event()

        async def cb(m: Any) -> None:
            times.append(time.monotonic())
            await m.ack()
            if len(times) == 3:
                done.set()

        await js.subscribe("r", cb=cb, durable="REPLAY", manual_ack=True,
                           config=ConsumerConfig(replay_policy="original", sample_freq="100%"))
        await asyncio.wait_for(done.wait(), 10)
        sample = json.loads((await metrics.next_msg(2)).data)
        return [round(times[2] - times[0], 1), sample["type"], sample["stream_seq"]]

    got = run(session(js_server, body))
    assert 0.6 <= got[0] <= 1.2  # the 0.4 s gaps between the publishes are replayed
    assert got[1:] == ["io.nats.jetstream.metric.v1.consumer_ack", 1]


def test_backoff_max_deliver_advisory_and_headers_only(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="B", subjects=["b"])
        await js.publish("b", b"payload!")
        adv = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.B.BO")
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await js.add_consumer("B", ConsumerConfig(durable_name="BO", deliver_subject=inbox,
                                                  ack_policy=AckPolicy.EXPLICIT, backoff=[0.3, 0.6],
                                                  max_deliver=3, headers_only=True))
        seen = []
        t0 = time.monotonic()
        for _ in range(3):
            m = await sub.next_msg(3)
            seen.append((round(time.monotonic() - t0, 1), m.data, m.headers.get("Nats-Msg-Size")))
        try:
            await sub.next_msg(1.2)
            extra = "redelivered past max_deliver"
        except NatsTimeout:
            extra = "none"
        a = json.loads((await adv.next_msg(2)).data)
        return [seen, extra, (a["type"], a["stream_seq"], a["deliveries"])]

    got = run(session(js_server, body))
    times = [t for t, _, _ in got[0]]
    assert [(d, size) for _, d, size in got[0]] == [(b"", "8")] * 3
    assert times[0] < 0.2 and 0.2 <= times[1] - times[0] <= 0.7 and 0.5 <= times[2] - times[1] <= 1.1
    assert got[1] == "none"
    assert got[2] == ("io.nats.jetstream.advisory.v1.max_deliver", 1, 3)
