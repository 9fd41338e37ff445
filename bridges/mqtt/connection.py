"""MQTTConnection: the MQTT kind of Connection. It turns packets (from the sans-I/O codec) into router
calls and session changes, and router deliveries into PUBLISH packets.

QoS 0 messages go through plain subscriptions on the mapped NATS subjects. A QoS 1/2 subscription is a
durable JetStream consumer on `$MQTT_msgs` (as in nats-server) pushing to `$MQTT.sub.<id>`: the
message's packet id is tied to the consumer's ack subject, and the PUBACK (or PUBREC) acks it, so
in-flight messages are the consumer's pending ones and survive a restart. A QoS 1 PUBLISH is PUBACKed
once what it was stored in (a stream capturing the subject, `$MQTT_msgs`) is committed.

Packets are handled in order. Most are handled at once; those that wait for JetStream (CONNECT,
SUBSCRIBE, a QoS 2 or retained PUBLISH) make the packets after them wait in `_backlog`.
"""

from __future__ import annotations

import asyncio
import collections
import os
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from bridges.mqtt import natsmsg
from bridges.mqtt.codec import (
    EMPTY_PROPERTIES,
    MQTTDecoder,
    MQTTProtocolError,
    encode,
    encode_properties,
    encode_puback,
    encode_publish,
)
from bridges.mqtt.jsapi import JSApiFailure
from bridges.mqtt.manager import MQTTAccount
from bridges.mqtt.natsmsg import Retained, mqtt_header, mqtt_qos
from bridges.mqtt.packets import (
    MQTT_5,
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
    ReasonCode,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    Will,
)
from bridges.mqtt.session import (
    MSGS_PREFIX,
    MSGS_STREAM,
    QOS2IN_PREFIX,
    QOS2IN_STREAM,
    SUB_PREFIX,
    Session,
    SubState,
    sub_key,
)
from bridges.mqtt.topics import (
    TopicError,
    filter_to_subjects,
    ignore_for_reserved,
    is_reserved_subscription,
    parse_shared,
    subject_to_topic,
    topic_to_subject,
    validate_topic_filter,
    validate_topic_name,
)
from edged.connections.connection import Connection
from edged.log import log
from edged.routing.receiver import KIND_CLIENT, Message, Subscription
from edged.security.auth import AuthError

if TYPE_CHECKING:
    from bridges.mqtt.service import MQTTService
    from edged.routing.accounts import Account
    from edged.server import Server

_MSGS_PREFIX_B = MSGS_PREFIX.encode()
_MSGS_AT = len(_MSGS_PREFIX_B)
_PUB_FIRST = natsmsg.PUB_FIRST
_PUB_AT = len(_PUB_FIRST)
_EXPIRY_KEY = b"\r\n" + natsmsg.EXPIRY_HEADER.encode() + b":"
# topic names of PUBLISHes already checked -> their subject: a publisher repeats a few topics (bounded)
_SUBJECTS: dict[str, str] = {}
TOPIC_ALIAS_MAX = 64  # topic aliases a client may set up with edged (MQTT 5)
RECEIVE_MAX = 65535
REPLY_HEADER = b"Nmqtt-Reply"
_REPLY_KEY = b"\r\n" + REPLY_HEADER + b":"


class MQTTSub(Subscription):
    """A subscription of an MQTT connection: `st` is its session state; `js` marks the subscription on a
    consumer's deliver subject (QoS 1/2), as opposed to the plain one on the mapped subject."""

    __slots__ = ("st", "js", "reserved", "key")

    def __init__(self, conn: MQTTConnection, subject: str, queue: str | None, sid: str, st: SubState, js: bool,
                 key: str) -> None:
        super().__init__(conn, subject, queue, sid)
        self.st = st
        self.js = js
        self.key = key
        self.reserved = is_reserved_subscription(key.partition(" ")[0])


class _Decoder:
    """The codec, with its error turned into an event so the base's read path stays as it is."""

    __slots__ = ("dec",)

    def __init__(self, max_packet_size: int) -> None:
        self.dec = MQTTDecoder(max_packet_size)

    def feed(self, data: bytes) -> list[Any]:
        try:
            return self.dec.feed(data)
        except MQTTProtocolError as e:
            return [*e.packets, e]


class MQTTConnection(Connection):
    kind = KIND_CLIENT
    headers = True

    def __init__(self, server: Server, service: MQTTService, websocket: bool = False) -> None:
        super().__init__(server)
        self.service = service
        self.websocket = websocket
        self.max_packet = service.max_packet_size
        self.parser = _Decoder(self.max_packet)
        self.level = 4
        self.client_id = ""
        self.connected = False
        self.account: Account | None = None
        self.macc: MQTTAccount | None = None
        self.session: Session | None = None
        self.user = ""
        self.perms: Any = None
        self.keep_alive = 0
        self.will: Will | None = None
        self.tls_info: dict[str, Any] | None = None
        # outgoing QoS 1/2: packet id -> (the consumer's ack subject or b"", qos) until PUBACK / PUBREC
        self.inflight: dict[int, tuple[bytes, int]] = {}
        # the consumer acks of the PUBACKs (PUBRECs) handled since the last packet of another kind: routed
        # as one run (`_send_acks`), before any other packet and at the end of each read
        self._acking: list[bytes] = []
        self._topics: dict[bytes, bytes] = {}  # a delivered `$MQTT.msgs.` subject -> its topic, encoded
        self._last_pi = 0
        # incoming QoS 2: packet id -> the message (subject, reply, hdr, payload, retained) until PUBREL
        self.qos2_in: dict[int, tuple[str, str, bytes, bytes, Retained | None]] = {}
        self.client_receive_max = RECEIVE_MAX
        self.client_max_packet = 0
        self.aliases_in: dict[int, str] = {}
        self.request_problem_info = True
        self._backlog: collections.deque[Any] = collections.deque()
        self._busy = False
        self._acks: collections.deque[tuple[Awaitable[None] | None, bytes]] = collections.deque()
        self._acks_on: Awaitable[None] | None = None  # the last commit `_acks_ready` was hooked on
        self._left: asyncio.Future[None] | None = None  # done once this connection let go of its session
        self._taken_over = False
        self._will_sent = False
        self._ka: asyncio.TimerHandle | None = None
        # per subscription key: stream sequences up to which a resumed consumer's deliveries are resends
        self._dup_upto: dict[str, int] = {}

    # ------------------------------------------------------------------ connection events

    def _connected(self, transport: Any) -> None:
        if transport.get_extra_info("ssl_object") is not None:
            self.tls_info = self.server.tls_info_of(transport)
        self.server.register_client(self)
        self._left = self.server.loop.create_future()
        # no CONNECT within the auth timeout: closed, as nats-server does for MQTT
        self._later(self.service.connect_timeout, self._connect_timeout)

    def _connect_timeout(self) -> None:
        if not self.connected and not self.closed and not self._busy:
            self.close("Authentication Timeout")

    def ping_interval(self) -> float:
        return 0.0  # MQTT keep-alive is the client's to drive

    def process(self, events: list[Any]) -> None:
        for ev in events:
            if self.closed:
                break
            if self._busy:
                self._backlog.append(ev)
                continue
            r = self._handle(ev)
            if r is not None:
                self._run(r)
        if self._acking:
            self._send_acks()

    def _run(self, aw: Awaitable[None]) -> None:
        self._busy = True
        self.server.loop.create_task(self._drain(aw))

    async def _drain(self, aw: Awaitable[None] | None) -> None:
        """Await a packet's work, then handle what arrived meanwhile, in order."""
        try:
            while True:
                if aw is not None:
                    try:
                        await aw
                    except JSApiFailure as e:
                        log.error("%s:%d - cid:%d - MQTT: JetStream: %s", self.host, self.port, self.cid, e)
                        self._fail(ReasonCode.UNSPECIFIED_ERROR, "JetStream error")
                    except Exception:
                        log.exception("MQTT packet handling failed")
                        self._fail(ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR, "internal error")
                if self.closed or not self._backlog:
                    break
                aw = None
                srv = self.server
                ctx = srv.reading
                ctx.begin(self)
                try:
                    while self._backlog and aw is None and not self.closed:
                        aw = self._handle(self._backlog.popleft())
                    if self._acking:
                        self._send_acks()
                    for hook in ctx.hooks:
                        hook()
                    if srv._flushq:
                        srv.flush_now()
                finally:
                    ctx.end()
                if aw is None:
                    break
        finally:
            self._busy = False
            self.server.flush_now()

    def _handle(self, p: Any) -> Awaitable[None] | None:
        if type(p) is PubAck:  # a subscriber's, the most frequent packet: one run of acks per read
            e = self.inflight.pop(p.packet_id, None)
            if e is not None and e[0]:
                self._acking.append(e[0])
            return None
        if self._acking:
            self._send_acks()  # acks go before whatever this packet does (an UNSUBSCRIBE, a DISCONNECT)
        if isinstance(p, Publish):
            if not self.connected:
                return self._fail(ReasonCode.PROTOCOL_ERROR, "PUBLISH before CONNECT")
            return self._on_publish(p)
        if isinstance(p, PubAck):  # a subclass (never made by the codec)
            self._on_puback(p.packet_id)
        elif isinstance(p, PubRec):
            return self._on_pubrec(p.packet_id)
        elif isinstance(p, PubRel):
            return self._on_pubrel(p.packet_id)
        elif isinstance(p, PubComp):
            self._on_pubcomp(p.packet_id)
        elif isinstance(p, PingReq):
            self._send(PingResp())
        elif isinstance(p, Subscribe):
            return self._on_subscribe(p)
        elif isinstance(p, Unsubscribe):
            return self._on_unsubscribe(p)
        elif isinstance(p, Connect):
            if self.connected:
                return self._fail(ReasonCode.PROTOCOL_ERROR, "second CONNECT")
            return self._on_connect(p)
        elif isinstance(p, Disconnect):
            self._on_disconnect(p)
        elif isinstance(p, MQTTProtocolError):
            self._protocol_error(p)
        else:  # a packet only a server sends, or AUTH (no enhanced authentication)
            self._fail(ReasonCode.PROTOCOL_ERROR, f"unexpected {type(p).__name__}")
        return None

    # ------------------------------------------------------------------ output

    def _send(self, p: Packet) -> None:
        self.send_raw(encode(p, self.level))

    def _send_ordered(self, done: Awaitable[None] | None, data: bytes) -> None:
        """A reply that must wait for `done` (a store commit), sent in the order replies were made."""
        waiting = done is not None and not _is_done(done)
        if not waiting and not self._acks:
            self.send_raw(data)
            return
        self._acks.append((done, data))
        if waiting:
            # the PUBLISHes of one read share one commit: one callback sends all their PUBACKs
            if done is not self._acks_on:
                self._acks_on = done
                self.service.after_commit(done, self)
        else:
            self.server.loop.call_soon(self._acks_ready, None)

    def _acks_ready(self, f: Any) -> None:
        """Replies whose commit is done go out, in order, in one write; `f` is a commit just made (its
        future resolves right after)."""
        if f is not None and f.done():  # the future's callback (a commit that failed, or a store that tells none)
            self.service._commit_waiters.pop(f, None)
        q = self._acks
        out = []
        while q and (q[0][0] is None or q[0][0] is f or _is_done(q[0][0])):
            out.append(q.popleft()[1])
        if out:
            self.send_raw(b"".join(out) if len(out) > 1 else out[0])
            self.server.flush_now()

    def _fail(self, rc: int, why: str) -> None:
        """Close for a protocol fault: MQTT 5 is told the reason in a DISCONNECT, 3.1.1 just closed."""
        if self.closed:
            return None
        log.error("%s:%d - cid:%d - MQTT: %s", self.host, self.port, self.cid, why)
        if self.level == MQTT_5 and self.connected:
            props = Properties(reason_string=why) if self.request_problem_info else None
            self._send(Disconnect(int(rc), props))
        self.close("Protocol Violation" if rc in (ReasonCode.PROTOCOL_ERROR, ReasonCode.MALFORMED_PACKET)
                   else "Client Closed")
        return None

    def _protocol_error(self, e: MQTTProtocolError) -> None:
        if e.in_connect and not self.connected:
            self.level = e.protocol_level or 4
            log.error("%s:%d - cid:%d - MQTT: bad CONNECT: %s", self.host, self.port, self.cid, e)
            self._send(ConnAck(False, e.reason_code))
            self.close("Protocol Violation")
            return
        if e.reason_code == ReasonCode.PACKET_TOO_LARGE:
            self._fail(e.reason_code, str(e))
            self.close("Maximum Payload Exceeded")
            return
        self._fail(e.reason_code, str(e))

    # ------------------------------------------------------------------ CONNECT

    async def _on_connect(self, c: Connect) -> None:
        srv = self.server
        self.level = c.protocol_level
        props = c.properties
        v5 = self.level == MQTT_5
        if props is not None:
            if props.receive_maximum:
                self.client_receive_max = props.receive_maximum
            if props.maximum_packet_size:
                self.client_max_packet = props.maximum_packet_size
            if props.request_problem_information == 0:
                self.request_problem_info = False
            if props.authentication_method:
                log.error("%s:%d - cid:%d - MQTT: enhanced authentication (%s) is not supported", self.host,
                          self.port, self.cid, props.authentication_method)
                self._send(ConnAck(False, ReasonCode.BAD_AUTHENTICATION_METHOD,
                                   Properties(reason_string="enhanced authentication is not supported")))
                self.close("Authentication Failure")
                return
        # who is it
        try:
            res = self.service.authenticate(self, c)
        except AuthError as e:
            srv.auth_errors += 1
            log.error("%s:%d - cid:%d - MQTT authentication error: %s", self.host, self.port, self.cid, e)
            # nats-server answers 3.1.1 "not authorized" whatever failed; MQTT 5 can say more
            bad = v5 and (c.username is not None or c.password is not None)
            self._send(ConnAck(False, ReasonCode.BAD_USER_NAME_OR_PASSWORD if bad else ReasonCode.NOT_AUTHORIZED))
            self.close("Authentication Failure")
            return
        acc = srv.account_for(res)
        if acc is None:
            self._send(ConnAck(False, ReasonCode.NOT_AUTHORIZED))
            self.close("Authentication Failure")
            return
        self.account = acc
        self.user = res.user
        self.perms = srv.permission_checker(res.permissions)
        # client id
        cid = c.client_id
        assigned = None
        if not cid:
            if not c.clean_start and not v5:
                self._send(ConnAck(False, ReasonCode.CLIENT_IDENTIFIER_NOT_VALID))
                self.close("Protocol Violation")
                return
            cid = assigned = os.urandom(12).hex()
        self.client_id = cid
        if c.will is not None:
            try:
                validate_topic_name(c.will.topic)
                topic_to_subject(c.will.topic)
            except TopicError as e:
                log.error("%s:%d - cid:%d - MQTT: bad will topic: %s", self.host, self.port, self.cid, e)
                self._send(ConnAck(False, ReasonCode.TOPIC_NAME_INVALID))
                self.close("Protocol Violation")
                return
        macc = self.service.account_state(acc)
        self.macc = macc
        try:
            await macc.ready()
        except JSApiFailure as e:  # no JetStream for this account: nowhere to keep MQTT state
            log.error("%s:%d - cid:%d - MQTT: account %s: %s", self.host, self.port, self.cid, acc.name, e)
            self._send(ConnAck(False, ReasonCode.SERVER_UNAVAILABLE))
            self.close("Client Closed")
            return
        if self.closed:
            return
        # client-id takeover: the connection holding the id is closed (MQTT 5 told why) and let go first
        old = macc.owners.get(cid)
        if old is not None and old is not self:
            old.take_over()
            if old._left is not None:
                await asyncio.wait_for(asyncio.shield(old._left), 10.0)
        if self.closed:
            return
        macc.owners[cid] = self
        self.service.cancel_will(acc.name, cid)
        # the session
        if v5:
            exp = props.session_expiry_interval if props is not None and props.session_expiry_interval else 0
            expiry = -1 if exp == 0xFFFFFFFF else exp
            clean = expiry == 0
        else:
            expiry, clean = -1, c.clean_start
        existing = macc.session_for(cid)
        # a session ends with its connection unless it is persistent (a taken-over clean one too)
        if existing is not None and (c.clean_start or not existing.persistent):
            await macc.drop_session(existing)
            existing = None
        elif existing is None and macc.sessions.get(cid) is not None:
            await macc.drop_session(macc.sessions[cid])  # expired
        present = existing is not None
        s = existing if existing is not None else Session(cid, macc.api.id)
        s.clean, s.expiry = clean, expiry
        self.session = s
        macc.attach(s)
        if s.persistent:
            await macc.save(s)
        if self.closed:
            return
        self.keep_alive = c.keep_alive
        self.will = c.will
        self.connected = True
        self.parser.dec.max_packet_size = self.max_packet
        ack_props = None
        if v5:
            ack_props = Properties(
                receive_maximum=RECEIVE_MAX, topic_alias_maximum=TOPIC_ALIAS_MAX,
                maximum_packet_size=self.max_packet, retain_available=1, wildcard_subscription_available=1,
                subscription_identifier_available=1, shared_subscription_available=1,
                assigned_client_identifier=assigned,
            )
            if self.service.reject_qos2:
                ack_props.maximum_qos = 1
        self._send(ConnAck(present, 0, ack_props))
        for key, st in list(s.subs.items()):
            await self._subscribe_key(key, st, restore=True)
        for pi in sorted(s.pubrel):
            self._send(PubRel(pi))
        if self.keep_alive:
            self._arm_keep_alive()
        log.debug("%s:%d - cid:%d - MQTT client %r connected (level %d, session present %s)", self.host,
                  self.port, self.cid, cid, self.level, present)

    @property
    def mqtt_client(self) -> str:
        """The MQTT client id (monitoring counts connections that have one)."""
        return self.client_id

    def take_over(self) -> None:
        """Another connection CONNECTed with this client id."""
        self._taken_over = True
        if self.level == MQTT_5 and self.connected:
            self._send(Disconnect(ReasonCode.SESSION_TAKEN_OVER))
        self.close("Duplicate Client ID")

    def _arm_keep_alive(self, delay: float = 0.0) -> None:
        """One timer, re-armed for the time left (not one per check: a long-lived connection would pile
        them up in the base's timer list)."""
        if self._ka is not None:
            self._ka.cancel()
        self._ka = self.server.loop.call_later(delay or self.keep_alive * 1.5, self._check_keep_alive)

    def _check_keep_alive(self) -> None:
        if self.closed:
            return
        idle = time.time() - self.last_activity
        if idle >= self.keep_alive * 1.5:
            log.debug("%s:%d - cid:%d - MQTT keep-alive expired", self.host, self.port, self.cid)
            if self.level == MQTT_5:
                self._send(Disconnect(ReasonCode.KEEP_ALIVE_TIMEOUT))
            self.close("Stale Connection")
            return
        self._arm_keep_alive(self.keep_alive * 1.5 - idle)

    def _on_disconnect(self, d: Disconnect) -> None:
        if d.reason_code != ReasonCode.DISCONNECT_WITH_WILL_MESSAGE:
            self.will = None
        s = self.session
        props = d.properties
        if s is not None and props is not None and props.session_expiry_interval is not None:
            exp = props.session_expiry_interval
            if s.expiry == 0 and exp:
                self._fail(ReasonCode.PROTOCOL_ERROR, "session expiry set on DISCONNECT after 0 on CONNECT")
                return
            s.expiry = -1 if exp == 0xFFFFFFFF else exp
            s.clean = s.expiry == 0
        self.close("Client Closed")

    # ------------------------------------------------------------------ PUBLISH in

    def _on_publish(self, p: Publish) -> Awaitable[None] | None:
        topic = p.topic
        props = p.properties
        reply = ""
        if props is not None:
            if props.topic_alias is not None:
                a = props.topic_alias
                if a == 0 or a > TOPIC_ALIAS_MAX:
                    return self._fail(ReasonCode.TOPIC_ALIAS_INVALID, f"topic alias {a} out of range")
                if topic:
                    self.aliases_in[a] = topic
                else:
                    t = self.aliases_in.get(a)
                    if t is None:
                        return self._fail(ReasonCode.PROTOCOL_ERROR, f"unknown topic alias {a}")
                    topic = t
            if props.response_topic:
                try:
                    reply = topic_to_subject(props.response_topic)
                except TopicError as e:
                    return self._fail(ReasonCode.TOPIC_NAME_INVALID, str(e))
        subject = _SUBJECTS.get(topic)
        if subject is None:
            try:
                validate_topic_name(topic)
                subject = topic_to_subject(topic)
            except TopicError as e:
                return self._fail(ReasonCode.TOPIC_NAME_INVALID, str(e))
            if len(_SUBJECTS) >= 4096:
                _SUBJECTS.clear()
            _SUBJECTS[topic] = subject
        if p.qos == 2 and self.service.reject_qos2:
            return self._fail(ReasonCode.QOS_NOT_SUPPORTED, "QoS 2 PUBLISH rejected by configuration")
        self.in_msgs += 1
        self.in_bytes += len(p.payload)
        perms = self.perms
        if perms is not None and not perms.can_publish(subject):
            # nats-server drops it and acknowledges it all the same; MQTT 5 is told it was not authorized
            log.error("%s:%d - cid:%d - MQTT: Permissions Violation for Publish to %r", self.host, self.port,
                      self.cid, subject)
            rc = ReasonCode.NOT_AUTHORIZED if self.level == MQTT_5 else 0
            if p.qos == 1:
                self._send_ordered(None, encode(PubAck(p.packet_id, rc), self.level))
            elif p.qos == 2:
                self._send_ordered(None, encode(PubRec(p.packet_id, rc), self.level))
            return None
        hdr = _publish_header(p.qos, props, p.retain)
        retained = None
        if p.retain:
            retained = Retained(subject, topic, p.payload, (p.qos << 1) | 1, self.macc.api.id if self.macc else "",
                                self.user)
        if p.qos == 2:
            return self._store_qos2(p.packet_id, subject, reply, hdr, p.payload, retained)
        done = self.service.publish(self, self.account, subject, reply, hdr, p.payload, p.qos)
        if retained is not None and self.macc is not None:
            rdone = self.server.loop.create_task(self.macc.retained.put(retained))
            done = rdone if done is None else _both(done, rdone)
        if p.qos == 1:
            self._send_ordered(done, encode_puback(p.packet_id))
        return None

    async def _store_qos2(self, pi: int, subject: str, reply: str, hdr: bytes, payload: bytes,
                          retained: Retained | None) -> None:
        """QoS 2 in, nats-server's method A: store it (`$MQTT.qos2.in.<session>.<pi>`), PUBREC; it is
        published on PUBREL. A PUBLISH again with the same id before that is only PUBRECed."""
        s = self.session
        if pi not in self.qos2_in and self.macc is not None and s is not None:
            self.qos2_in[pi] = (subject, reply, hdr, payload, retained)
            h = hdr[:-2] + b"Nmqtt-Subject:" + subject.encode() + b"\r\n"
            if reply:
                h += REPLY_HEADER + b":" + reply.encode() + b"\r\n"
            if retained is not None:
                h += b"Nmqtt-Retain:1\r\n"
            try:
                await self.macc.api.store(f"{QOS2IN_PREFIX}{s.hash}.{pi}", payload, h + b"\r\n")
            except JSApiFailure as e:
                # kept already (one per subject, discard new): nats-server's check, by the same text
                if e.err_code != 10077 or "maximum messages per subject" not in str(e):
                    raise
        self._send(PubRec(pi))

    async def _on_pubrel(self, pi: int) -> None:
        s = self.session
        m = self.qos2_in.pop(pi, None)
        if m is None and self.macc is not None and s is not None:
            stored = await self.macc.api.last_msg(QOS2IN_STREAM, f"{QOS2IN_PREFIX}{s.hash}.{pi}")
            if stored is not None:
                h = stored.header or b""
                subject = natsmsg.get_header(h, "Nmqtt-Subject") or ""
                reply = natsmsg.get_header(h, REPLY_HEADER.decode()) or ""
                qos_hdr = _publish_header(2, None)
                user = natsmsg.extras(h)
                hdr = mqtt_header(2, user.user, user.correlation, user.content_type, user.payload_format) \
                    if user.user or user.correlation else qos_hdr
                retained = None
                if natsmsg.get_header(h, "Nmqtt-Retain"):
                    retained = Retained(subject, subject_to_topic(subject), stored.payload, 5, self.macc.api.id,
                                        self.user)
                m = (subject, reply, hdr, stored.payload, retained)
        if m is not None and self.macc is not None and s is not None:
            subject, reply, hdr, payload, retained = m
            done = self.service.publish(self, self.account, subject, reply, hdr, payload, 2)
            if done is not None:
                await done
            if retained is not None:
                await self.macc.retained.put(retained)
            await self.macc.api.purge_subject(QOS2IN_STREAM, f"{QOS2IN_PREFIX}{s.hash}.{pi}")
        self._send(PubComp(pi))

    # ------------------------------------------------------------------ acks of what edged sent

    def _on_puback(self, pi: int) -> None:
        e = self.inflight.pop(pi, None)
        if e is not None and e[0]:
            self._ack_now(e[0])

    def _send_acks(self) -> None:
        """The consumer acks of the PUBACKs just handled, routed as one run: a consumer takes the run in
        one call (`Account.route_empties`), as a NATS client's plain acks of one read."""
        acks = self._acking
        self._acking = []
        macc = self.macc
        if macc is not None:
            client = macc.api.client
            client.account.route_empties(acks, client)

    def _on_pubrec(self, pi: int) -> Awaitable[None] | None:
        """QoS 2 out, PUBREC: the message is the client's now (the consumer's delivery is acked); the PUBREL
        to send is noted in a persistent session's record before it goes, so it is sent again after a
        reconnect or a restart until the PUBCOMP."""
        e = self.inflight.pop(pi, None)
        s = self.session
        if e is not None and e[0]:
            self._ack_now(e[0])
        if s is None or not s.persistent or self.macc is None:
            self._send(PubRel(pi))
            return None
        s.pubrel.add(pi)
        return self._pubrel_after_save(s, pi)

    async def _pubrel_after_save(self, s: Session, pi: int) -> None:
        assert self.macc is not None
        await self.macc.save(s)
        self._send(PubRel(pi))

    def _on_pubcomp(self, pi: int) -> None:
        s = self.session
        if s is not None and pi in s.pubrel:
            s.pubrel.discard(pi)
            self._save_soon()

    def _save_soon(self) -> None:
        s = self.session
        if s is not None and s.persistent and self.macc is not None:
            self.server.loop.create_task(self._save(s))

    async def _save(self, s: Session) -> None:
        try:
            assert self.macc is not None
            await self.macc.save(s)
        except JSApiFailure as e:
            log.error("MQTT: saving session %r: %s", s.client_id, e)

    # ------------------------------------------------------------------ SUBSCRIBE / UNSUBSCRIBE

    async def _on_subscribe(self, p: Subscribe) -> None:
        s = self.session
        assert s is not None and self.account is not None
        v5 = self.level == MQTT_5
        sub_id = 0
        if p.properties is not None and p.properties.subscription_identifiers:
            sub_id = p.properties.subscription_identifiers[0]
        codes: list[int] = []
        retained_out: list[tuple[SubState, str]] = []
        for topic_filter, o in p.subscriptions:
            try:
                group, f = parse_shared(topic_filter)
                validate_topic_filter(f)
                subjects = filter_to_subjects(f)
            except TopicError as e:
                log.error("%s:%d - cid:%d - MQTT: bad filter %r: %s", self.host, self.port, self.cid, topic_filter, e)
                codes.append(ReasonCode.TOPIC_FILTER_INVALID if v5 else 0x80)
                continue
            if group is not None and o.no_local:
                return self._fail(ReasonCode.PROTOCOL_ERROR, "no local on a shared subscription")
            qos = min(o.qos, 2)
            if qos == 2 and self.service.downgrade_qos2_sub:
                qos = 1
            perms = self.perms
            if perms is not None and not all(perms.can_subscribe(x, group) for x in subjects):
                log.error("%s:%d - cid:%d - MQTT: Permissions Violation for Subscription to %r", self.host,
                          self.port, self.cid, f)
                codes.append(ReasonCode.NOT_AUTHORIZED if v5 else 0x80)
                continue
            new = False
            for subject in subjects:
                key = sub_key(subject, group or "")
                st = SubState(qos, topic_filter, group or "", o.no_local, o.retain_as_published, sub_id)
                new = (key not in s.subs) or new
                await self._subscribe_key(key, st)
            # no retained messages for a shared subscription [MQTT-4.8.2-6 note]; retain handling 1: only if new
            if group is None and (o.retain_handling == 0 or (o.retain_handling == 1 and new)):
                retained_out.append((st, f))
            codes.append(qos)
        if s.persistent:
            await self.macc.save(s) if self.macc is not None else None
        self._send(SubAck(p.packet_id, codes))
        for st, f in retained_out:
            self._send_retained(st, f)

    async def _subscribe_key(self, key: str, st: SubState, restore: bool = False) -> None:
        """Make (or change, or restore after a reconnect) one NATS subject of a subscription."""
        s = self.session
        macc = self.macc
        acc = self.account
        assert s is not None and macc is not None and acc is not None
        subject, _, queue = key.partition(" ")
        old = s.subs.get(key)
        plain = self.subs.get(key)
        if plain is None:
            plain = MQTTSub(self, subject, queue or None, key, st, False, key)
            self.subs[key] = plain
            acc.subscribe(plain)
        else:
            plain.st = st  # type: ignore[attr-defined]
        s.subs[key] = st
        if queue:
            pass
        elif restore:
            if st.qos > 0:
                macc.watch(subject)
        elif old is None or old.qos == 0:
            if st.qos > 0:
                macc.watch(subject)
        elif st.qos == 0:
            macc.unwatch(subject)
        cfg = s.cons.get(key)
        if queue:
            # a shared subscription is a queue group: one member gets each message, at the lower of the two
            # QoS, through the plain subscription (a consumer per member would hand each message to two)
            return
        if st.qos == 0:
            if cfg is not None:
                del s.cons[key]
                self._drop_js_sub(key)
                if not queue:
                    await macc.api.delete_consumer(MSGS_STREAM, cfg["durable_name"])
            return
        if cfg is None:
            mo = self.service.opts
            max_ack = max(1, min(mo.max_ack_pending or 1024, self.client_receive_max))
            if queue:  # a shared subscription's members share one consumer, delivering to the group
                from edged.jetstream.stream import go_hash
                h = go_hash(f"{acc.name} {queue} {subject}")
                name, deliver = f"share_{h}", f"{SUB_PREFIX}share.{h}"
            else:
                nid = os.urandom(8).hex()
                name, deliver = f"{s.hash}_{nid}", SUB_PREFIX + nid
            cfg = {"durable_name": name, "deliver_subject": deliver, "ack_policy": "explicit",
                   "deliver_policy": "new", "filter_subject": MSGS_PREFIX + subject,
                   "ack_wait": int(mo.ack_wait * 1e9), "max_ack_pending": max_ack,
                   "mem_storage": mo.consumer_memory_storage}
            if queue:
                cfg["deliver_group"] = queue
            if mo.consumer_inactive_threshold:
                cfg["inactive_threshold"] = int(mo.consumer_inactive_threshold * 1e9)
            await macc.api.create_consumer(MSGS_STREAM, cfg)
            s.cons[key] = cfg
        elif restore and not queue:
            await self._resume_consumer(key, cfg)
            cfg = s.cons[key]
        js_sid = "js " + key
        js = self.subs.get(js_sid)
        if js is None:
            js = MQTTSub(self, cfg["deliver_subject"], queue or None, js_sid, st, True, key)
            self.subs[js_sid] = js
            acc.subscribe(js)
        else:
            js.st = st  # type: ignore[attr-defined]

    async def _resume_consumer(self, key: str, cfg: dict[str, Any]) -> None:
        """A persistent session is back: what its consumer delivered and nobody acked is sent again now,
        not after ack_wait (nats-server's wait). The consumer is replaced by one starting right after
        its ack floor (made before the old one goes, so the interest stream keeps those messages)."""
        s = self.session
        macc = self.macc
        assert s is not None and macc is not None
        info = await macc.api.consumer_info(MSGS_STREAM, cfg["durable_name"])
        if info is None:  # gone (deleted by hand, or a store lost): start a new one from now
            new = dict(cfg)
            await macc.api.create_consumer(MSGS_STREAM, new)
            return
        if not info.get("num_ack_pending"):
            return
        floor = int(info.get("ack_floor", {}).get("stream_seq", 0))
        # what the old consumer delivered may have reached the client: sent again with DUP [MQTT-3.3.1-1]
        self._dup_upto[key] = int(info.get("delivered", {}).get("stream_seq", 0))
        nid = os.urandom(8).hex()
        new = dict(cfg)
        new.update(durable_name=f"{s.hash}_{nid}", deliver_subject=SUB_PREFIX + nid,
                   deliver_policy="by_start_sequence", opt_start_seq=floor + 1)
        await macc.api.create_consumer(MSGS_STREAM, new)
        s.cons[key] = new
        await macc.api.delete_consumer(MSGS_STREAM, cfg["durable_name"])
        await macc.save(s)

    def _drop_js_sub(self, key: str) -> None:
        js = self.subs.pop("js " + key, None)
        if js is not None and self.account is not None:
            self.account.unsubscribe(js)

    async def _on_unsubscribe(self, p: Unsubscribe) -> None:
        s = self.session
        macc = self.macc
        assert s is not None and macc is not None and self.account is not None
        codes = []
        for topic_filter in p.topic_filters:
            try:
                group, f = parse_shared(topic_filter)
                subjects = filter_to_subjects(f)
            except TopicError:
                codes.append(ReasonCode.TOPIC_FILTER_INVALID)
                continue
            found = False
            for subject in subjects:
                key = sub_key(subject, group or "")
                st = s.subs.pop(key, None)
                plain = self.subs.pop(key, None)
                if plain is not None:
                    self.account.unsubscribe(plain)
                if st is None:
                    continue
                found = True
                self._drop_js_sub(key)
                if st.qos > 0 and not group:
                    macc.unwatch(subject)
                cfg = s.cons.pop(key, None)
                if cfg is not None and not group:
                    await macc.api.delete_consumer(MSGS_STREAM, cfg["durable_name"])
            codes.append(0 if found else ReasonCode.NO_SUBSCRIPTION_EXISTED)
        if s.persistent:
            await macc.save(s)
        self._send(UnsubAck(p.packet_id, codes if self.level == MQTT_5 else []))

    def _send_retained(self, st: SubState, topic_filter: str) -> None:
        macc = self.macc
        if macc is None:
            return
        for subject in filter_to_subjects(topic_filter):
            for r in macc.retained.matching(subject):
                qos = min(r.qos, st.qos)
                pi = self._track(b"", qos) if qos else 0
                self._publish_out(r.topic, r.payload, qos, True, False, pi, None, "",
                                  [st.sub_id] if st.sub_id else [])

    # ------------------------------------------------------------------ delivery (router -> PUBLISH)

    def _track(self, ack: bytes, qos: int) -> int:
        pi = self._last_pi
        for _ in range(65535):
            pi = pi % 65535 + 1
            if pi not in self.inflight and (self.session is None or pi not in self.session.pubrel):
                break
        self._last_pi = pi
        self.inflight[pi] = (ack, qos)
        return pi

    def deliver(self, sub: Subscription, subject: bytes, reply: bytes, hdr: bytes | None, payload: bytes) -> None:
        if self.closed or not self.connected or not isinstance(sub, MQTTSub):
            return
        st = sub.st
        if st.qos > 0 and not sub.js and sub.queue is None and not (
                self.service.publishing and hdr is not None and hdr[_PUB_AT:_PUB_AT + 1] == b"0"
                and hdr.startswith(_PUB_FIRST)) and not subject.startswith(b"$MQTT."):
            # the QoS 1/2 copy comes through the session's consumer (told before any decoding); what MQTT
            # routes (`publishing`) has its QoS first in the header
            return
        if sub.js:
            self._deliver_js(sub, st, subject, reply, hdr, payload)
            return
        subj = subject.decode("utf-8", "surrogateescape")
        if ignore_for_reserved(sub.reserved, subj):
            return
        if self.perms is not None and self.perms.deny_delivery(subj):
            return
        pq = mqtt_qos(hdr)
        qos = 0
        if sub.queue is not None:
            qos = min(st.qos, 1 if pq is None else pq)
        if st.no_local and self.server.reading.origin is self:
            return
        sub.delivered += 1
        retain = st.retain_as_published and natsmsg.mqtt_retained(hdr)
        self._publish_out(subject_to_topic(subj), payload, qos, retain, False, self._track(b"", qos) if qos else 0, hdr,
                          reply.decode("utf-8", "surrogateescape"), [st.sub_id] if st.sub_id else [],
                          natsmsg.expiry(hdr))

    def takes_batch(self, sub: Subscription) -> bool:
        """A QoS 1/2 subscription's consumer hands over its deliveries as one run (`deliver_batch`)."""
        return type(sub) is MQTTSub and sub.js

    def deliver_batch(self, sub: Subscription, msgs: list[Message], nbytes: int) -> None:
        """`deliver` of each of a consumer's deliveries in turn. What is the same for the whole run is
        looked up once, and the usual message (to a 3.1.1 client, no expiry, nothing to filter out) is
        framed with no call per message but its encoding; any other goes through `_deliver_js`."""
        if self.closed or not self.connected or type(sub) is not MQTTSub or not sub.js:
            return
        st = sub.st
        deliver_js = self._deliver_js
        if self.level == MQTT_5 or self.perms is not None or st.no_local or st.retain_as_published or \
                sub.reserved or self._dup_upto:
            for m in msgs:
                deliver_js(sub, st, m[0], m[1], m[2], m[3])
            return
        topics = self._topics
        inflight = self.inflight
        pubrel = self.session.pubrel if self.session is not None else ()
        out = self.out
        pi = self._last_pi
        maxq = st.qos
        sent = size = added = 0
        for subject, ack, hdr, payload in msgs:
            topic = topics.get(subject)
            if topic is None and subject.startswith(_MSGS_PREFIX_B):
                if len(topics) >= 4096:
                    topics.clear()
                topic = topics[subject] = subject_to_topic(
                    subject[_MSGS_AT:].decode("utf-8", "surrogateescape")).encode()
            # the QoS the publisher gave, where edged writes it (first); a message with an expiry (or
            # another header layout) takes the full path
            q = hdr[_PUB_AT] - 48 if hdr and hdr.startswith(_PUB_FIRST) and len(hdr) > _PUB_AT else 0
            if topic is None or not 0 < q <= 2 or _EXPIRY_KEY in hdr:  # type: ignore[operator]
                self._last_pi = pi
                deliver_js(sub, st, subject, ack, hdr, payload)
                pi = self._last_pi
                continue
            qos = q if q < maxq else maxq
            # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>: a resend is DUP
            dup = ack.count(b".") >= 8 and ack.rsplit(b".", 5)[1] != b"1"
            nxt = pi % 65535 + 1
            if nxt in inflight or nxt in pubrel:
                self._last_pi = pi
                pi = self._track(ack, qos)
            else:
                pi = nxt
                inflight[pi] = (ack, qos)
            data = encode_publish(topic, payload, qos, pi, False, dup)
            out.append(data)
            sent += 1
            size += len(payload)
            added += len(data)
        self._last_pi = pi
        if sent:
            sub.delivered += sent
            self.out_msgs += sent
            self.out_bytes += size
            self.queued(added)

    def _deliver_js(self, sub: MQTTSub, st: SubState, subject: bytes, ack: bytes, hdr: bytes | None,
                    payload: bytes) -> None:
        if not subject.startswith(_MSGS_PREFIX_B):
            return
        nsubj = subject[_MSGS_AT:].decode("utf-8", "surrogateescape")
        if ignore_for_reserved(sub.reserved, nsubj):
            self._ack_now(ack)
            return
        pq = mqtt_qos(hdr)
        qos = min(st.qos, 2 if pq is None else pq)
        toks = ack.split(b".")
        # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>
        dup = len(toks) >= 9 and (toks[-5] != b"1" or (
            sub.key in self._dup_upto and toks[-4].isdigit() and int(toks[-4]) <= self._dup_upto[sub.key]))
        exp = natsmsg.expiry(hdr)
        if exp is not None and len(toks) >= 9 and toks[-2].isdigit():
            exp -= int((time.time_ns() - int(toks[-2])) / 1e9)
        skip = (exp is not None and exp <= 0) or (self.perms is not None and self.perms.deny_delivery(nsubj)) or (
            st.no_local and natsmsg.get_header(hdr, natsmsg.ORIGIN_HEADER) == str(self.cid))
        if skip or qos == 0:
            self._ack_now(ack)
            if skip:
                return
            pi = 0
        else:
            pi = self._track(ack, qos)
        sub.delivered += 1
        reply = (natsmsg.get_header(hdr, REPLY_HEADER.decode()) or "") if hdr and _REPLY_KEY in hdr else ""
        retain = st.retain_as_published and natsmsg.mqtt_retained(hdr)
        self._publish_out(subject_to_topic(nsubj), payload, qos, retain, dup, pi, hdr, reply,
                          [st.sub_id] if st.sub_id else [], exp)

    def _ack_now(self, ack: bytes) -> None:
        """Ack a consumer's delivery at once (from inside the delivery call too: the consumer takes
        re-entrant acks)."""
        if self.macc is not None:
            client = self.macc.api.client
            client.account.route(ack.decode(), ack, b"", None, b"", client)

    def _publish_out(self, topic: str, payload: bytes, qos: int, retain: bool, dup: bool, pi: int,
                     hdr: bytes | None, reply: str, sub_ids: list[int], expiry: int | None = None) -> None:
        props_b = None
        if self.level == MQTT_5:
            props = None
            if hdr or reply or sub_ids:
                x = natsmsg.extras(hdr)
                props = Properties(user_properties=x.user, correlation_data=x.correlation,
                                   content_type=x.content_type, payload_format_indicator=x.payload_format,
                                   subscription_identifiers=sub_ids, message_expiry_interval=expiry)
                if reply:
                    props.response_topic = subject_to_topic(reply)
            props_b = encode_properties(props) if props is not None else EMPTY_PROPERTIES
        data = encode_publish(topic.encode(), payload, qos, pi, retain, dup, props_b)
        if self.client_max_packet and len(data) > self.client_max_packet:
            # too big for the client [MQTT-3.1.2-24]: dropped as if delivered
            e = self.inflight.pop(pi, None) if pi else None
            if e is not None and e[0]:
                self._ack_now(e[0])
            return
        self.out_msgs += 1
        self.out_bytes += len(payload)
        self.out.append(data)
        self.queued(len(data))

    def auto_unsubscribe(self, sub: Subscription) -> None:
        pass

    # ------------------------------------------------------------------ closing

    def close(self, reason: str, flush: bool = True, abort: bool = False) -> None:
        if reason == "Server Shutdown" and not self.closed and self.connected and self.level == MQTT_5:
            self._send(Disconnect(ReasonCode.SERVER_SHUTTING_DOWN))
        super().close(reason, flush, abort)

    def _release(self) -> None:
        if self._ka is not None:
            self._ka.cancel()
        acc = self.account
        if acc is not None:
            for sub in self.subs.values():
                acc.unsubscribe(sub)
        self.subs.clear()
        self.server.unregister_client(self)
        macc, s = self.macc, self.session
        if self.will is not None and not self._will_sent and self.connected and acc is not None:
            self._will_sent = True
            delay = 0
            wp = self.will.properties
            if wp is not None and wp.will_delay_interval:
                delay = wp.will_delay_interval
                if s is not None and s.expiry >= 0:
                    delay = min(delay, s.expiry)
            self.service.send_will(self, acc, self.client_id, self.will, delay)
        if macc is not None and s is not None and macc.owners.get(self.client_id) is self:
            del macc.owners[self.client_id]
            if not self._taken_over:
                self.service.track(self.server.loop.create_task(self._leave(macc, s)))
                return
        if self._left is not None and not self._left.done():
            self._left.set_result(None)

    async def _leave(self, macc: MQTTAccount, s: Session) -> None:
        try:
            await macc.detach(s)
        except Exception as e:
            log.error("MQTT: ending session %r: %s", s.client_id, e)
        finally:
            if self._left is not None and not self._left.done():
                self._left.set_result(None)

    def enter_lame_duck(self) -> None:
        """Nothing to say yet: MQTT 5 clients get DISCONNECT 0x8B when lame duck mode closes them."""

    def info(self) -> dict[str, Any]:
        return {
            **super().info(),
            "type": "websocket" if self.websocket else "mqtt",
            "mqtt_client": self.client_id,
            "name": "",
            "lang": "mqtt",
            "version": {3: "3.1", 4: "3.1.1", 5: "5.0"}.get(self.level, ""),
            "account": self.account.name if self.account else "",
            "user": self.user,
            "tls": self.tls_info,
        }


def _is_done(f: Any) -> bool:
    done = getattr(f, "done", None)
    return done is None or done()


def _both(a: Awaitable[None], b: Awaitable[None]) -> Awaitable[None]:
    return asyncio.ensure_future(asyncio.gather(a, b))


def _publish_header(qos: int, props: Properties | None, retain: bool = False) -> bytes:
    if props is None:
        return mqtt_header(qos, retain=True) if retain else natsmsg.QOS_HEADERS[qos]
    return mqtt_header(qos, props.user_properties, props.correlation_data, props.content_type,
                       props.payload_format_indicator, retain, props.message_expiry_interval)
