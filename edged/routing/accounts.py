"""Accounts and the router.

An account is an isolated subject space: its own sublist. Routing knows no protocol: every receiver
(a NATS client, a leafnode, an MQTT session, an internal service such as JetStream) is a
`edged.routing.receiver.Receiver`, and a `Subscription` ties a receiver to a subject. The router calls nothing
the contract in edged/routing/receiver.py does not declare.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from edged.routing.receiver import KIND_LEAF, KIND_SYSTEM, Message, ReadContext, Receiver, Subscription
from edged.routing.sublist import Sublist
from edged.settings.options import AccountConfig

GLOBAL_ACCOUNT = "$G"
SYSTEM_ACCOUNT = "$SYS"


MsgCallback = Callable[[Subscription, str, str, "bytes | None", bytes], None]
# a run of JetStream deliveries matched on one subject (Receiver.deliver_routed_batch): sub, routed, messages
BatchCallback = Callable[[Subscription, bytes, list[Message]], None]
# the same run as it crossed a leafnode (Receiver.deliver_framed_run): sub, routed, replies, payloads; True: taken
FramedCallback = Callable[[Subscription, bytes, list[bytes], list[bytes]], bool]


class InternalClient(Receiver):
    """A receiver for in-process services; callbacks run inline on the event loop."""

    echo = True
    kind = KIND_SYSTEM
    headers = True

    def __init__(self, account: Account, name: str = "internal") -> None:
        self.account = account
        self.reading = account.reading
        self.name = name
        self._sid = 0
        self.subs: dict[str, tuple[Subscription, MsgCallback]] = {}
        self._passive: set[str] = set()
        self._empties: dict[str, Callable[[Subscription, list[bytes]], None]] = {}
        self._replies: dict[str, Callable[[Subscription, str, list[bytes], list[bytes]], None]] = {}
        self._batches: dict[str, BatchCallback] = {}
        self._framed: dict[str, FramedCallback] = {}

    def subscribe(self, subject: str, cb: MsgCallback, queue: str | None = None, passive: bool = False,
                  empties: Callable[[Subscription, list[bytes]], None] | None = None,
                  replies: Callable[[Subscription, str, list[bytes], list[bytes]], None] | None = None,
                  batch: BatchCallback | None = None, framed: FramedCallback | None = None) -> Subscription:
        """`passive`: the callback itself deals with the read's deferred work (`ReadContext.defer`: runs it
        when it needs to); any other callback only runs once the deferred work is done. `empties`: takes a
        run of empty, header-less, reply-less messages (their subjects, bytes) in one call (see
        `Account.route_empties`); it must do exactly what `cb` would do for each in turn. `replies`: the
        same for runs of header-less messages to one subject, each with its own reply. `batch`: the same for
        runs of JetStream deliveries routed by this subject (`deliver_routed_batch`), as bytes. `framed`: such
        a run as it crossed a leafnode (`deliver_framed_run`), only with `batch`; False from it: not taken."""
        self._sid += 1
        sub = Subscription(self, subject, queue, str(self._sid))
        self.subs[sub.sid] = (sub, cb)
        if passive:
            self._passive.add(sub.sid)
        if empties is not None:
            self._empties[sub.sid] = empties
        if replies is not None:
            self._replies[sub.sid] = replies
        if batch is not None:
            self._batches[sub.sid] = batch
            if framed is not None:
                self._framed[sub.sid] = framed
        self.account.subscribe(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        if self.subs.pop(sub.sid, None) is not None:
            self._passive.discard(sub.sid)
            self._empties.pop(sub.sid, None)
            self._replies.pop(sub.sid, None)
            self._batches.pop(sub.sid, None)
            self._framed.pop(sub.sid, None)
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

    def takes_routed_batch(self, sub: Subscription) -> bool:
        return sub.sid in self._batches

    def deliver_routed_batch(self, sub: Subscription, routed: bytes, msgs: list[Message], nbytes: int) -> None:
        fn = self._batches.get(sub.sid)
        if fn is not None:
            self._delivering(sub, len(msgs))
            fn(sub, routed, msgs)

    def deliver_framed_run(self, sub: Subscription, routed: bytes, replies: list[bytes], payloads: list[bytes],
                           nbytes: int) -> bool:
        fn = self._framed.get(sub.sid)
        if fn is None:
            return False
        if self.reading.work and sub.sid not in self._passive:
            self.reading.run()
        if not fn(sub, routed, replies, payloads):
            return False
        sub.delivered += len(payloads)
        return True

    def _delivering(self, sub: Subscription, n: int) -> None:
        """Before `n` messages reach `sub`'s callback: the deferred work first (unless the callback is
        passive), and the count."""
        if self.reading.work and sub.sid not in self._passive:
            self.reading.run()
        sub.delivered += n

    def close(self) -> None:
        for sub, _ in list(self.subs.values()):
            self.account.unsubscribe(sub)
        self.subs.clear()
        self._empties.clear()
        self._replies.clear()
        self._batches.clear()
        self._framed.clear()

    def auto_unsubscribe(self, sub: Subscription) -> None:
        self.unsubscribe(sub)

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
    def __init__(self, name: str, config: AccountConfig | None = None, cache: bool = True,
                 reading: ReadContext | None = None) -> None:
        self.name = name
        # the server's per-read context, which in-process receivers of this account share
        self.reading = reading if reading is not None else ReadContext()
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
        # imports, exports and mappings (edged/routing/imports.py AccountLinks); None for an account with none
        self.links: Any = None

    @property
    def internal(self) -> InternalClient:
        if self._internal is None:
            self._internal = InternalClient(self, f"internal:{self.name}")
        return self._internal

    def subscribe(self, sub: Subscription) -> None:
        self.sublist.insert(sub)
        for f in self.interest_listeners:
            f(sub, True)
        if self.links is not None:
            self.links.subscribed(sub)  # stream imports: shadow subscriptions in the exporters

    def unsubscribe(self, sub: Subscription) -> None:
        if self.sublist.remove(sub):
            sub.closed = True
            for f in self.interest_listeners:
                f(sub, False)
            if self.links is not None:
                self.links.unsubscribed(sub)

    def route(
        self,
        subject: str,
        subject_b: bytes,
        reply_b: bytes,
        hdr: bytes | None,
        payload: bytes,
        origin: Any,
        queues: tuple[bytes, ...] | None = None,
    ) -> bool:
        """Deliver to every plain subscriber and one member of each queue group. True if anyone got it.
        `queues` (a message from a remote server, which names the queue groups it is for): only those
        groups get it, through a local member if there is one, else through a member behind another
        leafnode connection (never back to the one it came from), as nats-server's processMsgResults."""
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
        if queues is not None:
            if not queues:
                return delivered
            qgroups = [g for g in qgroups if g[0].queue is not None and
                       g[0].queue.encode("utf-8", "surrogateescape") in queues]
        for group in qgroups:
            sub = pick_queue_member(group, origin, echo)
            if sub is not None:
                conn = sub.conn
                conn.deliver(sub, subject_b, reply_b, hdr, payload)
                delivered = True
                if sub.max and sub.delivered >= sub.max:
                    conn.auto_unsubscribe(sub)
        return delivered

    def route_as(self, routed: str, routed_b: bytes, subject_b: bytes, reply_b: bytes, hdr: bytes | None,
                 payload: bytes, origin: Any, queues: tuple[bytes, ...] | None = None) -> bool:
        """`route` of a message matched on `routed` while it carries `subject_b`, its own (a JetStream
        consumer delivers to a deliver subject or pull request inbox): each receiver gets both through
        `Receiver.deliver_routed`, so a client sees the message's subject and a leafnode can tell the hub
        what to route it by. `queues` as for `route`. True if anyone got it."""
        psubs, qgroups = self.sublist.match(routed)
        if not psubs and not qgroups:
            return False
        if queues is not None:
            qgroups = [g for g in qgroups if g[0].queue is not None and
                       g[0].queue.encode("utf-8", "surrogateescape") in queues] if queues else []
        delivered = False
        echo = origin.echo
        for sub in psubs:
            conn = sub.conn
            if conn is origin and not echo:
                continue
            conn.deliver_routed(sub, routed_b, subject_b, reply_b, hdr, payload)
            delivered = True
            if sub.max and sub.delivered >= sub.max:
                conn.auto_unsubscribe(sub)
        for group in qgroups:
            sub = pick_queue_member(group, origin, echo)
            if sub is not None:
                conn = sub.conn
                conn.deliver_routed(sub, routed_b, subject_b, reply_b, hdr, payload)
                delivered = True
                if sub.max and sub.delivered >= sub.max:
                    conn.auto_unsubscribe(sub)
        return delivered

    def route_as_batch(self, routed: str, routed_b: bytes, msgs: list[Message], nbytes: int, origin: Any,
                       queues: tuple[bytes, ...] | None = None) -> None:
        """`route_as` of each of `msgs` in turn, all matched on `routed` (a run of JetStream deliveries from
        one consumer; `nbytes`: their header and payload bytes): one match, and one `deliver_routed_batch`
        when the only receiver takes the run whole (a mirror's deliver subject, a leafnode), which nothing
        can tell apart from message by message; otherwise message by message."""
        sl = self.sublist
        psubs, qgroups = sl.match(routed)
        if queues is not None and not queues:
            qgroups = ()
        if not psubs and not qgroups:
            sl.count_repeats(len(msgs) - 1)
            return
        if not qgroups and len(psubs) == 1:
            sub = psubs[0]
            conn = sub.conn
            if not sub.max and not sub.closed and (conn is not origin or origin.echo) and \
                    conn.takes_routed_batch(sub):
                sl.count_repeats(len(msgs) - 1)
                conn.deliver_routed_batch(sub, routed_b, msgs, nbytes)
                return
        sl.count_repeats(-1)  # each route_as matches again
        route_as = self.route_as
        for m in msgs:
            if origin.closed:
                return
            route_as(routed, routed_b, m[0], m[1], m[2], m[3], origin, queues)

    def route_framed_run(self, routed: str, routed_b: bytes, replies: list[bytes], payloads: list[bytes],
                         nbytes: int, origin: Any) -> bool:
        """A run of header-less JetStream deliveries that crossed a leafnode (replies `<ack reply>@<subject>`),
        all matched on `routed`: handed as these columns to the only receiver when it takes them so
        (`deliver_framed_run`: a mirror's deliver subject). False, with nothing delivered: the caller routes
        the run as messages (`route_as_batch`)."""
        sl = self.sublist
        psubs, qgroups = sl.match(routed)
        if qgroups or len(psubs) != 1:
            sl.count_repeats(-1)  # the caller matches again
            return False
        sub = psubs[0]
        conn = sub.conn
        if sub.max or sub.closed or (conn is origin and not origin.echo) or not conn.takes_routed_batch(sub) \
                or not conn.deliver_framed_run(sub, routed_b, replies, payloads, nbytes):
            sl.count_repeats(-1)
            return False
        sl.count_repeats(len(replies) - 1)
        return True

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
            if prefix is None or not all(not s.max and s.conn.takes_empties(s) for s in psubs):
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
        if sub.max or sub.closed or (conn is origin and not origin.echo) or not conn.takes_replies(sub):
            sl.count_repeats(-1)
            return False
        sl.count_repeats(len(payloads) - 1)
        conn.deliver_replies(sub, subject, replies, payloads)
        return True

    def route_run(self, subject: str, subject_b: bytes, reply_b: bytes, payloads: list[bytes], origin: Any,
                  payload_bytes: int, queues: tuple[bytes, ...] | None = None) -> None:
        """Route header-less messages with one subject and reply (`payload_bytes` in all): one
        match and one `deliver_run` per receiver when that is exactly what per-message routing would do
        (see `run_receivers`), else message by message, stopping if the origin gets closed on the way."""
        sl = self.sublist
        psubs, qgroups = sl.match(subject)
        if queues is not None and not queues:
            qgroups = ()  # a remote's message for no queue group
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
            route(subject, subject_b, reply_b, None, payload, origin, queues)


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


def pick_queue_member(group: tuple, origin: Any, echo: bool, remote_ok: bool = True) -> Subscription | None:
    """One member of a queue group, at random; local members win over remote (leafnode) ones, as in
    nats-server, so a group spread over edge and hub is served at the edge while it can be. With
    `remote_ok` False a remote member is never picked."""
    n = len(group)
    i = int(random.random() * n) if n > 1 else 0
    remote = None
    for k in range(n):
        sub = group[(i + k) % n]
        conn = sub.conn
        if (conn is origin and not echo) or sub.closed:
            continue
        if conn.kind == KIND_LEAF:
            if remote is None and remote_ok:
                remote = sub
            continue
        return sub
    return remote
