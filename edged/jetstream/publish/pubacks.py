"""PubAcks: their JSON, their sending once the store has committed the message, in publish order, one
flush per group-commit batch, and the spin that keeps the loop awake for a client's next request.

After each socket read the store commits what the read queued (small batches inline), and the acks of
a committed batch are sent in the same read's flush (`on_commit`).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import msgspec

from edged.jetstream.wire.errors import api_error
from edged.routing.receiver import Message
from storage import StoreError, StoreFullError

if TYPE_CHECKING:
    from edged.jetstream.account import JSAccount
    from edged.jetstream.space import Space
    from edged.server import Server

# see PubAcks.spin. 400 µs: a nats-py KV put loop sends its next put 130-300 µs after the ack on a
# loaded 2-vCPU VM; at 200 µs a quarter of the puts found the loop asleep (73 % of windows caught the
# next request, 99.4 % at 400 µs), and a SQLite insert right after a sleep took 35 µs against 21 µs
SPIN_NS = 400_000
_encode = msgspec.json.Encoder().encode


class PubAcks:
    """The replies to a stream's publishes, and the reply pacing (`spin`) every JetStream reply uses."""

    def __init__(self, server: Server, space: Space, domain: str, sync_interval: Any) -> None:
        self.server = server
        self.space = space
        self._domain_field = b""  # in PubAcks
        self.set_domain(domain)
        self._batch_acks: dict[Any, list[tuple[JSAccount, str, str, int]]] = {}
        self._spin_ok = not isinstance(sync_interval, str)  # fsync=always commits on the writer thread
        self._last_ack_ns = 0
        self._spin_until = 0
        self._spinning = False
        self._spin_misses = 0
        self._spin_skip = 0
        self._loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]  # set in start()

    def set_domain(self, domain: str) -> None:
        self._domain_field = b',"domain":"%s"' % domain.encode() if domain else b""

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def send_json(self, jsa: JSAccount, reply: str, body: dict[str, Any]) -> None:
        jsa.internal.publish(reply, _encode(body))

    def puback(self, stream: str, seq: int, duplicate: bool = False) -> bytes:
        """A PubAck's JSON, hand-built: this is the hottest response; same bytes as nats-server's encoder."""
        return b'{"stream":"%s","seq":%d%s%s}' % (stream.encode(), seq, self._domain_field,
                                                 b',"duplicate":true' if duplicate else b"")

    def puback_extra(self, stream: str, seq: int, extra: dict[str, Any]) -> bytes:
        """A PubAck with more fields (a counter's `val`, a batch's `batch` and `count`)."""
        return self.puback(stream, seq)[:-1] + b"," + _encode(extra)[1:]

    def send_ack(self, jsa: JSAccount, reply: str, stream: str, seq: int, duplicate: bool = False) -> None:
        jsa.internal.publish(reply, self.puback(stream, seq, duplicate))

    def reply_in_order(self, jsa: JSAccount, reply: str, body: bytes | dict[str, Any], committed: Any) -> None:
        """The reply to a publish that stored nothing (refused, or a duplicate), sent after the PubAcks
        that still wait for `committed` (the store's pending commits): nats-server answers a stream's
        publishes in the order they came."""
        if isinstance(body, dict):
            body = _encode(body)
        if getattr(committed, "done", None) is None or committed.done():
            jsa.internal.publish(reply, body)
        else:
            self.ack_after(committed, jsa, reply, None, body)

    def ack_after(self, committed: Any, jsa: JSAccount, reply: str, stream: str | None, seq: Any) -> None:
        """Send this PubAck once `committed` (a group-commit batch) resolves. One callback per batch,
        not per message, and one socket flush for all the acks of the batch. With `stream` None, `seq`
        is a reply's whole body, sent as it is (see `reply_in_order`)."""
        acks = self._batch_acks.get(committed)
        if acks is None:
            acks = self._batch_acks[committed] = []
            committed.add_done_callback(self._batch_committed)
        acks.append((jsa, reply, stream, seq))

    def on_commit(self, f: Any) -> None:
        """The store committed the batch of future `f` (not resolved yet): its PubAcks go out now, and
        the done callback that would send them a loop turn later (kept for a failed batch) comes off."""
        acks = self._batch_acks.pop(f, None)
        if acks is not None:
            f.remove_done_callback(self._batch_committed)
            self._send_acks(acks, None)

    def _batch_committed(self, f: Any) -> None:
        acks = self._batch_acks.pop(f, None)
        if acks is not None:
            self._send_acks(acks, f.exception() if not f.cancelled() else StoreError("cancelled"))

    def _send_acks(self, acks: list[tuple[JSAccount, str, str | None, Any]], exc: BaseException | None) -> None:
        if isinstance(exc, StoreFullError):
            self.space.note_store_full()
        if exc is not None:
            for jsa, reply, stream, x in acks:
                if stream is None:
                    jsa.internal.publish(reply, x)
                else:
                    self.send_json(jsa, reply, {"error": api_error("JSStreamStoreFailedF", err=str(exc)).to_dict(),
                                                "stream": stream, "seq": 0})
        elif len(acks) == 1:
            jsa, reply, stream, seq = acks[0]
            if stream is None:
                jsa.internal.publish(reply, seq)
            else:
                self.send_ack(jsa, reply, stream, seq)
                self.spin()
        else:
            self._send_ack_run(acks)
        self.server.flush_now()

    def _send_ack_run(self, acks: list[tuple[JSAccount, str, str | None, Any]]) -> None:
        """The PubAcks of one commit. Those to replies under one parent that the sublist answers alike
        and that go to one subscription of a receiver taking batches (a client's response inbox,
        `_INBOX.<id>.<n>`) are handed to it in one `deliver_batch`: what `send_ack` publishing each would
        deliver, without a route per ack. Anything else is published one by one."""
        puback = self.puback
        i = 0
        n = len(acks)
        while i < n:
            jsa, reply, stream, seq = acks[i]
            if stream is None:  # a reply of reply_in_order
                jsa.internal.publish(reply, seq)
                i += 1
                continue
            sl = jsa.account.sublist
            psubs, qgroups = sl.match(reply)
            parent = sl.memo_parent(reply) if len(psubs) == 1 and not qgroups else None
            sub = psubs[0] if parent is not None else None
            conn = sub.conn if sub is not None else None
            if sub is None or sub.max or sub.closed or not conn.takes_batch(sub):
                sl.count_repeats(-1)  # publishing matches it again
                self.send_ack(jsa, reply, stream, seq)
                i += 1
                continue
            under = parent + "."
            k = len(under)
            batch: list[Message] = []
            size = 0
            j = i
            while j < n:
                a = acks[j]
                r = a[1]
                if a[0] is not jsa or a[2] is None or not r.startswith(under) or r.find(".", k) >= 0:
                    break
                body = puback(a[2], a[3])
                batch.append((r.encode("utf-8", "surrogateescape"), b"", None, body))
                size += len(body)
                j += 1
            sl.count_repeats(j - i - 1)
            conn.deliver_batch(sub, batch, size)
            i = j

    def spin(self) -> None:
        """A client that awaits each reply (a PubAck, an API or direct-get response) sends its next
        request right after receiving one. When replies go out one at a time and often (the previous one
        under 2 ms ago), keep the event loop polling for up to SPIN_NS instead of letting it sleep: waking
        a sleeping loop costs tens of µs (a halted core, a VM's vCPU), more than the rest of the round
        trip. Go's scheduler spins the same way before parking. A sporadic publisher never triggers it;
        between turns the loop polls its sockets without the GIL, so the store's writer thread is not
        held up; with `sync_interval: always` (commits on the writer thread) it is off. A window that
        ends without the next request arriving (a client slower than SPIN_NS) is a miss; from the second
        miss in a row on, each doubles the number of replies that follow without spinning (up to 63), so
        a slow client costs at most a few percent of a core."""
        if not self._spin_ok:
            return
        now = time.perf_counter_ns()
        recent = now - self._last_ack_ns < 2_000_000
        self._last_ack_ns = now
        if not recent:
            return
        if self._spinning:
            self._spin_misses = 0  # this window caught the next request
        elif self._spin_skip:
            self._spin_skip -= 1
            return
        self._spin_until = now + SPIN_NS
        if not self._spinning:
            self._spinning = True
            self._loop.call_soon(self._spin)

    def _spin(self) -> None:
        if time.perf_counter_ns() < self._spin_until:
            self._loop.call_soon(self._spin)
        else:
            self._spinning = False
            self._spin_misses = min(self._spin_misses + 1, 7)
            self._spin_skip = (1 << (self._spin_misses - 1)) - 1  # a single miss is free

