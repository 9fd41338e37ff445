"""A QoS 1 subscriber's PUBACKs cost no store commit of their own: the removal of the acked messages from
`$MQTT_msgs` (interest retention) and the consumer's new state ride with the next commit (a publish's, or
one of their own a moment later). They are durable all the same: once a later publish is PUBACKed (so
committed, after them), a kill -9 brings back no acked message and loses no unacked one."""

from __future__ import annotations

import socket

from bridges.mqtt.codec import MQTTDecoder, encode, encode_publish
from bridges.mqtt.packets import ConnAck, Connect, PubAck, Publish, SubAck, Subscribe, SubscriptionOptions
from tests.support.mqttpeers.clients import Client, wait_mqtt


class RawClient:
    """An MQTT 3.1.1 client on a bare socket, so the test decides which deliveries get a PUBACK."""

    def __init__(self, port: int, client_id: str, clean: bool) -> None:
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.d = MQTTDecoder(protocol_level=4, server=False)
        self.got: list[object] = []
        self.queue: list[object] = []
        self.s.sendall(encode(Connect(4, client_id, clean, 60), 4))
        self.until(ConnAck)

    def until(self, kind: type, n: int = 1) -> list[object]:
        """The next `n` packets of `kind`, reading as needed (others are skipped; every packet is kept in
        `got`)."""
        out: list[object] = []
        for _ in range(1000):
            while self.queue and len(out) < n:
                p = self.queue.pop(0)
                if isinstance(p, kind):
                    out.append(p)
            if len(out) >= n:
                return out
            data = self.s.recv(65536)
            assert data, "broker closed the connection"
            for p in self.d.feed(data):
                self.got.append(p)
                self.queue.append(p)
        raise AssertionError(f"no {kind.__name__}")

    def close(self) -> None:
        self.s.close()


def test_acks_riding_later_commits_survive_kill9(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    srv = mqtt_server(mqtt_extra="ack_wait: '1h'")  # only a reconnect resends: nothing by timer
    port = srv.mqtt_port
    sub = RawClient(port, "ride-sub", clean=False)
    sub.s.sendall(encode(Subscribe(1, [("ride/#", SubscriptionOptions(1))]), 4))
    sub.until(SubAck)
    pub = Client(port)
    for i in range(10):
        pub.c.publish("ride/m", str(i), 1).wait_for_publish(10)
    msgs = sub.until(Publish, 10)
    assert [p.payload for p in msgs] == [str(i).encode() for i in range(10)]  # type: ignore[attr-defined]
    # the first six are acked; then two publishes on the subscriber's own connection, each awaited: the
    # second one's commit comes after whatever took the acks (commits are in order)
    sub.s.sendall(b"".join(encode(PubAck(p.packet_id), 4) for p in msgs[:6]))  # type: ignore[attr-defined]
    for k, pi in ((10, 101), (11, 102)):
        sub.s.sendall(encode_publish(b"ride/m", str(k).encode(), 1, pi))
        assert sub.until(PubAck)[0].packet_id == pi  # type: ignore[attr-defined]
    pub.disconnect()
    srv.kill9()
    sub.close()
    srv.start()
    wait_mqtt(port)
    again = RawClient(port, "ride-sub", clean=False)
    # what was not acked comes back (6-9, and 10 and 11, which it may have been sent), each once; 0-5 never
    want = {str(i).encode() for i in range(6, 12)}
    got: list[bytes] = []
    for _ in range(100):
        if want <= set(got):
            break
        p = again.until(Publish)[0]
        got.append(p.payload)  # type: ignore[attr-defined]
        again.s.sendall(encode(PubAck(p.packet_id), 4))  # type: ignore[attr-defined]
    assert want <= set(got)
    assert not {str(i).encode() for i in range(6)} & set(got)
    # nothing more is on its way: the publisher's last message to a new topic arrives next, nothing before it
    probe = Client(port)
    probe.c.publish("ride/end", "end", 1).wait_for_publish(10)
    rest = []
    for _ in range(100):
        p = again.until(Publish)[0]
        again.s.sendall(encode(PubAck(p.packet_id), 4))  # type: ignore[attr-defined]
        if p.payload == b"end":  # type: ignore[attr-defined]
            break
        rest.append(p.payload)  # type: ignore[attr-defined]
    assert not {str(i).encode() for i in range(6)} & set(rest)
    assert len(got) + len(rest) == len(set(got) | set(rest))  # each once
    probe.disconnect()
    again.close()
