"""The MQTT server's pure pieces: NATS headers made from MQTT messages and read back, the retained record
(nats-server's header layout) and the session record, round-tripped with hypothesis and checked against
the layouts nats-server writes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bridges.mqtt.natsmsg import (
    QOS_HEADERS,
    Retained,
    decode_retained,
    encode_retained,
    expiry,
    extras,
    mqtt_header,
    mqtt_qos,
    mqtt_retained,
)
from bridges.mqtt.session import Session, SubState
from edged.routing.headers import parse_headers

_name = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E, blacklist_characters=":"),
                min_size=1, max_size=12)
_value = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=20).map(str.strip)


def test_plain_header_is_nats_servers() -> None:
    assert QOS_HEADERS[1] == b"NATS/1.0\r\nNmqtt-Pub:1\r\n\r\n"
    assert mqtt_qos(QOS_HEADERS[2]) == 2 and mqtt_qos(None) is None and mqtt_qos(b"NATS/1.0\r\nX: y\r\n\r\n") is None
    # a retained publish carries the flags nibble after the QoS (nats-server's QoS 2 staging layout)
    h = mqtt_header(1, retain=True)
    assert parse_headers(h)[2]["Nmqtt-Pub"] == ["13"] and mqtt_qos(h) == 1 and mqtt_retained(h)
    assert not mqtt_retained(QOS_HEADERS[1])


@given(qos=st.integers(0, 2), user=st.lists(st.tuples(_name.filter(lambda n: not n.startswith("Nmqtt")), _value),
                                            max_size=5),
       corr=st.none() | st.binary(max_size=32), ctype=st.none() | _value.filter(bool),
       fmt=st.none() | st.integers(0, 1), retain=st.booleans(), exp=st.none() | st.integers(0, 2**32 - 1))
def test_header_round_trip(qos: int, user: list[tuple[str, str]], corr: bytes | None, ctype: str | None,
                           fmt: int | None, retain: bool, exp: int | None) -> None:
    h = mqtt_header(qos, user, corr, ctype, fmt, retain, exp)
    assert mqtt_qos(h) == qos and mqtt_retained(h) == retain and expiry(h) == exp
    x = extras(h)
    assert sorted(x.user) == sorted(user)  # grouped by name, as NATS headers are
    assert x.correlation == corr and x.content_type == ctype and x.payload_format == fmt


def test_retained_record_layout() -> None:
    r = Retained("a.b", "a/b", b"v", 3, origin="O1", source="alice")
    hdr, payload = encode_retained(r)
    assert hdr == b"NATS/1.0\r\nNmqtt-RTopic:a/b\r\nNmqtt-RFlags:3\r\nNmqtt-ROrigin:O1\r\nNmqtt-RSource:alice\r\n\r\n"
    assert payload == b"v"
    cleared, empty = encode_retained(Retained("a.b", "a/b", b"", 1))
    assert b"Nmqtt-RFlags:-1" in cleared and decode_retained("a.b", cleared, empty, 2) is None


@given(topic=st.text(min_size=1, max_size=30).filter(lambda t: "\r" not in t and "\n" not in t and t.strip() == t),
       payload=st.binary(min_size=1, max_size=64), qos=st.integers(0, 2))
def test_retained_round_trip(topic: str, payload: bytes, qos: int) -> None:
    r = Retained("s", topic, payload, (qos << 1) | 1, "o", "u")
    hdr, data = encode_retained(r)
    back = decode_retained("s", hdr, data, 9)
    assert back is not None and (back.topic, back.payload, back.qos, back.origin, back.source, back.seq) == (
        topic, payload, qos, "o", "u", 9)


def test_retained_damaged_record_is_no_message() -> None:
    assert decode_retained("s", None, b"x", 1) is None
    assert decode_retained("s", b"NATS/1.0\r\nNmqtt-RTopic:t\r\nNmqtt-RFlags:zz\r\n\r\n", b"x", 1).flags == 0  # type: ignore[union-attr]


@given(cid=st.text(min_size=1, max_size=23), clean=st.booleans(), expiry_=st.integers(-1, 2**32 - 2),
       subs=st.dictionaries(st.text(min_size=1, max_size=10).filter(lambda s: " " not in s),
                            st.tuples(st.integers(0, 2), st.booleans(), st.integers(0, 1000)), max_size=4),
       pubrel=st.sets(st.integers(1, 65535), max_size=4))
def test_session_record_round_trip(cid: str, clean: bool, expiry_: int, subs: dict[str, tuple[int, bool, int]],
                                   pubrel: set[int]) -> None:
    s = Session(cid, "origin", clean=clean, expiry=expiry_, pubrel=pubrel)
    for k, (q, nl, sid) in subs.items():
        s.subs[k] = SubState(q, k.replace(".", "/"), "", nl, False, sid)
    back = Session.decode(s.encode(), 5)
    assert (back.client_id, back.clean, back.expiry, back.pubrel, back.subs, back.seq, back.present) == (
        cid, clean, expiry_, pubrel, s.subs, 5, True)
    assert back.hash == s.hash


def test_session_record_is_nats_servers_json() -> None:
    import json

    s = Session("dev-1", "O")
    s.clean = False
    s.subs["a.>"] = SubState(1)
    s.cons["a.>"] = {"durable_name": "x"}
    doc = json.loads(s.encode())
    assert doc["origin"] == "O" and doc["id"] == "dev-1" and doc["subs"] == {"a.>": 1}
    assert doc["cons"] == {"a.>": {"durable_name": "x"}}
