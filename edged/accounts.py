"""Accounts and the router.

An account is an isolated subject space: its own sublist. Routing knows no protocol: every receiver
(a NATS client, a leafnode, an MQTT session, an internal service such as JetStream) is a `Receiver`
with a `deliver()` method, and a `Subscription` ties a receiver to a subject.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, Protocol

from edged.log import log
from edged.options import AccountConfig
from edged.sublist import Sublist

GLOBAL_ACCOUNT = "$G"
SYSTEM_ACCOUNT = "$SYS"


class Receiver(Protocol):
    echo: bool

    def deliver(self, sub: Subscription, subject: bytes, reply: bytes, hdr: bytes | None, payload: bytes) -> None:
        ...

    def takes_run(self, sub: Subscription, n: int, run_bytes: int) -> bool:
        """Can `deliver_run` take n messages of run_bytes (payloads and subject/reply per message) with no
        effect before its end (no flush, no close)?"""
        ...

    def deliver_run(self, sub: Subscription, subject: bytes, reply: bytes, payloads: list[bytes]) -> None:
        """`deliver` for each header-less payload in turn, in one call."""
        ...


class Subscription:
    __slots__ = ("subject", "queue", "sid", "sid_b", "conn", "max", "delivered", "closed", "weight")

    def __init__(self, conn: Any, subject: str, queue: str | None, sid: str) -> None:
        self.conn = conn
        self.subject = subject
        self.queue = queue
        self.sid = sid
        self.sid_b = sid.encode()
        self.max = 0
        self.delivered = 0
        self.closed = False
        self.weight = 1

    def __repr__(self) -> str:
        return f"<Subscription {self.subject!r} q={self.queue!r} sid={self.sid}>"


MsgCallback = Callable[[Subscription, str, str, "bytes | None", bytes], None]


class Deferred:
    """Work that may wait until the client read being processed has had its output written: a
    JetStream consumer queues the plain acks of a read here, so the messages a pull request in the
    same read asks for go out first (nats-server, too, processes acks apart from pull requests).
    Anything that could observe the deferred work runs `run()` first: every internal subscriber that
    is not `passive` does so on delivery. `active` is set by the client connection around a read."""

    active = False
    work: list[Callable[[], None]] = []
    # the client connection whose read is being processed (set with `active`): the JetStream API audit
    # advisory names the client a request came from, as nats-server's does
    origin: Any = None

    @classmethod
    def run(cls) -> None:
        """Run all queued work; one failing item is logged and does not drop the others."""
        while cls.work:
            work, cls.work = cls.work, []
            for fn in work:
                try:
                    fn()
                except Exception:
                    log.exception("deferred work failed")


class Declined:
    """A request that reached only a receiver that turned it down: a consumer subscribes to
    `$JS.ACK.<stream>.<consumer>.>` (one memo entry routes all its acks) where nats-server takes exactly
    nine tokens, so an ack subject of another shape reaches nobody there and a request gets "no
    responders". The receiver notes (subject, reply) while it is being routed; the publishing client
    checks it only for a delivered request, so plain acks pay nothing."""

    last: tuple[str, str] | None = None

    @classmethod
    def take(cls, subject: str, reply: str) -> bool:
        """Was this request (just routed) turned down? Clears the note either way."""
        last, cls.last = cls.last, None
        return last is not None and last[0] == subject and last[1] == reply


def _no(sub: Subscription) -> bool:
    return False


class InternalClient:
    """A receiver for in-process services; callbacks run inline on the event loop."""

    echo = True
    kind = "SYSTEM"
    headers = True

    def __init__(self, account: Account, name: str = "internal") -> None:
        self.account = account
        self.name = name
        self._sid = 0
        self.subs: dict[str, tuple[Subscription, MsgCallback]] = {}
        self._passive: set[str] = set()
        self._empties: dict[str, Callable[[Subscription, list[bytes]], None]] = {}
        self._replies: dict[str, Callable[[Subscription, str, list[bytes], list[bytes]], None]] = {}

    def subscribe(self, subject: str, cb: MsgCallback, queue: str | None = None, passive: bool = False,
                  empties: Callable[[Subscription, list[bytes]], None] | None = None,
                  replies: Callable[[Subscription, str, list[bytes], list[bytes]], None] | None = None,
                  ) -> Subscription:
        """`passive`: the callback itself deals with `Deferred` work (runs it when it needs to); any
        other callback only runs once the deferred work is done. `empties`: takes a run of empty,
        header-less, reply-less messages (their subjects, bytes) in one call (see `Account.route_empties`);
        it must do exactly what `cb` would do for each in turn."""
        self._sid += 1
        sub = Subscription(self, subject, queue, str(self._sid))
        self.subs[sub.sid] = (sub, cb)
        if passive:
            self._passive.add(sub.sid)
        if empties is not None:
            self._empties[sub.sid] = empties
        if replies is not None:
            self._replies[sub.sid] = replies
        self.account.subscribe(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        if self.subs.pop(sub.sid, None) is not None:
            self._passive.discard(sub.sid)
            self._empties.pop(sub.sid, None)
            self._replies.pop(sub.sid, None)
            self.account.unsubscribe(sub)

    def takes_empties(self, sub: Subscription) -> bool:
        return sub.sid in self._empties

    def deliver_empties(self, sub: Subscription, subjects: list[bytes]) -> None:
        fn = self._empties.get(sub.sid)
        if fn is not None:
            self._delivering(sub, len(subjects))
            fn(sub, subjects)

    def takes_replies(self, sub: Subscription) -> bool:
        return sub.sid in self._replies

    def deliver_replies(self, sub: Subscription, subject: str, replies: list[bytes], payloads: list[bytes]) -> None:
        fn = self._replies.get(sub.sid)
        if fn is not None:
            self._delivering(sub, len(payloads))
            fn(sub, subject, replies, payloads)

    def _delivering(self, sub: Subscription, n: int) -> None:
        """Before `n` messages reach `sub`'s callback: the deferred work first (unless the callback is
        passive), and the count."""
        if Deferred.work and sub.sid not in self._passive:
            Deferred.run()
        sub.delivered += n

    def close(self) -> None:
        for sub, _ in list(self.subs.values()):
            self.account.unsubscribe(sub)
        self.subs.clear()
        self._empties.clear()
        self._replies.clear()

    def auto_unsubscribe(self, sub: Subscription) -> None:
        self.unsubscribe(sub)

    def takes_run(self, sub: Subscription, n: int, run_bytes: int) -> bool:
        """No: a callback may publish, so its messages must interleave with the other deliveries."""
        return False

    def deliver_run(self, sub: Subscription, subject: bytes, reply: bytes, payloads: list[bytes]) -> None:
        for payload in payloads:
            self.deliver(sub, subject, reply, None, payload)

    def deliver(self, sub: Subscription, subject: bytes, reply: bytes, hdr: bytes | None, payload: bytes) -> None:
        entry = self.subs.get(sub.sid)
        if entry is None:
            return
        self._delivering(sub, 1)
        entry[1](sub, subject.decode("utf-8", "surrogateescape"),
                 reply.decode("utf-8", "surrogateescape") if reply else "", hdr, payload)

    def publish(self, subject: str, payload: bytes, reply: str = "", hdr: bytes | None = None) -> bool:
        return self.account.route(
            subject, subject.encode("utf-8", "surrogateescape"), reply.encode(), hdr, payload, self
        )


class Account:
    def __init__(self, name: str, config: AccountConfig | None = None, cache: bool = True) -> None:
        self.name = name
        self.config = config or AccountConfig(name=name)
        self.sublist = Sublist(cache=cache)
        self.clients: set[Any] = set()
        self.in_msgs = 0
        self.in_bytes = 0
        self.out_msgs = 0
        self.out_bytes = 0
        # observers of interest changes (leafnodes propagate them); called as f(sub, added)
        self.interest_listeners: list[Callable[[Subscription, bool], None]] = []
        self.claims: dict | None = None  # operator mode: decoded account JWT
        self._internal: InternalClient | None = None

    @property
    def internal(self) -> InternalClient:
        if self._internal is None:
            self._internal = InternalClient(self, f"internal:{self.name}")
        return self._internal

    def subscribe(self, sub: Subscription) -> None:
        self.sublist.insert(sub)
        for f in self.interest_listeners:
            f(sub, True)

    def unsubscribe(self, sub: Subscription) -> None:
        if self.sublist.remove(sub):
            sub.closed = True
            for f in self.interest_listeners:
                f(sub, False)

    def route(
        self,
        subject: str,
        subject_b: bytes,
        reply_b: bytes,
        hdr: bytes | None,
        payload: bytes,
        origin: Any,
    ) -> bool:
        """Deliver to every plain subscriber and one member of each queue group. True if anyone got it."""
        psubs, qgroups = self.sublist.match(subject)
        if not psubs and not qgroups:
            return False
        delivered = False
        echo = origin.echo
        for sub in psubs:
            conn = sub.conn
            if conn is origin and not echo:
                continue
            conn.deliver(sub, subject_b, reply_b, hdr, payload)
            delivered = True
            if sub.max and sub.delivered >= sub.max:
                conn.auto_unsubscribe(sub)
        for group in qgroups:
            sub = pick_queue_member(group, origin, echo)
            if sub is not None:
                conn = sub.conn
                conn.deliver(sub, subject_b, reply_b, hdr, payload)
                delivered = True
                if sub.max and sub.delivered >= sub.max:
                    conn.auto_unsubscribe(sub)
        return delivered

    def route_empties(self, subjects: list[bytes], origin: Any) -> None:
        """Route empty, header-less, reply-less messages to ASCII `subjects` in order (a client's plain
        JetStream acks). Subjects that one prefix memo of the sublist answers alike (`add_prefix`: the acks
        to one consumer) go to their receivers as one `deliver_empties` each when every receiver takes
        that (an in-process service that only queues them), which nothing can tell apart from message by
        message; anything else is routed message by message."""
        sl = self.sublist
        route = self.route
        i = 0
        n = len(subjects)
        while i < n:
            if origin.closed:
                return
            sb = subjects[i]
            subject = sb.decode()
            psubs, qgroups = sl.match(subject)
            prefix = sl.memo_prefix(subject) if psubs and not qgroups else None
            if prefix is None or not all(not s.max and getattr(s.conn, "takes_empties", _no)(s) for s in psubs):
                sl.count_repeats(-1)  # route matches it again
                route(subject, sb, b"", None, b"", origin)
                i += 1
                continue
            pb = prefix.encode()
            j = i + 1
            while j < n and subjects[j].startswith(pb):
                j += 1
            sl.count_repeats(j - i - 1)
            run = subjects[i:j] if i or j < n else subjects
            for s in psubs:
                s.conn.deliver_empties(s, run)
            i = j

    def route_replies(self, subject: str, subject_b: bytes, replies: list[bytes], payloads: list[bytes],
                      origin: Any) -> bool:
        """Route header-less messages to one subject, each with its own reply, as one call when their only
        receiver is an in-process service that takes such runs (`InternalClient.takes_replies`: a stream),
        which nothing can tell apart from message by message. False, having delivered nothing, otherwise."""
        sl = self.sublist
        psubs, qgroups = sl.match(subject)
        if qgroups or len(psubs) != 1:
            sl.count_repeats(-1)  # routed message by message, each matching again
            return False
        sub = psubs[0]
        conn = sub.conn
        if sub.max or sub.closed or (conn is origin and not origin.echo) or not getattr(conn, "takes_replies", _no)(sub):
            sl.count_repeats(-1)
            return False
        sl.count_repeats(len(payloads) - 1)
        conn.deliver_replies(sub, subject, replies, payloads)
        return True

    def route_run(self, subject: str, subject_b: bytes, reply_b: bytes, payloads: list[bytes], origin: Any,
                  payload_bytes: int) -> None:
        """Route header-less messages with one subject and reply (`payload_bytes` in all): one
        match and one `deliver_run` per receiver when that is exactly what per-message routing would do
        (see `run_receivers`), else message by message, stopping if the origin gets closed on the way."""
        sl = self.sublist
        psubs, qgroups = sl.match(subject)
        if not psubs and not qgroups:
            sl.count_repeats(len(payloads) - 1)
            return
        n = len(payloads)
        subs = None if qgroups else run_receivers(psubs, origin, not origin.echo, n,
                                                  payload_bytes + n * (len(subject_b) + len(reply_b)))
        if subs is not None:
            sl.count_repeats(n - 1)
            for sub in subs:
                sub.conn.deliver_run(sub, subject_b, reply_b, payloads)
            return
        # message by message: each `route` matches again (a cache hit), so the match above is not counted
        sl.count_repeats(-1)
        route = self.route
        for payload in payloads:
            if origin.closed:
                return
            route(subject, subject_b, reply_b, None, payload, origin)


def run_receivers(psubs: tuple, origin: Any, skip_origin: bool, n: int, run_bytes: int) -> list[Subscription] | None:
    """The plain subscriptions a run of messages can be handed to whole (`deliver_run`), or None when the
    run must go message by message to stay exactly what per-message routing does: a receiver without
    `deliver_run` (an in-process service may publish from its callback), two subscriptions on one
    connection (their deliveries interleave per message), a subscription with an auto-unsubscribe limit,
    or a receiver whose output could pass max_pending during the run (a mid-run flush or close)."""
    out: list[Subscription] = []
    for sub in psubs:
        conn = sub.conn
        if (conn is origin and skip_origin) or sub.closed:
            continue
        if sub.max or not conn.takes_run(sub, n, run_bytes):
            return None
        out.append(sub)
    if len(out) > 1 and len({id(s.conn) for s in out}) != len(out):
        return None
    return out


def pick_queue_member(group: tuple, origin: Any, echo: bool) -> Subscription | None:
    """One member of a queue group, at random; local members win over remote (leafnode) ones, as in
    nats-server, so a group spread over edge and hub is served at the edge while it can be."""
    n = len(group)
    i = int(random.random() * n) if n > 1 else 0
    remote = None
    for k in range(n):
        sub = group[(i + k) % n]
        conn = sub.conn
        if (conn is origin and not echo) or sub.closed:
            continue
        if conn.kind == "Leafnode":
            if remote is None:
                remote = sub
            continue
        return sub
    return remote
