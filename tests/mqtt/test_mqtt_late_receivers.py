"""Receivers that come and go while QoS 1 MQTT traffic flows on a subject. edged remembers, per subject,
that a QoS 1 publish reaches only QoS 1 MQTT subscriptions (which take it through their session's
consumer) and routes no more than that; a NATS subscriber, a QoS 0 MQTT subscriber or a stream that
joins later, or a subscription changed to QoS 0, must get every publish from then on all the same, as
from nats-server."""

from __future__ import annotations

import asyncio

import nats

from tests.support.aio import run
from tests.support.mqttpeers.clients import Client
from tests.support.servers import ServerProcess


def test_receivers_joining_and_leaving_a_busy_subject(any_mqtt: ServerProcess) -> None:
    port = any_mqtt.mqtt_port  # type: ignore[attr-defined]

    async def main() -> None:
        q1 = Client(port)
        assert q1.subscribe("late/t", 1) == [1]
        pub = Client(port)
        n = 0

        async def publish(k: int) -> list[bytes]:
            nonlocal n
            sent = []
            for _ in range(k):
                payload = b"m%d" % n
                n += 1
                await asyncio.to_thread(pub.publish, "late/t", payload, 1)
                sent.append(payload)
            return sent

        want = await publish(5)  # only the QoS 1 subscription takes these
        nc = await nats.connect(any_mqtt.url)
        got: asyncio.Queue = asyncio.Queue()
        sub = await nc.subscribe("late.t", cb=got.put)
        await nc.flush()
        later = await publish(3)
        want += later
        assert [(await asyncio.wait_for(got.get(), 10)).data for _ in later] == later
        js = nc.jetstream()
        await js.add_stream(name="LATE", subjects=["late.>"])
        stored = await publish(2)
        want += stored
        assert (await js.stream_info("LATE")).state.messages == 2
        q0 = Client(port)
        assert q0.subscribe("late/t", 0) == [0]
        zero = await publish(2)
        want += zero
        assert [m.payload for m in await asyncio.to_thread(q0.get_n, 2)] == zero
        assert [(await asyncio.wait_for(got.get(), 10)).data for _ in stored + zero] == stored + zero
        await sub.unsubscribe()
        want += await publish(2)
        assert [m.payload for m in await asyncio.to_thread(q1.get_n, len(want))] == want
        assert {m.qos for m in await asyncio.to_thread(q0.get_n, 2)} == {0}
        # the QoS 1 subscription made QoS 0 in place: it now takes the publishes at QoS 0
        assert q1.subscribe("late/t", 0) == [0]
        last = await publish(2)
        got1 = await asyncio.to_thread(q1.get_n, 2)
        assert [(m.payload, m.qos) for m in got1] == [(p, 0) for p in last]
        assert got.empty()
        for c in (q0, q1, pub):
            c.disconnect()
        await nc.close()

    run(main())
