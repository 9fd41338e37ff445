"""MQTT devices at the edge and NATS at the hub: edged as a leaf of a real nats-server hub. MQTT publishes
reach hub subscribers; hub publishes reach MQTT subscribers, and are queued for an offline persistent
session (its QoS 1 subscription keeps the interest on the link)."""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Iterator

import pytest

from tests.support.aio import run
from tests.support.leaf import HUB_CONF, Hub, hub_binary, hub_client
from tests.support.mqttpeers.clients import Client


@pytest.fixture
def hub() -> Iterator[Hub]:
    h = Hub(hub_binary("2.15"), HUB_CONF).start()
    yield h
    h.stop()


def test_mqtt_device_through_edge_to_hub(hub: Hub, mqtt_server) -> None:  # type: ignore[no-untyped-def]
    edge = mqtt_server(extra=f'leafnodes {{ remotes: [ {{ url: "nats://leaf:s3cret@127.0.0.1:{hub.leaf_port}" }} ] }}',
                       js_extra="domain: edge")

    async def main() -> None:
        nc = await hub_client(hub)
        got: asyncio.Queue = asyncio.Queue()
        await nc.subscribe("tele.>", cb=got.put)
        await nc.flush()
        dev = Client(edge.mqtt_port, client_id="d1", clean=False)
        dev.subscribe("cmd/d1", 1)
        # until the link is up and interest has crossed it both ways (bounded)
        for _ in range(200):
            await asyncio.to_thread(dev.publish, "tele/d1/temp", "probe", 1)
            await nc.publish("cmd.d1", b"probe")
            try:
                m = await asyncio.wait_for(got.get(), 0.1)
                if m.data == b"probe" and not dev.msgs.empty():
                    break
            except TimeoutError:
                pass
        else:
            raise AssertionError("the leaf link never carried MQTT traffic")
        dev.publish("tele/d1/temp", "21.5", 1)
        while (m := await asyncio.wait_for(got.get(), 10)).data == b"probe":
            pass
        assert (m.subject, m.data) == ("tele.d1.temp", b"21.5")
        dev.disconnect()
        await nc.publish("cmd.d1", b"reboot")  # the device is offline: edged keeps it for its session
        await nc.flush()
        await asyncio.sleep(0.2)
        dev = Client(edge.mqtt_port, client_id="d1", clean=False)
        seen = []
        while True:
            try:
                mm = await asyncio.to_thread(dev.get, 10)
            except queue.Empty:
                break
            seen.append(mm.payload)
            if mm.payload == b"reboot":
                break
        assert seen[-1:] == [b"reboot"]
        dev.disconnect()
        await nc.close()

    run(main())
