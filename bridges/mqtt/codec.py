"""Sans-I/O MQTT 3.1 / 3.1.1 / 5.0 codec: bytes in, packets out; packets in, bytes out.

`MQTTDecoder.feed` buffers partial packets and returns the complete ones; any violation raises
`MQTTProtocolError` carrying the spec's reason code (what a server puts in its CONNACK or
DISCONNECT), the level to answer at, and the packets decoded before the fault in the same feed.
The decoder is made for one side of a connection: `server=True` (the default) decodes what clients
send and insists the first packet is CONNECT, which fixes the protocol level; `server=False`
decodes what servers send at a level the caller gives.

PUBLISH is the hot path: it is decoded inline in the feed loop and `encode_publish` builds one from
bytes without a Publish object; the other packets go through small per-type functions.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from bridges.mqtt.packets import (
    MQTT_5,
    MQTT_31,
    PROTOCOL_LEVELS,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    PingReq,
    PingResp,
    Properties,
    PropertyId,
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

MAX_REMAINING_LENGTH = 268_435_455  # the largest 4-byte variable byte integer
MAX_PACKET_SIZE = 1 + 4 + MAX_REMAINING_LENGTH
MAX_VARINT = MAX_REMAINING_LENGTH
EMPTY_PROPERTIES = b"\x00"  # an MQTT 5 property block with nothing in it

_MALFORMED = ReasonCode.MALFORMED_PACKET
_PROTOCOL = ReasonCode.PROTOCOL_ERROR


class MQTTProtocolError(Exception):
    """A packet breaks the spec. `reason_code` is the spec's code for it.

    `protocol_level` is the level the peer should be answered at (for an unsupported level in CONNECT it
    is 3.1.1, whose CONNACK every client reads); `packets` holds what the same feed decoded before the fault.
    """

    def __init__(
        self,
        reason_code: int,
        msg: str,
        *,
        packet_type: int | None = None,
        protocol_level: int | None = None,
    ) -> None:
        super().__init__(msg)
        self.reason_code = int(reason_code)
        self.packet_type = packet_type
        self.protocol_level = protocol_level
        self.packets: list[Packet] = []

    @property
    def in_connect(self) -> bool:
        """True when the fault is in the CONNECT packet: the answer is a CONNACK with the reason code."""
        return self.packet_type == PacketType.CONNECT


# ---- variable byte integers ----


def encode_varint(n: int) -> bytes:
    """The spec's variable byte integer (1..4 bytes, 0..268435455)."""
    if 0 <= n < 128:
        return _SMALL_VARINTS[n]
    if n > MAX_VARINT or n < 0:
        raise ValueError(f"variable byte integer out of range: {n}")
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


_SMALL_VARINTS = [bytes((i,)) for i in range(128)]


def decode_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it); MQTTProtocolError for a 5th byte or a varint cut short by `end`."""
    value = 0
    shift = 0
    for _ in range(4):
        if pos >= end:
            raise MQTTProtocolError(_MALFORMED, "variable byte integer runs past the packet")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
    raise MQTTProtocolError(_MALFORMED, "malformed variable byte integer")


# ---- field readers over a packet body (buf[pos:end]) ----


class _Body:
    """A cursor over one packet's body; every read past the end is a malformed packet."""

    __slots__ = ("buf", "pos", "end", "ptype")

    def __init__(self, buf: bytes, pos: int, end: int, ptype: int) -> None:
        self.buf = buf
        self.pos = pos
        self.end = end
        self.ptype = ptype

    def fail(self, rc: int, msg: str) -> MQTTProtocolError:
        return MQTTProtocolError(rc, msg, packet_type=self.ptype)

    def more(self) -> bool:
        return self.pos < self.end

    def u8(self) -> int:
        if self.pos >= self.end:
            raise self.fail(_MALFORMED, "packet shorter than its fields")
        v = self.buf[self.pos]
        self.pos += 1
        return v

    def u16(self) -> int:
        p = self.pos
        if p + 2 > self.end:
            raise self.fail(_MALFORMED, "packet shorter than its fields")
        self.pos = p + 2
        return (self.buf[p] << 8) | self.buf[p + 1]

    def u32(self) -> int:
        p = self.pos
        if p + 4 > self.end:
            raise self.fail(_MALFORMED, "packet shorter than its fields")
        self.pos = p + 4
        return int.from_bytes(self.buf[p : p + 4], "big")

    def varint(self) -> int:
        try:
            v, self.pos = decode_varint(self.buf, self.pos, self.end)
        except MQTTProtocolError as e:
            e.packet_type = self.ptype
            raise
        return v

    def binary(self) -> bytes:
        n = self.u16()
        p = self.pos
        if p + n > self.end:
            raise self.fail(_MALFORMED, "length-prefixed field runs past the packet")
        self.pos = p + n
        return self.buf[p : p + n]

    def string(self, what: str) -> str:
        raw = self.binary()
        try:
            s = raw.decode()
        except UnicodeDecodeError:
            raise self.fail(_MALFORMED, f"invalid UTF-8 in {what}") from None
        if "\x00" in s:
            raise self.fail(_MALFORMED, f"U+0000 in {what}")
        return s

    def rest(self) -> bytes:
        p = self.pos
        self.pos = self.end
        return self.buf[p : self.end]

    def done(self) -> None:
        if self.pos != self.end:
            raise self.fail(_MALFORMED, "bytes left over at the end of the packet")


# ---- MQTT 5 properties ----

_BYTE, _U16, _U32, _VARINT, _STR, _BIN, _PAIR = range(7)
# a pseudo packet type for the will properties inside CONNECT
WILL_PROPERTIES = 0

_P = PropertyId
_T = PacketType
# property id -> (value kind, Properties attribute)
_PROPERTY_KINDS: dict[int, tuple[int, str]] = {
    _P.PAYLOAD_FORMAT_INDICATOR: (_BYTE, "payload_format_indicator"),
    _P.MESSAGE_EXPIRY_INTERVAL: (_U32, "message_expiry_interval"),
    _P.CONTENT_TYPE: (_STR, "content_type"),
    _P.RESPONSE_TOPIC: (_STR, "response_topic"),
    _P.CORRELATION_DATA: (_BIN, "correlation_data"),
    _P.SUBSCRIPTION_IDENTIFIER: (_VARINT, "subscription_identifiers"),
    _P.SESSION_EXPIRY_INTERVAL: (_U32, "session_expiry_interval"),
    _P.ASSIGNED_CLIENT_IDENTIFIER: (_STR, "assigned_client_identifier"),
    _P.SERVER_KEEP_ALIVE: (_U16, "server_keep_alive"),
    _P.AUTHENTICATION_METHOD: (_STR, "authentication_method"),
    _P.AUTHENTICATION_DATA: (_BIN, "authentication_data"),
    _P.REQUEST_PROBLEM_INFORMATION: (_BYTE, "request_problem_information"),
    _P.WILL_DELAY_INTERVAL: (_U32, "will_delay_interval"),
    _P.REQUEST_RESPONSE_INFORMATION: (_BYTE, "request_response_information"),
    _P.RESPONSE_INFORMATION: (_STR, "response_information"),
    _P.SERVER_REFERENCE: (_STR, "server_reference"),
    _P.REASON_STRING: (_STR, "reason_string"),
    _P.RECEIVE_MAXIMUM: (_U16, "receive_maximum"),
    _P.TOPIC_ALIAS_MAXIMUM: (_U16, "topic_alias_maximum"),
    _P.TOPIC_ALIAS: (_U16, "topic_alias"),
    _P.MAXIMUM_QOS: (_BYTE, "maximum_qos"),
    _P.RETAIN_AVAILABLE: (_BYTE, "retain_available"),
    _P.USER_PROPERTY: (_PAIR, "user_properties"),
    _P.MAXIMUM_PACKET_SIZE: (_U32, "maximum_packet_size"),
    _P.WILDCARD_SUBSCRIPTION_AVAILABLE: (_BYTE, "wildcard_subscription_available"),
    _P.SUBSCRIPTION_IDENTIFIER_AVAILABLE: (_BYTE, "subscription_identifier_available"),
    _P.SHARED_SUBSCRIPTION_AVAILABLE: (_BYTE, "shared_subscription_available"),
}
# attribute -> property id, in id order (the order the encoder writes them)
_ATTR_IDS: list[tuple[str, int, int]] = [(name, pid, kind) for pid, (kind, name) in sorted(_PROPERTY_KINDS.items())]

_ACKS = (_T.PUBACK, _T.PUBREC, _T.PUBREL, _T.PUBCOMP)
_MESSAGE = (_T.PUBLISH, WILL_PROPERTIES)
# the spec's table 2.2.2.2: which packet may carry which property
_WHERE: dict[int, tuple[int, ...]] = {
    _P.PAYLOAD_FORMAT_INDICATOR: _MESSAGE,
    _P.MESSAGE_EXPIRY_INTERVAL: _MESSAGE,
    _P.CONTENT_TYPE: _MESSAGE,
    _P.RESPONSE_TOPIC: _MESSAGE,
    _P.CORRELATION_DATA: _MESSAGE,
    _P.SUBSCRIPTION_IDENTIFIER: (_T.PUBLISH, _T.SUBSCRIBE),
    _P.SESSION_EXPIRY_INTERVAL: (_T.CONNECT, _T.CONNACK, _T.DISCONNECT),
    _P.ASSIGNED_CLIENT_IDENTIFIER: (_T.CONNACK,),
    _P.SERVER_KEEP_ALIVE: (_T.CONNACK,),
    _P.AUTHENTICATION_METHOD: (_T.CONNECT, _T.CONNACK, _T.AUTH),
    _P.AUTHENTICATION_DATA: (_T.CONNECT, _T.CONNACK, _T.AUTH),
    _P.REQUEST_PROBLEM_INFORMATION: (_T.CONNECT,),
    _P.WILL_DELAY_INTERVAL: (WILL_PROPERTIES,),
    _P.REQUEST_RESPONSE_INFORMATION: (_T.CONNECT,),
    _P.RESPONSE_INFORMATION: (_T.CONNACK,),
    _P.SERVER_REFERENCE: (_T.CONNACK, _T.DISCONNECT),
    _P.REASON_STRING: (_T.CONNACK, *_ACKS, _T.SUBACK, _T.UNSUBACK, _T.DISCONNECT, _T.AUTH),
    _P.RECEIVE_MAXIMUM: (_T.CONNECT, _T.CONNACK),
    _P.TOPIC_ALIAS_MAXIMUM: (_T.CONNECT, _T.CONNACK),
    _P.TOPIC_ALIAS: (_T.PUBLISH,),
    _P.MAXIMUM_QOS: (_T.CONNACK,),
    _P.RETAIN_AVAILABLE: (_T.CONNACK,),
    _P.USER_PROPERTY: (
        _T.CONNECT,
        _T.CONNACK,
        *_MESSAGE,
        *_ACKS,
        _T.SUBSCRIBE,
        _T.SUBACK,
        _T.UNSUBSCRIBE,
        _T.UNSUBACK,
        _T.DISCONNECT,
        _T.AUTH,
    ),
    _P.MAXIMUM_PACKET_SIZE: (_T.CONNECT, _T.CONNACK),
    _P.WILDCARD_SUBSCRIPTION_AVAILABLE: (_T.CONNACK,),
    _P.SUBSCRIPTION_IDENTIFIER_AVAILABLE: (_T.CONNACK,),
    _P.SHARED_SUBSCRIPTION_AVAILABLE: (_T.CONNACK,),
}
_ALLOWED: dict[int, frozenset[int]] = {
    t: frozenset(pid for pid, where in _WHERE.items() if t in where) for t in (WILL_PROPERTIES, *range(1, 16))
}
# byte properties whose only values are 0 and 1
_BOOLEAN_BYTES = frozenset(
    {
        _P.PAYLOAD_FORMAT_INDICATOR,
        _P.REQUEST_PROBLEM_INFORMATION,
        _P.REQUEST_RESPONSE_INFORMATION,
        _P.MAXIMUM_QOS,
        _P.RETAIN_AVAILABLE,
        _P.WILDCARD_SUBSCRIPTION_AVAILABLE,
        _P.SUBSCRIPTION_IDENTIFIER_AVAILABLE,
        _P.SHARED_SUBSCRIPTION_AVAILABLE,
    }
)
# properties where 0 is a protocol error
_NONZERO = frozenset({_P.RECEIVE_MAXIMUM, _P.MAXIMUM_PACKET_SIZE, _P.SUBSCRIPTION_IDENTIFIER})


_USER_PROPERTY = int(_P.USER_PROPERTY)
_SUBSCRIPTION_IDENTIFIER = int(_P.SUBSCRIPTION_IDENTIFIER)
_TOPIC_ALIAS = int(_P.TOPIC_ALIAS)
_PUBLISH = int(_T.PUBLISH)
_SUBSCRIBE = int(_T.SUBSCRIBE)


def _utf8(r: _Body, raw: bytes, pid: int) -> str:
    try:
        s = raw.decode()
    except UnicodeDecodeError:
        raise r.fail(_MALFORMED, f"invalid UTF-8 in {PropertyId(pid).name}") from None
    if "\x00" in s:
        raise r.fail(_MALFORMED, f"U+0000 in {PropertyId(pid).name}")
    return s


def _read_properties(r: _Body, ptype: int, from_server: bool) -> Properties | None:
    """An MQTT 5 property block; None when it is empty (the common case: no object made)."""
    n = r.varint()
    if n == 0:
        return None
    buf = r.buf
    p = r.pos
    end = p + n
    if end > r.end:
        raise r.fail(_MALFORMED, "property length runs past the packet")
    allowed = _ALLOWED[ptype]
    kinds = _PROPERTY_KINDS
    props = Properties()
    seen = 0  # a bit per property id
    value: Any
    while p < end:
        pid = buf[p]
        p += 1
        spec = kinds.get(pid)
        if spec is None:
            raise r.fail(_MALFORMED, f"unknown property identifier 0x{pid:02x}")
        if pid not in allowed:
            raise r.fail(_MALFORMED, f"property {PropertyId(pid).name} not allowed in {_name(ptype)}")
        kind, attr = spec
        if kind == _STR or kind == _BIN or kind == _PAIR:
            if p + 2 > end:
                raise r.fail(_MALFORMED, "property runs past the property block")
            q = p + 2 + ((buf[p] << 8) | buf[p + 1])
            if q > end:
                raise r.fail(_MALFORMED, "property runs past the property block")
            value = buf[p + 2 : q]
            p = q
            if kind == _STR:
                value = _utf8(r, value, pid)
            elif kind == _PAIR:
                if p + 2 > end:
                    raise r.fail(_MALFORMED, "property runs past the property block")
                q = p + 2 + ((buf[p] << 8) | buf[p + 1])
                if q > end:
                    raise r.fail(_MALFORMED, "property runs past the property block")
                props.user_properties.append((_utf8(r, value, pid), _utf8(r, buf[p + 2 : q], pid)))
                p = q
                continue
        elif kind == _BYTE:
            if p >= end:
                raise r.fail(_MALFORMED, "property runs past the property block")
            value = buf[p]
            p += 1
            if value > 1 and pid in _BOOLEAN_BYTES:
                raise r.fail(_PROTOCOL, f"{PropertyId(pid).name} must be 0 or 1, got {value}")
        elif kind == _U16 or kind == _U32:
            q = p + (2 if kind == _U16 else 4)
            if q > end:
                raise r.fail(_MALFORMED, "property runs past the property block")
            value = int.from_bytes(buf[p:q], "big")
            p = q
        else:
            try:
                value, p = decode_varint(buf, p, end)
            except MQTTProtocolError as e:
                e.packet_type = r.ptype
                raise
        if not value and (pid in _NONZERO or pid == _TOPIC_ALIAS):
            if pid == _TOPIC_ALIAS:
                raise r.fail(ReasonCode.TOPIC_ALIAS_INVALID, "topic alias must not be 0")
            raise r.fail(_PROTOCOL, f"{PropertyId(pid).name} must not be 0")
        bit = 1 << pid
        if pid == _SUBSCRIPTION_IDENTIFIER:
            if ptype == _PUBLISH and not from_server:
                # [MQTT-3.3.4-6]: only a server puts subscription identifiers in a PUBLISH
                raise r.fail(_PROTOCOL, "a client's PUBLISH must not carry a subscription identifier")
            if ptype == _SUBSCRIBE and seen & bit:
                raise r.fail(_PROTOCOL, "duplicate property SUBSCRIPTION_IDENTIFIER")
            props.subscription_identifiers.append(value)
        else:
            if seen & bit:
                raise r.fail(_PROTOCOL, f"duplicate property {PropertyId(pid).name}")
            setattr(props, attr, value)
        seen |= bit
    r.pos = end
    return props


def _name(ptype: int) -> str:
    return "will properties" if ptype == WILL_PROPERTIES else PacketType(ptype).name


_H = struct.Struct(">H").pack
_BBH = struct.Struct(">BBH").pack


def _u16(n: int) -> bytes:
    return _H(n)


def _str(s: str) -> bytes:
    b = s.encode()
    return len(b).to_bytes(2, "big") + b


def _bin(b: bytes) -> bytes:
    return len(b).to_bytes(2, "big") + b


def encode_properties(props: Properties | None, ptype: int = PacketType.PUBLISH) -> bytes:
    """An MQTT 5 property block with its length; ValueError for a property `ptype` may not carry."""
    if props is None:
        return EMPTY_PROPERTIES
    allowed = _ALLOWED[ptype]
    out: list[bytes] = []
    for attr, pid, kind in _ATTR_IDS:
        value = getattr(props, attr)
        if value is None or (isinstance(value, list) and not value):
            continue
        if pid not in allowed:
            raise ValueError(f"property {attr} not allowed in {_name(ptype)}")
        if kind == _PAIR:
            for k, v in value:
                out.append(b"\x26" + _str(k) + _str(v))
            continue
        if kind == _VARINT:
            for v in value:
                out.append(b"\x0b" + encode_varint(v))
            continue
        head = bytes((pid,))
        if kind == _BYTE:
            out.append(head + bytes((value,)))
        elif kind == _U16:
            out.append(head + _u16(value))
        elif kind == _U32:
            out.append(head + value.to_bytes(4, "big"))
        elif kind == _STR:
            out.append(head + _str(value))
        else:
            out.append(head + _bin(value))
    body = b"".join(out)
    return encode_varint(len(body)) + body


# ---- decoding ----

# fixed-header flags every packet but PUBLISH must carry [MQTT-2.1.3-1]
_FLAGS = {t: 0 for t in range(1, 16)}
_FLAGS[_T.PUBREL] = _FLAGS[_T.SUBSCRIBE] = _FLAGS[_T.UNSUBSCRIBE] = 2
# what each side may receive
_FROM_CLIENT = frozenset(
    {
        _T.CONNECT,
        _T.PUBLISH,
        _T.PUBACK,
        _T.PUBREC,
        _T.PUBREL,
        _T.PUBCOMP,
        _T.SUBSCRIBE,
        _T.UNSUBSCRIBE,
        _T.PINGREQ,
        _T.DISCONNECT,
        _T.AUTH,
    }
)
_FROM_SERVER = frozenset(
    {
        _T.CONNACK,
        _T.PUBLISH,
        _T.PUBACK,
        _T.PUBREC,
        _T.PUBREL,
        _T.PUBCOMP,
        _T.SUBACK,
        _T.UNSUBACK,
        _T.PINGRESP,
        _T.DISCONNECT,
        _T.AUTH,
    }
)
# MQTT 5 reason codes each packet may carry (spec 3.x.2.1 tables)
_PUBACK_CODES = frozenset({0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99})
_PUBREL_CODES = frozenset({0x00, 0x92})
_ACK_CODES = {_T.PUBACK: _PUBACK_CODES, _T.PUBREC: _PUBACK_CODES, _T.PUBREL: _PUBREL_CODES, _T.PUBCOMP: _PUBREL_CODES}
_CONNACK_CODES = frozenset(
    {0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8C}
    | {0x90, 0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F}
)
_SUBACK_CODES = frozenset({0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2})
_UNSUBACK_CODES = frozenset({0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91})
_DISCONNECT_CODES = frozenset(
    {0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x90}
    | {0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F, 0xA0, 0xA1, 0xA2}
)
_AUTH_CODES = frozenset({0x00, 0x18, 0x19})


def _check_code(r: _Body, code: int, allowed: frozenset[int]) -> int:
    if code not in allowed:
        raise r.fail(_PROTOCOL, f"reason code 0x{code:02x} not valid in {_name(r.ptype)}")
    return code


def _check_topic_name(r: _Body, topic: str) -> None:
    if "+" in topic or "#" in topic:
        raise r.fail(ReasonCode.TOPIC_NAME_INVALID, f"wildcards not allowed in a topic name: {topic!r}")


def _decode_connect(r: _Body, flags: int, level: int, from_server: bool) -> Connect:
    # the level is not known until it is read: errors before it are answered at 3.1.1
    name = r.string("protocol name")
    lvl = r.u8()
    if (name, lvl) not in (("MQTT", 4), ("MQTT", 5), ("MQIsdp", 3)):
        e = r.fail(
            ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
            f"unsupported protocol name {name!r} level {lvl}",
        )
        e.protocol_level = 4
        raise e
    try:
        return _decode_connect_rest(r, lvl, from_server)
    except MQTTProtocolError as e:
        e.protocol_level = lvl  # answered at the level the client asked for
        raise


def _decode_connect_rest(r: _Body, lvl: int, from_server: bool) -> Connect:
    cflags = r.u8()
    if cflags & 0x01:
        raise r.fail(_MALFORMED, "connect flags reserved bit not set to 0")
    has_will = bool(cflags & 0x04)
    wqos = (cflags >> 3) & 3
    wretain = bool(cflags & 0x20)
    if not has_will and (wqos or wretain):
        raise r.fail(_MALFORMED, "will QoS and retain must be 0 without the will flag")
    if wqos == 3:
        raise r.fail(_MALFORMED, "will QoS 3")
    has_user = bool(cflags & 0x80)
    has_password = bool(cflags & 0x40)
    if has_password and not has_user and lvl != MQTT_5:
        raise r.fail(_MALFORMED, "password flag set but username flag is not")
    keep_alive = r.u16()
    props = _read_properties(r, _T.CONNECT, from_server) if lvl == MQTT_5 else None
    client_id = r.string("client ID")
    clean = bool(cflags & 0x02)
    if not client_id and not clean and lvl != MQTT_5:
        # [MQTT-3.1.3-8]: 3.1.1 needs clean session for an empty client id (MQTT 5 lets the server assign one)
        raise r.fail(ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, "empty client ID needs the clean session flag")
    will = None
    if has_will:
        wprops = _read_properties(r, WILL_PROPERTIES, from_server) if lvl == MQTT_5 else None
        wtopic = r.string("will topic")
        if not wtopic:
            raise r.fail(_PROTOCOL, "empty will topic")
        _check_topic_name(r, wtopic)
        will = Will(wtopic, r.binary(), wqos, wretain, wprops)
    username = r.string("user name") if has_user else None
    password = r.binary() if has_password else None
    r.done()
    return Connect(lvl, client_id, clean, keep_alive, username, password, will, props)


def _decode_connack(r: _Body, flags: int, level: int, from_server: bool) -> ConnAck:
    ack_flags = r.u8()
    if ack_flags & 0xFE:
        raise r.fail(_MALFORMED, "connack flags reserved bits not 0")
    code = r.u8()
    props = None
    if level == MQTT_5:
        _check_code(r, code, _CONNACK_CODES)
        if r.more():
            props = _read_properties(r, _T.CONNACK, from_server)
    else:
        v5 = connack_v5_code(code)
        if v5 is None:
            raise r.fail(_PROTOCOL, f"CONNACK return code {code} not defined")
        code = v5
    if ack_flags and code:
        raise r.fail(_PROTOCOL, "session present with a refused connection")
    r.done()
    return ConnAck(bool(ack_flags), code, props)


def _decode_ack(r: _Body, flags: int, level: int, from_server: bool) -> PubAck | PubRec | PubRel | PubComp:
    pid = r.u16()
    if pid == 0:
        raise r.fail(_PROTOCOL, "packet identifier cannot be 0")
    code = 0
    props = None
    if level == MQTT_5 and r.more():
        code = _check_code(r, r.u8(), _ACK_CODES[r.ptype])
        if r.more():
            props = _read_properties(r, r.ptype, from_server)
    r.done()
    return _ACK_CLASSES[r.ptype](pid, code, props)


_ACK_CLASSES: dict[int, Callable[..., Any]] = {
    _T.PUBACK: PubAck,
    _T.PUBREC: PubRec,
    _T.PUBREL: PubRel,
    _T.PUBCOMP: PubComp,
}


def _decode_subscribe(r: _Body, flags: int, level: int, from_server: bool) -> Subscribe:
    pid = r.u16()
    if pid == 0:
        raise r.fail(_PROTOCOL, "packet identifier cannot be 0")
    props = _read_properties(r, _T.SUBSCRIBE, from_server) if level == MQTT_5 else None
    subs: list[tuple[str, SubscriptionOptions]] = []
    while r.more():
        topic_filter = r.string("topic filter")
        opts = r.u8()
        qos = opts & 3
        if qos == 3:
            raise r.fail(_MALFORMED, "subscribe QoS value must be 0, 1 or 2")
        if level == MQTT_5:
            if opts & 0xC0:
                raise r.fail(_MALFORMED, "subscription options reserved bits not 0")
            rh = (opts >> 4) & 3
            if rh == 3:
                raise r.fail(_PROTOCOL, "retain handling 3")
            no_local = bool(opts & 0x04)
            if no_local and topic_filter.startswith("$share/"):
                raise r.fail(_PROTOCOL, "no local on a shared subscription")  # [MQTT-3.8.3-4]
            subs.append((topic_filter, SubscriptionOptions(qos, no_local, bool(opts & 0x08), rh)))
        else:
            if opts & 0xFC:
                raise r.fail(_MALFORMED, "subscribe options reserved bits not 0")
            subs.append((topic_filter, SubscriptionOptions(qos)))
    if not subs:
        raise r.fail(_PROTOCOL, "subscribe must contain at least 1 topic filter")
    return Subscribe(pid, subs, props)


def _decode_suback(r: _Body, flags: int, level: int, from_server: bool) -> SubAck:
    pid = r.u16()
    if pid == 0:
        raise r.fail(_PROTOCOL, "packet identifier cannot be 0")
    props = _read_properties(r, _T.SUBACK, from_server) if level == MQTT_5 else None
    allowed = _SUBACK_CODES if level == MQTT_5 else frozenset({0, 1, 2, 0x80})
    codes = [_check_code(r, c, allowed) for c in r.rest()]
    if not codes:
        raise r.fail(_PROTOCOL, "SUBACK without a return code")
    return SubAck(pid, codes, props)


def _decode_unsubscribe(r: _Body, flags: int, level: int, from_server: bool) -> Unsubscribe:
    pid = r.u16()
    if pid == 0:
        raise r.fail(_PROTOCOL, "packet identifier cannot be 0")
    props = _read_properties(r, _T.UNSUBSCRIBE, from_server) if level == MQTT_5 else None
    filters: list[str] = []
    while r.more():
        filters.append(r.string("topic filter"))
    if not filters:
        raise r.fail(_PROTOCOL, "unsubscribe must contain at least 1 topic filter")
    return Unsubscribe(pid, filters, props)


def _decode_unsuback(r: _Body, flags: int, level: int, from_server: bool) -> UnsubAck:
    pid = r.u16()
    if pid == 0:
        raise r.fail(_PROTOCOL, "packet identifier cannot be 0")
    if level != MQTT_5:
        r.done()
        return UnsubAck(pid)
    props = _read_properties(r, _T.UNSUBACK, from_server)
    codes = [_check_code(r, c, _UNSUBACK_CODES) for c in r.rest()]
    if not codes:
        raise r.fail(_PROTOCOL, "UNSUBACK without a reason code")
    return UnsubAck(pid, codes, props)


def _decode_ping(r: _Body, flags: int, level: int, from_server: bool) -> PingReq | PingResp:
    r.done()
    return PingReq() if r.ptype == _T.PINGREQ else PingResp()


def _decode_disconnect(r: _Body, flags: int, level: int, from_server: bool) -> Disconnect:
    code = 0
    props = None
    if level == MQTT_5 and r.more():
        code = _check_code(r, r.u8(), _DISCONNECT_CODES)
        if r.more():
            props = _read_properties(r, _T.DISCONNECT, from_server)
    if code == ReasonCode.DISCONNECT_WITH_WILL_MESSAGE and from_server:
        raise r.fail(_PROTOCOL, "only a client disconnects with its will message")
    r.done()
    return Disconnect(code, props)


def _decode_auth(r: _Body, flags: int, level: int, from_server: bool) -> Auth:
    code = 0
    props = None
    if r.more():
        code = _check_code(r, r.u8(), _AUTH_CODES)
        if r.more():
            props = _read_properties(r, _T.AUTH, from_server)
    r.done()
    return Auth(code, props)


_DECODERS: dict[int, Callable[[_Body, int, int, bool], Any]] = {
    _T.CONNECT: _decode_connect,
    _T.CONNACK: _decode_connack,
    _T.PUBACK: _decode_ack,
    _T.PUBREC: _decode_ack,
    _T.PUBREL: _decode_ack,
    _T.PUBCOMP: _decode_ack,
    _T.SUBSCRIBE: _decode_subscribe,
    _T.SUBACK: _decode_suback,
    _T.UNSUBSCRIBE: _decode_unsubscribe,
    _T.UNSUBACK: _decode_unsuback,
    _T.PINGREQ: _decode_ping,
    _T.PINGRESP: _decode_ping,
    _T.DISCONNECT: _decode_disconnect,
    _T.AUTH: _decode_auth,
}


# topic names already checked (valid UTF-8, no U+0000, no wildcard, not empty) -> their text: a publisher
# repeats a few topics, so the hot path skips the decode and the checks; shared by all decoders, bounded
_TOPICS: dict[bytes, str] = {}
_TOPICS_MAX = 4096


class MQTTDecoder:
    """Decodes one direction of one connection; dead after the first MQTTProtocolError."""

    __slots__ = ("max_packet_size", "protocol_level", "server", "_pending", "_have", "_need", "_error")

    def __init__(
        self,
        max_packet_size: int = MAX_PACKET_SIZE,
        protocol_level: int | None = None,
        *,
        server: bool = True,
    ) -> None:
        if protocol_level is not None and protocol_level not in PROTOCOL_LEVELS:
            raise ValueError(f"unknown MQTT protocol level {protocol_level}")
        if not server and protocol_level is None:
            raise ValueError("a client-side decoder needs the protocol level it connected with")
        self.max_packet_size = max_packet_size
        # None until CONNECT (server side); 3, 4 or 5 after
        self.protocol_level = protocol_level
        self.server = server
        self._pending: list[bytes] = []  # a packet cut short, in the pieces it came in
        self._have = 0
        self._need = 0  # bytes the cut packet needs in all (0: its header is not complete yet)
        self._error: MQTTProtocolError | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> list[Packet]:
        """The complete packets in what has arrived so far; the rest waits for the next feed."""
        if self._error is not None:
            raise self._error
        if self._pending:
            self._pending.append(bytes(data))
            self._have += len(data)
            if self._have < self._need:
                return []
            buf = b"".join(self._pending)
            self._pending = []
            self._have = self._need = 0
        else:
            buf = data if type(data) is bytes else bytes(data)
        out: list[Packet] = []
        try:
            pos = self._decode(buf, out)
        except MQTTProtocolError as e:
            if e.protocol_level is None:
                e.protocol_level = self.protocol_level
            e.packets = out
            self._error = e
            raise
        if pos < len(buf):
            rest = buf[pos:]
            self._pending.append(rest)
            self._have = len(rest)
        return out

    def _decode(self, buf: bytes, out: list[Packet]) -> int:
        n = len(buf)
        pos = 0
        level = self.protocol_level
        limit = self.max_packet_size
        from_server = not self.server
        topics = _TOPICS
        append = out.append
        while pos < n:
            h = buf[pos]
            ptype = h >> 4
            if level is None and ptype != 1:
                raise MQTTProtocolError(_PROTOCOL, "the first packet must be CONNECT", packet_type=ptype)
            # remaining length
            if pos + 1 >= n:
                self._need = 0
                return pos
            rl = buf[pos + 1]
            hl = 2
            if rl & 0x80:
                rl &= 0x7F
                shift = 7
                while True:
                    if hl == 5:
                        raise MQTTProtocolError(_MALFORMED, "malformed remaining length", packet_type=ptype)
                    if pos + hl >= n:
                        self._need = 0
                        return pos
                    b = buf[pos + hl]
                    hl += 1
                    rl |= (b & 0x7F) << shift
                    if not b & 0x80:
                        break
                    shift += 7
            total = hl + rl
            if total > limit:
                raise MQTTProtocolError(
                    ReasonCode.PACKET_TOO_LARGE,
                    f"packet of {total} bytes exceeds the maximum packet size {limit}",
                    packet_type=ptype,
                )
            end = pos + total
            if end > n:
                self._need = total
                return pos
            start = pos + hl
            if ptype == 3:
                # fast path: a topic seen before (so valid), no properties; anything else takes _publish
                flags = h & 15
                qos = (flags >> 1) & 3
                topic = None
                p = start + 2
                if p <= end:
                    p += (buf[start] << 8) | buf[start + 1]
                    if p <= end:
                        topic = topics.get(buf[start + 2 : p])
                if topic is not None:
                    pid = 0
                    if qos == 0:
                        if flags & 8:
                            topic = None
                    elif qos != 3 and p + 2 <= end:
                        pid = (buf[p] << 8) | buf[p + 1]
                        p += 2
                        if not pid:
                            topic = None
                    else:
                        topic = None
                    if level == 5 and topic is not None:
                        if p < end and buf[p] == 0:
                            p += 1
                        else:
                            topic = None
                if topic is None:
                    append(self._publish(buf, start, end, flags, level, from_server))
                else:
                    append(Publish(topic, buf[p:end], qos, flags & 1 == 1, flags & 8 == 8, pid, None))
            elif h == 0x40 and rl == 2 and (buf[start] or buf[start + 1]):
                # fast path: a plain PUBACK (success, no properties), what a QoS 1 subscriber sends per message
                append(PubAck((buf[start] << 8) | buf[start + 1]))
            else:
                self._check_type(ptype, h & 15, level)
                r = _Body(buf, start, end, ptype)
                if ptype == 1:
                    pkt = _decode_connect(r, h & 15, 0, from_server)
                    level = self.protocol_level = pkt.protocol_level
                else:
                    pkt = _DECODERS[ptype](r, h & 15, level, from_server)
                append(pkt)
            pos = end
        return pos

    def _check_type(self, ptype: int, flags: int, level: int | None) -> None:
        if ptype == 0 or (ptype == 15 and level is not None and level != MQTT_5):
            raise MQTTProtocolError(_MALFORMED, f"reserved packet type {ptype}", packet_type=ptype)
        if flags != _FLAGS[ptype]:
            raise MQTTProtocolError(
                _MALFORMED, f"wrong fixed header flags {flags:#x} for {PacketType(ptype).name}", packet_type=ptype
            )
        if ptype not in (_FROM_CLIENT if self.server else _FROM_SERVER):
            side = "a client" if self.server else "a server"
            raise MQTTProtocolError(
                _PROTOCOL, f"{PacketType(ptype).name} is not a packet {side} sends", packet_type=ptype
            )
        if ptype == 1 and level is not None:
            raise MQTTProtocolError(_PROTOCOL, "received a second CONNECT packet", packet_type=ptype)
        if ptype == 14 and level != MQTT_5 and not self.server:
            raise MQTTProtocolError(_PROTOCOL, "a 3.1.1 server does not send DISCONNECT", packet_type=ptype)

    @staticmethod
    def _publish(buf: bytes, start: int, end: int, flags: int, level: int | None, from_server: bool) -> Publish:
        """The hot path: one PUBLISH, decoded inline."""
        qos = (flags >> 1) & 3
        if qos == 3:
            raise MQTTProtocolError(_MALFORMED, "PUBLISH with QoS 3", packet_type=3)
        if start + 2 > end:
            raise MQTTProtocolError(_MALFORMED, "PUBLISH shorter than its topic", packet_type=3)
        p = start + 2 + ((buf[start] << 8) | buf[start + 1])
        if p > end:
            raise MQTTProtocolError(_MALFORMED, "PUBLISH topic runs past the packet", packet_type=3)
        raw = buf[start + 2 : p]
        try:
            topic = raw.decode()
        except UnicodeDecodeError:
            raise MQTTProtocolError(_MALFORMED, "invalid UTF-8 in topic name", packet_type=3) from None
        if b"\x00" in raw:
            raise MQTTProtocolError(_MALFORMED, "U+0000 in topic name", packet_type=3)
        if b"+" in raw or b"#" in raw:
            raise MQTTProtocolError(
                ReasonCode.TOPIC_NAME_INVALID, f"wildcards not allowed in publish's topic: {topic!r}", packet_type=3
            )
        if topic:
            if len(_TOPICS) >= _TOPICS_MAX:
                _TOPICS.clear()
            _TOPICS[raw] = topic
        pid = 0
        if qos:
            if p + 2 > end:
                raise MQTTProtocolError(_MALFORMED, "PUBLISH shorter than its packet identifier", packet_type=3)
            pid = (buf[p] << 8) | buf[p + 1]
            if pid == 0:
                raise MQTTProtocolError(_PROTOCOL, "packet identifier cannot be 0", packet_type=3)
            p += 2
        elif flags & 8:
            raise MQTTProtocolError(_MALFORMED, "DUP set on a QoS 0 PUBLISH", packet_type=3)
        props = None
        if level == MQTT_5:
            if p < end and buf[p] == 0:
                p += 1
            else:
                r = _Body(buf, p, end, 3)
                props = _read_properties(r, _T.PUBLISH, from_server)
                p = r.pos
            if not topic and (props is None or props.topic_alias is None):
                raise MQTTProtocolError(_PROTOCOL, "topic cannot be empty without a topic alias", packet_type=3)
        elif not topic:
            raise MQTTProtocolError(_PROTOCOL, "topic cannot be empty", packet_type=3)
        return Publish(topic, buf[p:end], qos, bool(flags & 1), bool(flags & 8), pid, props)


# ---- encoding ----


def _packet(first: int, body: bytes) -> bytes:
    n = len(body)
    if n < 128:
        return bytes((first, n)) + body
    return bytes((first,)) + encode_varint(n) + body


def encode_publish(
    topic: bytes,
    payload: bytes,
    qos: int = 0,
    packet_id: int = 0,
    retain: bool = False,
    dup: bool = False,
    properties: bytes | None = None,
) -> bytes:
    """A PUBLISH from bytes, no Publish object: the hot path. `properties` is the MQTT 5 property block
    (`encode_properties(...)` or EMPTY_PROPERTIES); None below MQTT 5."""
    # DUP is for QoS 1 and 2 only [MQTT-3.3.1-2]: a message downgraded to QoS 0 loses it
    first = 0x30 | (qos << 1) | (8 if dup and qos else 0) | (1 if retain else 0)
    tl = len(topic)
    n = 2 + tl + len(payload)
    if qos:
        n += 2
    if properties is not None:
        n += len(properties)
    head = _BBH(first, n, tl) if n < 128 else bytes((first,)) + encode_varint(n) + _H(tl)
    if qos:
        if properties is not None:
            return b"".join((head, topic, _H(packet_id), properties, payload))
        return b"".join((head, topic, _H(packet_id), payload))
    if properties is not None:
        return b"".join((head, topic, properties, payload))
    return b"".join((head, topic, payload))


def _enc_publish(p: Publish, level: int) -> bytes:
    return encode_publish(
        p.topic.encode(),
        p.payload,
        p.qos,
        p.packet_id,
        p.retain,
        p.dup,
        encode_properties(p.properties, _T.PUBLISH) if level == MQTT_5 else None,
    )


def _enc_connect(c: Connect, level: int) -> bytes:
    lvl = c.protocol_level
    flags = 0x02 if c.clean_start else 0
    parts = [_str(c.protocol_name or ("MQIsdp" if lvl == MQTT_31 else "MQTT")), b""]
    w = c.will
    if w is not None:
        flags |= 0x04 | (w.qos << 3) | (0x20 if w.retain else 0)
    if c.username is not None:
        flags |= 0x80
    if c.password is not None:
        flags |= 0x40
    parts[1] = bytes((lvl, flags)) + _u16(c.keep_alive)
    if lvl == MQTT_5:
        parts.append(encode_properties(c.properties, _T.CONNECT))
    parts.append(_str(c.client_id))
    if w is not None:
        if lvl == MQTT_5:
            parts.append(encode_properties(w.properties, WILL_PROPERTIES))
        parts.append(_str(w.topic))
        parts.append(_bin(w.payload))
    if c.username is not None:
        parts.append(_str(c.username))
    if c.password is not None:
        parts.append(_bin(c.password))
    return _packet(0x10, b"".join(parts))


def _enc_connack(c: ConnAck, level: int) -> bytes:
    flags = 1 if c.session_present else 0
    if level != MQTT_5:
        return bytes((0x20, 2, flags, connack_v3_code(c.reason_code)))
    return _packet(0x20, bytes((flags, c.reason_code)) + encode_properties(c.properties, _T.CONNACK))


def encode_puback(packet_id: int) -> bytes:
    """A PUBACK with reason 0 and no properties, at any level (MQTT 5 leaves both out then): the QoS 1 hot
    path's four bytes, without a packet object."""
    return bytes((0x40, 2, packet_id >> 8, packet_id & 0xFF))


def _enc_ack(a: PubAck | PubRec | PubRel | PubComp, level: int) -> bytes:
    ptype = _ACK_TYPES[type(a)]
    first = (ptype << 4) | _FLAGS[ptype]
    pid = a.packet_id
    if level != MQTT_5 or (a.reason_code == 0 and a.properties is None):
        return bytes((first, 2, pid >> 8, pid & 0xFF))
    if a.properties is None:
        return bytes((first, 3, pid >> 8, pid & 0xFF, a.reason_code))
    return _packet(first, _u16(pid) + bytes((a.reason_code,)) + encode_properties(a.properties, ptype))


_ACK_TYPES = {PubAck: _T.PUBACK, PubRec: _T.PUBREC, PubRel: _T.PUBREL, PubComp: _T.PUBCOMP}


def _options_byte(o: SubscriptionOptions, level: int) -> int:
    if level != MQTT_5:
        return o.qos
    return o.qos | (4 if o.no_local else 0) | (8 if o.retain_as_published else 0) | (o.retain_handling << 4)


def _enc_subscribe(s: Subscribe, level: int) -> bytes:
    parts = [_u16(s.packet_id)]
    if level == MQTT_5:
        parts.append(encode_properties(s.properties, _T.SUBSCRIBE))
    for topic_filter, opts in s.subscriptions:
        parts.append(_str(topic_filter) + bytes((_options_byte(opts, level),)))
    return _packet(0x82, b"".join(parts))


def _enc_suback(s: SubAck, level: int) -> bytes:
    if level == MQTT_5:
        body = _u16(s.packet_id) + encode_properties(s.properties, _T.SUBACK) + bytes(s.reason_codes)
    else:
        body = _u16(s.packet_id) + bytes(c if c < 0x80 else 0x80 for c in s.reason_codes)
    return _packet(0x90, body)


def _enc_unsubscribe(u: Unsubscribe, level: int) -> bytes:
    parts = [_u16(u.packet_id)]
    if level == MQTT_5:
        parts.append(encode_properties(u.properties, _T.UNSUBSCRIBE))
    parts.extend(_str(f) for f in u.topic_filters)
    return _packet(0xA2, b"".join(parts))


def _enc_unsuback(u: UnsubAck, level: int) -> bytes:
    if level != MQTT_5:
        return bytes((0xB0, 2)) + _u16(u.packet_id)
    return _packet(0xB0, _u16(u.packet_id) + encode_properties(u.properties, _T.UNSUBACK) + bytes(u.reason_codes))


def _enc_pingreq(p: PingReq, level: int) -> bytes:
    return b"\xc0\x00"


def _enc_pingresp(p: PingResp, level: int) -> bytes:
    return b"\xd0\x00"


def _enc_disconnect(d: Disconnect, level: int) -> bytes:
    if level != MQTT_5 or (d.reason_code == 0 and d.properties is None):
        return b"\xe0\x00"
    if d.properties is None:
        return bytes((0xE0, 1, d.reason_code))
    return _packet(0xE0, bytes((d.reason_code,)) + encode_properties(d.properties, _T.DISCONNECT))


def _enc_auth(a: Auth, level: int) -> bytes:
    if level != MQTT_5:
        raise ValueError("AUTH exists only in MQTT 5")
    if a.reason_code == 0 and a.properties is None:
        return b"\xf0\x00"
    return _packet(0xF0, bytes((a.reason_code,)) + encode_properties(a.properties, _T.AUTH))


_ENCODERS: dict[type, Callable[[Any, int], bytes]] = {
    Connect: _enc_connect,
    ConnAck: _enc_connack,
    Publish: _enc_publish,
    PubAck: _enc_ack,
    PubRec: _enc_ack,
    PubRel: _enc_ack,
    PubComp: _enc_ack,
    Subscribe: _enc_subscribe,
    SubAck: _enc_suback,
    Unsubscribe: _enc_unsubscribe,
    UnsubAck: _enc_unsuback,
    PingReq: _enc_pingreq,
    PingResp: _enc_pingresp,
    Disconnect: _enc_disconnect,
    Auth: _enc_auth,
}


def encode(packet: Packet, protocol_level: int) -> bytes:
    """The bytes of any packet at `protocol_level` (3, 4 or 5); fields a level lacks are left out."""
    return _ENCODERS[type(packet)](packet, protocol_level)
