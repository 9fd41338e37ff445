"""The MQTT codec: the spec's byte examples, round trips of every packet at every level, the spec's reason
code for each violation, and properties over random, cut and damaged input."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridges.mqtt.codec import (
    EMPTY_PROPERTIES,
    MAX_PACKET_SIZE,
    MAX_VARINT,
    WILL_PROPERTIES,
    MQTTDecoder,
    MQTTProtocolError,
    decode_varint,
    encode,
    encode_properties,
    encode_puback,
    encode_publish,
    encode_varint,
)
from bridges.mqtt.packets import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    SubAck,
    Subscribe,
    SubscriptionOptions,
    UnsubAck,
    Unsubscribe,
    Will,
    connack_v3_code,
    connack_v5_code,
)

LEVELS = (3, 4, 5)


def server_decoder(level: int) -> MQTTDecoder:
    """A server-side decoder that has seen its client's CONNECT."""
    d = MQTTDecoder()
    assert d.feed(encode(Connect(protocol_level=level, client_id="c"), level))
    return d


def client_decoder(level: int) -> MQTTDecoder:
    return MQTTDecoder(protocol_level=level, server=False)


def error_of(decoder: MQTTDecoder, data: bytes) -> MQTTProtocolError:
    with pytest.raises(MQTTProtocolError) as info:
        decoder.feed(data)
    return info.value


# ---- the spec's examples, byte for byte ----


# MQTT 5 spec 1.5.5, table 1-1 (the same table as 3.1.1's 2.2.3)
VARINT_TABLE = [
    (0, "00"),
    (127, "7f"),
    (128, "8001"),
    (16_383, "ff7f"),
    (16_384, "808001"),
    (2_097_151, "ffff7f"),
    (2_097_152, "80808001"),
    (268_435_455, "ffffff7f"),
]


@pytest.mark.parametrize(("value", "hexed"), VARINT_TABLE)
def test_variable_byte_integer_table(value: int, hexed: str) -> None:
    raw = bytes.fromhex(hexed)
    assert encode_varint(value) == raw
    assert decode_varint(raw, 0, len(raw)) == (value, len(raw))


def test_variable_byte_integer_bounds() -> None:
    for bad in (-1, MAX_VARINT + 1):
        with pytest.raises(ValueError):
            encode_varint(bad)
    with pytest.raises(MQTTProtocolError) as info:
        decode_varint(b"\xff\xff\xff\xff\x01", 0, 5)
    assert info.value.reason_code == ReasonCode.MALFORMED_PACKET
    with pytest.raises(MQTTProtocolError):
        decode_varint(b"\x80\x80", 0, 2)


@given(st.integers(0, MAX_VARINT))
def test_variable_byte_integer_round_trip(value: int) -> None:
    raw = encode_varint(value)
    assert 1 <= len(raw) <= 4
    assert decode_varint(raw, 0, len(raw)) == (value, len(raw))


def test_connect_311_bytes() -> None:
    # CONNECT, protocol "MQTT" level 4, clean session, keep alive 60, client id "abc"
    raw = bytes.fromhex("100f00044d5154540402003c0003616263")
    assert MQTTDecoder().feed(raw) == [Connect(4, "abc", True, 60)]
    assert encode(Connect(4, "abc", True, 60), 4) == raw


def test_connect_31_bytes() -> None:
    raw = bytes.fromhex("100f00064d514973647003020000000178")
    [c] = MQTTDecoder().feed(raw)
    assert c == Connect(3, "x", True, 0)
    assert c.protocol_name == "MQIsdp"
    assert encode(c, 3) == raw


def test_connect_5_spec_variable_header_example() -> None:
    # the spec's figure 3-6: "MQTT", level 5, flags user+password+clean, keep alive 10, session expiry 10
    header = bytes.fromhex("00044d51545405c2000a0511 0000000a".replace(" ", ""))
    payload = bytes.fromhex("0002 6964 0001 75 0002 7077".replace(" ", ""))
    raw = bytes((0x10, len(header) + len(payload))) + header + payload
    [c] = MQTTDecoder().feed(raw)
    assert c == Connect(5, "id", True, 10, "u", b"pw", None, Properties(session_expiry_interval=10))
    assert encode(c, 5) == raw


def test_fixed_packets_bytes() -> None:
    assert encode(PingReq(), 4) == b"\xc0\x00"
    assert encode(PingResp(), 5) == b"\xd0\x00"
    assert encode(Disconnect(), 4) == b"\xe0\x00"
    assert encode(Disconnect(), 5) == b"\xe0\x00"
    assert encode(Disconnect(ReasonCode.SERVER_SHUTTING_DOWN), 5) == b"\xe0\x01\x8b"
    assert encode(ConnAck(True, 0), 4) == b"\x20\x02\x01\x00"
    assert encode(ConnAck(False, 0), 5) == b"\x20\x03\x00\x00\x00"
    assert encode(PubAck(10), 4) == b"\x40\x02\x00\x0a"
    assert encode(PubRel(10), 4) == b"\x62\x02\x00\x0a"
    assert encode(PubAck(10, ReasonCode.NO_MATCHING_SUBSCRIBERS), 5) == b"\x40\x03\x00\x0a\x10"
    assert encode(SubAck(1, [0, 1, 2, 0x80]), 4) == b"\x90\x06\x00\x01\x00\x01\x02\x80"
    assert encode(UnsubAck(7), 4) == b"\xb0\x02\x00\x07"


def test_publish_bytes() -> None:
    raw = bytes.fromhex("3209 0003 612f62 000a 6869".replace(" ", ""))
    assert server_decoder(4).feed(raw) == [Publish("a/b", b"hi", 1, False, False, 10)]
    assert encode(Publish("a/b", b"hi", 1, packet_id=10), 4) == raw
    # MQTT 5: an empty property block after the packet id
    raw5 = bytes.fromhex("330a 0003 612f62 000a 00 6869".replace(" ", ""))
    assert server_decoder(5).feed(raw5) == [Publish("a/b", b"hi", 1, True, False, 10)]
    assert encode_publish(b"a/b", b"hi", 1, 10, retain=True, properties=EMPTY_PROPERTIES) == raw5


def test_subscribe_bytes() -> None:
    # 3.1.1 spec 3.8.3 example: "a/b" QoS 1, "c/d" QoS 2
    raw = bytes.fromhex("820e 0001 0003612f62 01 0003632f64 02".replace(" ", ""))
    expected = Subscribe(1, [("a/b", SubscriptionOptions(1)), ("c/d", SubscriptionOptions(2))])
    assert server_decoder(4).feed(raw) == [expected]
    assert encode(expected, 4) == raw


def test_short_acks_in_mqtt5_mean_success() -> None:
    # a 2-byte PUBACK / DISCONNECT / AUTH with no reason code is Success [MQTT 5 3.4.2.1, 3.14.2.1, 3.15.2.1]
    d = client_decoder(5)
    assert d.feed(b"\x40\x02\x00\x05\xe0\x00\xf0\x00") == [PubAck(5), Disconnect(), Auth()]
    assert encode(Auth(), 5) == b"\xf0\x00"


def test_connack_return_codes_of_311() -> None:
    for code in range(6):
        v5 = connack_v5_code(code)
        assert v5 is not None
        assert connack_v3_code(v5) == code
        assert client_decoder(4).feed(bytes((0x20, 2, 0, code))) == [ConnAck(False, v5)]
    assert connack_v5_code(6) is None
    assert connack_v3_code(ReasonCode.BANNED) == 5
    assert connack_v3_code(ReasonCode.SERVER_BUSY) == 3
    assert encode(ConnAck(False, ReasonCode.NOT_AUTHORIZED), 4) == b"\x20\x02\x00\x05"
    assert error_of(client_decoder(4), b"\x20\x02\x00\x06").reason_code == ReasonCode.PROTOCOL_ERROR


def test_properties_bytes() -> None:
    props = Properties(
        payload_format_indicator=1,
        message_expiry_interval=60,
        content_type="t",
        user_properties=[("k", "v"), ("k", "w")],
        subscription_identifiers=[1, 200],
    )
    raw = bytes.fromhex("1e 0101 02 0000003c 03 0001 74 0b 01 0b c801 26 0001 6b 0001 76 26 0001 6b 0001 77".replace(" ", ""))
    assert encode_properties(props) == raw
    [p] = client_decoder(5).feed(encode_publish(b"x", b"", properties=raw))
    assert p.properties == props


def test_reason_code_names() -> None:
    assert ReasonCode.PACKET_TOO_LARGE == 0x95
    assert ReasonCode.NORMAL_DISCONNECTION == ReasonCode.SUCCESS == ReasonCode.GRANTED_QOS_0 == 0
    assert ReasonCode.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED == 0xA2


# ---- the spec's reason code for each violation ----


def test_first_packet_must_be_connect() -> None:
    e = error_of(MQTTDecoder(), encode(PingReq(), 4))
    assert e.reason_code == ReasonCode.PROTOCOL_ERROR


def test_second_connect_is_a_protocol_error() -> None:
    c = encode(Connect(4, "a"), 4)
    e = error_of(MQTTDecoder(), c + c)
    assert e.reason_code == ReasonCode.PROTOCOL_ERROR
    assert [type(p) for p in e.packets] == [Connect]


def test_unsupported_protocol_level_is_answered_at_311() -> None:
    raw = bytearray(encode(Connect(4, "a"), 4))
    raw[8] = 6
    e = error_of(MQTTDecoder(), bytes(raw))
    assert e.reason_code == ReasonCode.UNSUPPORTED_PROTOCOL_VERSION
    assert e.in_connect
    assert e.protocol_level == 4
    assert connack_v3_code(e.reason_code) == 1
    raw[4:8] = b"MQTX"
    assert error_of(MQTTDecoder(), bytes(raw)).reason_code == ReasonCode.UNSUPPORTED_PROTOCOL_VERSION


def test_connect_flag_rules() -> None:
    good = bytearray(encode(Connect(4, "a"), 4))
    for flags, rc in [
        (0x03, ReasonCode.MALFORMED_PACKET),  # reserved bit
        (0x12, ReasonCode.MALFORMED_PACKET),  # will QoS without the will flag
        (0x22, ReasonCode.MALFORMED_PACKET),  # will retain without the will flag
        (0x1E, ReasonCode.MALFORMED_PACKET),  # will QoS 3
        (0x42, ReasonCode.MALFORMED_PACKET),  # password without user name in 3.1.1
    ]:
        raw = bytearray(good)
        raw[9] = flags
        e = error_of(MQTTDecoder(), bytes(raw))
        assert e.reason_code == rc, hex(flags)
        assert e.in_connect and e.protocol_level == 4


def test_empty_client_id_needs_clean_session_in_311_only() -> None:
    e = error_of(MQTTDecoder(), encode(Connect(4, "", False), 4))
    assert e.reason_code == ReasonCode.CLIENT_IDENTIFIER_NOT_VALID
    assert MQTTDecoder().feed(encode(Connect(5, "", False), 5)) == [Connect(5, "", False)]


def test_password_without_user_name_is_allowed_in_mqtt5() -> None:
    c = Connect(5, "a", password=b"secret")
    assert MQTTDecoder().feed(encode(c, 5)) == [c]


def test_malformed_remaining_length() -> None:
    e = error_of(server_decoder(4), b"\x30\xff\xff\xff\xff\x01")
    assert e.reason_code == ReasonCode.MALFORMED_PACKET


def test_packet_too_large_is_refused_before_it_arrives() -> None:
    d = MQTTDecoder(max_packet_size=100)
    d.feed(encode(Connect(5, "a"), 5))
    head = encode(Publish("t", b"x" * 200), 5)[:4]
    e = error_of(d, head)
    assert e.reason_code == ReasonCode.PACKET_TOO_LARGE
    assert e.protocol_level == 5
    # exactly the limit is fine
    d = MQTTDecoder(max_packet_size=100)
    d.feed(encode(Connect(4, "a"), 4))
    pkt = encode(Publish("t", b"x" * (100 - 5)), 4)
    assert len(pkt) == 100
    assert len(d.feed(pkt)) == 1


@pytest.mark.parametrize(
    "raw",
    [
        bytes.fromhex("3005 0002 ff61 00".replace(" ", "")),  # invalid UTF-8
        bytes.fromhex("3005 0003 eda080".replace(" ", "")),  # an encoded surrogate
        bytes.fromhex("3005 0003 610062".replace(" ", "")),  # U+0000
        bytes.fromhex("3004 0005 6161".replace(" ", "")),  # topic runs past the packet
        bytes.fromhex("3601 00".replace(" ", "")),  # QoS 3
        bytes.fromhex("3804 0001 6100".replace(" ", "")),  # DUP on QoS 0
        b"\x60\x02\x00\x01",  # PUBREL without its 0b0010 flags
        b"\x80\x06\x00\x01\x00\x01a\x00",  # SUBSCRIBE without its flags
        b"\xc1\x00",  # PINGREQ with a flag
        b"\xc0\x01\x00",  # PINGREQ with a body
        b"\x00\x00",  # reserved type 0
        b"\xf0\x00",  # AUTH below MQTT 5
        b"\x82\x06\x00\x01\x00\x01a\x03",  # subscribe QoS 3
        b"\x82\x06\x00\x01\x00\x01a\x04",  # subscribe option reserved bits (3.1.1)
        b"\x40\x01\x00",  # PUBACK cut short
    ],
)
def test_malformed_packets_311(raw: bytes) -> None:
    e = error_of(server_decoder(4), raw)
    assert e.reason_code == ReasonCode.MALFORMED_PACKET
    assert e.protocol_level == 4


@pytest.mark.parametrize(
    ("raw", "rc"),
    [
        (b"\x32\x05\x00\x01a\x00\x00", ReasonCode.PROTOCOL_ERROR),  # QoS 1 with packet id 0
        (b"\x40\x02\x00\x00", ReasonCode.PROTOCOL_ERROR),  # PUBACK id 0
        (b"\x82\x06\x00\x00\x00\x01a\x00", ReasonCode.PROTOCOL_ERROR),  # SUBSCRIBE id 0
        (b"\x82\x02\x00\x01", ReasonCode.PROTOCOL_ERROR),  # no topic filter
        (b"\xa2\x02\x00\x01", ReasonCode.PROTOCOL_ERROR),  # UNSUBSCRIBE with no topic filter
        (b"\x30\x05\x00\x03a/+", ReasonCode.TOPIC_NAME_INVALID),
        (b"\x30\x03\x00\x01#", ReasonCode.TOPIC_NAME_INVALID),
        (b"\x30\x02\x00\x00", ReasonCode.PROTOCOL_ERROR),  # empty topic
        (b"\x90\x03\x00\x01\x00", ReasonCode.PROTOCOL_ERROR),  # SUBACK from a client
        (b"\x20\x02\x00\x00", ReasonCode.PROTOCOL_ERROR),  # CONNACK from a client
        (b"\xd0\x00", ReasonCode.PROTOCOL_ERROR),  # PINGRESP from a client
    ],
)
def test_protocol_errors_311(raw: bytes, rc: int) -> None:
    assert error_of(server_decoder(4), raw).reason_code == rc


def _pub5(props: bytes, topic: bytes = b"t") -> bytes:
    return encode_publish(topic, b"", 0, properties=props)


@pytest.mark.parametrize(
    ("raw", "rc"),
    [
        (_pub5(b"\x02\x7f\x00"), ReasonCode.MALFORMED_PACKET),  # unknown property
        (_pub5(b"\x05\x11\x00\x00\x00\x01"), ReasonCode.MALFORMED_PACKET),  # session expiry in PUBLISH
        (_pub5(b"\x04\x01\x01\x01\x01"), ReasonCode.PROTOCOL_ERROR),  # duplicate payload format
        (_pub5(b"\x02\x01\x02"), ReasonCode.PROTOCOL_ERROR),  # payload format 2
        (_pub5(b"\x02\x0b\x01"), ReasonCode.PROTOCOL_ERROR),  # a client's PUBLISH with a subscription id
        (_pub5(b"\x03\x23\x00\x00"), ReasonCode.TOPIC_ALIAS_INVALID),
        (_pub5(b"\x00", b""), ReasonCode.PROTOCOL_ERROR),  # empty topic, no alias
        (_pub5(b"\x05\x03\x00\x05ab"), ReasonCode.MALFORMED_PACKET),  # string runs past the properties
        (_pub5(b"\x09\x01\x01"), ReasonCode.MALFORMED_PACKET),  # property length past the packet
        (b"\x30\x03\x00\x01t", ReasonCode.MALFORMED_PACKET),  # no property length at all
        (b"\x82\x07\x00\x01\x00\x00\x01a\x30", ReasonCode.PROTOCOL_ERROR),  # retain handling 3
        (b"\x82\x07\x00\x01\x00\x00\x01a\xc0", ReasonCode.MALFORMED_PACKET),  # options reserved bits
        (b"\x82\x09\x00\x01\x02\x0b\x00\x00\x01a\x00", ReasonCode.PROTOCOL_ERROR),  # subscription id 0
        (b"\x82\x0b\x00\x01\x04\x0b\x01\x0b\x02\x00\x01a\x00", ReasonCode.PROTOCOL_ERROR),  # 2 ids
        (encode(Subscribe(1, [("$share/g/a", SubscriptionOptions(0, no_local=True))]), 5), ReasonCode.PROTOCOL_ERROR),
        (b"\x40\x03\x00\x01\x92", ReasonCode.PROTOCOL_ERROR),  # PUBACK with a PUBREL-only reason code
        (b"\xe0\x01\x01", ReasonCode.PROTOCOL_ERROR),  # unknown DISCONNECT reason
        (b"\xf0\x01\x80", ReasonCode.PROTOCOL_ERROR),  # AUTH with a failure code
    ],
)
def test_violations_mqtt5(raw: bytes, rc: int) -> None:
    e = error_of(server_decoder(5), raw)
    assert e.reason_code == rc, e
    assert e.protocol_level == 5


def test_empty_topic_with_an_alias_is_fine_in_mqtt5() -> None:
    props = Properties(topic_alias=3)
    p = Publish("", b"x", properties=props)
    assert server_decoder(5).feed(encode(p, 5)) == [p]


def test_user_properties_may_repeat_and_keep_their_order() -> None:
    props = Properties(user_properties=[("a", "1"), ("b", "2"), ("a", "3")])
    p = Publish("t", b"", properties=props)
    assert server_decoder(5).feed(encode(p, 5)) == [p]


def test_encoder_refuses_a_property_the_packet_cannot_carry() -> None:
    with pytest.raises(ValueError):
        encode(PubAck(1, 0, Properties(topic_alias=1)), 5)


def test_decoder_is_dead_after_an_error_and_keeps_earlier_packets() -> None:
    d = server_decoder(4)
    good = encode(PingReq(), 4)
    e = error_of(d, good + good + b"\x36\x00")
    assert e.packets == [PingReq(), PingReq()]
    with pytest.raises(MQTTProtocolError):
        d.feed(good)


def test_server_disconnect_in_311_is_a_protocol_error() -> None:
    assert error_of(client_decoder(4), b"\xe0\x00").reason_code == ReasonCode.PROTOCOL_ERROR


def test_client_side_decoder_needs_a_level() -> None:
    with pytest.raises(ValueError):
        MQTTDecoder(server=False)


# ---- strategies: every packet, valid at its level, in the form the decoder gives back ----

_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
_topic = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00+#"), min_size=1, max_size=12)
_bin = st.binary(max_size=16)
_u16 = st.integers(0, 0xFFFF)
_u32 = st.integers(0, 0xFFFFFFFF)
_bit = st.integers(0, 1)

# Properties attribute -> value strategy
_PROPERTY_VALUES = {
    "payload_format_indicator": _bit,
    "message_expiry_interval": _u32,
    "content_type": _text,
    "response_topic": _topic,
    "correlation_data": _bin,
    "session_expiry_interval": _u32,
    "assigned_client_identifier": _text,
    "server_keep_alive": _u16,
    "authentication_method": _text,
    "authentication_data": _bin,
    "request_problem_information": _bit,
    "will_delay_interval": _u32,
    "request_response_information": _bit,
    "response_information": _text,
    "server_reference": _text,
    "reason_string": _text,
    "receive_maximum": st.integers(1, 0xFFFF),
    "topic_alias_maximum": _u16,
    "topic_alias": st.integers(1, 0xFFFF),
    "maximum_qos": _bit,
    "retain_available": _bit,
    "maximum_packet_size": st.integers(1, 0xFFFFFFFF),
    "wildcard_subscription_available": _bit,
    "subscription_identifier_available": _bit,
    "shared_subscription_available": _bit,
}
_ALLOWED_ATTRS = {
    PacketType.CONNECT: [
        "session_expiry_interval",
        "authentication_method",
        "authentication_data",
        "request_problem_information",
        "request_response_information",
        "receive_maximum",
        "topic_alias_maximum",
        "maximum_packet_size",
    ],
    PacketType.CONNACK: [
        "session_expiry_interval",
        "assigned_client_identifier",
        "server_keep_alive",
        "authentication_method",
        "authentication_data",
        "response_information",
        "server_reference",
        "reason_string",
        "receive_maximum",
        "topic_alias_maximum",
        "maximum_qos",
        "retain_available",
        "maximum_packet_size",
        "wildcard_subscription_available",
        "subscription_identifier_available",
        "shared_subscription_available",
    ],
    PacketType.PUBLISH: [
        "payload_format_indicator",
        "message_expiry_interval",
        "content_type",
        "response_topic",
        "correlation_data",
        "topic_alias",
    ],
    WILL_PROPERTIES: [
        "payload_format_indicator",
        "message_expiry_interval",
        "content_type",
        "response_topic",
        "correlation_data",
        "will_delay_interval",
    ],
    PacketType.DISCONNECT: ["session_expiry_interval", "server_reference", "reason_string"],
    PacketType.AUTH: ["authentication_method", "authentication_data", "reason_string"],
    "ack": ["reason_string"],
    PacketType.SUBSCRIBE: [],
    PacketType.UNSUBSCRIBE: [],
}


@st.composite
def properties(draw: st.DrawFn, kind: object, subscription_ids: int = 0) -> Properties | None:
    """None or a non-empty Properties (an empty block decodes as None)."""
    if draw(st.booleans()):
        return None
    kwargs = {}
    for attr in _ALLOWED_ATTRS[kind]:
        if draw(st.booleans()):
            kwargs[attr] = draw(_PROPERTY_VALUES[attr])
    kwargs["user_properties"] = draw(st.lists(st.tuples(_text, _text), max_size=2))
    if subscription_ids:
        kwargs["subscription_identifiers"] = draw(st.lists(st.integers(1, MAX_VARINT), max_size=subscription_ids))
    props = Properties(**kwargs)
    return None if props.is_empty() else props


def _pid() -> st.SearchStrategy[int]:
    return st.integers(1, 0xFFFF)


@st.composite
def publishes(draw: st.DrawFn, level: int, from_server: bool) -> Publish:
    qos = draw(st.integers(0, 2))
    props = draw(properties(PacketType.PUBLISH, 3 if from_server else 0)) if level == 5 else None
    topic = draw(_topic)
    return Publish(
        topic,
        draw(st.binary(max_size=300)),
        qos,
        draw(st.booleans()),
        draw(st.booleans()) if qos else False,
        draw(_pid()) if qos else 0,
        props,
    )


@st.composite
def connects(draw: st.DrawFn, level: int) -> Connect:
    will = None
    if draw(st.booleans()):
        wprops = draw(properties(WILL_PROPERTIES)) if level == 5 else None
        will = Will(draw(_topic), draw(_bin), draw(st.integers(0, 2)), draw(st.booleans()), wprops)
    username = draw(st.none() | _text)
    password = draw(st.none() | _bin) if (username is not None or level == 5) else None
    client_id = draw(_text)
    clean = draw(st.booleans()) or (not client_id and level != 5)
    props = draw(properties(PacketType.CONNECT)) if level == 5 else None
    return Connect(level, client_id, clean, draw(_u16), username, password, will, props)


def _code(level: int, codes: list[int]) -> st.SearchStrategy[int]:
    return st.sampled_from(codes) if level == 5 else st.just(0)


@st.composite
def acks(draw: st.DrawFn, level: int) -> Packet:
    cls = draw(st.sampled_from([PubAck, PubRec, PubRel, PubComp]))
    codes = [0, 0x92] if cls in (PubRel, PubComp) else [0, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99]
    props = draw(properties("ack")) if level == 5 else None
    return cls(draw(_pid()), draw(_code(level, codes)), props)


@st.composite
def subscribes(draw: st.DrawFn, level: int) -> Subscribe:
    subs = []
    for _ in range(draw(st.integers(1, 3))):
        topic_filter = draw(_text.filter(lambda t: not t.startswith("$share/")))
        if level == 5:
            opts = SubscriptionOptions(draw(st.integers(0, 2)), draw(st.booleans()), draw(st.booleans()), draw(st.integers(0, 2)))
        else:
            opts = SubscriptionOptions(draw(st.integers(0, 2)))
        subs.append((topic_filter, opts))
    props = draw(properties(PacketType.SUBSCRIBE, 1)) if level == 5 else None
    return Subscribe(draw(_pid()), subs, props)


@st.composite
def client_packets(draw: st.DrawFn, level: int) -> Packet:
    choices: list[st.SearchStrategy[Packet]] = [
        publishes(level, False),
        acks(level),
        subscribes(level),
        st.builds(
            Unsubscribe,
            _pid(),
            st.lists(_text, min_size=1, max_size=3),
            properties(PacketType.UNSUBSCRIBE) if level == 5 else st.none(),
        ),
        st.just(PingReq()),
    ]
    if level == 5:
        choices.append(
            st.builds(
                Disconnect,
                st.sampled_from([0, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x8F, 0x90, 0x93, 0x95, 0x99]),
                properties(PacketType.DISCONNECT),
            )
        )
        choices.append(st.builds(Auth, st.sampled_from([0, 0x18, 0x19]), properties(PacketType.AUTH)))
    return draw(st.one_of(choices))


@st.composite
def server_packets(draw: st.DrawFn, level: int) -> Packet:
    v3_connack = [0, 0x84, 0x85, 0x88, 0x86, 0x87]
    connack_codes = v3_connack + [0x80, 0x81, 0x82, 0x83, 0x89, 0x8A, 0x8C, 0x90, 0x95, 0x97, 0x9F]
    suback_codes = [0, 1, 2, 0x80] + ([0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2] if level == 5 else [])
    code = draw(st.sampled_from(connack_codes if level == 5 else v3_connack))
    choices: list[st.SearchStrategy[Packet]] = [
        st.builds(
            ConnAck,
            st.just(False) if code else st.booleans(),
            st.just(code),
            properties(PacketType.CONNACK) if level == 5 else st.none(),
        ),
        publishes(level, True),
        acks(level),
        st.builds(
            SubAck,
            _pid(),
            st.lists(st.sampled_from(suback_codes), min_size=1, max_size=4),
            properties("ack") if level == 5 else st.none(),
        ),
        st.builds(
            UnsubAck,
            _pid(),
            st.lists(st.sampled_from([0, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91]), min_size=1, max_size=3)
            if level == 5
            else st.just([]),
            properties("ack") if level == 5 else st.none(),
        ),
        st.just(PingResp()),
    ]
    if level == 5:
        choices.append(st.builds(Disconnect, st.sampled_from([0, 0x80, 0x8B, 0x8E, 0x9C]), properties(PacketType.DISCONNECT)))
        choices.append(st.builds(Auth, st.sampled_from([0, 0x18]), properties(PacketType.AUTH)))
    return draw(st.one_of(choices))


@st.composite
def client_streams(draw: st.DrawFn) -> tuple[int, list[Packet]]:
    """A client's packets from its CONNECT on."""
    level = draw(st.sampled_from(LEVELS))
    return level, [draw(connects(level)), *draw(st.lists(client_packets(level), max_size=6))]


@st.composite
def server_streams(draw: st.DrawFn) -> tuple[int, list[Packet]]:
    level = draw(st.sampled_from(LEVELS))
    return level, draw(st.lists(server_packets(level), min_size=1, max_size=6))


def _decoder_for(side: str, level: int) -> MQTTDecoder:
    return MQTTDecoder() if side == "client" else client_decoder(level)


_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- properties ----


@_SETTINGS
@given(st.one_of(client_streams().map(lambda s: ("client", s)), server_streams().map(lambda s: ("server", s))))
def test_encode_decode_identity(case: tuple[str, tuple[int, list[Packet]]]) -> None:
    side, (level, packets) = case
    raw = b"".join(encode(p, level) for p in packets)
    assert _decoder_for(side, level).feed(raw) == packets


@_SETTINGS
@given(st.one_of(client_streams().map(lambda s: ("client", s)), server_streams().map(lambda s: ("server", s))), st.data())
def test_any_split_gives_the_same_packets(case: tuple[str, tuple[int, list[Packet]]], data: st.DataObject) -> None:
    side, (level, packets) = case
    raw = b"".join(encode(p, level) for p in packets)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=8)))
    d = _decoder_for(side, level)
    got: list[Packet] = []
    prev = 0
    for cut in [*cuts, len(raw)]:
        got.extend(d.feed(memoryview(raw)[prev:cut]))
        prev = cut
    assert got == packets


@settings(max_examples=60, deadline=None)
@given(st.one_of(client_streams().map(lambda s: ("client", s)), server_streams().map(lambda s: ("server", s))))
def test_every_truncation_returns_fewer_packets(case: tuple[str, tuple[int, list[Packet]]]) -> None:
    side, (level, packets) = case
    raw = b"".join(encode(p, level) for p in packets)
    for cut in range(len(raw)):
        got = _decoder_for(side, level).feed(raw[:cut])
        assert got == packets[: len(got)]
        assert len(got) < len(packets)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200), st.sampled_from(LEVELS), st.booleans())
def test_random_bytes_raise_only_protocol_errors(raw: bytes, level: int, after_connect: bool) -> None:
    d = MQTTDecoder(max_packet_size=1000)
    try:
        if after_connect:
            d.feed(encode(Connect(level, "c"), level))
        d.feed(raw)
    except MQTTProtocolError:
        pass
    try:
        client_decoder(level).feed(raw)
    except MQTTProtocolError:
        pass


@settings(max_examples=300, deadline=None)
@given(client_streams(), st.data())
def test_damaged_packets_raise_only_protocol_errors(case: tuple[int, list[Packet]], data: st.DataObject) -> None:
    level, packets = case
    raw = bytearray(b"".join(encode(p, level) for p in packets))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        MQTTDecoder().feed(bytes(raw))
    except MQTTProtocolError as e:
        assert 0x80 <= e.reason_code <= 0xA2


def test_max_packet_size_default_is_the_protocol_maximum() -> None:
    assert MAX_PACKET_SIZE == 268_435_460


@pytest.mark.parametrize(
    ("raw", "rc"),
    [
        (b"\x36\x05\x00\x03a/b", ReasonCode.MALFORMED_PACKET),  # QoS 3
        (b"\x32\x07\x00\x03a/b\x00\x00", ReasonCode.PROTOCOL_ERROR),  # packet id 0
        (b"\x38\x05\x00\x03a/b", ReasonCode.MALFORMED_PACKET),  # DUP on QoS 0
        (b"\x32\x06\x00\x03a/b\x00", ReasonCode.MALFORMED_PACKET),  # packet id cut short
        (b"\x30\x04\x00\x03a/", ReasonCode.MALFORMED_PACKET),  # topic runs past the packet
    ],
)
def test_a_topic_seen_before_gets_the_same_checks(raw: bytes, rc: int) -> None:
    d = server_decoder(4)
    assert d.feed(encode(Publish("a/b", b"x"), 4) * 2) == [Publish("a/b", b"x")] * 2
    assert error_of(d, raw).reason_code == rc


def test_a_topic_seen_before_with_properties_in_mqtt5() -> None:
    d = server_decoder(5)
    plain = Publish("a/b", b"1", 1, packet_id=1)
    with_props = Publish("a/b", b"2", 1, packet_id=2, properties=Properties(user_properties=[("k", "v")]))
    assert d.feed(encode(plain, 5) + encode(with_props, 5) + encode(plain, 5)) == [plain, with_props, plain]
    assert error_of(d, b"\x30\x04\x00\x03a/b").reason_code == ReasonCode.MALFORMED_PACKET  # no property length


def test_dup_is_left_out_of_a_qos_0_publish() -> None:
    # a resent message downgraded to QoS 0 must not carry DUP [MQTT-3.3.1-2]
    raw = encode(Publish("t", b"x", 0, dup=True), 4)
    assert raw[0] == 0x30
    assert server_decoder(4).feed(raw) == [Publish("t", b"x")]


@given(st.integers(1, 65535), st.sampled_from([3, 4, 5]))
def test_encode_puback_is_the_generic_encoding(pi: int, level: int) -> None:
    """The hot path's PUBACK bytes are what encode() makes of PubAck(pi), and a broker's decoder reads them."""
    data = encode_puback(pi)
    assert data == encode(PubAck(pi), level)
    dec = MQTTDecoder(protocol_level=level, server=False)
    [p] = dec.feed(data)
    assert isinstance(p, PubAck) and p.packet_id == pi and p.reason_code == 0
