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
