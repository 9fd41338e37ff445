"""The router's contract: what a receiver of messages must be, and the per-read context.

Every front door (a NATS client, a leafnode, later MQTT sessions) and every in-process service
(JetStream, system requests) meets the router as a `Receiver`; a `Subscription` ties one to a subject.
The router (`edged.routing.accounts.Account.route*`) calls only what is declared here, so a new connection kind
is a subclass that frames these calls in its own protocol. Messages are always handed over as parts
(subject, reply, headers, payload), never as another protocol's bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any

from edged.log import log

# One message of a batch (`Receiver.deliver_batch`): subject, reply (b"" for none), the header block
# (b"NATS/1.0..." or None) and the payload. Tuples, not objects: a JetStream consumer hands over
# thousands per pull request.
Message = tuple[bytes, bytes, "bytes | None", bytes]

# Connection kinds as nats-server names them (/connz, advisories, queue-member preference)
KIND_CLIENT = "Client"
KIND_LEAF = "Leafnode"
KIND_SYSTEM = "SYSTEM"


class Subscription:
    __slots__ = ("subject", "queue", "sid", "sid_b", "conn", "max", "delivered", "closed", "weight")

    def __init__(self, conn: Receiver, subject: str, queue: str | None, sid: str) -> None:
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


class Receiver:
    """The whole contract between the router and whoever receives messages.

    Required: `deliver` and `auto_unsubscribe`. The batch forms have correct defaults (one `deliver`
    per message); a receiver overrides them where it can do a batch in one go, and says so through the
    `takes_*` questions, which the router asks before choosing the batch form. A batch form must do
    exactly what `deliver` would do for each message in turn.
    """

    kind: str = KIND_CLIENT
    # False: never hand back to this receiver what it published itself (a leafnode, a no-echo client)
    echo: bool = True
    closed: bool = False
    # True when it understands header blocks (delivers them; otherwise headers are dropped by it)
    headers: bool = True
    # a leafnode link this server solicited: interest learned over it came from a hub and is never
    # advertised back to a hub (spoke semantics)
    is_spoke: bool = False

    def deliver(self, sub: Subscription, subject: bytes, reply: bytes, hdr: bytes | None, payload: bytes) -> None:
        raise NotImplementedError

    def auto_unsubscribe(self, sub: Subscription) -> None:
        """`sub` reached its delivery limit (UNSUB with a max): remove it."""
        raise NotImplementedError

    def deliver_routed(self, sub: Subscription, routed: bytes, subject: bytes, reply: bytes, hdr: bytes | None,
                       payload: bytes) -> None:
        """A message that was matched on `routed` (a JetStream consumer's deliver subject or pull request
        inbox, `Account.route_as`) but carries `subject`, its own. An end receiver (a client, a service)
        takes it under `subject`, which is this default; a link to another server must pass both on, or
        the far side would route it by the message's subject (a leafnode frames `LMSG <routed>
        <reply>@<subject>`)."""
        self.deliver(sub, subject, reply, hdr, payload)

    def takes_routed_batch(self, sub: Subscription) -> bool:
        """Does `deliver_routed_batch` to `sub` take a run whole (no per-message check by the caller, no
        effect before its end that per-message delivery would have had)? No by default."""
        return False

    def deliver_routed_batch(self, sub: Subscription, routed: bytes, msgs: list[Message], nbytes: int) -> None:
        """JetStream deliveries matched on one `routed` subject (a deliver subject), each with its own
        subject and ack reply: `deliver_routed` of each in turn, which is this default. A drain of a
        backlog over a leafnode is thousands of them: a link frames them as one write, a mirror stores
        them in one call. `nbytes` is their header and payload bytes."""
        deliver_routed = self.deliver_routed
        for m in msgs:
            deliver_routed(sub, routed, m[0], m[1], m[2], m[3])

    def deliver_framed_run(self, sub: Subscription, routed: bytes, replies: list[bytes], payloads: list[bytes],
                           nbytes: int) -> bool:
        """Header-less deliveries matched on `routed` as they crossed a leafnode, each reply `<ack reply>@<its
        subject>` (a consumer's backlog draining to a mirror or source here): a receiver that checks and stores
        the run from these columns at once (no message tuples, no split done twice) takes it and says True;
        False, with nothing done, makes the caller split it into messages for `deliver_routed_batch`, which
        this default does. Only for a subscription `takes_routed_batch` said yes to."""
        return False

    def deliver_numbered_run(self, sub: Subscription, routed: bytes, subjects: list[bytes], payloads: list[bytes],
                             reply_fmt: bytes, numbers: Sequence[Sequence[int]], nbytes: int) -> None:
        """`deliver_routed_batch` of header-less deliveries whose ack replies differ only in numbers: message
        i's reply is `reply_fmt % (numbers[0][i], numbers[1][i], ...)` (a consumer's run: sequences, time,
        pending). A receiver that frames the run can build each reply inside its frame, one formatting per
        message; this default builds the replies and hands the run to `deliver_routed_batch`. Only for a
        subscription `takes_routed_batch` said yes to."""
        replies = list(map(reply_fmt.__mod__, zip(*numbers, strict=True)))
        msgs: list[Message] = list(zip(subjects, replies, repeat(None, len(replies)), payloads, strict=True))
        self.deliver_routed_batch(sub, routed, msgs, nbytes)

    def backlogged(self) -> bool:
        """Is output waiting here beyond what a producer of bulk deliveries (a JetStream push consumer
        draining a backlog to a hub) should add to? Such a producer then stops and asks `on_drained`, so
        the receiver's own traffic (a link's PING/PONG, interest, core messages) never queues behind a
        whole backlog and a drain never makes it a slow consumer. No by default."""
        return False

    def on_drained(self, fn: Callable[[], None]) -> None:
        """Call `fn` once `backlogged` has turned false (asked only after it said true)."""
        fn()

    def takes_run(self, sub: Subscription, n: int, run_bytes: int) -> bool:
        """Can `deliver_run` take n messages of run_bytes (payloads and subject/reply per message) with no
        effect before its end (no flush, no close)? No by default: the router then goes message by
        message."""
        return False

    def deliver_run(self, sub: Subscription, subject: bytes, reply: bytes, payloads: list[bytes]) -> None:
        """Header-less messages with one subject and reply."""
        deliver = self.deliver
        for payload in payloads:
            deliver(sub, subject, reply, None, payload)

    def deliver_batch(self, sub: Subscription, msgs: list[Message], nbytes: int) -> None:
        """Messages for one subscription that a service produced together (a consumer's deliveries, the
        PubAcks of one commit); `nbytes` is their header and payload bytes. Callers use it only for a
        subscription without an auto-unsubscribe limit, and only with a receiver that keeps the default
        `deliver_routed` (a batch carries the messages' own subjects, not what they were routed by)."""
        deliver = self.deliver
        for m in msgs:
            deliver(sub, m[0], m[1], m[2], m[3])

    def takes_batch(self, sub: Subscription) -> bool:
        """True when `deliver_batch` to `sub` needs no per-message check by the caller (no delivery
        permissions to apply): the producer may then build messages straight into a batch."""
        return False

    def takes_empties(self, sub: Subscription) -> bool:
        """Does `deliver_empties` take runs of empty, header-less, reply-less messages for `sub`?"""
        return False

    def deliver_empties(self, sub: Subscription, subjects: list[bytes]) -> None:
        for s in subjects:
            self.deliver(sub, s, b"", None, b"")

    def takes_replies(self, sub: Subscription) -> bool:
        """Does `deliver_replies` take runs of header-less messages to one subject, each with its own
        reply (a JetStream publisher's pipelined requests), for `sub`?"""
        return False

    def deliver_replies(self, sub: Subscription, subject: str, replies: list[bytes], payloads: list[bytes]) -> None:
        sb = subject.encode("utf-8", "surrogateescape")
        for reply, payload in zip(replies, payloads, strict=True):
            self.deliver(sub, sb, reply, None, payload)


class ReadContext:
    """What one socket read's processing shares with the services it reaches, per server (no
    process-wide state): who is being read (`origin`), work that may wait until the read's output is
    written (`defer`: a consumer's plain acks, so the messages a pull request in the same read asks for
    go out first, as nats-server processes acks apart from pull requests), the hooks that run once the
    read is processed (the store's commit kick), and a request turned down by its only receiver
    (`decline`)."""

    __slots__ = ("active", "origin", "work", "hooks", "declined")

    def __init__(self) -> None:
        self.active = False
        self.origin: Any = None
        self.work: list[Callable[[], None]] = []
        self.hooks: list[Callable[[], None]] = []
        self.declined: tuple[str, str] | None = None

    def begin(self, origin: Any) -> None:
        self.active = True
        self.origin = origin

    def end(self) -> None:
        self.active = False
        self.origin = None
        if self.work:
            self.run()

    def defer(self, fn: Callable[[], None]) -> None:
        self.work.append(fn)

    def run(self) -> None:
        """Run all deferred work; one failing item is logged and does not drop the others."""
        while self.work:
            work, self.work = self.work, []
            for fn in work:
                try:
                    fn()
                except Exception:
                    log.exception("deferred work failed")

    def decline(self, subject: str, reply: str) -> None:
        """A receiver took this request but turns it down (an ack subject of a shape nats-server's exact
        subscription would not match): its publisher gets "no responders" unless someone else took it."""
        self.declined = (subject, reply)

    def take_declined(self, subject: str, reply: str) -> bool:
        """Was this request (just routed) turned down? Clears the note either way."""
        last, self.declined = self.declined, None
        return last is not None and last[0] == subject and last[1] == reply
