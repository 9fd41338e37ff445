"""JetStream API requests published without a reply subject, differential: nats-server carries them out
(and audits them) and only leaves them unanswered, so a fire-and-forget create, purge or delete works."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.support.aio import run
from tests.support.jsutil import drain, session
from tests.support.servers import ServerProcess


def test_requests_without_reply_are_carried_out(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        audit = await nc.subscribe("$JS.EVENT.ADVISORY.API")

        async def exists(aw: Any) -> Any:
            try:
                return (await aw).config.name
            except Exception as e:
                return type(e).__name__

        await nc.publish("$JS.API.STREAM.CREATE.NR", json.dumps({"name": "NR", "subjects": ["nr"]}).encode())
        await nc.flush()
        await asyncio.sleep(0.3)
        out: list[Any] = [await exists(js.stream_info("NR"))]
        await nc.publish("$JS.API.STREAM.DELETE.NR", b"")
        await nc.flush()
        await asyncio.sleep(0.3)
        out.append(await exists(js.stream_info("NR")))
        await js.add_stream(name="Q", subjects=["q"])
        await js.publish("q", b"1")
        await js.publish("q", b"2")
        await nc.publish("$JS.API.STREAM.PURGE.Q", b"")
        await nc.publish("$JS.API.CONSUMER.DURABLE.CREATE.Q.D", json.dumps(
            {"stream_name": "Q", "config": {"durable_name": "D", "ack_policy": "explicit"}}).encode())
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.Q.D", b"1")  # a pull request needs somewhere to go
        await nc.flush()
        await asyncio.sleep(0.3)
        out.append((await js.stream_info("Q")).state.messages)
        ci = await js.consumer_info("Q", "D")
        out.append((ci.name, ci.num_waiting))
        # every call is audited, answered or not (the async purge may be audited after the create)
        out.append(sorted(json.loads(m.data)["subject"].removeprefix("$JS.API.") for m in await drain(audit)))
        return out

    got = run(session(js_server, body))
    assert got[:4] == ["NR", "NotFoundError", 0, ("D", 0)]
    assert got[4] == sorted(["STREAM.CREATE.NR", "STREAM.INFO.NR", "STREAM.DELETE.NR", "STREAM.INFO.NR",
                             "STREAM.CREATE.Q", "STREAM.PURGE.Q", "CONSUMER.DURABLE.CREATE.Q.D", "STREAM.INFO.Q",
                             "CONSUMER.INFO.Q.D"])
