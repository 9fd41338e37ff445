"""Persistent sessions, retained messages, wills and client-id takeover, across reconnects, edged restarts
and kill -9: the state lives in JetStream streams (nats-server's names), so it is there afterwards."""

from __future__ import annotations

import asyncio

import nats
import pytest

from tests.support.aio import run
from tests.support.mqttpeers.clients import Client, wait_mqtt
from tests.support.servers import ServerProcess


def _restart(srv: ServerProcess, how: str) -> None:
    if how == "kill9":
        srv.kill9()
        srv.start()
    else:
        srv.restart()
    wait_mqtt(srv.mqtt_port)  # type: ignore[attr-defined]


def test_retained_set_replace_clear(any_mqtt: ServerProcess) -> None:
    port = any_mqtt.mqtt_port  # type: ignore[attr-defined]
    pub = Client(port)
    pub.publish("ret/a", "one", 1, retain=True)
    pub.publish("ret/b", "bee", 1, retain=True)
    s1 = Client(port)
    s1.subscribe("ret/#", 1)
    got = sorted((m.topic, m.payload, m.retain) for m in s1.get_n(2))
    assert got == [("ret/a", b"one", True), ("ret/b", b"bee", True)]
    pub.publish("ret/a", "two", 1, retain=True)  # replace: a live subscriber gets it without retain
    m = s1.get()
    assert (m.topic, m.payload, m.retain) == ("ret/a", b"two", False)
    pub.publish("ret/b", "", 1, retain=True)  # clear
    s1.get()
    s2 = Client(port)
    s2.subscribe("ret/#", 1)
    m = s2.get()
    assert (m.topic, m.payload, m.retain) == ("ret/a", b"two", True)
    assert s2.none()
    for c in (pub, s1, s2):
        c.disconnect()


@pytest.mark.parametrize("how", ["restart", "kill9"])
def test_persistent_session_and_retained_survive(mqtt_server, how: str) -> None:  # type: ignore[no-untyped-def]
    srv = mqtt_server()
    port = srv.mqtt_port
    s = Client(port, client_id="dev-1", clean=False)
    s.subscribe("ps/#", 1)
    s.disconnect()
    pub = Client(port)
    pub.publish("ps/one", "queued-before", 1)
    pub.publish("keep/r", "retained", 1, retain=True)
    pub.disconnect()
    _restart(srv, how)
    pub = Client(port)
    pub.publish("ps/two", "queued-after", 1)
    s = Client(port, client_id="dev-1", clean=False)
    assert s.session_present
    assert [m.payload for m in s.get_n(2)] == [b"queued-before", b"queued-after"]
    r = Client(port)
    r.subscribe("keep/#", 0)
    assert r.get().payload == b"retained"
    for c in (pub, s, r):
        c.disconnect()


def test_clean_session_drops_state(any_mqtt: ServerProcess) -> None:
    port = any_mqtt.mqtt_port  # type: ignore[attr-defined]
    s = Client(port, client_id="cs-1", clean=False)
    s.subscribe("cs/#", 1)
    s.disconnect()
    s = Client(port, client_id="cs-1", clean=True)
    assert not s.session_present
    s.disconnect()
    pub = Client(port)
    pub.publish("cs/x", "lost", 1)
    s = Client(port, client_id="cs-1", clean=False)
    assert not s.session_present
    assert s.none()
    s.disconnect()
    pub.disconnect()


def test_nats_publish_queued_for_offline_session(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    """nats-server delivers NATS -> MQTT at QoS 0 only, never to an offline session; edged queues it."""
    srv = mqtt_server()
    port = srv.mqtt_port
    s = Client(port, client_id="dev-nats", clean=False)
    s.subscribe("cmd/dev-nats/#", 1)
    s.disconnect()

    async def publish() -> None:
        nc = await nats.connect(srv.url)
        await nc.publish("cmd.dev-nats.reboot", b"please")
        await nc.flush()
        await nc.close()

    run(publish())
    _restart(srv, "kill9")
    s = Client(port, client_id="dev-nats", clean=False)
    m = s.get()
    assert (m.topic, m.payload, m.qos) == ("cmd/dev-nats/reboot", b"please", 1)
    s.disconnect()


def test_unacked_qos1_resent_at_once_on_reconnect(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    """A message delivered but never PUBACKed is sent again when the session comes back, without waiting
    for ack_wait (here an hour, so only the resend on reconnect can deliver it)."""
    srv = mqtt_server(mqtt_extra="ack_wait: '1h'")
    port = srv.mqtt_port
    s = Client(port, client_id="slow", clean=False)
    s.subscribe("u/#", 1)
    # the client takes the message but dies before its PUBACK: paho acks on receipt, so drop the socket
    # from inside the message callback, before paho can answer
    s.c.on_message = lambda c, u, m: (s.msgs.put(m), c.socket().close())
    pub = Client(port)
    pub.publish("u/1", "must-arrive", 1)
    assert s.get().payload == b"must-arrive"
    s.c.loop_stop()
    s2 = Client(port, client_id="slow", clean=False)
    m = s2.get()
    assert m.payload == b"must-arrive" and m.dup  # a resend says so [MQTT-3.3.1-1]
    s2.disconnect()
    pub.disconnect()


def test_will_on_abrupt_close_not_on_disconnect(any_mqtt: ServerProcess) -> None:
    port = any_mqtt.mqtt_port  # type: ignore[attr-defined]
    w = Client(port)
    w.subscribe("will/#", 1)
    a = Client(port, will=("will/a", b"a-died", 1, False))
    a.drop()
    m = w.get()
    assert (m.topic, m.payload) == ("will/a", b"a-died")
    b = Client(port, will=("will/b", b"b-died", 1, True))
    b.disconnect()
    assert w.none()
    c = Client(port, will=("will/c", b"c-died", 1, True))
    c.drop()
    assert w.get().payload == b"c-died"
    late = Client(port)
    late.subscribe("will/c", 0)
    m = late.get()
    assert m.payload == b"c-died" and m.retain  # a retained will is retained
    w.disconnect()
    late.disconnect()


def test_client_id_takeover(any_mqtt: ServerProcess) -> None:
    port = any_mqtt.mqtt_port  # type: ignore[attr-defined]
    first = Client(port, client_id="same-id")
    first.subscribe("to/#", 0)
    second = Client(port, client_id="same-id")
    first.disconnects.get(timeout=10)  # the first connection is closed by the server
    first.c.loop_stop()
    second.subscribe("to/#", 0)
    pub = Client(port)
    pub.publish("to/x", "hi", 1)
    assert second.get().payload == b"hi"
    assert first.none()
    second.disconnect()
    pub.disconnect()


def test_qos2_incoming_survives_restart_between_pubrec_and_pubrel(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    """QoS 2 in: after PUBREC the message is edged's; it is delivered exactly once when PUBREL comes,
    even across a kill -9."""
    import socket

    from bridges.mqtt import codec
    from bridges.mqtt.packets import ConnAck, Connect, PubComp, Publish, PubRec, PubRel

    srv = mqtt_server()
    port = srv.mqtt_port
    sub = Client(port, client_id="q2sub", clean=False)
    sub.subscribe("q2/#", 2)
    sub.disconnect()

    def raw_session() -> tuple[socket.socket, codec.MQTTDecoder]:
        sk = socket.create_connection(("127.0.0.1", port), timeout=10)
        sk.sendall(codec.encode(Connect(client_id="q2pub", clean_start=False, keep_alive=30), 4))
        dec = codec.MQTTDecoder(protocol_level=4, server=False)
        pk = _read(sk, dec)
        assert isinstance(pk, ConnAck) and pk.reason_code == 0
        return sk, dec

    sk, dec = raw_session()
    sk.sendall(codec.encode(Publish("q2/x", b"exactly-once", qos=2, packet_id=7), 4))
    assert _read(sk, dec) == PubRec(7)
    sk.close()
    srv.kill9()
    srv.start()
    wait_mqtt(port)
    sk, dec = raw_session()
    sk.sendall(codec.encode(PubRel(7), 4))
    assert _read(sk, dec) == PubComp(7)
    sk.sendall(codec.encode(PubRel(7), 4))  # again: nothing more is published
    assert _read(sk, dec) == PubComp(7)
    sk.close()
    s = Client(port, client_id="q2sub", clean=False)
    m = s.get()
    assert (m.payload, m.qos) == (b"exactly-once", 2)
    assert s.none()
    s.disconnect()


_LEFT: dict[int, list] = {}  # packets read past the one asked for, per decoder


def _read(sk, dec):  # type: ignore[no-untyped-def]
    """The next packet on a raw socket (packets that came in the same read are kept for the next call)."""
    left = _LEFT.setdefault(id(dec), [])
    while not left:
        data = sk.recv(65536)
        assert data, "connection closed"
        left.extend(dec.feed(data))
    pk = left.pop(0)
    if not left:
        del _LEFT[id(dec)]  # a later decoder may get the same id
    return pk


def test_other_clients_unaffected_by_restart_of_one(any_mqtt: ServerProcess) -> None:
    port = any_mqtt.mqtt_port  # type: ignore[attr-defined]

    async def main() -> None:
        subs = [Client(port) for _ in range(3)]
        for s in subs:
            s.subscribe("fan/out", 1)
        pub = Client(port)
        pub.publish("fan/out", "all", 1)
        for s in subs:
            assert (await asyncio.to_thread(s.get)).payload == b"all"
        for c in (*subs, pub):
            c.disconnect()

    run(main())


@pytest.mark.parametrize("how", ["reconnect", "kill9"])
def test_qos2_outgoing_pubrel_resent(mqtt_server, how: str) -> None:  # type: ignore[no-untyped-def]
    """QoS 2 out: a subscriber that PUBRECed but never PUBCOMPed gets the PUBREL again when its session
    comes back (after a kill -9 too), and not the message a second time."""
    import socket

    from bridges.mqtt import codec
    from bridges.mqtt.packets import (
        Connect,
        PubComp,
        Publish,
        PubRec,
        PubRel,
        SubAck,
        Subscribe,
        SubscriptionOptions,
    )

    srv = mqtt_server()
    port = srv.mqtt_port

    def session() -> tuple[socket.socket, codec.MQTTDecoder, bool]:
        sk = socket.create_connection(("127.0.0.1", port), timeout=10)
        sk.sendall(codec.encode(Connect(client_id="q2out", clean_start=False, keep_alive=30), 4))
        dec = codec.MQTTDecoder(protocol_level=4, server=False)
        ack = _read(sk, dec)
        return sk, dec, ack.session_present

    sk, dec, _ = session()
    sk.sendall(codec.encode(Subscribe(1, [("q2o/#", SubscriptionOptions(qos=2))]), 4))
    assert _read(sk, dec) == SubAck(1, [2])
    pub = Client(port)
    pub.publish("q2o/x", "once", 2)
    p = _read(sk, dec)
    assert isinstance(p, Publish) and (p.payload, p.qos) == (b"once", 2)
    sk.sendall(codec.encode(PubRec(p.packet_id), 4))
    assert _read(sk, dec) == PubRel(p.packet_id)
    sk.close()  # no PUBCOMP
    if how == "kill9":
        _restart(srv, "kill9")
    else:
        pub.disconnect()
    sk, dec, present = session()
    assert present
    assert _read(sk, dec) == PubRel(p.packet_id)
    sk.sendall(codec.encode(PubComp(p.packet_id), 4))
    sk.close()
    sk, dec, _ = session()
    sk.settimeout(1.0)
    with pytest.raises(TimeoutError):  # nothing more: neither the message nor the PUBREL again
        sk.recv(65536)
    sk.close()


def test_nats_messages_to_overlapping_qos1_subscriptions_once_each(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    """A NATS message matching several QoS 1 subscriptions (of one session and of others) is queued once;
    equal (empty) payloads in a row are all delivered."""
    srv = mqtt_server()
    a = Client(srv.mqtt_port, client_id="ov-a", clean=False)
    a.subscribe([("ov/#", 1), ("ov/+/x", 1)])
    b = Client(srv.mqtt_port, client_id="ov-b", clean=False)
    b.subscribe("ov/1/x", 1)

    async def publish() -> None:
        nc = await nats.connect(srv.url)
        for _ in range(3):
            await nc.publish("ov.1.x", b"")
        await nc.publish("ov.2.y", b"other")
        await nc.flush()
        await nc.close()

    run(publish())
    # each QoS 1 subscription is a consumer, so a session gets a copy per matching subscription (as from
    # nats-server, and as MQTT allows); the message itself was queued once, or there would be more
    got_a = sorted((m.topic, m.payload) for m in a.get_n(7))
    assert got_a == [("ov/1/x", b"")] * 6 + [("ov/2/y", b"other")]
    assert [(m.topic, m.payload) for m in b.get_n(3)] == [("ov/1/x", b"")] * 3
    assert a.none() and b.none()
    a.disconnect()
    b.disconnect()


def test_clean_session_cut_by_kill9_leaves_no_consumer(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    """A clean session's QoS 1 consumer outlives a kill -9; edged drops it when it starts again (it would
    keep its messages in the interest stream for ever), and keeps the persistent sessions' ones."""
    srv = mqtt_server()
    keep = Client(srv.mqtt_port, client_id="keeper", clean=False)
    keep.subscribe("o/#", 1)
    keep.disconnect()
    c = Client(srv.mqtt_port, client_id="cut")
    c.subscribe("o/x", 1)

    async def names() -> set[str]:
        nc = await nats.connect(srv.url)
        try:
            return {ci.name for ci in await nc.jetstream().consumers_info("$MQTT_msgs")}
        finally:
            await nc.close()

    assert len(run(names())) == 3  # keeper's two (o.> and o) and cut's
    srv.kill9()
    c.c.loop_stop()
    srv.start()
    wait_mqtt(srv.mqtt_port)
    from tests.support.mqttpeers.clients import until

    until(lambda: len(run(names())) == 2)
    k = Client(srv.mqtt_port, client_id="keeper", clean=False)
    assert k.session_present
    k.disconnect()


def test_qos2_publish_resent_after_reconnect_is_delivered_once(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    """A QoS 2 PUBLISH sent again (DUP) on a new connection before its PUBREL: PUBRECed again, published
    once."""
    import socket

    from bridges.mqtt import codec
    from bridges.mqtt.packets import ConnAck, Connect, PubComp, Publish, PubRec, PubRel

    srv = mqtt_server()
    port = srv.mqtt_port
    sub = Client(port)
    sub.subscribe("dup2/#", 2)

    def session() -> tuple[socket.socket, codec.MQTTDecoder]:
        sk = socket.create_connection(("127.0.0.1", port), timeout=10)
        sk.sendall(codec.encode(Connect(client_id="dup2pub", clean_start=False, keep_alive=30), 4))
        dec = codec.MQTTDecoder(protocol_level=4, server=False)
        assert isinstance(_read(sk, dec), ConnAck)
        return sk, dec

    sk, dec = session()
    sk.sendall(codec.encode(Publish("dup2/x", b"one", qos=2, packet_id=5), 4))
    assert _read(sk, dec) == PubRec(5)
    sk.close()
    sk, dec = session()
    sk.sendall(codec.encode(Publish("dup2/x", b"one", qos=2, packet_id=5, dup=True), 4))
    assert _read(sk, dec) == PubRec(5)
    sk.sendall(codec.encode(PubRel(5), 4))
    assert _read(sk, dec) == PubComp(5)
    sk.close()
    assert sub.get().payload == b"one"
    assert sub.none()
    sub.disconnect()


def test_nothing_pubacked_is_lost_across_kill9(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    """A publisher sends QoS 1 messages one after another while edged is killed -9: every message it got a
    PUBACK for is in the stream capturing it and reaches the offline persistent session afterwards."""
    import threading

    srv = mqtt_server()
    port = srv.mqtt_port

    async def add_stream() -> None:
        nc = await nats.connect(srv.url)
        await nc.jetstream().add_stream(name="TELE", subjects=["kt.>"])
        await nc.close()

    run(add_stream())
    s = Client(port, client_id="kt-sub", clean=False)
    s.subscribe("kt/#", 1)
    s.disconnect()
    acked: list[int] = []
    pub = Client(port)
    stop = threading.Event()

    def publish() -> None:
        i = 0
        while not stop.is_set() and i < 100_000:
            info = pub.c.publish("kt/m", str(i), 1)
            info.wait_for_publish(2)
            if not info.is_published():
                return
            acked.append(i)
            i += 1

    t = threading.Thread(target=publish)
    t.start()
    from tests.support.mqttpeers.clients import until

    until(lambda: len(acked) >= 50)
    srv.kill9()
    stop.set()
    t.join(10)
    pub.c.loop_stop()
    assert acked
    srv.start()
    wait_mqtt(port)

    async def stored() -> set[int]:
        nc = await nats.connect(srv.url)
        js = nc.jetstream()
        sub = await js.subscribe("kt.>", ordered_consumer=True)
        n = (await js.stream_info("TELE")).state.messages
        got = set()
        for _ in range(n):
            got.add(int((await sub.next_msg(10)).data))
        await nc.close()
        return got

    assert set(acked) <= run(stored())
    s = Client(port, client_id="kt-sub", clean=False)
    got = set()
    while not set(acked) <= got:
        got.add(int(s.get().payload))
    s.disconnect()
