"""The JetStream ack protocol, differential: +ACK / double ack, -NAK (with delay), +WPI, +NXT, +TERM, the
ack policies all and none, redelivery up to max_deliver, and malformed acks, on
`$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`, with consumer info checked after
each step. The same nats-py scenario runs against nats-server and edged with the same assertions; timings
are only bounded from below where the protocol promises a delay, with room for a busy machine."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import AckPolicy, ConsumerConfig

from tests.support.aio import run
from tests.support.jsutil import Probe, drain, info_t, masked, session, sync
from tests.support.servers import ServerProcess


def seqs(msgs: list[Any]) -> list[tuple[int, int, int]]:
    """(stream seq, consumer seq, deliveries) of delivered messages."""
    return [(m.metadata.sequence.stream, m.metadata.sequence.consumer, m.metadata.num_delivered) for m in msgs]


async def fill(js: Any, stream: str, n: int, retention: str = "limits", add: bool = True) -> None:
    if add:
        await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], retention=retention)
    for i in range(n):
        await js.publish(f"{stream.lower()}.{i}", f"m{i}".encode())


def test_ack_replies_double_ack_and_bad_acks(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        out: list[Any] = []
        for retention in ("limits", "interest"):
            st = "L" if retention == "limits" else "I"
            await js.add_stream(name=st, subjects=[f"{st.lower()}.>"], retention=retention)
            psub = await js.pull_subscribe(f"{st.lower()}.>", durable="C", config=ConsumerConfig(ack_wait=30))
            await fill(js, st, 5, add=False)  # interest retention keeps only what a consumer wants
            ms = await psub.fetch(3, timeout=2)
            r = await ms[0].ack_sync()  # a synchronous ack gets an empty reply
            out.append(r.data)
            probe = await Probe(nc).start()
            pre = f"$JS.ACK.{st}.C"
            await probe.send("ack_again", ms[0].reply, b"+ACK")
            await probe.send("empty_again", ms[0].reply)
            await probe.send("ok", ms[1].reply, b"+OK")
            await probe.send("undelivered", f"{pre}.1.5.5.0.0")
            await probe.send("seq0", f"{pre}.1.0.0.0.0")
            await probe.send("nak_acked", ms[0].reply, b"-NAK")
            await probe.send("wpi_acked", ms[0].reply, b"+WPI")
            await probe.send("unknown_kind", ms[2].reply, b"+FOO")
            await probe.send("not_numeric", f"{pre}.1.x.1.1.0")
            await probe.send("unknown_consumer", f"$JS.ACK.{st}.NOPE.1.1.1.1.0")
            await probe.send("8_tokens", f"{pre}.1.3.3.1")
            await probe.send("10_tokens", f"{pre}.1.3.3.1.0.0")
            await probe.send("bad_nak", ms[2].reply, b"-NAK {bad")
            got = await probe.collect()
            # wrong token counts reach no consumer: nats-server answers "no responders", edged nothing
            wrong = (got.pop("8_tokens"), got.pop("10_tokens"))
            out.append([got, all(w in ("none", "503") for w in wrong)])
            # nothing above acked m2 (the bad NAK is a plain one): it comes again, and the stream still works
            again = await psub.fetch(1, timeout=2)
            out.append(seqs(again))
            out.append(info_t(await js.consumer_info(st, "C")))
            await again[0].ack_sync()
            out.append((await js.stream_info(st)).state.messages)
        return out

    got = run(session(js_server, body))
    replies = {"ack_again": b"", "empty_again": b"", "ok": b"", "undelivered": "none", "nak_acked": b"",
               "wpi_acked": b"", "unknown_kind": b"", "not_numeric": "none", "unknown_consumer": "503",
               "bad_nak": b""}
    # limits: an ack of stream sequence 0 is answered; interest: it is not
    assert got[:5] == [b"", [{**replies, "seq0": b""}, True], [(3, 4, 2)], ((4, 3), (2, 2), 1, 1, 2, 0), 5]
    assert got[5:] == [b"", [{**replies, "seq0": "none"}, True], [(3, 4, 2)], ((4, 3), (2, 2), 1, 1, 2, 0), 2]


def test_nak_now_and_with_delay(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await fill(js, "N", 2)
        adv = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.N.C")
        psub = await js.pull_subscribe("n.>", durable="C", config=ConsumerConfig(ack_wait=5))
        out: list[Any] = []
        (m,) = await psub.fetch(1, timeout=2)
        await sync(nc, m, b"-NAK")
        (m,) = await psub.fetch(1, timeout=2)  # redelivered at once, ahead of the next new message
        out.append(seqs([m]))
        await m.nak(delay=1.0)
        await sync(nc, m, b"+FENCE")  # an ack of no known kind: only answered, after the NAK
        t0 = time.monotonic()
        (m1,) = await psub.fetch(1, timeout=2)
        out.append(seqs([m1]))
        await m1.ack_sync()
        out.append(info_t(await js.consumer_info("N", "C")))
        again: list[Any] = []
        while not again and time.monotonic() - t0 < 5:
            try:
                again = await psub.fetch(1, timeout=0.25)
            except NatsTimeout:
                pass
        waited = time.monotonic() - t0
        out.append(seqs(again))
        # a Go duration works as well
        await sync(nc, again[0], b"-NAK 600ms")
        t1 = time.monotonic()
        (m,) = await psub.fetch(1, timeout=4)
        waited2 = time.monotonic() - t1
        out.append(seqs([m]))
        await m.ack_sync()
        await nc.publish(m.reply, b"-NAK")  # of an acked message: ignored, no advisory
        out.append(info_t(await js.consumer_info("N", "C")))
        out.append([masked(a.data) for a in await drain(adv)])
        out.append((waited, waited2))
        return out

    got = run(session(js_server, body))
    assert got[:6] == [[(1, 2, 2)], [(2, 3, 1)], ((3, 2), (0, 0), 1, 1, 0, 0), [(1, 4, 3)], [(1, 5, 4)],
                       ((5, 2), (5, 2), 0, 0, 0, 0)]
    base = {"type": "io.nats.jetstream.advisory.v1.nak", "stream": "N", "consumer": "C", "stream_seq": 1}
    assert got[6] == [{**base, "consumer_seq": 1, "deliveries": 1}, {**base, "consumer_seq": 2, "deliveries": 2},
                      {**base, "consumer_seq": 4, "deliveries": 3}]
    waited, waited2 = got[7]
    assert 0.9 <= waited <= 3.5 and 0.5 <= waited2 <= 3.0  # not before the delay


def test_in_progress_holds_redelivery(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await fill(js, "W", 1)
        psub = await js.pull_subscribe("w.>", durable="C", config=ConsumerConfig(ack_wait=1.0))
        out: list[Any] = []
        (m,) = await psub.fetch(1, timeout=2)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.1:  # twice ack_wait, kept in progress
            await m.in_progress()
            await asyncio.sleep(0.3)
        await m.in_progress()
        last = time.monotonic()
        out.append(info_t(await js.consumer_info("W", "C")))
        try:
            await psub.fetch(1, timeout=0.4)
            out.append("redelivered while in progress")
        except NatsTimeout:
            out.append("held")
        (m2,) = await psub.fetch(1, timeout=3)  # no more progress: redelivered after ack_wait
        out.append(seqs([m2]))
        out.append(time.monotonic() - last)
        out.append(info_t(await js.consumer_info("W", "C")))
        await m2.ack_sync()
        out.append(info_t(await js.consumer_info("W", "C")))
        return out

    got = run(session(js_server, body))
    assert got[0] == ((1, 1), (0, 0), 1, 0, 0, 0)
    assert got[1:3] == ["held", [(1, 2, 2)]]
    assert got[3] >= 0.8
    assert got[4:] == [((2, 1), (0, 0), 1, 1, 0, 0), ((2, 1), (2, 1), 0, 0, 0, 0)]


def test_next_acks_and_asks_for_more(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await fill(js, "X", 5)
        psub = await js.pull_subscribe("x.>", durable="C", config=ConsumerConfig(ack_wait=30))
        out: list[Any] = []
        (m0,) = await psub.fetch(1, timeout=2)
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish(m0.reply, b"+NXT", reply=inbox)
        m1 = await sub.next_msg(2)
        await nc.publish(m1.reply, b'+NXT {"batch":2}', reply=inbox)
        m2, m3 = await sub.next_msg(2), await sub.next_msg(2)
        out.append([(m.data, m.subject) for m in (m1, m2, m3)])
        out.append(len(await drain(sub)))  # no empty ack reply besides, nothing more
        out.append(info_t(await js.consumer_info("X", "C")))
        # m3 acked (m2 still pending: the floor stays), then whatever is left and the end of a no_wait request
        await nc.publish(m3.reply, b'+NXT {"batch":3,"no_wait":true}', reply=inbox)
        rest = await drain(sub)
        out.append([m.data or (m.headers or {}).get("Status") for m in rest])
        out.append(info_t(await js.consumer_info("X", "C")))
        return out

    got = run(session(js_server, body))
    assert got == [[(b"m1", "x.1"), (b"m2", "x.2"), (b"m3", "x.3")], 0, ((4, 4), (2, 2), 2, 0, 1, 0),
                   [b"m4", "404"], ((5, 5), (2, 2), 2, 0, 0, 0)]


def test_term_with_reason_and_advisory(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await fill(js, "T", 4)
        adv = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.T.C")
        psub = await js.pull_subscribe("t.>", durable="C", config=ConsumerConfig(ack_wait=0.6))
        out: list[Any] = []
        ms = await psub.fetch(3, timeout=2)
        await ms[0].term()
        await nc.publish(ms[1].reply, b"+TERM  too big ")
        r = await nc.request(ms[2].reply, b"+TERM", timeout=2)
        out.append(r.data)
        out.append(info_t(await js.consumer_info("T", "C")))
        await asyncio.sleep(1.0)  # past ack_wait: a terminated message is not redelivered
        rest = await psub.fetch(3, timeout=0.5)
        out.append(seqs(rest))
        await rest[0].ack_sync()
        await nc.publish(ms[0].reply, b"+TERM again")  # terminating it again: one more advisory
        out.append(info_t(await js.consumer_info("T", "C")))
        out.append([masked(a.data) for a in await drain(adv)])
        return out

    got = run(session(js_server, body))
    assert got[:4] == [b"", ((3, 3), (3, 3), 0, 0, 1, 0), [(4, 4, 1)], ((4, 4), (4, 4), 0, 0, 0, 0)]
    base = {"type": "io.nats.jetstream.advisory.v1.terminated", "stream": "T", "consumer": "C", "deliveries": 1}
    assert got[4] == [{**base, "stream_seq": 1, "consumer_seq": 1}, {**base, "stream_seq": 2, "consumer_seq": 2,
                                                                      "reason": "too big"},
                      {**base, "stream_seq": 3, "consumer_seq": 3}, {**base, "stream_seq": 1, "consumer_seq": 1,
                                                                      "reason": "again"}]


def test_ack_policy_all(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await fill(js, "A", 6)
        psub = await js.pull_subscribe("a.>", durable="C", config=ConsumerConfig(ack_policy=AckPolicy.ALL,
                                                                                  ack_wait=30))
        out: list[Any] = []
        ms = await psub.fetch(6, timeout=2)
        out.append(info_t(await js.consumer_info("A", "C")))
        await ms[2].ack_sync()  # acks 1..3
        out.append(info_t(await js.consumer_info("A", "C")))
        out.append((await nc.request(ms[0].reply, b"", timeout=2)).data)  # below the floor: answered, no change
        out.append(info_t(await js.consumer_info("A", "C")))
        await sync(nc, ms[3], b"-NAK")
        (m3,) = await psub.fetch(1, timeout=2)
        out.append(seqs([m3]))
        out.append(info_t(await js.consumer_info("A", "C")))
        await ms[4].ack_sync()  # acks the redelivered 4 as well: the floor is this delivery
        out.append(info_t(await js.consumer_info("A", "C")))
        await nc.request(m3.reply, b"", timeout=2)  # the redelivery of 4, now below the floor
        out.append(info_t(await js.consumer_info("A", "C")))
        await sync(nc, ms[5], b"+TERM")
        out.append(info_t(await js.consumer_info("A", "C")))
        return out

    got = run(session(js_server, body))
    assert got == [((6, 6), (0, 0), 6, 0, 0, 0), ((6, 6), (3, 3), 3, 0, 0, 0), b"", ((6, 6), (3, 3), 3, 0, 0, 0),
                   [(4, 7, 2)], ((7, 6), (3, 3), 3, 1, 0, 0), ((7, 6), (5, 5), 1, 0, 0, 0),
                   ((7, 6), (5, 5), 1, 0, 0, 0), ((7, 6), (6, 6), 0, 0, 0, 0)]


def test_ack_policy_none(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await fill(js, "Z", 5)
        psub = await js.pull_subscribe("z.>", durable="C", config=ConsumerConfig(ack_policy=AckPolicy.NONE))
        out: list[Any] = []
        ms = await psub.fetch(3, timeout=2)
        out.append(info_t(await js.consumer_info("Z", "C")))
        probe = await Probe(nc).start()
        await probe.send("ack", ms[0].reply)
        await probe.send("nak", ms[1].reply, b"-NAK")
        await probe.send("term", ms[2].reply, b"+TERM")
        out.append(await probe.collect())  # nobody takes acks of an ack-none consumer
        out.append(info_t(await js.consumer_info("Z", "C")))
        out.append(seqs(await psub.fetch(5, timeout=1)))
        out.append(info_t(await js.consumer_info("Z", "C")))
        return out

    got = run(session(js_server, body))
    assert got == [((3, 3), (3, 3), 0, 0, 2, 0), {"ack": "503", "nak": "503", "term": "503"},
                   ((3, 3), (3, 3), 0, 0, 2, 0), [(4, 4, 1), (5, 5, 1)], ((5, 5), (5, 5), 0, 0, 0, 0)]


def test_mixed_acks_info_each_step(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await fill(js, "M", 6)
        adv = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.M.C")
        psub = await js.pull_subscribe("m.>", durable="C", config=ConsumerConfig(ack_wait=1.0, max_deliver=2))
        out: list[Any] = []
        ms = await psub.fetch(4, timeout=2)
        out.append(info_t(await js.consumer_info("M", "C")))
        for m, kind in zip(ms, (b"+ACK", b"-NAK", b"+TERM", b"+WPI"), strict=True):
            await sync(nc, m, kind)
        out.append(info_t(await js.consumer_info("M", "C")))
        ms2 = await psub.fetch(2, timeout=2)  # the NAKed one first, then the next new one
        out.append(seqs(ms2))
        out.append(info_t(await js.consumer_info("M", "C")))
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.M.C", b'{"batch":10,"expires":8000000000}', reply=inbox)
        m5 = await sub.next_msg(2)
        out.append(m5.data)
        out.append(info_t(await js.consumer_info("M", "C")))  # the request waits on for 9 more
        await sync(nc, ms[3], b"+TERM")
        out.append(info_t(await js.consumer_info("M", "C")))
        # 2 was delivered twice (max_deliver): it leaves pending when its turn comes; 5 and 6 are sent again
        redelivered = []
        t0 = time.monotonic()
        while len(redelivered) < 2 and time.monotonic() - t0 < 4:
            try:
                m = await sub.next_msg(0.3)
                redelivered.append((m.data, m.reply.split(".")[4:7]))
            except NatsTimeout:
                pass
        out.append(redelivered)
        advs: list[Any] = []
        t0 = time.monotonic()
        while len(advs) < 3 and time.monotonic() - t0 < 4:
            try:
                advs.append(masked((await adv.next_msg(0.3)).data))
            except NatsTimeout:
                pass
        out.append(sorted(advs, key=lambda a: a["stream_seq"]))
        out.append(len(await drain(sub, 0.2)))
        out.append(info_t(await js.consumer_info("M", "C")))
        return out

    got = run(session(js_server, body))
    assert got[:8] == [((4, 4), (0, 0), 4, 0, 2, 0), ((4, 4), (1, 1), 2, 0, 2, 0), [(2, 5, 2), (5, 6, 1)],
                       ((6, 5), (1, 1), 3, 1, 1, 0), b"m5", ((7, 6), (1, 1), 4, 1, 0, 1),
                       ((7, 6), (1, 1), 3, 1, 0, 1), [(b"m4", ["2", "5", "8"]), (b"m5", ["2", "6", "9"])]]
    base = {"type": "io.nats.jetstream.advisory.v1.max_deliver", "stream": "M", "consumer": "C", "deliveries": 2}
    assert got[8] == [{**base, "stream_seq": 2}, {**base, "stream_seq": 5}, {**base, "stream_seq": 6}]
    # nothing pending any more, the three counted as redelivered; the ack floor stays where acks left it
    assert got[9:] == [0, ((9, 6), (1, 1), 0, 3, 0, 1)]


def test_max_deliver_reached_info(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await fill(js, "D", 1)
        two = await js.pull_subscribe("d.>", durable="TWO", config=ConsumerConfig(ack_wait=0.5, max_deliver=2))
        one = await js.pull_subscribe("d.>", durable="ONE", config=ConsumerConfig(ack_wait=0.5, max_deliver=1))
        out: list[Any] = []
        out.append(seqs(await two.fetch(1, timeout=2)) + seqs(await one.fetch(1, timeout=2)))
        await asyncio.sleep(1.0)
        out.append(seqs(await two.fetch(1, timeout=2)))
        out.append((info_t(await js.consumer_info("D", "TWO")), info_t(await js.consumer_info("D", "ONE"))))
        await asyncio.sleep(1.0)
        # TWO: past ack_wait again, but still pending until a pull request looks for the next message;
        # ONE (max_deliver 1) left pending as soon as its ack_wait was over, and reports no redelivery
        out.append((info_t(await js.consumer_info("D", "TWO")), info_t(await js.consumer_info("D", "ONE"))))
        for sub in (two, one):
            try:
                await sub.fetch(1, timeout=0.4)
                out.append("redelivered past max_deliver")
            except NatsTimeout:
                out.append("none")
        out.append((info_t(await js.consumer_info("D", "TWO")), info_t(await js.consumer_info("D", "ONE"))))
        return out

    got = run(session(js_server, body))
    assert got[:3] == [[(1, 1, 1), (1, 1, 1)], [(1, 2, 2)],
                       (((2, 1), (0, 0), 1, 1, 0, 0), ((1, 1), (0, 0), 0, 0, 0, 0))]
    assert got[3] == (((2, 1), (0, 0), 1, 1, 0, 0), ((1, 1), (0, 0), 0, 0, 0, 0))
    assert got[4:] == ["none", "none", (((2, 1), (0, 0), 0, 1, 0, 0), ((1, 1), (0, 0), 0, 0, 0, 0))]
