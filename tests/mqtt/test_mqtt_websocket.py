"""MQTT over WebSocket (subprotocol `mqtt`, path `/mqtt` on the `websocket {}` port), with paho's WebSocket
transport, against nats-server's and edged's listeners: QoS 0/1/2 between a WebSocket and a TCP MQTT
client, and across to NATS."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable

import nats
import pytest

from tests.support.aio import run
from tests.support.mqttpeers.clients import Client, mqtt_config, wait_mqtt
from tests.support.servers import KINDS, ServerProcess, free_port


@pytest.fixture(params=KINDS)
def ws_mqtt(request: pytest.FixtureRequest, start_server: Callable[..., ServerProcess]) -> ServerProcess:
    port, ws_port = free_port(), free_port()
    conf = mqtt_config(port, tempfile.mkdtemp(prefix="mqtt-ws-"),
                       extra=f"websocket {{ port: {ws_port}\nno_tls: true\ncompression: true }}")
    srv = start_server(request.param, config=conf)
    wait_mqtt(port)
    wait_mqtt(ws_port)
    srv.mqtt_port, srv.ws_port = port, ws_port  # type: ignore[attr-defined]
    return srv


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_websocket_and_tcp_mqtt_clients_see_each_other(ws_mqtt: ServerProcess, qos: int) -> None:
    ws_sub = Client(ws_mqtt.ws_port, websocket=True)  # type: ignore[attr-defined]
    tcp_sub = Client(ws_mqtt.mqtt_port)  # type: ignore[attr-defined]
    assert ws_sub.subscribe("w/+", qos) == [qos]
    assert tcp_sub.subscribe("w/+", qos) == [qos]
    tcp_pub = Client(ws_mqtt.mqtt_port)  # type: ignore[attr-defined]
    ws_pub = Client(ws_mqtt.ws_port, websocket=True)  # type: ignore[attr-defined]
    for i in range(3):
        tcp_pub.publish("w/tcp", f"t{i}", qos)
        ws_pub.publish("w/ws", f"w{i}" * 2000, qos)  # larger than one frame of a browser's size
    for c in (ws_sub, tcp_sub):
        got = c.get_n(6)
        assert sorted(m.payload for m in got) == sorted([f"t{i}".encode() for i in range(3)]
                                                        + [(f"w{i}" * 2000).encode() for i in range(3)])
        assert {m.qos for m in got} == {qos}
    for c in (ws_sub, tcp_sub, tcp_pub, ws_pub):
        c.disconnect()


def test_websocket_mqtt_to_nats_and_back(ws_mqtt: ServerProcess) -> None:
    async def main() -> None:
        nc = await nats.connect(ws_mqtt.url)
        got: asyncio.Queue = asyncio.Queue()
        await nc.subscribe("dev.*.up", cb=got.put)
        await nc.flush()
        c = Client(ws_mqtt.ws_port, websocket=True)  # type: ignore[attr-defined]
        c.subscribe("dev/+/down", 1)
        c.publish("dev/d1/up", b"hello", 1)
        m = await asyncio.wait_for(got.get(), 10)
        assert (m.subject, m.data) == ("dev.d1.up", b"hello")
        await nc.publish("dev.d1.down", b"cmd")
        await nc.flush()
        down = await asyncio.to_thread(c.get)
        assert (down.topic, down.payload) == ("dev/d1/down", b"cmd")
        c.disconnect()
        await nc.close()

    run(main())
