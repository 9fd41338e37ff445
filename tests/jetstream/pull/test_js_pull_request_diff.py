"""Pull request bodies a consumer without a priority policy refuses or ignores, differential: priority
group fields (nats-server answers 400 naming the policy the consumer lacks), a heartbeat that is not
positive (ignored: edged used to take it and send heartbeats back to back), and the request limits."""

from __future__ import annotations

import json
from typing import Any

import nats
from nats.errors import TimeoutError as NatsTimeout

from tests.support.jsutil import replies_of_both

BODIES = [b'{"min_pending": 1}', b'{"min_ack_pending": 2, "batch": 1}', b'{"id": "x"}', b'{"id": "x", "no_wait": true}',
          b'{"group": "g", "no_wait": true}', b'{"priority": 10, "no_wait": true}', b'{"priority": -1}',
          b'{"priority": 3, "no_wait": true}', b'{"idle_heartbeat": -5, "expires": 100000000}',
          b'{"idle_heartbeat": -5}', b'{"batch": 200, "min_pending": 1}', b'{"min_pending": "x"}',
          b'{"batch": 1, "no_wait": true}']


async def _scenario(url: str) -> list[Any]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s"])
    for _ in range(3):
        await js.publish("s", b"x" * 20)
    cfg = {"durable_name": "P", "ack_policy": "none", "max_waiting": 5, "max_batch": 100, "max_expires": 5_000_000_000}
    await nc.request("$JS.API.CONSUMER.DURABLE.CREATE.S.P", json.dumps({"stream_name": "S", "config": cfg}).encode())
    out = []
    for body in BODIES:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.P", body, reply=inbox)
        got = []
        for _ in range(5):  # what comes back within 0.3 s (a flood of heartbeats would fill it)
            try:
                m = await sub.next_msg(0.3)
            except NatsTimeout:
                break
            h = m.headers or {}
            got.append((h.get("Status"), h.get("Description"), m.data))
        await sub.unsubscribe()
        out.append((body, got))
    await nc.close()
    return out


def test_pull_request_bodies_a_plain_consumer_refuses_or_ignores() -> None:
    got = replies_of_both(_scenario, "js-pullreq-")
    ref = got["nats-server"]
    assert sum(1 for _, g in ref if g and g[0][0] == "400") >= 7, ref
    assert got["edged"] == ref


async def _fetch_heartbeats(url: str) -> list[Any]:
    """nats-py's own fetch-with-heartbeat sequence (its test_fetch_heartbeats): a fetch of 20 held back
    by max_ack_pending 5 is a no_wait request with an expiry; nats-server ends it with 404 at its first
    heartbeat tick, so the next fetch does not find stale messages and send a no-expiry request."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="events", subjects=["events.>"])
    await js.add_consumer("events", durable_name="a", max_deliver=2, max_waiting=5, ack_wait=30,
                          max_ack_pending=5, filter_subject="events.>")
    sub = await js.pull_subscribe_bind("a", stream="events")
    out: list[Any] = []

    async def fetch(n: int, timeout: float, hb: float) -> None:
        try:
            msgs = await sub.fetch(n, timeout=timeout, heartbeat=hb)
        except Exception as e:  # noqa: BLE001 - the kind of failure is the observable result
            out.append((n, hb, type(e).__name__, getattr(e, "description", None)))
            return
        for m in msgs:
            await m.ack_sync()
        out.append((n, hb, [m.data for m in msgs]))

    await fetch(1, 1, 0.1)
    for i in range(15):
        await js.publish(f"events.{i}", b"i:%d" % i)
    for n, timeout, hb in ((5, 5, 0.1), (1, 1, 0.1), (20, 2, 0.1), (4, 2, 0.1), (4, 1, 0.1), (1, 1, 0.5)):
        await fetch(n, timeout, hb)
    await nc.close()
    return out


def test_fetch_with_heartbeat_held_back_by_max_ack_pending() -> None:
    got = replies_of_both(_fetch_heartbeats, "js-fetchhb-")
    ref = got["nats-server"]
    assert ref[4][2] == [b"i:11", b"i:12", b"i:13", b"i:14"], ref
    assert got["edged"] == ref
