"""How an MQTT message is a NATS message and back, with nats-server's headers (`Nmqtt-Pub: <qos>`, the
retained record's `Nmqtt-R*`), plus edged's MQTT 5 mapping: user properties are NATS headers, a message
expiry rides in `Nmqtt-Expiry`, a response topic is the NATS reply subject and the correlation data rides in
`Nmqtt-Corr`. Pure functions, no I/O."""

from __future__ import annotations

import base64
from dataclasses import dataclass

from edged.routing.headers import get_header, parse_headers

PUB_HEADER = "Nmqtt-Pub"
CORRELATION_HEADER = "Nmqtt-Corr"
CONTENT_TYPE_HEADER = "Nmqtt-Content-Type"
FORMAT_HEADER = "Nmqtt-Format"
EXPIRY_HEADER = "Nmqtt-Expiry"
ORIGIN_HEADER = "Nmqtt-Origin"
R_TOPIC = "Nmqtt-RTopic"
R_ORIGIN = "Nmqtt-ROrigin"
R_FLAGS = "Nmqtt-RFlags"
R_SOURCE = "Nmqtt-RSource"
DEL_MARKER = "-"

# headers that belong to the MQTT mapping itself, never shown to an MQTT 5 receiver as user properties
_INTERNAL = {PUB_HEADER, "Nmqtt-Subject", "Nmqtt-Mapped", CORRELATION_HEADER, CONTENT_TYPE_HEADER,
             FORMAT_HEADER, EXPIRY_HEADER, ORIGIN_HEADER, "Nmqtt-Reply", "Nmqtt-Retain"}


# how an MQTT message's header block starts (the QoS digit follows): its QoS is read without a lookup
PUB_FIRST = _PUB_FIRST = b"NATS/1.0\r\n%s:" % PUB_HEADER.encode()
_PUB_AT = len(_PUB_FIRST)

# the header of a plain MQTT message, by QoS: built once
QOS_HEADERS = [b"NATS/1.0\r\n%s:%d\r\n\r\n" % (PUB_HEADER.encode(), q) for q in range(3)]


def mqtt_header(qos: int, user: list[tuple[str, str]] | None = None, correlation: bytes | None = None,
                content_type: str | None = None, payload_format: int | None = None, retain: bool = False,
                expiry: int | None = None) -> bytes:
    """The header block of a NATS message made from an MQTT PUBLISH (`Nmqtt-Pub:<qos>` first, as
    nats-server writes it; a retained message adds the flags nibble after the QoS, nats-server's
    layout for a staged QoS 2 message, so a retain-as-published subscription can tell)."""
    first = b"%s:%d" % (PUB_HEADER.encode(), qos)
    if retain:
        first += b"%x" % ((qos << 1) | 1)
    parts = [b"NATS/1.0", first]
    if expiry is not None:
        parts.append(b"%s: %d" % (EXPIRY_HEADER.encode(), expiry))
    if correlation is not None:
        parts.append(f"{CORRELATION_HEADER}: {base64.b64encode(correlation).decode()}".encode())
    if content_type is not None:
        parts.append(f"{CONTENT_TYPE_HEADER}: {content_type}".encode())
    if payload_format is not None:
        parts.append(f"{FORMAT_HEADER}: {payload_format}".encode())
    for k, v in user or ():
        if _header_safe(k) and "\r" not in v and "\n" not in v:
            parts.append(f"{k}: {v}".encode())
    return b"\r\n".join(parts) + b"\r\n\r\n"


def _header_safe(name: str) -> bool:
    return bool(name) and ":" not in name and not any(c in name for c in " \r\n\t")


def mqtt_retained(hdr: bytes | None) -> bool:
    """Was it published with the retain flag (the flags nibble after the QoS)?"""
    v = get_header(hdr, PUB_HEADER)
    return bool(v and len(v) > 1 and int(v[1], 16) & 1) if v and v[1:2].isalnum() else False


def expiry(hdr: bytes | None) -> int | None:
    if not hdr or b"\r\nNmqtt-Expiry:" not in hdr:  # the usual case, told without a lookup
        return None
    v = get_header(hdr, EXPIRY_HEADER)
    return int(v) if v and v.isdigit() else None


def mqtt_qos(hdr: bytes | None) -> int | None:
    """The QoS an MQTT publisher gave (None: the message did not come from MQTT)."""
    if hdr and hdr.startswith(_PUB_FIRST) and len(hdr) > _PUB_AT and 48 <= hdr[_PUB_AT] <= 57:
        return hdr[_PUB_AT] - 48  # `Nmqtt-Pub` first, as edged and nats-server write it: no lookup
    v = get_header(hdr, PUB_HEADER)
    if not v or not v[0].isdigit():
        return None
    return int(v[0])


@dataclass(slots=True)
class Extras:
    """What an MQTT 5 receiver gets from a NATS message's headers."""

    user: list[tuple[str, str]]
    correlation: bytes | None = None
    content_type: str | None = None
    payload_format: int | None = None


def extras(hdr: bytes | None) -> Extras:
    if not hdr:
        return Extras([])
    status, _, h = parse_headers(hdr)
    user = [(k, v) for k, vs in h.items() if k not in _INTERNAL for v in vs]
    corr = None
    c = h.get(CORRELATION_HEADER)
    if c:
        try:
            corr = base64.b64decode(c[0])
        except ValueError:
            corr = None
    ct = h.get(CONTENT_TYPE_HEADER)
    pf = h.get(FORMAT_HEADER)
    return Extras(user, corr, ct[0] if ct else None, int(pf[0]) if pf and pf[0].isdigit() else None)


# ---------------------------------------------------------------------- the retained message record


@dataclass(slots=True)
class Retained:
    subject: str
    topic: str
    payload: bytes
    flags: int  # the PUBLISH flags nibble (QoS << 1 | retain)
    origin: str = ""
    source: str = ""
    seq: int = 0

    @property
    def qos(self) -> int:
        return (self.flags >> 1) & 3


def encode_retained(r: Retained) -> tuple[bytes, bytes]:
    """(header, payload) of the `$MQTT_rmsgs` record, nats-server's layout; an empty payload is the
    delete marker that clears the subject's retained message."""
    marker = DEL_MARKER if not r.payload else ""
    parts = [b"NATS/1.0", f"{R_TOPIC}:{r.topic}".encode(), f"{R_FLAGS}:{marker}{r.flags:x}".encode()]
    if r.origin:
        parts.append(f"{R_ORIGIN}:{r.origin}".encode())
    if r.source:
        parts.append(f"{R_SOURCE}:{r.source}".encode())
    return b"\r\n".join(parts) + b"\r\n\r\n", r.payload


def decode_retained(subject: str, hdr: bytes | None, payload: bytes, seq: int) -> Retained | None:
    """A stored record; None for a delete marker or a record without a topic."""
    topic = get_header(hdr, R_TOPIC)
    flags = get_header(hdr, R_FLAGS) or "0"
    if not topic or flags.startswith(DEL_MARKER):
        return None
    try:
        f = int(flags, 16)
    except ValueError:
        f = 0
    return Retained(subject, topic, payload, f, get_header(hdr, R_ORIGIN) or "", get_header(hdr, R_SOURCE) or "",
                    seq)
