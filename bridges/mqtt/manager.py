"""The MQTT state of one account: its JetStream streams, its sessions (live and offline), who holds
each client id, the retained messages, and the queueing of NATS messages for QoS 1/2 subscribers.

nats-server stores only MQTT publishes in `$MQTT_msgs`, so a NATS publish reaches an MQTT subscriber at
QoS 0 and never while it is offline. edged also stores a message that did not come from MQTT under
`$MQTT.msgs.<subject>` when a session (online or not) holds a QoS 1/2 subscription matching it: the
session's consumer then delivers it at QoS 1/2, and keeps it while the session is away.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bridges.mqtt.jsapi import JSApi, JSApiFailure
from bridges.mqtt.retained import RetainedStore
from bridges.mqtt.session import MSGS_PREFIX, MSGS_STREAM, SESS_STREAM, STREAMS, Session
from bridges.mqtt.topics import ignore_for_reserved, is_reserved_subscription
from edged.log import log
from edged.routing.subjects import subject_matches

if TYPE_CHECKING:
    from edged.routing.accounts import Account
    from edged.routing.receiver import Subscription
    from edged.server import Server


class MQTTAccount:
    def __init__(self, server: Server, account: Account, origin_is_mqtt: Callable[[], bool]) -> None:
        mo = server.opts.mqtt
        assert mo is not None
        self.server = server
        self.account = account
        self.origin_is_mqtt = origin_is_mqtt
        self.api = JSApi(account, mo.js_domain, mo.js_api_timeout or 5.0)
        self.retained = RetainedStore(self.api)
        self.sessions: dict[str, Session] = {}  # every session known: live and offline persistent ones
        self.owners: dict[str, Any] = {}  # client id -> the connection holding it
        self._ready: asyncio.Task[None] | None = None
        # subject -> (internal subscription, how many QoS 1/2 session subscriptions want it)
        self._watch: dict[str, tuple[Subscription, int]] = {}
        self._watching: dict[str, bool] = {}  # sid of a watch subscription -> reserved (first-level wildcard)
        # set when a message routed reached a QoS 1/2 session subscription: what `wants_stored` would say of
        # it, told by the routing of an MQTT publish itself (the service clears it before), with no match
        self.matched = False
        self._dups = 0  # calls still to come for the message just queued (it matched several subjects)
        self._dup_of: tuple[bytes, str] = (b"", "")
        self._expiry: dict[str, asyncio.TimerHandle] = {}

    async def ready(self) -> None:
        """The streams exist and the state is loaded (once; every CONNECT in the account waits for it)."""
        if self._ready is None or (self._ready.done() and self._ready.exception() is not None):
            self._ready = asyncio.get_running_loop().create_task(self._load())
        await asyncio.shield(self._ready)

    async def preload(self) -> None:
        """At start: load an account that has MQTT state already, so NATS messages are queued for its
        offline sessions before any MQTT client comes back."""
        try:
            await self.api.request(f"STREAM.INFO.{SESS_STREAM}")
        except JSApiFailure:
            return
        await self.ready()

    async def _load(self) -> None:
        for cfg in STREAMS:
            await self.api.ensure_stream(cfg)
        await self.retained.load()
        now = time.time()
        for subject in await self.api.subjects(SESS_STREAM):
            m = await self.api.last_msg(SESS_STREAM, subject)
            if m is None or not m.payload:
                continue
            try:
                s = Session.decode(m.payload, m.seq)
            except Exception as e:  # a damaged record is logged, not fatal for the others
                log.error("MQTT: unreadable session record %s: %s", subject, e)
                continue
            if s.expired(now):
                await self.drop_session(s)
                continue
            s.left = s.left or now
            self.sessions[s.client_id] = s
            self._watch_session(s)
            self._arm_expiry(s)
        await self._drop_orphan_consumers()

    async def _drop_orphan_consumers(self) -> None:
        """Consumers of sessions that ended without their cleanup (a clean session cut by a kill -9): an
        orphan would keep its messages in the interest stream for ever."""
        known = {cfg.get("durable_name") for s in self.sessions.values() for cfg in s.cons.values()}
        offset = 0
        names: list[str] = []
        while True:
            doc = await self.api.request(f"CONSUMER.NAMES.{MSGS_STREAM}", {"offset": offset})
            page = doc.get("consumers") or []
            names += page
            offset += len(page)
            if not page or offset >= int(doc.get("total", 0)):
                break
        for name in names:
            if name not in known:
                await self.api.delete_consumer(MSGS_STREAM, name)

    # ------------------------------------------------------------------ sessions

    def _arm_expiry(self, s: Session) -> None:
        h = self._expiry.pop(s.client_id, None)
        if h is not None:
            h.cancel()
        if s.expiry >= 0 and s.left:
            delay = max(0.0, s.left + s.expiry - time.time())
            self._expiry[s.client_id] = self.server.loop.call_later(delay, self._expire, s)

    def _expire(self, s: Session) -> None:
        self._expiry.pop(s.client_id, None)
        if self.owners.get(s.client_id) is None and self.sessions.get(s.client_id) is s:
            self.server.loop.create_task(self.drop_session(s))

    def session_for(self, client_id: str) -> Session | None:
        s = self.sessions.get(client_id)
        if s is not None and s.expired():
            return None
        return s

    def attach(self, s: Session) -> None:
        """A connection took this session: it does not expire while connected."""
        h = self._expiry.pop(s.client_id, None)
        if h is not None:
            h.cancel()
        s.left = 0.0
        self.sessions[s.client_id] = s

    async def detach(self, s: Session) -> None:
        """The connection holding `s` is gone: keep the session (persistent) or drop it."""
        if not s.persistent:
            await self.drop_session(s)
            return
        s.left = time.time()
        await self.save(s)
        self._arm_expiry(s)

    async def save(self, s: Session) -> None:
        s.seq = await self.api.store(s.subject, s.encode())
        s.present = True

    async def drop_session(self, s: Session) -> None:
        """Remove a session: its consumers, its QoS 1/2 queueing, its record."""
        if self.sessions.get(s.client_id) is s:
            del self.sessions[s.client_id]
        for key, st in s.subs.items():
            if st.qos > 0 and not st.queue:
                self.unwatch(key.partition(" ")[0])
        s.subs.clear()
        cons, s.cons = s.cons, {}
        for cfg in cons.values():
            try:
                await self.api.delete_consumer(MSGS_STREAM, cfg["durable_name"])
            except JSApiFailure as e:
                log.error("MQTT: deleting consumer %s: %s", cfg.get("durable_name"), e)
        if s.present:
            try:
                await self.api.purge_subject(SESS_STREAM, s.subject)
            except JSApiFailure as e:
                log.error("MQTT: deleting session %s: %s", s.client_id, e)
            s.present = False

    # ------------------------------------------------------------------ NATS messages for QoS 1/2 sessions

    def _watch_session(self, s: Session) -> None:
        for key, st in s.subs.items():
            if st.qos > 0 and not st.queue:
                self.watch(key.partition(" ")[0])

    def watch(self, subject: str) -> None:
        entry = self._watch.get(subject)
        if entry is not None:
            self._watch[subject] = (entry[0], entry[1] + 1)
            return
        reserved = is_reserved_subscription(subject)

        def cb(sub: Subscription, subj: str, reply: str, hdr: bytes | None, payload: bytes) -> None:
            if ignore_for_reserved(reserved, subj):
                return
            self._queue_nats_msg(subj, reply, hdr, payload)

        sub = self.account.internal.subscribe(subject, cb)
        self._watch[subject] = (sub, 1)
        self._watching[sub.sid] = reserved

    def wants_stored(self, subject: str) -> bool:
        """Does a QoS 1/2 session subscription (so a consumer on `$MQTT_msgs`) take a message on `subject`?
        If none does, storing it there would only be deleted again at once (interest retention). (An MQTT
        publish learns it from its own routing instead: `matched`.)"""
        if not self._watch:
            return False
        watching = self._watching
        for sub in self.account.sublist.match(subject)[0]:
            if sub.sid in watching and sub.conn is self.account.internal and \
                    not ignore_for_reserved(watching[sub.sid], subject):
                return True
        return False

    def unwatch(self, subject: str) -> None:
        entry = self._watch.get(subject)
        if entry is None:
            return
        if entry[1] > 1:
            self._watch[subject] = (entry[0], entry[1] - 1)
            return
        del self._watch[subject]
        self._watching.pop(entry[0].sid, None)
        self.account.internal.unsubscribe(entry[0])

    def _queue_nats_msg(self, subject: str, reply: str, hdr: bytes | None, payload: bytes) -> None:
        """A message matched a QoS 1/2 session subscription: store it for the sessions' consumers unless MQTT
        stored it already (it is being routed by `MQTTService.publish`), or it is MQTT's own traffic. One message matching several subscriptions comes
        here once per matching subject, one call right after the other: it is stored once."""
        self.matched = True
        if subject.startswith("$MQTT.") or self.origin_is_mqtt():
            return
        if self._dups:
            if self._dup_of[0] is payload and self._dup_of[1] == subject:
                self._dups -= 1
                return
            self._dups = 0  # a count that did not run out (never expected): not this message's
        # the router hands one message to every matching subscription in a row: this is its first, so
        # the next (matches - 1) calls are the same message
        self._dups = sum(1 for w in self._watch if subject_matches(w, subject)
                         and not ignore_for_reserved(is_reserved_subscription(w), subject)) - 1
        self._dup_of = (payload, subject)
        if reply:  # a request: its reply subject rides in a header (a reply would get the stream's PubAck)
            hdr = (hdr[:-2] if hdr else b"NATS/1.0\r\n") + b"Nmqtt-Reply:" + reply.encode() + b"\r\n\r\n"
        self.api.client.publish(MSGS_PREFIX + subject, payload, "", hdr)

    def close(self) -> None:
        for h in self._expiry.values():
            h.cancel()
        self._expiry.clear()
        for sub, _ in self._watch.values():
            self.account.internal.unsubscribe(sub)
        self._watch.clear()
        self.api.close()
