"""An MQTT session: what outlives a connection when the client asks for it (clean session 0 / clean start
0 with a session expiry), kept as one record per client id in the `$MQTT_sess` stream under
`$MQTT.sess.<hash of the client id>`, nats-server's JSON layout (`origin`, `id`, `clean`, `subs`,
`cons`) plus edged's fields: the MQTT 5 subscription options, the session expiry, the time the client
left, and the QoS 2 packet ids waiting for PUBCOMP."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from edged.jetstream.stream import go_hash

SESS_STREAM = "$MQTT_sess"
SESS_PREFIX = "$MQTT.sess."
MSGS_STREAM = "$MQTT_msgs"
MSGS_PREFIX = "$MQTT.msgs."
RMSGS_STREAM = "$MQTT_rmsgs"
RMSGS_PREFIX = "$MQTT.rmsgs."
QOS2IN_STREAM = "$MQTT_qos2in"
QOS2IN_PREFIX = "$MQTT.qos2.in."
OUT_STREAM = "$MQTT_out"
OUT_PREFIX = "$MQTT.out."
SUB_PREFIX = "$MQTT.sub."

# the streams nats-server keeps MQTT state in, with its settings (server/mqtt.go,
# mqttCreateAccountSessionManager)
STREAMS: list[dict[str, Any]] = [
    {"name": SESS_STREAM, "subjects": [SESS_PREFIX + ">"], "storage": "file", "retention": "limits",
     "max_msgs_per_subject": 1, "num_replicas": 1},
    {"name": MSGS_STREAM, "subjects": [MSGS_PREFIX + ">"], "storage": "file", "retention": "interest",
     "num_replicas": 1},
    {"name": QOS2IN_STREAM, "subjects": [QOS2IN_PREFIX + ">"], "storage": "file", "retention": "limits",
     "discard": "new", "max_msgs_per_subject": 1, "discard_new_per_subject": True, "num_replicas": 1},
    {"name": OUT_STREAM, "subjects": [OUT_PREFIX + ">"], "storage": "file", "retention": "interest",
     "num_replicas": 1},
    {"name": RMSGS_STREAM, "subjects": [RMSGS_PREFIX + ">"], "storage": "file", "retention": "limits",
     "max_msgs_per_subject": 1, "num_replicas": 1},
]


@dataclass(slots=True)
class SubState:
    """One NATS subject of a session's subscription (a `a/#` filter has two: `a.>` and `a`)."""

    qos: int
    topic_filter: str = ""
    queue: str = ""  # an MQTT 5 shared subscription's group
    no_local: bool = False
    retain_as_published: bool = False
    sub_id: int = 0


class Record(msgspec.Struct, omit_defaults=True):
    origin: str = ""
    id: str = ""
    clean: bool = False
    subs: dict[str, int] = {}
    cons: dict[str, dict[str, Any]] = {}
    # edged's own fields
    opts: dict[str, dict[str, Any]] = {}
    expiry: int = -1  # MQTT 5 session expiry interval in seconds; -1: never (a 3.1.1 persistent session)
    left: float = 0.0  # when the last connection ended (0: connected, or never left)
    pubrel: list[int] = []


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(Record).decode


def id_hash(client_id: str) -> str:
    return go_hash(client_id)


def sub_key(subject: str, queue: str) -> str:
    """A session's key for a subscription: its subject, with a shared subscription's group after a space
    (the group changes who gets a message, so `$share/g/t` and `t` are two subscriptions)."""
    return f"{subject} {queue}" if queue else subject


@dataclass
class Session:
    client_id: str
    origin: str
    clean: bool = True
    expiry: int = -1
    subs: dict[str, SubState] = field(default_factory=dict)
    cons: dict[str, dict[str, Any]] = field(default_factory=dict)
    pubrel: set[int] = field(default_factory=set)
    left: float = 0.0
    seq: int = 0  # the record's sequence in $MQTT_sess (0: never stored)
    present: bool = False  # restored from a stored record
    hash: str = ""

    def __post_init__(self) -> None:
        self.hash = id_hash(self.client_id)

    @property
    def subject(self) -> str:
        return SESS_PREFIX + self.hash

    @property
    def persistent(self) -> bool:
        return not self.clean and self.expiry != 0

    def expired(self, now: float | None = None) -> bool:
        if self.expiry < 0 or not self.left:
            return False
        return (now or time.time()) - self.left >= self.expiry

    def encode(self) -> bytes:
        opts: dict[str, dict[str, Any]] = {}
        for k, s in self.subs.items():
            o: dict[str, Any] = {}
            if s.topic_filter:
                o["f"] = s.topic_filter
            if s.queue:
                o["q"] = s.queue
            if s.no_local:
                o["nl"] = True
            if s.retain_as_published:
                o["rap"] = True
            if s.sub_id:
                o["id"] = s.sub_id
            if o:
                opts[k] = o
        rec = Record(origin=self.origin, id=self.client_id, clean=self.clean,
                     subs={k: s.qos for k, s in self.subs.items()}, cons=self.cons, opts=opts, expiry=self.expiry,
                     left=self.left, pubrel=sorted(self.pubrel))
        return _encode(rec)

    @classmethod
    def decode(cls, data: bytes, seq: int) -> Session:
        rec = _decode(data)
        s = cls(rec.id, rec.origin, clean=rec.clean, expiry=rec.expiry, cons=dict(rec.cons),
                pubrel=set(rec.pubrel), left=rec.left, seq=seq, present=True)
        for k, qos in rec.subs.items():
            o = rec.opts.get(k, {})
            s.subs[k] = SubState(qos, o.get("f", ""), o.get("q", ""), bool(o.get("nl")), bool(o.get("rap")),
                                 int(o.get("id", 0)))
        return s
