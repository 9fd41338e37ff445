"""MQTT 3.1.1 and 5 over TCP with real clients (paho-mqtt, mosquitto_pub/sub, nats-py): QoS 0/1/2 both
ways, MQTT <-> NATS <-> JetStream. 3.1.1 scenarios run against nats-server's MQTT listener too."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess

import nats
import pytest

from tests.support.aio import run
from tests.support.mqttpeers.clients import Client
from tests.support.servers import ServerProcess


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_pub_sub_each_qos(any_mqtt: ServerProcess, qos: int) -> None:
    port = any_mqtt.mqtt_port  # type: ignore[attr-defined]
    sub = Client(port)
    assert sub.subscribe("a/+/c", qos) == [qos]
    pub = Client(port)
    for i in range(5):
        pub.publish("a/b/c", f"m{i}", qos)
    got = sub.get_n(5)
    assert [m.payload for m in got] == [f"m{i}".encode() for i in range(5)]
    assert {m.topic for m in got} == {"a/b/c"} and {m.qos for m in got} == {qos}
    pub.publish("a/b/x", "no", qos)
    assert sub.none()
    pub.disconnect()
    sub.disconnect()


def test_qos_downgrade_to_subscription(any_mqtt: ServerProcess) -> None:
    port = any_mqtt.mqtt_port  # type: ignore[attr-defined]
    s0, s1 = Client(port), Client(port)
    s0.subscribe("d/#", 0)
    s1.subscribe("d/#", 1)
    pub = Client(port)
    pub.publish("d/x", "two", 2)
    pub.publish("d", "level-up", 1)  # `d/#` matches `d` too
    assert [(m.topic, m.qos) for m in s0.get_n(2)] == [("d/x", 0), ("d", 0)]
    assert sorted((m.topic, m.qos) for m in s1.get_n(2)) == [("d", 1), ("d/x", 1)]
    for c in (s0, s1, pub):
        c.disconnect()


def test_mqtt_to_nats_and_nats_to_mqtt(any_mqtt: ServerProcess) -> None:
    port = any_mqtt.mqtt_port  # type: ignore[attr-defined]

    async def main() -> None:
        nc = await nats.connect(any_mqtt.url)
        got: asyncio.Queue = asyncio.Queue()
        await nc.subscribe("sensors.>", cb=got.put)
        await nc.flush()
        pub = Client(port)
        pub.publish("sensors/t1/temp", b"21.5", 1)
        m = await asyncio.wait_for(got.get(), 10)
        assert m.subject == "sensors.t1.temp" and m.data == b"21.5"
        assert m.headers is not None and m.headers.get("Nmqtt-Pub") == "1"  # nats-server's header
        sub = Client(port)
        sub.subscribe("cmd/#", 0)
        await nc.publish("cmd.dev1.reboot", b"now")
        await nc.flush()
        mm = await asyncio.to_thread(sub.get)
        assert (mm.topic, mm.payload) == ("cmd/dev1/reboot", b"now")
        pub.disconnect()
        sub.disconnect()
        await nc.close()

    run(main())


def test_mqtt_publish_is_stored_before_puback(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    """A stream capturing the subject holds the message by the time the QoS 1 PUBACK arrives. (Not
    nats-server's guarantee: it hands the message to the stream's queue and PUBACKs, and a lookup right
    after the PUBACK can miss it.)"""
    any_mqtt = mqtt_server()
    port = any_mqtt.mqtt_port

    async def main() -> None:
        nc = await nats.connect(any_mqtt.url)
        js = nc.jetstream()
        await js.add_stream(name="TELEMETRY", subjects=["tele.>"])
        pub = Client(port)
        for i in range(20):
            await asyncio.to_thread(pub.publish, f"tele/dev/{i}", f"v{i}", 1)
            msg = await js.get_last_msg("TELEMETRY", f"tele.dev.{i}")
            assert msg.data == f"v{i}".encode()
        pub.disconnect()
        await nc.close()

    run(main())


def test_mosquitto_clients(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    if shutil.which("mosquitto_pub") is None:
        pytest.skip("mosquitto-clients not installed (apt-get install mosquitto-clients)")
    srv = mqtt_server()
    port = str(srv.mqtt_port)
    sub = subprocess.Popen(["mosquitto_sub", "-p", port, "-t", "m/#", "-q", "1", "-v", "-C", "3", "-W", "10"],
                           stdout=subprocess.PIPE, text=True)
    c = Client(srv.mqtt_port)  # wait until the subscription is there: a retained-free probe
    c.subscribe("m/#", 0)
    for i, q in enumerate((0, 1, 2)):
        # mosquitto_sub may not have subscribed yet when the first publish goes: repeat until it has
        subprocess.run(["mosquitto_pub", "-p", port, "-t", f"m/{i}", "-m", f"x{q}", "-q", str(q)], check=True,
                       timeout=10)
        assert c.get().payload == f"x{q}".encode()
    out, _ = sub.communicate(timeout=15)
    lines = out.splitlines()
    assert lines == ["m/0 x0", "m/1 x1", "m/2 x2"][-len(lines):] and lines
    c.disconnect()


def test_v5_pub_sub_and_user_properties(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    from tests.support.mqttpeers.clients import publish_props

    srv = mqtt_server()

    async def main() -> None:
        nc = await nats.connect(srv.url)
        got: asyncio.Queue = asyncio.Queue()
        await nc.subscribe("v5.>", cb=got.put)
        await nc.flush()
        sub = Client(srv.mqtt_port, v5=True)
        sub.subscribe("v5/#", 1)
        pub = Client(srv.mqtt_port, v5=True)
        pp = publish_props(UserProperty=[("site", "north"), ("unit", "C")], ContentType="text/plain")
        pub.publish("v5/t", b"x", 1, props=pp)
        m = await asyncio.to_thread(sub.get)
        assert m.payload == b"x" and m.qos == 1
        assert ("site", "north") in m.properties.UserProperty and m.properties.ContentType == "text/plain"
        nm = await asyncio.wait_for(got.get(), 10)
        assert nm.headers["site"] == "north" and nm.headers["unit"] == "C"
        # NATS headers -> MQTT 5 user properties
        await nc.publish("v5.n", b"y", headers={"origin": "nats"})
        m2 = await asyncio.to_thread(sub.get)
        assert m2.payload == b"y" and ("origin", "nats") in m2.properties.UserProperty
        pub.disconnect()
        sub.disconnect()
        await nc.close()

    run(main())


def test_jetstream_sees_mqtt_state_streams(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    """MQTT state is kept in the streams nats-server names: any JetStream tool can read them."""
    srv = mqtt_server()
    c = Client(srv.mqtt_port, client_id="keeper", clean=False)
    c.subscribe("k/#", 1)
    c.disconnect()

    async def main() -> None:
        nc = await nats.connect(srv.url)
        js = nc.jetstream()
        infos = {s.config.name for s in await js.streams_info()}
        assert {"$MQTT_msgs", "$MQTT_rmsgs", "$MQTT_sess", "$MQTT_qos2in", "$MQTT_out"} <= infos
        from edged.jetstream.stream import go_hash

        rec = await js.get_last_msg("$MQTT_sess", "$MQTT.sess." + go_hash("keeper"))
        doc = json.loads(rec.data)
        assert doc["id"] == "keeper" and doc["subs"] == {"k.>": 1, "k": 1} and len(doc["cons"]) == 2
        await nc.close()

    run(main())


def test_mqtt_31_clients(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    """MQTT 3.1 (protocol name MQIsdp, level 3) clients are served as 3.1.1 ones (nats-server refuses
    them: CONNACK "unacceptable protocol version")."""
    import paho.mqtt.client as paho

    port = mqtt_server().mqtt_port
    sub = Client(port, protocol=paho.MQTTv31)
    sub.subscribe("old/#", 1)
    pub = Client(port, protocol=paho.MQTTv31)
    pub.publish("old/x", "3.1", 1)
    assert sub.get().payload == b"3.1"
    sub.disconnect()
    pub.disconnect()


@pytest.mark.parametrize("kind", ["nats-server", "edged"])
def test_qos2_options(mqtt_server, kind: str) -> None:  # type: ignore[no-untyped-def]
    """mqtt { downgrade_qos2_subscribe, reject_qos2_publish } as nats-server: a QoS 2 SUBSCRIBE is granted
    QoS 1, a QoS 2 PUBLISH closes the connection."""
    srv = mqtt_server(kind, mqtt_extra="downgrade_qos2_subscribe: true\nreject_qos2_publish: true")
    c = Client(srv.mqtt_port)
    assert c.subscribe("q/#", 2) == [1]
    c.publish("q/1", "one", 1)
    assert c.get().qos == 1
    c.c.publish("q/2", "two", 2)
    c.disconnects.get(timeout=10)  # closed by the server
    c.c.loop_stop()


def test_qos1_publish_stored_in_mqtt_msgs_only_for_qos1_subscribers(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    """Telemetry nobody subscribed to at QoS 1 over MQTT is not written to `$MQTT_msgs` (interest retention
    would delete it at once); with such a subscriber it is."""
    srv = mqtt_server()
    pub = Client(srv.mqtt_port)
    pub.publish("tm/a", "x", 1)
    s0 = Client(srv.mqtt_port)
    s0.subscribe("tm/#", 0)
    pub.publish("tm/b", "y", 1)
    assert s0.get().payload == b"y"

    async def last_seq() -> int:
        nc = await nats.connect(srv.url)
        try:
            return (await nc.jetstream().stream_info("$MQTT_msgs")).state.last_seq
        finally:
            await nc.close()

    assert run(last_seq()) == 0
    s1 = Client(srv.mqtt_port)
    s1.subscribe("tm/#", 1)
    pub.publish("tm/c", "z", 1)
    assert s1.get().payload == b"z"
    assert run(last_seq()) == 1
    for c in (pub, s0, s1):
        c.disconnect()
