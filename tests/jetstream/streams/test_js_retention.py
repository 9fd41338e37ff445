"""Interest and workqueue retention, differential: which consumers a workqueue stream accepts, when messages
leave an interest or workqueue stream (acks, NAK/TERM, consumer removal, purges), and the stream state
nats-server reports after each step."""

from __future__ import annotations

import asyncio
from typing import Any

from nats.js.api import AckPolicy, ConsumerConfig

from tests.support.aio import run
from tests.support.jsutil import err, session
from tests.support.servers import ServerProcess


async def count(js: Any, stream: str) -> tuple[int, int, int]:
    await asyncio.sleep(0.05)  # removals on ack happen just after the ack reply on both servers
    st = (await js.stream_info(stream)).state
    return st.messages, st.first_seq, st.last_seq


def test_workqueue_consumers_and_removal(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="WQ", subjects=["job.>"], retention="workqueue")
        out: list[Any] = []
        cfg = {"ack_policy": AckPolicy.EXPLICIT}
        await js.add_consumer("WQ", ConsumerConfig(durable_name="A", filter_subject="job.a.>", **cfg))
        out.append(await err(js.add_consumer("WQ", ConsumerConfig(durable_name="B", filter_subject="job.>",
                                                                   **cfg))))
        out.append(await err(js.add_consumer("WQ", ConsumerConfig(durable_name="C", filter_subject="job.a.x",
                                                                   **cfg))))
        out.append(await err(js.add_consumer("WQ", ConsumerConfig(durable_name="D",
                                                                   filter_subjects=["job.b", "job.a.*"], **cfg))))
        await js.add_consumer("WQ", ConsumerConfig(durable_name="E", filter_subjects=["job.b", "job.c"], **cfg))
        out.append(await err(js.add_consumer("WQ", ConsumerConfig(durable_name="F", deliver_subject="push.f",
                                                                   filter_subject="job.f",
                                                                   ack_policy=AckPolicy.NONE))))
        out.append(await err(js.add_consumer("WQ", ConsumerConfig(durable_name="G", filter_subject="job.d",
                                                                   deliver_policy="last"))))
        for s in ("job.a.1", "job.b", "job.c", "job.a.2", "job.z"):
            await js.publish(s, s.encode())
        out.append(await count(js, "WQ"))
        a = await js.pull_subscribe_bind("A", "WQ")
        msgs = await a.fetch(2, timeout=2)
        await msgs[1].ack_sync()  # out of order: job.a.2 leaves, job.a.1 stays
        out.append(await count(js, "WQ"))
        await msgs[0].nak()
        again = await a.fetch(1, timeout=2)
        await again[0].term()  # a terminated message leaves a workqueue too
        out.append((again[0].data, await count(js, "WQ")))
        e = await js.pull_subscribe_bind("E", "WQ")
        for m in await e.fetch(5, timeout=2):
            await m.ack_sync()
        out.append(await count(js, "WQ"))  # only job.z, which no consumer takes, is left
        await js.delete_consumer("WQ", "E")
        await js.add_consumer("WQ", ConsumerConfig(durable_name="Z", filter_subject="job.z", **cfg))
        z = await js.pull_subscribe_bind("Z", "WQ")
        out.append([m.data for m in await z.fetch(5, timeout=2)])  # a later consumer still gets it
        return out

    got = run(session(js_server, body))
    overlap = (10100, "filtered consumer not unique on workqueue stream")
    assert got[0] == overlap
    assert got[1] == overlap
    assert got[2] == overlap
    assert got[3] == (10098, "workqueue stream requires explicit ack")
    assert got[4] == (10101, "consumer must be deliver all on workqueue stream")
    assert got[5] == (5, 1, 5)
    assert got[6] == (4, 1, 5)
    assert got[7] == (b"job.a.1", (3, 2, 5))
    assert got[8] == (1, 5, 5)
    assert got[9] == [b"job.z"]


def test_interest_retention(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="IN", subjects=["ev.>"], retention="interest")
        out: list[Any] = []
        cfg = {"ack_policy": AckPolicy.EXPLICIT}
        await js.add_consumer("IN", ConsumerConfig(durable_name="ALL", **cfg))
        await js.add_consumer("IN", ConsumerConfig(durable_name="ONLYB", filter_subject="ev.b", **cfg))
        for s in ("ev.a", "ev.b", "ev.a", "ev.b"):
            await js.publish(s, s.encode())
        out.append(await count(js, "IN"))
        every = await js.pull_subscribe_bind("ALL", "IN")
        for m in await every.fetch(4, timeout=2):
            await m.ack_sync()
        out.append(await count(js, "IN"))  # the ev.a ones had only ALL's interest
        only_b = await js.pull_subscribe_bind("ONLYB", "IN")
        first = (await only_b.fetch(1, timeout=2))[0]
        await first.ack_sync()
        out.append(await count(js, "IN"))
        await js.publish("ev.b", b"late")
        await js.delete_consumer("IN", "ONLYB")  # the interest it held goes with it
        out.append(await count(js, "IN"))
        for m in await every.fetch(1, timeout=2):
            await m.ack_sync()
        out.append(await count(js, "IN"))
        await js.add_consumer("IN", ConsumerConfig(durable_name="NONE", ack_policy=AckPolicy.NONE))
        await js.publish("ev.c", b"c")
        none = await js.pull_subscribe_bind("NONE", "IN")
        out.append(len(await none.fetch(1, timeout=2)))
        out.append(await count(js, "IN"))  # NONE's interest ends on delivery, ALL's is still there
        for m in await every.fetch(1, timeout=2):
            await m.ack_sync()
        out.append(await count(js, "IN"))
        # unlike a workqueue, an interest stream takes consumers with overlapping filters
        out.append((await js.add_consumer("IN", ConsumerConfig(durable_name="DUP", filter_subject="ev.>",
                                                               **cfg))).name)
        return out

    got = run(session(js_server, body))
    assert got == [(4, 1, 4), (2, 2, 4), (1, 4, 4), (1, 5, 5), (0, 6, 5), 1, (1, 6, 6), (0, 7, 6),
                   "DUP"]
