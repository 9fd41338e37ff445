"""The bridge against a real mosquitto: each kind of rule, with a paho-mqtt subscriber or publisher on the
broker side and nats-py on edged's side."""

from __future__ import annotations

import json
import tempfile
import urllib.request
from collections.abc import Callable
from typing import Any

import nats

from tests.support.aio import eventually, run, until
from tests.support.mqttpeers.mosquitto import Mosquitto, Subscriber, publish
from tests.support.servers import ServerProcess, free_port


def bridge_conf(broker: Mosquitto, body: str, extra: str = "", name: str = "cloud") -> str:
    return f"""
server_name: edge1
jetstream {{ store_dir: "{tempfile.mkdtemp(prefix='js-')}" }}
edged {{
  mqtt_bridge [
    {{ name: {name}, url: "{broker.url}", keepalive: "5s", max_inflight: 20
       {extra}
       {body} }}
  ]
}}
"""


def jsz(p: ServerProcess) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{p.http_port}/jsz", timeout=5) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def test_out_from_subject(mosquitto: Callable[..., Mosquitto], start_server: Callable[..., ServerProcess]) -> None:
    broker = mosquitto()
    sub = Subscriber(broker.port, "site1/#")
    assert sub.subscribed.wait(10)
    p = start_server("edged", config=bridge_conf(
        broker, 'out: [ { subject: "telemetry.*.temp", topic: "site1/{{wildcard(1)}}/t", qos: 1 } ]'),
        http_port=free_port())

    async def main() -> None:
        nc = await nats.connect(p.url)
        await eventually(lambda: _connected(p), 10, "the bridge connects")
        for i in range(20):
            await nc.publish(f"telemetry.dev{i % 2}.temp", b"%d" % i)
        await nc.publish("telemetry.dev0.other", b"not forwarded")
        await nc.flush()
        await until(lambda: len(sub.messages()) >= 20, 10)
        await nc.close()

    try:
        run(main())
        got = sub.messages()
        assert [(t, pl) for t, pl, _ in got] == [(f"site1/dev{i % 2}/t", b"%d" % i) for i in range(20)]
    finally:
        sub.close()


async def _connected(p: ServerProcess) -> bool:
    return bool(jsz(p)["mqtt_bridges"][0]["connected"])


def test_out_from_stream_in_order_with_ack(mosquitto: Callable[..., Mosquitto],
                                           start_server: Callable[..., ServerProcess]) -> None:
    broker = mosquitto()
    sub = Subscriber(broker.port, "up/#", qos=1)
    assert sub.subscribed.wait(10)
    p = start_server("edged", config=bridge_conf(
        broker, 'out: [ { stream: TELE, topic: "up/$1", qos: 1, filter_subject: "tele.*" } ]'),
        http_port=free_port())

    async def main() -> dict[str, Any]:
        nc = await nats.connect(p.url)
        js = nc.jetstream()
        await js.add_stream(name="TELE", subjects=["tele.*"])
        for i in range(200):
            await js.publish("tele.a", b"%d" % i)
        await until(lambda: len(sub.messages()) >= 200, 20)
        ci = await eventually(lambda: _acked(js, 200), 10, "every message acked")
        await nc.close()
        return ci

    try:
        run(main())
        assert sub.payloads() == [b"%d" % i for i in range(200)]
        b = jsz(p)["mqtt_bridges"][0]
        assert b["connected"] and b["out"][0]["pending"] == 0 and b["out"][0]["forwarded"] == 200
    finally:
        sub.close()


async def _acked(js: Any, n: int) -> Any:
    ci = await js.consumer_info("TELE", "mqtt_bridge_cloud_0")
    return ci if ci.ack_floor.stream_seq == n and ci.num_ack_pending == 0 else None


def test_in_to_subject_and_stream(mosquitto: Callable[..., Mosquitto],
                                  start_server: Callable[..., ServerProcess]) -> None:
    broker = mosquitto()
    p = start_server("edged", config=bridge_conf(
        broker, 'in: [ { topic: "cmd/+/set", subject: "cmd.$1", qos: 1 },'
                ' { topic: "cfg/#", subject: "cfg.>", stream: CFG, qos: 2 } ]'), http_port=free_port())

    async def main() -> tuple[list[Any], list[Any]]:
        nc = await nats.connect(p.url)
        js = nc.jetstream()
        await js.add_stream(name="CFG", subjects=["cfg.>"])
        got: list[Any] = []

        async def on_cmd(m: Any) -> None:
            got.append((m.subject, m.data))

        await nc.subscribe("cmd.*", cb=on_cmd)
        await nc.flush()
        await eventually(lambda: _connected(p), 10, "the bridge connects")
        publish(broker.port, "cmd/dev1/set", [b"on", b"off"])
        publish(broker.port, "cfg/a/b", [b"%d" % i for i in range(50)], qos=2)
        await until(lambda: len(got) >= 2, 10)
        await eventually(lambda: _stored(js, 50), 10, "stored")
        sub = await js.pull_subscribe("cfg.>", "check", stream="CFG")
        msgs = await sub.fetch(50, timeout=5)
        await nc.close()
        return got, [(m.subject, m.data) for m in msgs]

    got, stored = run(main())
    assert got == [("cmd.dev1", b"on"), ("cmd.dev1", b"off")]
    assert stored == [("cfg.a.b", b"%d" % i) for i in range(50)]


async def _stored(js: Any, n: int) -> bool:
    return bool((await js.stream_info("CFG")).state.messages == n)


def test_missing_streams_are_clear_errors_until_created(mosquitto: Callable[..., Mosquitto],
                                                        start_server: Callable[..., ServerProcess]) -> None:
    """An out rule's stream that does not exist: the log and /jsz say so, and forwarding starts once it is
    created. An in rule's stream that does not exist: the message is not acknowledged upstream (nor lost)
    and is stored once the stream is there."""
    broker = mosquitto()
    sub = Subscriber(broker.port, "up/#")
    assert sub.subscribed.wait(10)
    p = start_server("edged", config=bridge_conf(
        broker, 'out: [ { stream: NOPE, topic: "up/$1" } ], in: [ { topic: "cfg/#", subject: "cfg.>", stream: CFG } ]'),
        http_port=free_port())

    async def main() -> list[bytes]:
        await eventually(lambda: _connected(p), 10, "the bridge connects")
        b = await eventually(lambda: _out_error(p), 10, "the missing stream is reported")
        assert b["out"][0]["last_error"] == "stream 'NOPE' not found" and not b["out"][0]["ready"]
        assert "out rule from stream NOPE: stream 'NOPE' not found" in p.log_tail()
        publish(broker.port, "cfg/x", [b"kept"])
        await eventually(lambda: _in_error(p), 10, "the in rule's store failure is reported")
        nc = await nats.connect(p.url)
        js = nc.jetstream()
        await js.add_stream(name="CFG", subjects=["cfg.>"])
        await js.add_stream(name="NOPE", subjects=["nope.*"])
        await js.publish("nope.a", b"now")
        await until(lambda: sub.payloads() == [b"now"], 15)
        await eventually(lambda: _stored(js, 1), 10, "the held message is stored")
        psub = await js.pull_subscribe("cfg.>", "check", stream="CFG")
        msgs = await psub.fetch(1, timeout=5)
        await nc.close()
        return [m.data for m in msgs]

    try:
        assert run(main()) == [b"kept"]
    finally:
        sub.close()


async def _out_error(p: ServerProcess) -> dict[str, Any] | None:
    b = jsz(p)["mqtt_bridges"][0]
    return b if b["out"][0]["last_error"] else None


async def _in_error(p: ServerProcess) -> bool:
    return "not stored in stream CFG" in jsz(p)["mqtt_bridges"][0]["in"][0]["last_error"]


def test_failover_to_the_next_url_and_qos0_from_a_stream(mosquitto: Callable[..., Mosquitto],
                                                         start_server: Callable[..., ServerProcess]) -> None:
    """The first URL has no broker: the bridge goes on to the next one. A QoS 0 rule from a stream acks each
    message once paho has written it."""
    broker = mosquitto()
    sub = Subscriber(broker.port, "up/#", qos=0)
    assert sub.subscribed.wait(10)
    dead = free_port()
    text = bridge_conf(broker, 'out: [ { stream: TELE, topic: "up/$1", qos: 0 } ]').replace(
        f'url: "{broker.url}"', f'urls: ["mqtt://127.0.0.1:{dead}", "{broker.url}"], reconnect_max: "1s"')
    p = start_server("edged", config=text, http_port=free_port())

    async def main() -> None:
        nc = await nats.connect(p.url)
        js = nc.jetstream()
        await js.add_stream(name="TELE", subjects=["tele.*"])
        for i in range(30):
            await js.publish("tele.a", b"%d" % i)
        await until(lambda: len(sub.payloads()) >= 30, 20)
        await eventually(lambda: _acked_n(js, 30), 10, "acked")
        await nc.close()

    try:
        run(main())
        assert sub.payloads() == [b"%d" % i for i in range(30)]
        assert jsz(p)["mqtt_bridges"][0]["connects"] == 1
    finally:
        sub.close()


async def _acked_n(js: Any, n: int) -> bool:
    ci = await js.consumer_info("TELE", "mqtt_bridge_cloud_0")
    return bool(ci.ack_floor.stream_seq == n)


def test_in_rule_does_not_feed_an_out_rule_of_the_same_bridge(mosquitto: Callable[..., Mosquitto],
                                                             start_server: Callable[..., ServerProcess]) -> None:
    """`in: down/# -> x.>` and `out: x.> -> up/#`: what came from the broker is not sent back to it; a NATS
    client's publish to x.> is."""
    broker = mosquitto()
    sub = Subscriber(broker.port, "up/#")
    assert sub.subscribed.wait(10)
    p = start_server("edged", config=bridge_conf(
        broker, 'in: [ { topic: "down/#", subject: "x.>" } ], out: [ { subject: "x.>", topic: "up/#" } ]'),
        http_port=free_port())

    async def main() -> list[Any]:
        nc = await nats.connect(p.url)
        got: list[Any] = []

        async def on_x(m: Any) -> None:
            got.append((m.subject, m.data))

        await nc.subscribe("x.>", cb=on_x)
        await nc.flush()
        await eventually(lambda: _connected(p), 10, "the bridge connects")
        publish(broker.port, "down/a", [b"from the broker"])
        await until(lambda: got, 10)
        await nc.publish("x.b", b"from nats")
        await until(lambda: sub.payloads() and len(got) == 2, 10)
        await nc.close()
        return got

    try:
        assert run(main()) == [("x.a", b"from the broker"), ("x.b", b"from nats")]
        assert [(t, pl) for t, pl, _ in sub.messages()] == [("up/b", b"from nats")]
    finally:
        sub.close()
