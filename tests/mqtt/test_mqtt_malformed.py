"""Malformed packets, bad UTF-8, oversized packets and protocol violations: the spec's reason code (a
CONNACK code for a bad CONNECT, a DISCONNECT reason for MQTT 5), the connection closed, other clients
unaffected. Raw sockets send exactly the bytes under test."""

from __future__ import annotations

import socket

import pytest

from bridges.mqtt import codec
from bridges.mqtt.packets import ConnAck, Connect, Disconnect, Publish
from tests.support.mqttpeers.clients import Client
from tests.support.servers import ServerProcess


def _raw(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _recv_all(sk: socket.socket) -> bytes:
    """Everything until the server closes (bounded by the socket timeout)."""
    out = b""
    while True:
        try:
            d = sk.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not d:
            break
        out += d
    return out


def _connect(sk: socket.socket, level: int = 4, **kw: object) -> None:
    sk.sendall(codec.encode(Connect(protocol_level=level, client_id=kw.pop("client_id", "raw"), **kw), level))  # type: ignore[arg-type]
    dec = codec.MQTTDecoder(protocol_level=level, server=False)
    pk: list = []
    while not pk:
        d = sk.recv(65536)
        assert d
        pk = dec.feed(d)
    assert isinstance(pk[0], ConnAck) and pk[0].reason_code == 0


BAD_AFTER_CONNECT = {
    "reserved packet type 0": b"\x00\x00",
    "bad fixed header flags on SUBSCRIBE": b"\x80\x06\x00\x01\x00\x01a\x00",
    "PUBLISH topic with a wildcard": b"\x32\x07\x00\x03a/#\x00\x01",
    "PUBLISH QoS 3": b"\x36\x06\x00\x01a\x00\x01x",
    "bad UTF-8 in a topic": b"\x30\x05\x00\x02\xc3\x28x",
    "remaining length over 4 bytes": b"\x30\xff\xff\xff\xff\x01",
    "packet id 0 on QoS 1": b"\x32\x05\x00\x01a\x00\x00",
    "second CONNECT": codec.encode(Connect(client_id="again"), 4),
}


@pytest.mark.parametrize("name", sorted(BAD_AFTER_CONNECT))
def test_malformed_packet_closes_only_that_connection(any_mqtt: ServerProcess, name: str) -> None:
    port = any_mqtt.mqtt_port  # type: ignore[attr-defined]
    good_sub = Client(port)
    good_sub.subscribe("ok/#", 1)
    good_pub = Client(port)
    sk = _raw(port)
    _connect(sk, client_id=f"bad-{abs(hash(name))}")
    sk.sendall(BAD_AFTER_CONNECT[name])
    assert _recv_all(sk) == b""  # MQTT 3.1.1: closed, nothing said
    sk.close()
    good_pub.publish("ok/1", "still-fine", 1)
    assert good_sub.get().payload == b"still-fine"
    good_sub.disconnect()
    good_pub.disconnect()


def test_v5_protocol_error_gets_disconnect_reason(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    srv = mqtt_server()
    sk = _raw(srv.mqtt_port)
    _connect(sk, level=5, client_id="v5bad")
    sk.sendall(b"\x32\x08\x00\x03a/#\x00\x01\x00")  # a wildcard in a PUBLISH topic
    dec = codec.MQTTDecoder(protocol_level=5, server=False)
    pk = dec.feed(_recv_all(sk))
    assert len(pk) == 1 and isinstance(pk[0], Disconnect)
    assert pk[0].reason_code in (0x90, 0x81, 0x82)  # topic name invalid / malformed / protocol error
    sk.close()


def test_unsupported_protocol_level_connack(any_mqtt: ServerProcess) -> None:
    sk = _raw(any_mqtt.mqtt_port)  # type: ignore[attr-defined]
    sk.sendall(b"\x10\x0c\x00\x04MQTT\x07\x02\x00\x3c\x00\x00")  # level 7
    assert _recv_all(sk) == b"\x20\x02\x00\x01"  # CONNACK: unacceptable protocol version
    sk.close()


def test_oversized_packet(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    srv = mqtt_server(extra="max_payload: 1024")
    ok = Client(srv.mqtt_port)
    ok.subscribe("big/#", 0)
    sk = _raw(srv.mqtt_port)
    _connect(sk, client_id="big")
    sk.sendall(codec.encode(Publish("big/x", b"x" * 200_000), 4))
    assert _recv_all(sk) == b""
    sk.close()
    p = Client(srv.mqtt_port)
    p.publish("big/y", "small", 0)
    assert ok.get().payload == b"small"
    ok.disconnect()
    p.disconnect()


def test_keep_alive_closes_silent_client(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    """Keep-alive 1 s: a client that sends nothing for 1.5 s is closed (and its will sent)."""
    srv = mqtt_server()
    w = Client(srv.mqtt_port)
    w.subscribe("ka/#", 0)
    sk = _raw(srv.mqtt_port)
    sk.sendall(codec.encode(Connect(client_id="silent", keep_alive=1, will=None), 4))
    from bridges.mqtt.packets import Will

    sk2 = _raw(srv.mqtt_port)
    sk2.sendall(codec.encode(Connect(client_id="silent2", keep_alive=1, will=Will("ka/gone", b"bye")), 4))
    assert _recv_all(sk)[:2] == b"\x20\x02"  # CONNACK, then closed
    assert w.get().payload == b"bye"
    for s in (sk, sk2):
        s.close()
    w.disconnect()


def test_enhanced_authentication_not_supported(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    """MQTT 5 enhanced authentication (an authentication method in CONNECT) is refused with the spec's
    "bad authentication method" and a reason string saying it is not supported."""
    from bridges.mqtt.packets import Properties

    srv = mqtt_server()
    sk = _raw(srv.mqtt_port)
    sk.sendall(codec.encode(Connect(protocol_level=5, client_id="sasl",
                                    properties=Properties(authentication_method="SCRAM-SHA-1")), 5))
    pk = codec.MQTTDecoder(protocol_level=5, server=False).feed(_recv_all(sk))
    assert len(pk) == 1 and isinstance(pk[0], ConnAck) and pk[0].reason_code == 0x8C
    assert pk[0].properties is not None and "not supported" in (pk[0].properties.reason_string or "")
    sk.close()
