"""What a stream purge does to its pull consumers, differential. nats-server tells each consumer in turn
(stream.go purge, consumer.go purge): a consumer whose filter lies within the purged subject (or any, for
a purge without one) moves up to the first message of that subject left, past the end if none; one whose
filter is wider moves up to the stream's first message, and drops the pending messages the purge took.
The floor goes up to just below that start, its delivery becoming the highest pending one taken; with
nothing left pending the floor is what was delivered. A purge of a subject that took exactly one message
also settles that one as a single removal. edged moved every consumer to the stream's first message and
its floor to just below the lowest pending one. Each case: a fresh stream, one consumer, a fetch (no_wait,
so no request outlives it), some acks, one purge; the consumer's info and the purge reply must match.
Each case's stream has a name of its own (`case_stream`)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
from nats.js.errors import NotFoundError

from tests.support.jsutil import ANCHOR, case_stream, differing, replies_of_both

# (subjects published in order, consumer filter, fetch, indexes of the fetched to ack, purge body)
CASES: list[tuple[str, str | None, int, list[int], dict[str, Any]]] = [
    ("bacb", None, 4, [0, 2], {"filter": "pp.a"}),  # one message taken: settled on its own
    ("bac", None, 3, [0, 2], {"filter": "pp.a", "seq": 9}),
    ("abcab", None, 5, [2], {"filter": "pp.a", "seq": 2}),
    ("abcab", None, 5, [0, 2], {"filter": "pp.b"}),  # two taken from the middle: pending stays
    ("abcabc", "pp.*", 5, [2], {"filter": "pp.a"}),  # wider filter: its taken pending ones go
    ("aabcca", "pp.a", 2, [], {"filter": "pp.a", "seq": 1}),
    ("aabcca", "pp.a", 2, [], {"filter": "pp.a", "seq": 2}),
    ("aabcca", "pp.a", 2, [], {"seq": 2}),
    ("aabcca", "pp.a", 2, [0], {"keep": 5}),
    ("aabcca", "pp.a", 2, [], {}),
    ("aabcca", "pp.b", 1, [], {"filter": "pp.a"}),  # apart: the consumer is left alone
    ("aabcca", "pp.a", 3, [1], {"filter": "pp.b"}),
    ("abab", "pp.b", 1, [], {"filter": "pp.b", "keep": 1}),  # moves up to the one left
    ("abcbcb", "pp.b", 2, [0], {"filter": "pp.b", "keep": 2}),
    ("ccab", "pp.a", 1, [], {"filter": "pp.c"}),
]


def _info(ci: Any) -> tuple[int, ...]:
    return (ci.delivered.stream_seq, ci.delivered.consumer_seq, ci.ack_floor.stream_seq,
            ci.ack_floor.consumer_seq, ci.num_ack_pending, ci.num_pending)


async def _fetch(nc: Any, stream: str, n: int) -> list[Any]:
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.C", json.dumps({"batch": n, "no_wait": True}).encode(),
                     reply=inbox)
    msgs: list[Any] = []
    while len(msgs) < n:
        m = await sub.next_msg(timeout=5)
        if m.headers and m.headers.get("Status"):
            break
        msgs.append(m)
    await sub.unsubscribe()
    return msgs


async def _settled(js: Any, stream: str, pending: set[int], purged: Any,
                   before: tuple[int, ...]) -> tuple[int, ...]:
    """The consumer's info once the purge is done with it. A purge that took exactly one message also removes
    that one on its own, and nats-server settles a removed pending message on a goroutine of its own
    (stream.go storeUpdates, consumer.go decStreamPending): when the message was pending, wait (2 s at most)
    until the consumer no longer counts it, as the delete test below does."""
    info = _info(await js.consumer_info(stream, "C"))
    if purged != 1:
        return info
    gone = False
    for seq in pending:
        try:
            await js.get_msg(stream, seq)
        except NotFoundError:
            gone = True
    for _ in range(40):
        if not gone or info[4] < before[4]:
            break
        await asyncio.sleep(0.05)
        info = _info(await js.consumer_info(stream, "C"))
    return info


async def _scenario(url: str) -> list[Any]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(**ANCHOR)
    out: list[Any] = []
    for i, (subjects, flt, n, acks, body) in enumerate(CASES):
        name = case_stream("PP", i)
        await js.add_stream(name=name, subjects=["pp.*"])
        for s in subjects:
            await js.publish(f"pp.{s}", b"x")
        cfg: dict[str, Any] = {"durable_name": "C", "ack_policy": "explicit"}
        if flt:
            cfg["filter_subject"] = flt
        r = json.loads((await nc.request(f"$JS.API.CONSUMER.CREATE.{name}.C",
                                         json.dumps({"stream_name": name, "config": cfg}).encode(), timeout=5)).data)
        assert "error" not in r, r
        msgs = await _fetch(nc, name, n)
        for k in acks:
            await nc.request(msgs[k].reply, b"+ACK", timeout=5)
        pending = {m.metadata.sequence.stream for k, m in enumerate(msgs) if k not in acks}
        before = _info(await js.consumer_info(name, "C"))
        r = json.loads((await nc.request(f"$JS.API.STREAM.PURGE.{name}", json.dumps(body).encode(), timeout=5)).data)
        after = await _settled(js, name, pending, r.get("purged"), before)
        out.append((subjects, flt, body, len(msgs), before, r.get("purged"), after))
        await js.delete_stream(name)
    await nc.close()
    return out


def test_purge_moves_consumers_as_nats_server() -> None:
    res = replies_of_both(_scenario, "purgecons-")
    diffs = differing(res)
    assert not diffs, diffs[:4]


async def _deletes(url: str) -> list[Any]:
    """A message deleted while pending: terminated, which counts as an ack; with ack_policy all, of
    everything up to it (on an interest stream the messages below go as well)."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(**ANCHOR)
    out: list[Any] = []
    for i, (retention, seq, policy) in enumerate((("limits", 3, "all"), ("limits", 1, "all"), ("interest", 3, "all"),
                                                  ("limits", 3, "explicit"), ("limits", 5, "all"),
                                                  ("interest", 4, "explicit"))):
        name = case_stream("PD", i)
        await js.add_stream(name=name, subjects=["pp.*"], retention=retention)
        cfg = {"durable_name": "C", "ack_policy": policy}
        await nc.request(f"$JS.API.CONSUMER.CREATE.{name}.C",
                         json.dumps({"stream_name": name, "config": cfg}).encode(), timeout=5)
        for _ in range(6):
            await js.publish("pp.x", b"x")
        await _fetch(nc, name, 5)
        r = json.loads((await nc.request(f"$JS.API.STREAM.MSG.DELETE.{name}", json.dumps({"seq": seq}).encode(),
                                         timeout=5)).data)
        # nats-server settles a removed pending message on a goroutine of its own: wait until it has
        # (the deleted message was one of the 5 pending), at most 2 s
        for _ in range(40):
            info = _info(await js.consumer_info(name, "C"))
            if info[4] < 5:
                break
            await asyncio.sleep(0.05)
        out.append((retention, seq, policy, r.get("success"), info, (await js.stream_info(name)).state.messages))
        await js.delete_stream(name)
    await nc.close()
    return out


def test_deleting_a_pending_message_acks_as_nats_server() -> None:
    res = replies_of_both(_deletes, "delcons-")
    assert res["edged"] == res["nats-server"]
