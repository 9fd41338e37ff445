"""`out` rules: local messages to the upstream broker.

From a subject (core NATS): at most once, as core NATS is. A message is handed to paho as it comes; QoS
1/2 ones wait in paho's queue while the broker is away, up to `SUBJECT_QUEUE_MAX` per rule (beyond that,
and for QoS 0 with no connection, the message is dropped and counted).

From a stream: at least once, in stream order. The rule owns a durable pull consumer (explicit ack, one
ack_wait of a day, max_ack_pending = the window) and keeps at most `max_inflight` messages between the
stream and the broker. Messages go to paho in stream order, and a message is acked to JetStream only
when it and every message before it has the broker's PUBACK (QoS 1) / PUBCOMP (QoS 2): the consumer's
ack floor is so always a prefix of what the broker confirmed. paho keeps unconfirmed QoS 1/2 messages
across broker outages and sends them again, in order, on the next connection.

A clean stop takes no more messages and gives those with the broker up to 2 s to be confirmed and
acked, so a restart repeats nothing. At start (and so after a kill -9) the durable is recreated at its
ack floor + 1 when it had unacked messages, so they go out again at once, in order, instead of after
ack_wait (see `setup`). What may then reach the broker twice: the messages the broker confirmed whose
ack had not reached the consumer's store yet (at most the window, usually the last few); with QoS 1
also a message the broker got while its PUBACK was lost to an outage (paho sends it again with DUP
set). With MQTT 5 each message carries user properties `Nats-Stream` and `Nats-Sequence` so a
subscriber can drop those duplicates (and, from either kind of rule, its NATS headers as user properties).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from paho.mqtt.enums import MQTTErrorCode

from bridges.mqtt_bridge.jsapi import JSClient, JSError, status_of
from bridges.mqtt_bridge.topics import TopicError, subject_to_topic
from edged.jetstream.mirror import parse_ack_reply
from edged.log import log
from edged.routing.headers import parse_headers
from edged.settings.options import BridgeOutRule

if TYPE_CHECKING:
    from bridges.mqtt_bridge.bridge import Bridge

SUBJECT_QUEUE_MAX = 10_000
ACK_WAIT_NS = 24 * 3600 * 1_000_000_000
PULL_EXPIRES_NS = 2_000_000_000
RETRY_S = 2.0


def user_properties(hdr: bytes | None) -> list[tuple[str, str]]:
    """A message's NATS headers as MQTT 5 user properties (sent with MQTT 5 only)."""
    if not hdr:
        return []
    return [(k, v) for k, vs in parse_headers(hdr)[2].items() for v in vs]


def _floor(info: dict[str, Any]) -> int:
    return int((info.get("ack_floor") or {}).get("stream_seq") or 0)


class SubjectForward:
    """A core NATS subscription forwarded to a topic."""

    def __init__(self, bridge: Bridge, rule: BridgeOutRule) -> None:
        self.bridge = bridge
        self.rule = rule
        self.sub: Any = None
        self.queued = 0  # handed to paho, not yet confirmed
        self.forwarded = 0
        self.dropped = 0
        self.last_error = ""

    def start(self) -> None:
        self.sub = self.bridge.ic.subscribe(self.rule.subject, self._on_msg)

    def stop(self) -> None:
        if self.sub is not None:
            self.bridge.ic.unsubscribe(self.sub)
            self.sub = None

    def _on_msg(self, sub: Any, subject: str, reply: str, hdr: bytes | None, payload: bytes) -> None:
        r = self.rule
        try:
            topic = subject_to_topic(subject, r.subject, r.topic)
        except TopicError as e:
            self._drop(str(e))
            return
        if self.queued >= SUBJECT_QUEUE_MAX:
            self._drop(f"{SUBJECT_QUEUE_MAX} messages already wait for the broker")
            return
        rc, mid = self.bridge.upstream.publish(topic, payload, r.qos, r.retain, user_properties(hdr))
        if r.qos == 0 and rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
            self._drop("not connected (QoS 0)")
            return
        self.queued += 1
        self.bridge.waiting[mid] = self._done

    def _done(self, mid: int, refused: str) -> None:
        self.queued -= 1
        if refused:
            self._drop(f"refused by the broker: {refused}")
        else:
            self.forwarded += 1

    def _drop(self, why: str) -> None:
        self.dropped += 1
        self.last_error = why

    def status(self) -> dict[str, Any]:
        r = self.rule
        return {"subject": r.subject, "topic": r.topic or "", "qos": r.qos, "in_flight": self.queued,
                "forwarded": self.forwarded, "dropped": self.dropped, "last_error": self.last_error}


@dataclass
class _Entry:
    sseq: int
    ack: str  # the JetStream ack reply subject
    topic: str
    payload: bytes
    hdr: bytes | None
    mid: int = -1
    sent: bool = False  # handed to paho (a QoS 0 message is not while there is no connection)
    done: bool = False  # the broker confirmed it


class StreamForward:
    """A stream's durable consumer forwarded to a topic, acked in order after the broker confirms."""

    def __init__(self, bridge: Bridge, rule: BridgeOutRule, js: JSClient, window: int) -> None:
        self.bridge = bridge
        self.rule = rule
        self.js = js
        self.window = window
        self.fifo: deque[_Entry] = deque()
        self.last_sseq = 0  # the highest stream sequence taken in (a lower one again is a redelivery)
        self.ready = False  # the durable exists and is ours
        self.draining = False  # stopping: no more pulls
        self.pending = 0  # what the consumer still has for us (its num_pending)
        self.forwarded = 0
        self.refused = 0
        self.last_error = ""
        self._pull_sub: Any = None
        self._pull_inbox = ""
        self._pull_left = 0
        self._pull_until = 0.0
        self._pulls = 0
        self._pull_reply = ""
        self._pump_due = False
        self._next_try = 0.0
        self._setting_up = False
        self._info_task: asyncio.Task[None] | None = None
        self.consumer = rule.durable  # the durable in use: `durable` or `durable`_b (see setup)

    # ------------------------------------------------------------------ the durable

    async def setup(self) -> None:
        """Find the stream, then make a durable ours: the existing one when it has nothing out and our
        settings, else a new one at the ack floor + 1 under the other of the rule's two names (`durable`,
        `durable`_b), made before the old one is deleted, so a crash in between leaves a consumer to
        resume from (the one with the higher ack floor), never none."""
        r = self.rule
        self._setting_up = True
        try:
            try:
                await self.js.api(f"STREAM.INFO.{r.stream}")
            except JSError as e:
                if e.err_code == 10059 or "not found" in str(e):
                    raise JSError(f"stream {r.stream!r} not found", 10059) from None
                raise
            names = (r.durable, f"{r.durable}_b")
            found = {n: i for n in names if (i := await self._info(n)) is not None}
            if len(found) == 2:  # a crash between a create and a delete: keep the one further on
                low = min(found, key=lambda n: _floor(found[n]))
                await self.js.api(f"CONSUMER.DELETE.{r.stream}.{low}")
                del found[low]
            cfg: dict[str, Any] = {
                "ack_policy": "explicit", "ack_wait": ACK_WAIT_NS,
                "max_ack_pending": self.window, "max_deliver": -1, "replay_policy": "instant",
                "description": f"edged mqtt_bridge {self.bridge.opts.name}", "deliver_policy": r.deliver,
            }
            if r.filter_subject:
                cfg["filter_subject"] = r.filter_subject
            if not found:
                name, info = r.durable, await self._create(r.durable, cfg)
            else:
                (name, info), = found.items()
                old = info.get("config") or {}
                if (info.get("num_ack_pending") or old.get("filter_subject", "") != r.filter_subject
                        or old.get("ack_wait") != ACK_WAIT_NS or old.get("max_ack_pending") != self.window):
                    floor = _floor(info)
                    cfg["deliver_policy"], cfg["opt_start_seq"] = "by_start_sequence", floor + 1
                    other = names[1] if name == names[0] else names[0]
                    info = await self._create(other, cfg)
                    await self.js.api(f"CONSUMER.DELETE.{r.stream}.{name}")
                    name = other
                    log.info("mqtt_bridge %s: stream %s resumes after sequence %d (durable %s)",
                             self.bridge.opts.name, r.stream, floor, name)
            self.consumer = name
            self.pending = int(info.get("num_pending") or 0)
            self.fifo.clear()
            self.last_sseq = 0
            self.ready = True
            self.last_error = ""
            self._pull_left = 0
            self.pump()
        except (JSError, ValueError) as e:
            self.fail(str(e))
        except Exception as e:  # anything else must not end the retries
            self.fail(f"{type(e).__name__}: {e}")
        finally:
            self._setting_up = False

    async def _info(self, name: str) -> dict[str, Any] | None:
        try:
            return await self.js.api(f"CONSUMER.INFO.{self.rule.stream}.{name}")
        except JSError as e:
            if e.err_code != 10014:  # consumer not found
                raise
            return None

    async def _create(self, name: str, cfg: dict[str, Any]) -> dict[str, Any]:
        r = self.rule
        return await self.js.api(f"CONSUMER.CREATE.{r.stream}.{name}",
                                 {"stream_name": r.stream, "config": {**cfg, "durable_name": name}, "action": ""})

    def fail(self, why: str) -> None:
        if why != self.last_error:
            log.error("mqtt_bridge %s: out rule from stream %s: %s", self.bridge.opts.name, self.rule.stream, why)
        self.last_error = why
        self.ready = False
        self._next_try = time.monotonic() + RETRY_S

    def start(self) -> None:
        self._pull_inbox = self.js.new_inbox()
        self._pull_sub = self.js.ic.subscribe(f"{self._pull_inbox}.*", self._on_msg)

    def stop(self) -> None:
        if self._pull_sub is not None:
            self.js.ic.unsubscribe(self._pull_sub)
            self._pull_sub = None
        self.ready = False

    def tick(self, now: float) -> None:
        if not self.ready:
            if not self._setting_up and now >= self._next_try:
                self._setting_up = True
                asyncio.get_running_loop().create_task(self.setup())
            return
        self.pump(now)
        if self._info_task is None or self._info_task.done():
            self._info_task = asyncio.get_running_loop().create_task(self._refresh())

    async def _refresh(self) -> None:
        r = self.rule
        try:
            info = await self.js.api(f"CONSUMER.INFO.{r.stream}.{self.consumer}")
            self.pending = int(info.get("num_pending") or 0)
        except JSError as e:
            if e.err_code in (10014, 10059):  # the consumer or the stream went away: set up again
                self.fail(str(e))

    # ------------------------------------------------------------------ pulling

    def pump(self, now: float | None = None) -> None:
        """Ask for as many messages as the window has room for, while the broker is there."""
        if not self.ready or not self.bridge.connected or self.draining:
            return
        now = time.monotonic() if now is None else now
        room = self.window - len(self.fifo)
        if room <= 0 or (self._pull_left > 0 and now < self._pull_until):
            return
        self._pull_left = room
        self._pull_until = now + PULL_EXPIRES_NS / 1e9 + 0.5
        self._pulls += 1
        reply = self._pull_reply = f"{self._pull_inbox}.{self._pulls}"
        body = b'{"batch":%d,"expires":%d}' % (room, PULL_EXPIRES_NS)
        r = self.rule
        if not self.js.ic.publish(f"{self.js.prefix}.CONSUMER.MSG.NEXT.{r.stream}.{self.consumer}", body, reply):
            self.fail(f"consumer {self.consumer} on stream {r.stream} does not answer")

    def _on_msg(self, sub: Any, subject: str, reply: str, hdr: bytes | None, payload: bytes) -> None:
        """A delivery (its own subject, the ack subject as reply) or a pull's end (a status message on the
        pull's reply subject: 408 expired, 409 ...)."""
        if not reply:
            if status_of(hdr) and subject == self._pull_reply:
                self._pull_left = 0
                self.pump_soon()
            return
        meta = parse_ack_reply(reply)
        if meta is None:
            return
        _, _, sseq, _, _, pending = meta
        self._pull_left -= 1
        self.pending = pending
        if sseq <= self.last_sseq:
            return  # a redelivery of a message we hold: it is in paho's hands already
        self.last_sseq = sseq
        r = self.rule
        try:
            topic = subject_to_topic(subject, r.filter_subject or ">", r.topic)
        except TopicError as e:
            log.warning("mqtt_bridge %s: stream %s sequence %d not forwarded: %s", self.bridge.opts.name,
                     r.stream, sseq, e)
            topic = ""
        e = _Entry(sseq, reply, topic, payload, hdr)
        self.fifo.append(e)
        if topic:
            self._send(e)
        else:
            e.done = True
            asyncio.get_running_loop().call_soon(self._confirmed, -1, "")
        if self._pull_left <= 0:
            self.pump_soon()

    def pump_soon(self) -> None:
        """`pump` once the consumer's delivery (or expiry) run that called us is over: a pull made from
        inside it would change its waiting requests while it walks them."""
        if not self._pump_due:
            self._pump_due = True
            asyncio.get_running_loop().call_soon(self._pump_now)

    def _pump_now(self) -> None:
        self._pump_due = False
        self.pump()

    def _send(self, e: _Entry) -> None:
        r = self.rule
        props = [*user_properties(e.hdr), ("Nats-Stream", r.stream), ("Nats-Sequence", str(e.sseq))]
        rc, mid = self.bridge.upstream.publish(e.topic, e.payload, r.qos, r.retain, props)
        if r.qos == 0 and rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
            return  # sent again on the next connection (resend_unsent)
        e.mid, e.sent = mid, True
        self.bridge.waiting[mid] = self._confirmed

    def resend_unsent(self) -> None:
        """On a new connection: the QoS 0 messages that found none, in order (paho resends QoS 1/2)."""
        for e in self.fifo:
            if not e.sent:
                self._send(e)

    def _confirmed(self, mid: int, refused: str) -> None:
        for e in self.fifo:
            if e.mid == mid and e.sent and not e.done:
                e.done = True
                if refused:
                    self.refused += 1
                    self.last_error = f"stream sequence {e.sseq} refused by the broker: {refused}"
                    log.warning("mqtt_bridge %s: %s", self.bridge.opts.name, self.last_error)
                break
        publish = self.js.ic.publish
        while self.fifo and self.fifo[0].done:
            head = self.fifo.popleft()
            publish(head.ack, b"+ACK")
            self.forwarded += 1
        self.pump()

    def status(self) -> dict[str, Any]:
        r = self.rule
        return {"stream": r.stream, "durable": self.consumer, "filter_subject": r.filter_subject,
                "topic": r.topic or "", "qos": r.qos, "ready": self.ready, "pending": self.pending,
                "in_flight": len(self.fifo), "forwarded": self.forwarded, "refused": self.refused,
                "last_error": self.last_error}
