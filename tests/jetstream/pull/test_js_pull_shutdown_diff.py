"""Waiting pull requests when the server shuts down, differential: nats-server tells each one
`409 Server Shutdown` with what it still expected (Nats-Pending-Messages / -Bytes). nats.py's new
client (nats-jetstream's test_ordered_consumer_messages_server_restart) relies on it: the 409 makes it
ask again once reconnected, and the "no responders" that request gets makes its ordered consumer
start over; without it the consumer waited forever on a request the restarted server never heard of."""

from __future__ import annotations

import asyncio
import tempfile
from typing import Any

import nats

from tests.support.aio import run, until
from tests.support.servers import KINDS, ServerProcess

REQUESTS = [b'{"batch": 10, "expires": 30000000000}', b'{"batch": 5, "max_bytes": 1000, "expires": 30000000000}',
            b'{"batch": 3, "expires": 30000000000, "idle_heartbeat": 10000000000}']


async def _scenario(p: ServerProcess) -> list[Any]:
    nc = await nats.connect(p.url, allow_reconnect=False)
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s"])
    await js.publish("s", b"m0")
    await js.add_consumer("S", durable_name="D", ack_policy="explicit")
    got: list[list[Any]] = [[] for _ in REQUESTS]

    def collect(out: list[Any]) -> Any:
        async def cb(m: Any) -> None:
            h = m.headers or {}
            out.append((h.get("Status"), h.get("Description"), h.get("Nats-Pending-Messages"),
                        h.get("Nats-Pending-Bytes")) if h.get("Status") else m.data)
        return cb

    for body, out in zip(REQUESTS, got, strict=True):
        sub = await nc.subscribe(nc.new_inbox(), cb=collect(out))
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.D", body, reply=sub.subject)
    await nc.flush()
    await until(lambda: got[0])  # the first request takes the message and waits for 9 more
    await asyncio.get_running_loop().run_in_executor(None, p.stop)
    await until(lambda: nc.is_closed)
    await nc.close()
    return got


def test_waiting_pull_requests_are_told_of_a_shutdown() -> None:
    res = {}
    for kind in KINDS:
        p = ServerProcess(kind, ["-js", "-sd", tempfile.mkdtemp(prefix="js-pullshut-")]).start()
        try:
            res[kind] = run(_scenario(p), timeout=60)
        finally:
            p.stop()
    ref = res["nats-server"]
    assert ref[0] == [b"m0", ("409", "Server Shutdown", "9", "0")], ref
    assert res["edged"] == ref
