"""bridges/mqtt/topics.py against nats-server's MQTT listener itself, not only its test tables, and the same
scenarios against edged's: an MQTT publish lands on the subject topic_to_subject names, a NATS publish
reaches MQTT subscribers under the topic subject_to_topic names, and `a/#` also gets `a`
(filter_to_subjects)."""

from __future__ import annotations

import asyncio
import queue
import tempfile
import threading
import uuid
from collections.abc import Callable

import nats
import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from bridges.mqtt.topics import filter_to_subjects, subject_to_topic, topic_to_subject
from tests.support.aio import run
from tests.support.servers import KINDS, ServerProcess, free_port, wait_port

WAIT = 10.0

TOPICS = [
    "a/b", "/a", "a/", "a//b", "//", "/", "a.b/c", ".", "a..b/", "x/.y./z", "sport/tennis/player1", "ü/日本",
    "$SYS/x", "a*b/c>",
]  # fmt: skip
SUBJECTS = ["a.b", "a", "a//b.c", "x./.y", "/.x", "a./", "t.u.v.w"]


@pytest.fixture(params=KINDS)
def mqtt_kind(request: pytest.FixtureRequest) -> str:
    return request.param


def _server(start_server: Callable[..., ServerProcess], kind: str) -> tuple[ServerProcess, int]:
    """nats-server (the reference) or edged, with JetStream and an MQTT port."""
    port = free_port()
    store = tempfile.mkdtemp(prefix="mqtt-topics-js-")
    conf = f"server_name: topics_{port}\njetstream {{ store_dir: '{store}' }}\nmqtt {{ port: {port} }}\n"
    srv = start_server(kind, config=conf)
    if kind == "edged" and "MQTT is not supported yet" in srv.log_tail():
        pytest.skip("this edged has no MQTT listener (branch mqttserver brings it)")
    wait_port(port)
    return srv, port


def _client(port: int) -> tuple[paho.Client, queue.Queue[paho.MQTTMessage]]:
    got: queue.Queue[paho.MQTTMessage] = queue.Queue()
    connected = threading.Event()
    c = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"t-{uuid.uuid4().hex[:8]}", protocol=paho.MQTTv311)
    c.on_message = lambda _c, _u, m: got.put(m)
    c.on_connect = lambda *a: connected.set()
    c.connect("127.0.0.1", port, keepalive=30)
    c.loop_start()
    assert connected.wait(WAIT)
    return c, got


def test_mqtt_publishes_land_on_the_mapped_subjects(start_server: Callable[..., ServerProcess], mqtt_kind: str) -> None:
    srv, port = _server(start_server, mqtt_kind)

    async def main() -> None:
        nc = await nats.connect(srv.url)
        seen: list[tuple[str, bytes]] = []

        async def on_msg(m: nats.aio.msg.Msg) -> None:
            seen.append((m.subject, m.data))

        await nc.subscribe(">", cb=on_msg)
        await nc.flush()
        c, _ = _client(port)
        try:
            for i, topic in enumerate(TOPICS):
                c.publish(topic, str(i).encode(), qos=1).wait_for_publish(WAIT)
            await nc.flush()
            for _ in range(200):  # bounded wait for the last one
                if any(d == str(len(TOPICS) - 1).encode() for _, d in seen):
                    break
                await asyncio.sleep(0.05)
        finally:
            c.disconnect()
            c.loop_stop()
            await nc.close()
        # a QoS 1 publish also goes to nats-server's own $MQTT.msgs.<subject> (its JetStream copy)
        by_payload = {d: s for s, d in seen if d.isdigit() and not s.startswith("$MQTT.")}
        assert {t: by_payload.get(str(i).encode()) for i, t in enumerate(TOPICS)} == {t: topic_to_subject(t) for t in TOPICS}

    run(main())


def test_nats_publishes_reach_mqtt_under_the_mapped_topics(start_server: Callable[..., ServerProcess], mqtt_kind: str) -> None:
    srv, port = _server(start_server, mqtt_kind)
    c, got = _client(port)
    try:
        subscribed = threading.Event()
        c.on_subscribe = lambda *a: subscribed.set()
        c.subscribe("#", 0)
        assert subscribed.wait(WAIT)

        async def main() -> None:
            nc = await nats.connect(srv.url)
            for i, subject in enumerate(SUBJECTS):
                await nc.publish(subject, str(i).encode())
            await nc.flush()
            await nc.close()

        run(main())
        topics = {}
        for _ in SUBJECTS:
            m = got.get(timeout=WAIT)
            topics[int(m.payload)] = m.topic
        assert [topics[i] for i in range(len(SUBJECTS))] == [subject_to_topic(s) for s in SUBJECTS]
    finally:
        c.disconnect()
        c.loop_stop()


def test_multi_level_filter_gets_its_parent_level(start_server: Callable[..., ServerProcess], mqtt_kind: str) -> None:
    srv, port = _server(start_server, mqtt_kind)
    assert filter_to_subjects("a/#") == ["a.>", "a"]
    c, got = _client(port)
    try:
        subscribed = threading.Event()
        c.on_subscribe = lambda *a: subscribed.set()
        c.subscribe("a/#", 0)
        assert subscribed.wait(WAIT)

        async def main() -> None:
            nc = await nats.connect(srv.url)
            for subject in ("a", "a.b", "ab", "b.a"):
                await nc.publish(subject, subject.encode())
            await nc.publish("a.end", b"end")
            await nc.flush()
            await nc.close()

        run(main())
        topics = []
        for _ in range(10):
            m = got.get(timeout=WAIT)
            if m.payload == b"end":
                break
            topics.append(m.topic)
        assert topics == ["a", "a/b"]
    finally:
        c.disconnect()
        c.loop_stop()
