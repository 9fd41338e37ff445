"""Pull requests waiting together take turns: each new message goes to the next waiting request, as from
nats-server's waiting queue (a request with batch left goes to the back), differential."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats

from tests.support.jsutil import api, drain, replies_of_both


async def _scenario(url: str) -> list[Any]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await api(nc, "$JS.API.STREAM.CREATE.R", {"name": "R", "subjects": ["r.>"]})
    await api(nc, "$JS.API.CONSUMER.CREATE.R.W", {"stream_name": "R", "config": {"durable_name": "W",
                                                                                "ack_policy": "none"}})
    subs = []
    for batch in (5, 2, 5):
        inbox = nc.new_inbox()
        subs.append(await nc.subscribe(inbox))
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.R.W", json.dumps({"batch": batch, "expires": 3_000_000_000})
                         .encode(), reply=inbox)
    await nc.flush()
    await asyncio.sleep(0.2)
    for i in range(8):
        await js.publish(f"r.{i}", b"x")
        await asyncio.sleep(0.02)
    out = [[m.subject for m in await drain(s, 0.3, 20) if not (m.headers or {}).get("Status")] for s in subs]
    await nc.close()
    return out


def test_waiting_pull_requests_take_turns() -> None:
    res = replies_of_both(_scenario, "pullturns-")
    assert res["edged"] == res["nats-server"]
    assert res["edged"] == [["r.0", "r.3", "r.6"], ["r.1", "r.4"], ["r.2", "r.5", "r.7"]]
