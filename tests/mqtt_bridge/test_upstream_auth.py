"""How the bridge logs in upstream: TLS to mosquitto with a generated CA (the broker's certificate checked),
username and password from a mosquitto_passwd file, a TLS client certificate, MQTT 5. A broker it cannot
trust or that refuses the password: no connection, the reason and the backlog in /jsz and /metrics, and
once the password is right every message still goes out (the durable kept them)."""

from __future__ import annotations

import json
import tempfile
import urllib.request
from collections.abc import Callable
from typing import Any

import nats
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.support.aio import eventually, run, until
from tests.support.mqttpeers.mosquitto import Mosquitto, Subscriber
from tests.support.servers import ServerProcess, free_port


def conf(broker: Mosquitto, bridge: str, store: str = "") -> str:
    return f"""
server_name: edge1
jetstream {{ store_dir: "{store or tempfile.mkdtemp(prefix='js-')}" }}
edged {{
  mqtt_bridge [
    {{ name: cloud, url: "{broker.url}", keepalive: "5s", reconnect_max: "1s"
       out: [ {{ stream: TELE, topic: "up/$1", qos: 1 }} ]
       {bridge} }}
  ]
}}
"""


def bridge_status(p: ServerProcess) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{p.http_port}/jsz", timeout=5) as r:
        return json.loads(r.read())["mqtt_bridges"][0]  # type: ignore[no-any-return]


def metrics(p: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{p.http_port}/metrics", timeout=5) as r:
        return r.read().decode()


async def fill(url: str, n: int) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="TELE", subjects=["tele.*"])
    for i in range(n):
        await js.publish("tele.a", b"%d" % i)
    await nc.close()


def _forward(p: ServerProcess, sub: Subscriber, n: int = 30) -> None:
    async def main() -> None:
        await fill(p.url, n)
        await until(lambda: len(sub.payloads()) >= n, 20)

    run(main())
    assert sub.payloads() == [b"%d" % i for i in range(n)]


def test_tls_with_ca_and_password(mosquitto: Callable[..., Mosquitto], start_server: Callable[..., ServerProcess],
                                  pki: dict[str, str]) -> None:
    broker = mosquitto(users={"edge": "s3cret", "reader": "r"}, tls=pki)
    sub = Subscriber(broker.port, "up/#", username="reader", password="r", tls=pki)
    assert sub.subscribed.wait(10)
    p = start_server("edged", config=conf(broker, f'username: edge, password: s3cret, tls {{ ca_file: "{pki["ca"]}" }}'),
                     http_port=free_port())
    try:
        _forward(p, sub)
        assert bridge_status(p)["connected"]
    finally:
        sub.close()


def test_tls_client_certificate(mosquitto: Callable[..., Mosquitto], start_server: Callable[..., ServerProcess],
                                pki: dict[str, str]) -> None:
    broker = mosquitto(tls=pki, require_certificate=True)
    sub = Subscriber(broker.port, "up/#", tls=pki)
    assert sub.subscribed.wait(10)
    p = start_server("edged", config=conf(broker, f'tls {{ ca_file: "{pki["ca"]}", cert_file: "{pki["client_cert"]}", '
                                                  f'key_file: "{pki["client_key"]}" }}'), http_port=free_port())
    try:
        _forward(p, sub)
    finally:
        sub.close()


def test_tls_untrusted_broker_refused(mosquitto: Callable[..., Mosquitto], start_server: Callable[..., ServerProcess],
                                      pki: dict[str, str]) -> None:
    """Without the CA the broker's certificate is not trusted: no connection, and /jsz says why."""
    broker = mosquitto(tls=pki)
    p = start_server("edged", config=conf(broker, ""), http_port=free_port())

    async def main() -> dict[str, Any]:
        await fill(p.url, 5)
        return await eventually(lambda: _errored(p), 15, "the bridge reports the failure")  # type: ignore[no-any-return]

    b = run(main())
    assert not b["connected"] and b["out"][0]["pending"] == 5
    assert "edged_mqtt_bridge_connected{bridge=\"cloud\"} 0" in metrics(p)
    assert 'edged_mqtt_bridge_out_pending_messages{bridge="cloud",source="TELE",durable="mqtt_bridge_cloud_0"} 5' \
        in metrics(p)


async def _errored(p: ServerProcess) -> dict[str, Any] | None:
    """The bridge's status once it has tried the broker and its durable holds the stream's messages."""
    b = bridge_status(p)
    return b if b["last_error"] and b["out"][0]["ready"] and b["out"][0]["pending"] else None


def test_wrong_password_then_nothing_lost(mosquitto: Callable[..., Mosquitto],
                                          start_server: Callable[..., ServerProcess]) -> None:
    broker = mosquitto(users={"edge": "right", "reader": "r"})
    sub = Subscriber(broker.port, "up/#", username="reader", password="r")
    assert sub.subscribed.wait(10)
    store = tempfile.mkdtemp(prefix="js-")
    p = start_server("edged", config=conf(broker, "username: edge, password: wrong", store), http_port=free_port())

    async def main() -> dict[str, Any]:
        await fill(p.url, 10)
        return await eventually(lambda: _errored(p), 15, "the refusal shows")  # type: ignore[no-any-return]

    try:
        b = run(main())
        assert not b["connected"] and "not authorized" in b["last_error"].lower(), b
        assert sub.payloads() == []
        p.stop()
        p.config = conf(broker, "username: edge, password: right", store)
        p.start()

        async def after() -> None:
            await until(lambda: len(sub.payloads()) >= 10, 20)

        run(after())
        assert sub.payloads() == [b"%d" % i for i in range(10)]
    finally:
        sub.close()


def test_mqtt5_user_properties(mosquitto: Callable[..., Mosquitto], start_server: Callable[..., ServerProcess]) -> None:
    """With MQTT 5 each forwarded message names its stream and sequence (user properties), so a subscriber
    can drop the repeats an edged crash may cause, and NATS headers and user properties cross both ways."""
    broker = mosquitto()
    sub = Subscriber(broker.port, "up/#", v5=True)
    assert sub.subscribed.wait(10)
    p = start_server("edged", config=conf(broker, 'protocol: "5", in: [ { topic: "down/+", subject: "down.$1" } ]'),
                     http_port=free_port())

    async def main() -> Any:
        nc = await nats.connect(p.url)
        js = nc.jetstream()
        await js.add_stream(name="TELE", subjects=["tele.*"])
        for i in range(3):
            await js.publish("tele.a", b"%d" % i, headers={"unit": "C"} if i == 1 else None)
        await until(lambda: len(sub.payloads()) >= 3, 20)
        got: list[Any] = []

        async def on_down(m: Any) -> None:
            got.append((m.subject, m.data, m.headers))

        await nc.subscribe("down.*", cb=on_down)
        await nc.flush()
        await eventually(lambda: _up(p), 10, "connected")
        c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="v5-pub", protocol=mqtt.MQTTv5)
        c.connect("127.0.0.1", broker.port, 30)
        c.loop_start()
        props = Properties(PacketTypes.PUBLISH)
        props.UserProperty = [("site", "north"), ("kind", "cmd")]
        c.publish("down/x", b"go", 1, properties=props).wait_for_publish(10)
        c.disconnect()
        c.loop_stop()
        await until(lambda: got, 10)
        await nc.close()
        return got

    try:
        got = run(main())
        assert [m[2] for m in sub.messages()] == [
            {"Nats-Stream": "TELE", "Nats-Sequence": "1"},
            {"unit": "C", "Nats-Stream": "TELE", "Nats-Sequence": "2"},
            {"Nats-Stream": "TELE", "Nats-Sequence": "3"}]
        assert got == [("down.x", b"go", {"site": "north", "kind": "cmd"})]
    finally:
        sub.close()


async def _up(p: ServerProcess) -> bool:
    return bool(bridge_status(p)["connected"])
