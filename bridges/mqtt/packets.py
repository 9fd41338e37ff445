"""MQTT 3.1, 3.1.1 and 5.0 control packets as plain data, shared by the codec, the server and the bridge.

One dataclass per packet type, the same in both directions, so a test client and the server speak
through the same types. `properties` is None when a packet has none (always so below MQTT 5): the
common packets then carry no Properties object at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

# protocol levels (the CONNECT packet's "protocol version" byte)
MQTT_31 = 3  # protocol name "MQIsdp"
MQTT_311 = 4
MQTT_5 = 5
PROTOCOL_LEVELS = (MQTT_31, MQTT_311, MQTT_5)


class PacketType(IntEnum):
    """The control packet type, the high nibble of the fixed header's first byte."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15  # MQTT 5 only


class ReasonCode(IntEnum):
    """MQTT 5 reason codes (spec 2.4); several names share a value, as in the spec's table."""

    SUCCESS = 0x00
    NORMAL_DISCONNECTION = 0x00
    GRANTED_QOS_0 = 0x00
    GRANTED_QOS_1 = 0x01
    GRANTED_QOS_2 = 0x02
    DISCONNECT_WITH_WILL_MESSAGE = 0x04
    NO_MATCHING_SUBSCRIBERS = 0x10
    NO_SUBSCRIPTION_EXISTED = 0x11
    CONTINUE_AUTHENTICATION = 0x18
    RE_AUTHENTICATE = 0x19
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    SERVER_SHUTTING_DOWN = 0x8B
    BAD_AUTHENTICATION_METHOD = 0x8C
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_FILTER_INVALID = 0x8F
    TOPIC_NAME_INVALID = 0x90
    PACKET_IDENTIFIER_IN_USE = 0x91
    PACKET_IDENTIFIER_NOT_FOUND = 0x92
    RECEIVE_MAXIMUM_EXCEEDED = 0x93
    TOPIC_ALIAS_INVALID = 0x94
    PACKET_TOO_LARGE = 0x95
    MESSAGE_RATE_TOO_HIGH = 0x96
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99
    RETAIN_NOT_SUPPORTED = 0x9A
    QOS_NOT_SUPPORTED = 0x9B
    USE_ANOTHER_SERVER = 0x9C
    SERVER_MOVED = 0x9D
    SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
    CONNECTION_RATE_EXCEEDED = 0x9F
    MAXIMUM_CONNECT_TIME = 0xA0
    SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
    WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2


# MQTT 3.1 / 3.1.1 CONNACK return codes (3.1.1 spec 3.2.2.3)
CONNACK_ACCEPTED = 0
CONNACK_UNACCEPTABLE_PROTOCOL_VERSION = 1
CONNACK_IDENTIFIER_REJECTED = 2
CONNACK_SERVER_UNAVAILABLE = 3
CONNACK_BAD_USERNAME_OR_PASSWORD = 4
CONNACK_NOT_AUTHORIZED = 5

# 3.1.1 return code -> the MQTT 5 reason code that means the same
_V3_TO_V5 = {
    CONNACK_ACCEPTED: ReasonCode.SUCCESS,
    CONNACK_UNACCEPTABLE_PROTOCOL_VERSION: ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
    CONNACK_IDENTIFIER_REJECTED: ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
    CONNACK_SERVER_UNAVAILABLE: ReasonCode.SERVER_UNAVAILABLE,
    CONNACK_BAD_USERNAME_OR_PASSWORD: ReasonCode.BAD_USER_NAME_OR_PASSWORD,
    CONNACK_NOT_AUTHORIZED: ReasonCode.NOT_AUTHORIZED,
}
_V5_TO_V3 = {int(v): k for k, v in _V3_TO_V5.items()}
_V5_TO_V3[ReasonCode.BANNED] = CONNACK_NOT_AUTHORIZED
_V5_TO_V3[ReasonCode.BAD_AUTHENTICATION_METHOD] = CONNACK_NOT_AUTHORIZED


def connack_v3_code(reason_code: int) -> int:
    """The 3.1.1 CONNACK return code for an MQTT 5 reason code; errors 3.1.1 cannot name are 'server unavailable'."""
    code = _V5_TO_V3.get(reason_code)
    if code is not None:
        return code
    return CONNACK_SERVER_UNAVAILABLE


def connack_v5_code(return_code: int) -> int | None:
    """The MQTT 5 reason code for a 3.1.1 CONNACK return code, None for a code 3.1.1 does not define."""
    rc = _V3_TO_V5.get(return_code)
    return None if rc is None else int(rc)


class PropertyId(IntEnum):
    """MQTT 5 property identifiers (spec 2.2.2.2)."""

    PAYLOAD_FORMAT_INDICATOR = 0x01
    MESSAGE_EXPIRY_INTERVAL = 0x02
    CONTENT_TYPE = 0x03
    RESPONSE_TOPIC = 0x08
    CORRELATION_DATA = 0x09
    SUBSCRIPTION_IDENTIFIER = 0x0B
    SESSION_EXPIRY_INTERVAL = 0x11
    ASSIGNED_CLIENT_IDENTIFIER = 0x12
    SERVER_KEEP_ALIVE = 0x13
    AUTHENTICATION_METHOD = 0x15
    AUTHENTICATION_DATA = 0x16
    REQUEST_PROBLEM_INFORMATION = 0x17
    WILL_DELAY_INTERVAL = 0x18
    REQUEST_RESPONSE_INFORMATION = 0x19
    RESPONSE_INFORMATION = 0x1A
    SERVER_REFERENCE = 0x1C
    REASON_STRING = 0x1F
    RECEIVE_MAXIMUM = 0x21
    TOPIC_ALIAS_MAXIMUM = 0x22
    TOPIC_ALIAS = 0x23
    MAXIMUM_QOS = 0x24
    RETAIN_AVAILABLE = 0x25
    USER_PROPERTY = 0x26
    MAXIMUM_PACKET_SIZE = 0x27
    WILDCARD_SUBSCRIPTION_AVAILABLE = 0x28
    SUBSCRIPTION_IDENTIFIER_AVAILABLE = 0x29
    SHARED_SUBSCRIPTION_AVAILABLE = 0x2A


@dataclass(slots=True)
class Properties:
    """Every MQTT 5 property; None = absent. Which packet may carry which is checked by the codec."""

    payload_format_indicator: int | None = None
    message_expiry_interval: int | None = None
    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    # several in a server's PUBLISH (one per matching subscription), at most one in a SUBSCRIBE
    subscription_identifiers: list[int] = field(default_factory=list)
    session_expiry_interval: int | None = None
    assigned_client_identifier: str | None = None
    server_keep_alive: int | None = None
    authentication_method: str | None = None
    authentication_data: bytes | None = None
    request_problem_information: int | None = None
    will_delay_interval: int | None = None
    request_response_information: int | None = None
    response_information: str | None = None
    server_reference: str | None = None
    reason_string: str | None = None
    receive_maximum: int | None = None
    topic_alias_maximum: int | None = None
    topic_alias: int | None = None
    maximum_qos: int | None = None
    retain_available: int | None = None
    user_properties: list[tuple[str, str]] = field(default_factory=list)
    maximum_packet_size: int | None = None
    wildcard_subscription_available: int | None = None
    subscription_identifier_available: int | None = None
    shared_subscription_available: int | None = None

    def is_empty(self) -> bool:
        """True when no property is set (such a Properties encodes as a zero length)."""
        for name in self.__slots__:  # type: ignore[attr-defined]
            value = getattr(self, name)
            if value is not None and value != []:
                return False
        return True


@dataclass(slots=True)
class Will:
    """The will message a CONNECT carries."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties | None = None  # MQTT 5 will properties


@dataclass(slots=True)
class Connect:
    protocol_level: int = MQTT_311
    client_id: str = ""
    clean_start: bool = True  # "clean session" below MQTT 5
    keep_alive: int = 0
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties | None = None
    # the name on the wire: "MQTT" (levels 4 and 5) or "MQIsdp" (level 3); the codec derives it from the level
    protocol_name: str = ""

    def __post_init__(self) -> None:
        if not self.protocol_name:
            self.protocol_name = "MQIsdp" if self.protocol_level == MQTT_31 else "MQTT"


@dataclass(slots=True)
class ConnAck:
    session_present: bool = False
    # always an MQTT 5 reason code; the codec maps it to and from a 3.1.1 return code
    reason_code: int = 0
    properties: Properties | None = None


@dataclass(slots=True)
class Publish:
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int = 0  # 0 for QoS 0
    properties: Properties | None = None


@dataclass(slots=True)
class PubAck:
    packet_id: int
    reason_code: int = 0
    properties: Properties | None = None


@dataclass(slots=True)
class PubRec:
    packet_id: int
    reason_code: int = 0
    properties: Properties | None = None


@dataclass(slots=True)
class PubRel:
    packet_id: int
    reason_code: int = 0
    properties: Properties | None = None


@dataclass(slots=True)
class PubComp:
    packet_id: int
    reason_code: int = 0
    properties: Properties | None = None


@dataclass(slots=True)
class SubscriptionOptions:
    """A SUBSCRIBE's per-filter options byte; only qos exists below MQTT 5."""

    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0  # 0 send retained on subscribe, 1 only if new, 2 never


@dataclass(slots=True)
class Subscribe:
    packet_id: int
    subscriptions: list[tuple[str, SubscriptionOptions]]
    properties: Properties | None = None


@dataclass(slots=True)
class SubAck:
    packet_id: int
    # one per filter: granted QoS 0..2 or a failure code >= 0x80 (3.1.1 has only 0x80)
    reason_codes: list[int]
    properties: Properties | None = None


@dataclass(slots=True)
class Unsubscribe:
    packet_id: int
    topic_filters: list[str]
    properties: Properties | None = None


@dataclass(slots=True)
class UnsubAck:
    packet_id: int
    reason_codes: list[int] = field(default_factory=list)  # MQTT 5 only; empty below
    properties: Properties | None = None


@dataclass(slots=True)
class PingReq:
    pass


@dataclass(slots=True)
class PingResp:
    pass


@dataclass(slots=True)
class Disconnect:
    reason_code: int = 0  # MQTT 5 only
    properties: Properties | None = None


@dataclass(slots=True)
class Auth:
    """MQTT 5 enhanced authentication exchange."""

    reason_code: int = 0
    properties: Properties | None = None


Packet = (
    Connect
    | ConnAck
    | Publish
    | PubAck
    | PubRec
    | PubRel
    | PubComp
    | Subscribe
    | SubAck
    | Unsubscribe
    | UnsubAck
    | PingReq
    | PingResp
    | Disconnect
    | Auth
)

PACKET_TYPES: dict[type, PacketType] = {
    Connect: PacketType.CONNECT,
    ConnAck: PacketType.CONNACK,
    Publish: PacketType.PUBLISH,
    PubAck: PacketType.PUBACK,
    PubRec: PacketType.PUBREC,
    PubRel: PacketType.PUBREL,
    PubComp: PacketType.PUBCOMP,
    Subscribe: PacketType.SUBSCRIBE,
    SubAck: PacketType.SUBACK,
    Unsubscribe: PacketType.UNSUBSCRIBE,
    UnsubAck: PacketType.UNSUBACK,
    PingReq: PacketType.PINGREQ,
    PingResp: PacketType.PINGRESP,
    Disconnect: PacketType.DISCONNECT,
    Auth: PacketType.AUTH,
}
