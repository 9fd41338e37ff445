"""A hub asking again for the durable that sources an interest stream (a 2.14+ hub after a link cut or a
stall: the same name, a new deliver subject). nats-server's standalone consumer update puts a sourcing
consumer back at its ack floor (consumer.go updateConfig -> resetStartingSeqLocked): nothing pending,
consumer sequences from 1, so what went into the cut link comes again, first deliveries all (the hub
drops redeliveries). edged used to keep the consumer where it was, so the hub waited for messages that
never came and asked again forever."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats

from tests.support.jsutil import replies_of_both

HUB_REQUEST = {
    "name": "JS_SRC_test", "deliver_policy": "all", "ack_policy": "none", "ack_wait": 79200000000000,
    "max_deliver": 1, "replay_policy": "instant", "flow_control": True, "idle_heartbeat": 1000000000,
    "inactive_threshold": 10000000000, "num_replicas": 0, "direct": True, "sourcing": True,
    "metadata": {"_nats.src.acc": "APP", "_nats.src.domain": "hub", "_nats.src.stream": "SRC"},
}


async def scenario(url: str) -> list[Any]:
    nc = await nats.connect(url)
    try:
        await nc.jetstream().add_stream(name="I", subjects=["i.>"], retention="interest")
        got: dict[str, list[Any]] = {"d1": [], "d2": []}

        def take(box: str) -> Any:
            async def cb(m: Any) -> None:
                if m.reply.startswith("$JS.ACK."):  # not a heartbeat or a flow control request
                    md = m.metadata
                    got[box].append((m.data, md.sequence.stream, md.sequence.consumer, md.num_delivered))
            return cb

        s1 = await nc.subscribe("d1", cb=take("d1"))
        await nc.subscribe("d2", cb=take("d2"))
        await nc.flush()
        out: list[Any] = []

        async def create(deliver: str) -> None:
            body = {"stream_name": "I", "config": {**HUB_REQUEST, "deliver_subject": deliver}, "action": ""}
            r = await nc.request("$JS.API.CONSUMER.CREATE.I", json.dumps(body).encode(),
                                 headers={"Nats-Required-Api-Level": "4"})
            d = json.loads(r.data)
            out.append(d.get("error") or (d["name"], d["config"]["ack_policy"], d["config"]["deliver_subject"]))

        async def info() -> None:
            d = json.loads((await nc.request("$JS.API.CONSUMER.INFO.I.JS_SRC_test", b"")).data)
            out.append((d["delivered"]["consumer_seq"], d["delivered"]["stream_seq"], d["ack_floor"]["stream_seq"],
                        d["num_pending"], d["num_ack_pending"]))

        await create("d1")
        for i in range(5):
            await nc.publish(f"i.{i}", b"m%d" % i)
        for _ in range(100):
            if len(got["d1"]) >= 5:
                break
            await asyncio.sleep(0.05)
        await info()
        # asked again, as after a cut (no flow control answer, no acks ever came): the hub drops the old
        # deliver subject first (with interest still on it, both servers refuse the new one: 10013)
        await s1.unsubscribe()
        await nc.flush()
        await create("d2")
        for _ in range(100):
            if len(got["d2"]) >= 5:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        await info()
        out.append(got)
        return out
    finally:
        await nc.close()


def test_a_hub_asking_again_gets_its_source_back_at_the_ack_floor() -> None:
    res = replies_of_both(scenario, "jsreask-")
    ref = res["nats-server"]
    assert ref[0] == ("JS_SRC_test", "flow_control", "d1"), ref
    assert [m[0] for m in ref[-1]["d2"]] == [b"m%d" % i for i in range(5)], ref
    assert res["edged"] == ref
