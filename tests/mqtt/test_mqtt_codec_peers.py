"""The MQTT codec against independent implementations over real sockets: paho-mqtt (3.1.1 and 5) and
mosquitto_pub / mosquitto_sub connect to a socket whose far end is only the codec, so what they send
must decode to the right packets and what the codec encodes must be what they understand."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties

from bridges.mqtt.codec import MQTTDecoder, encode, encode_properties
from bridges.mqtt.packets import (
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    SubscriptionOptions,
    UnsubAck,
    Unsubscribe,
)

TIMEOUT = 10.0


class CodecEnd:
    """The server end of one accepted connection, spoken through the codec only."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(TIMEOUT)
        self.decoder = MQTTDecoder()
        self.queue: list[Packet] = []

    @property
    def level(self) -> int:
        assert self.decoder.protocol_level is not None
        return self.decoder.protocol_level

    def next(self) -> Packet:
        """The next packet from the peer; bounded by the socket timeout (and the peer closing)."""
        while not self.queue:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("peer closed")
            self.queue.extend(self.decoder.feed(data))
        return self.queue.pop(0)

    def next_not_ping(self) -> Packet:
        for _ in range(10):
            p = self.next()
            if not isinstance(p, PingReq):
                return p
            self.send(PingResp())
        raise AssertionError("only pings")

    def send(self, packet: Packet) -> None:
        self.sock.sendall(encode(packet, self.level))


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4)
    s.settimeout(TIMEOUT)
    yield s
    s.close()


def _accept(listener: socket.socket) -> CodecEnd:
    conn, _ = listener.accept()
    return CodecEnd(conn)


@pytest.mark.parametrize("version", [paho.MQTTv31, paho.MQTTv311, paho.MQTTv5])
def test_paho_client_against_the_codec(listener: socket.socket, version: int) -> None:
    v5 = version == paho.MQTTv5
    received: list[paho.MQTTMessage] = []
    got_message = threading.Event()
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id="paho-1", protocol=version)
    client.username_pw_set("user", "pass")
    will_props = None
    if v5:
        will_props = PahoProperties(PacketTypes.WILLMESSAGE)
        will_props.WillDelayInterval = 30
    client.will_set("will/t", b"gone", qos=1, retain=True, properties=will_props)

    def on_message(_c: paho.Client, _u: object, msg: paho.MQTTMessage) -> None:
        received.append(msg)
        got_message.set()

    client.on_message = on_message
    connect_props = None
    if v5:
        connect_props = PahoProperties(PacketTypes.CONNECT)
        connect_props.SessionExpiryInterval = 120
        connect_props.ReceiveMaximum = 10
    port = listener.getsockname()[1]
    client.connect_async("127.0.0.1", port, keepalive=30, properties=connect_props, clean_start=True if v5 else 3)
    client.loop_start()
    end = _accept(listener)
    try:
        c = end.next()
        assert isinstance(c, Connect)
        assert c.protocol_level == {paho.MQTTv31: 3, paho.MQTTv311: 4, paho.MQTTv5: 5}[version]
        assert (c.client_id, c.keep_alive, c.username, c.password) == ("paho-1", 30, "user", b"pass")
        assert c.will is not None and (c.will.topic, c.will.payload, c.will.qos, c.will.retain) == ("will/t", b"gone", 1, True)
        if v5:
            assert c.properties == Properties(session_expiry_interval=120, receive_maximum=10)
            assert c.will.properties == Properties(will_delay_interval=30)
        end.send(ConnAck(False, 0, Properties(topic_alias_maximum=5, assigned_client_identifier="x") if v5 else None))

        sub_props = None
        if v5:
            sub_props = PahoProperties(PacketTypes.SUBSCRIBE)
            sub_props.SubscriptionIdentifier = 42
        opts = paho.SubscribeOptions(qos=2, noLocal=v5, retainAsPublished=v5, retainHandling=2 if v5 else 0)
        mid = client.subscribe([("a/+", opts)] if v5 else [("a/+", 2)], properties=sub_props)[1]
        s = end.next_not_ping()
        assert isinstance(s, Subscribe) and s.packet_id == mid
        assert s.subscriptions == [("a/+", SubscriptionOptions(2, v5, v5, 2 if v5 else 0))]
        if v5:
            assert s.properties == Properties(subscription_identifiers=[42])
        end.send(SubAck(mid, [2]))

        pub_props = None
        if v5:
            pub_props = PahoProperties(PacketTypes.PUBLISH)
            pub_props.UserProperty = [("k", "v"), ("k", "w")]
            pub_props.MessageExpiryInterval = 60
            pub_props.ResponseTopic = "reply/here"
            pub_props.CorrelationData = b"\x00\x01"
            pub_props.ContentType = "text/plain"
        info = client.publish("a/b", b"hello", qos=2, retain=False, properties=pub_props)
        p = end.next_not_ping()
        assert isinstance(p, Publish)
        assert (p.topic, p.payload, p.qos, p.packet_id) == ("a/b", b"hello", 2, info.mid)
        if v5:
            assert p.properties == Properties(
                message_expiry_interval=60,
                content_type="text/plain",
                response_topic="reply/here",
                correlation_data=b"\x00\x01",
                user_properties=[("k", "v"), ("k", "w")],
            )
        end.send(PubRec(info.mid))
        rel = end.next_not_ping()
        assert rel == PubRel(info.mid)
        end.send(PubComp(info.mid))
        assert info.wait_for_publish(TIMEOUT) is None and info.is_published()

        # the codec's server-side PUBLISH, with properties paho must read
        out_props = Properties(user_properties=[("from", "codec")], subscription_identifiers=[42], content_type="c") if v5 else None
        end.send(Publish("a/c", b"back", 1, False, False, 7, out_props))
        assert end.next_not_ping() == PubAck(7)
        assert got_message.wait(TIMEOUT)
        [msg] = received
        assert (msg.topic, msg.payload, msg.qos) == ("a/c", b"back", 1)
        if v5:
            assert msg.properties.UserProperty == [("from", "codec")]
            assert msg.properties.SubscriptionIdentifier == [42]
            assert msg.properties.ContentType == "c"

        umid = client.unsubscribe("a/+")[1]
        u = end.next_not_ping()
        assert u == Unsubscribe(umid, ["a/+"])
        end.send(UnsubAck(umid, [0] if v5 else []))
        client.disconnect()
        assert isinstance(end.next_not_ping(), Disconnect)
    finally:
        client.loop_stop()
        end.sock.close()


def test_paho_properties_pack_the_same_bytes() -> None:
    """paho's own property encoder and ours agree on a PUBLISH's properties, both ways."""

    pp = PahoProperties(PacketTypes.PUBLISH)
    pp.PayloadFormatIndicator = 1
    pp.MessageExpiryInterval = 3600
    pp.ContentType = "application/json"
    pp.ResponseTopic = "r/t"
    pp.CorrelationData = b"id-1"
    pp.TopicAlias = 9
    pp.UserProperty = [("a", "b")]
    ours = Properties(
        payload_format_indicator=1,
        message_expiry_interval=3600,
        content_type="application/json",
        response_topic="r/t",
        correlation_data=b"id-1",
        topic_alias=9,
        user_properties=[("a", "b")],
    )
    # paho writes in its own order; compare through the decoders, not the byte order
    decoded = MQTTDecoder(protocol_level=5, server=False).feed(b"\x30" + bytes((3 + len(pp.pack()),)) + b"\x00\x01t" + pp.pack())
    assert decoded[0].properties == ours
    back = PahoProperties(PacketTypes.PUBLISH)
    back.unpack(encode_properties(ours))
    assert back.json() == pp.json()


MOSQUITTO_PUB = shutil.which("mosquitto_pub")
needs_clients = pytest.mark.skipif(MOSQUITTO_PUB is None, reason="mosquitto-clients not installed (make test installs it)")


@needs_clients
@pytest.mark.parametrize("version", ["mqttv311", "mqttv5"])
def test_mosquitto_pub_against_the_codec(listener: socket.socket, version: str) -> None:
    port = listener.getsockname()[1]
    args = [
        "mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), "-V", version, "-i", "mp-1",
        "-t", "sensors/t1", "-m", "21.5", "-q", "1", "-r",
    ]  # fmt: skip
    if version == "mqttv5":
        args += ["-D", "publish", "user-property", "unit", "C", "-D", "publish", "message-expiry-interval", "90"]
        args += ["-D", "connect", "session-expiry-interval", "5"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        end = _accept(listener)
        c = end.next()
        assert isinstance(c, Connect) and c.client_id == "mp-1"
        end.send(ConnAck())
        p = end.next()
        assert isinstance(p, Publish)
        assert (p.topic, p.payload, p.qos, p.retain) == ("sensors/t1", b"21.5", 1, True)
        if version == "mqttv5":
            assert c.properties is not None and c.properties.session_expiry_interval == 5
            assert p.properties == Properties(message_expiry_interval=90, user_properties=[("unit", "C")])
        end.send(PubAck(p.packet_id))
        assert isinstance(end.next(), Disconnect)
        assert proc.wait(TIMEOUT) == 0
    finally:
        proc.kill()
        proc.wait()


@needs_clients
def test_mosquitto_sub_reads_the_codecs_publish(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    args = [
        "mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), "-V", "mqttv5", "-t", "x/#", "-q", "1",
        "-C", "1", "-F", "%t|%p|%q|%P|%E|%C|%R|%S",
    ]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        end = _accept(listener)
        assert isinstance(end.next(), Connect)
        end.send(ConnAck())
        s = end.next()
        assert isinstance(s, Subscribe) and s.subscriptions[0][0] == "x/#"
        end.send(SubAck(s.packet_id, [1]))
        props = Properties(
            user_properties=[("k", "v")],
            message_expiry_interval=30,
            content_type="text",
            response_topic="r/1",
            subscription_identifiers=[3],
        )
        end.send(Publish("x/y", b"payload", 1, False, False, 1, props))
        assert end.next() == PubAck(1)
        out, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, err
        assert out.decode().strip() == "x/y|payload|1|k:v|30|text|r/1|3"
    finally:
        proc.kill()
        proc.wait()
