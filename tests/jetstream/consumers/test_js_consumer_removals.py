"""What consumers see when messages leave a stream without being acked, differential: discarded by limits,
deleted through the API, expired by max_age, or purged. Consumer info (delivered, ack floor, pending) and
the terminated advisories must be the same as nats-server's."""

from __future__ import annotations

import asyncio
from typing import Any

from nats.js.api import AckPolicy, ConsumerConfig

from tests.support.aio import run
from tests.support.jsutil import masked, session
from tests.support.servers import ServerProcess


def info_t(ci: Any) -> tuple[Any, ...]:
    return ((ci.delivered.consumer_seq, ci.delivered.stream_seq), (ci.ack_floor.consumer_seq,
            ci.ack_floor.stream_seq), ci.num_ack_pending, ci.num_pending, ci.num_redelivered)


async def advisories(sub: Any) -> list[dict[str, Any]]:
    out = []
    for _ in range(20):
        try:
            out.append(masked((await sub.next_msg(0.5)).data))
        except Exception:
            break
    return sorted(out, key=lambda a: (a["consumer"], a["stream_seq"]))


def test_limits_discard_delete_and_purge(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="L", subjects=["l.>"], max_msgs=3)
        terms = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>")
        cfg = {"ack_policy": AckPolicy.EXPLICIT, "ack_wait": 30}
        for i in range(3):
            await js.publish(f"l.{i}", b"x")
        done = await js.pull_subscribe("l.>", durable="DONE", config=ConsumerConfig(**cfg))
        (m,) = await done.fetch(1, timeout=2)
        await m.ack_sync()  # DONE: 1 delivered and acked, nothing pending
        held = await js.pull_subscribe("l.>", durable="HELD", config=ConsumerConfig(**cfg))
        msgs = await held.fetch(2, timeout=2)
        await msgs[0].ack_sync()  # HELD: seq 2 pending
        await js.pull_subscribe("l.>", durable="IDLE", config=ConsumerConfig(**cfg))
        out: list[Any] = []
        for i in range(3, 8):
            await js.publish(f"l.{i}", b"y")  # seqs 4..8: 1..5 are discarded
        await asyncio.sleep(0.2)
        for name in ("DONE", "HELD", "IDLE"):
            out.append(info_t(await js.consumer_info("L", name)))
        out.append(await advisories(terms))
        got = await held.fetch(1, timeout=2)
        out.append([x.metadata.sequence.stream for x in got])
        for x in got:
            await x.ack_sync()
        out.append(info_t(await js.consumer_info("L", "HELD")))
        # a pending message deleted through the API
        msgs = await done.fetch(2, timeout=2)
        await msgs[1].ack_sync()
        await js.delete_msg("L", msgs[0].metadata.sequence.stream)
        await asyncio.sleep(0.2)
        out.append(info_t(await js.consumer_info("L", "DONE")))
        out.append(await advisories(terms))
        # a purge moves everyone past what it removed
        await js.purge_stream("L")
        await asyncio.sleep(0.2)
        for name in ("DONE", "HELD", "IDLE"):
            out.append(info_t(await js.consumer_info("L", name)))
        out.append(await advisories(terms))
        return out

    got = run(session(js_server, body))

    def term(consumer: str, cseq: int, sseq: int) -> dict[str, Any]:
        return {"type": "io.nats.jetstream.advisory.v1.terminated", "stream": "L", "consumer": consumer,
                "consumer_seq": cseq, "stream_seq": sseq, "deliveries": 1,
                "reason": "Unacknowledged message was deleted"}

    # discards leave delivered and the ack floor where they were; HELD's pending seq 2 is terminated
    assert got[0:3] == [((1, 1), (1, 1), 0, 3, 0), ((2, 2), (2, 2), 0, 3, 0), ((0, 0), (0, 0), 0, 3, 0)]
    assert got[3] == [term("HELD", 2, 2)]
    assert got[4:6] == [[6], ((3, 6), (3, 6), 0, 2, 0)]
    # a pending message deleted through the API: terminated too, the floor moves as for an ack
    assert got[6:8] == [((3, 7), (3, 7), 0, 1, 0), [term("DONE", 2, 6)]]
    # a purge moves every consumer past it, without advisories
    assert got[8:] == [((3, 8), (3, 8), 0, 0, 0), ((3, 8), (3, 8), 0, 0, 0), ((0, 8), (0, 8), 0, 0, 0), []]


def test_max_age_expiry_of_pending(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="A", subjects=["a"], max_age=1.0)
        terms = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>")
        for _ in range(3):
            await js.publish("a", b"x")
        psub = await js.pull_subscribe("a", durable="P", config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT,
                                                                               ack_wait=30))
        msgs = await psub.fetch(2, timeout=2)
        await msgs[1].ack_sync()
        await asyncio.sleep(2.5)
        return [info_t(await js.consumer_info("A", "P")), (await js.stream_info("A")).state.messages,
                await advisories(terms)]

    got = run(session(js_server, body))
    assert got == [((2, 2), (2, 2), 0, 0, 0), 0, [
        {"type": "io.nats.jetstream.advisory.v1.terminated", "stream": "A", "consumer": "P", "consumer_seq": 1,
         "stream_seq": 1, "deliveries": 1, "reason": "Unacknowledged message was deleted"}]]


def test_interior_removals_of_pending(js_server: ServerProcess) -> None:
    """Per-subject limits and per-message TTLs take messages from the middle of the stream: pending ones
    are terminated at once (advisory, num_ack_pending), not only when their redelivery comes due."""
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="I", subjects=["i.>"], max_msgs_per_subject=2, allow_msg_ttl=True)
        terms = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>")
        for subj in ("i.z", "i.a", "i.b", "i.a"):
            await js.publish(subj, b"x")
        await js.publish("i.t", b"t", headers={"Nats-TTL": "1s"})
        await js.publish("i.c", b"x")
        psub = await js.pull_subscribe("i.>", durable="P", config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT,
                                                                                ack_wait=30))
        msgs = await psub.fetch(6, timeout=2)
        await msgs[0].ack_sync()  # the front stays: nothing below the interior removals is pending
        out: list[Any] = []
        await js.publish("i.a", b"y")  # i.a's third: its first (seq 2) goes
        await asyncio.sleep(0.3)
        out.append(info_t(await js.consumer_info("I", "P")))
        out.append(await advisories(terms))
        await asyncio.sleep(2.0)  # seq 5's TTL runs out
        out.append(info_t(await js.consumer_info("I", "P")))
        out.append(await advisories(terms))
        out.append((await js.stream_info("I")).state.messages)
        return out

    got = run(session(js_server, body))

    def term(sseq: int) -> dict[str, Any]:
        return {"type": "io.nats.jetstream.advisory.v1.terminated", "stream": "I", "consumer": "P",
                "consumer_seq": sseq, "stream_seq": sseq, "deliveries": 1,
                "reason": "Unacknowledged message was deleted"}

    # (the floor moves over the terminated seq 2 as over an acked one)
    assert got == [((6, 6), (2, 2), 4, 1, 0), [term(2)], ((6, 6), (2, 2), 3, 1, 0), [term(5)], 5]


def test_rollup_of_pending(js_server: ServerProcess) -> None:
    """A subject rollup takes the subject's earlier messages from the middle of the stream. nats-server
    treats it as a purge: no advisory, and the pending ones stay counted until they are acked or come due."""
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="R", subjects=["r.>"], allow_rollup_hdrs=True)
        terms = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>")
        for subj in ("r.z", "r.a", "r.b", "r.a", "r.c"):
            await js.publish(subj, b"x")
        psub = await js.pull_subscribe("r.>", durable="P", config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT,
                                                                                ack_wait=30))
        msgs = await psub.fetch(5, timeout=2)
        await msgs[0].ack_sync()
        await js.publish("r.a", b"roll", headers={"Nats-Rollup": "sub"})  # seqs 2 and 4 go
        await asyncio.sleep(0.3)
        out: list[Any] = [info_t(await js.consumer_info("R", "P")), await advisories(terms)]
        out.append([m.metadata.sequence.stream for m in await psub.fetch(5, timeout=1)])
        out.append((await js.stream_info("R")).state.messages)
        return out

    got = run(session(js_server, body))
    assert got == [((5, 5), (1, 1), 4, 1, 0), [], [6], 4]
