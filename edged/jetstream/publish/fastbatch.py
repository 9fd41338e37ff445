"""Fast batch publishing (nats-server 2.14, `allow_batched`; server/jetstream_batching.go, stream.go
processJetStreamFastBatchMsg). A publisher streams messages whose reply subject names the batch:
`<prefix>.<batch id>.<initial flow>.<gap mode>.<batch seq>.<operation>.$FI`. Each message is stored as
it comes (no all-or-nothing: that is `allow_atomic`); the stream answers with flow messages
(`{"type":"ack","seq":N,"msgs":M}`: messages up to N are stored, the next ack comes M messages on),
gap reports (`{"type":"gap",...}`), per-message errors (`{"type":"err",...}`) and, to the commit, a
PubAck with `batch` and `count`. "Stored" means committed in SQLite here, as every PubAck of edged.

`parse_reply` is the sans-I/O part (the reply subject's grammar); `FastBatches` keeps a stream's open
batches and does the bookkeeping around the stream's ordinary publish path."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from edged.jetstream.wire.errors import JSApiError, api_error
from edged.jetstream.wire.versioning import REQUIRED_LEVEL_HEADER, refuses_required_level
from edged.routing.headers import get_header, remove_headers

if TYPE_CHECKING:
    from edged.jetstream.stream import Stream

SUFFIX = ".$FI"
OP_START, OP_APPEND, OP_COMMIT, OP_COMMIT_EOB, OP_PING = range(5)
MAX_ID = 64
INFLIGHT_PER_STREAM = 1000  # nats-server's streamDefaultMaxFastBatchInflightPerStream
INFLIGHT_TOTAL = 50_000  # streamDefaultMaxFastBatchInflightTotal
TIMEOUT = 10.0  # streamDefaultMaxBatchTimeout: an idle batch is forgotten after this
MAX_FLOW = 500  # the most messages between two flow acks the server offers
_U64 = (1 << 64) - 1
_encode = msgspec.json.Encoder().encode
_inflight_total = 0  # open batches across all streams of this server


@dataclass(slots=True)
class BatchRef:
    """What one message's reply subject says of its batch."""

    id: str
    seq: int
    flow: int
    gap_ok: bool
    commit: bool = False
    commit_eob: bool = False
    ping: bool = False


INVALID = BatchRef("", 0, 0, False)  # a `.$FI` reply that does not follow the grammar (10206)


def _go_int(tok: str) -> int:
    """nats-server's parseInt64: digits only, else -1."""
    return int(tok) if tok and tok.isascii() and tok.isdigit() else -1


def parse_reply(reply: str) -> BatchRef | None:
    """The batch a reply subject names (nats-server's getFastBatch): None when it is no fast batch reply,
    INVALID when it ends in `.$FI` but is not one."""
    if len(reply) <= len(SUFFIX) or not reply.endswith(SUFFIX):
        return None
    toks = reply[:-len(SUFFIX)].rsplit(".", 5)
    if len(toks) < 6:  # a prefix, then id, flow, gap mode, seq, operation
        return INVALID
    op = _go_int(toks[-1])
    if not OP_START <= op <= OP_PING:
        return INVALID
    seq = _go_int(toks[-2])
    if seq <= 0 or seq >= _U64:
        return INVALID
    eob = op == OP_COMMIT_EOB
    if (seq == 1 and eob) or (op == OP_START and seq != 1) or (op == OP_APPEND and seq <= 1):
        return INVALID
    gap = toks[-3]
    if gap not in ("fail", "ok"):
        return INVALID
    flow = _go_int(toks[-4])
    flow = 10 if flow <= 0 else min(flow, 0xFFFF)
    return BatchRef(toks[-5], seq, flow, gap == "ok", commit=eob or op == OP_COMMIT, commit_eob=eob,
                    ping=op == OP_PING)


class _Batch:
    """One open batch: its sequences (last received, last stored, last flow-acked), how many of its
    messages wait for their commit, the current ack interval, the inactivity timer."""

    __slots__ = ("lseq", "sseq", "pseq", "fseq", "pending", "ack_msgs", "max_ack", "reply", "gap_ok", "commit",
                 "timer", "active")

    def __init__(self, gap_ok: bool, max_ack: int) -> None:
        self.lseq = self.sseq = self.pseq = self.fseq = self.pending = 0
        self.ack_msgs = 1
        self.max_ack = max_ack
        self.reply = ""
        self.gap_ok = gap_ok
        self.commit = False
        self.timer: asyncio.TimerHandle | None = None
        self.active = 0.0  # loop time of the last message: the timer looks at it rather than being re-armed


class FastBatches:
    """The open fast batches of one stream."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.open: dict[str, _Batch] = {}
        self._in_commit = False
        # messages waiting for their commit, per commit future: one callback per group commit
        self._waiting: dict[Any, list[tuple[str, _Batch, int, int, str]]] = {}

    # ---------------------------------------------------------------- replies

    def _send(self, reply: str, body: dict[str, Any]) -> None:
        """A reply after the PubAcks still waiting for their commit, or at once from a commit callback."""
        s = self.stream
        if not reply or s.no_ack:
            return
        if self._in_commit:
            s.jsa.internal.publish(reply, _encode(body))
            s.pubacks.spin()
        else:
            s.pubacks.reply_in_order(s.jsa, reply, _encode(body), s.store.durable())

    def _flow(self, b: _Batch, seq: int, reply: str) -> None:
        self._send(reply, {"type": "ack", "seq": seq, "msgs": b.ack_msgs})

    def _puback(self, bid: str, b: _Batch, reply: str) -> None:
        s = self.stream
        body: dict[str, Any] = {"stream": s.name}
        if s.js.domain:
            body["domain"] = s.js.domain
        body.update(seq=b.sseq, batch=bid, count=b.lseq)
        self._send(reply, body)

    # ---------------------------------------------------------------- lifecycle

    def _new(self, bid: str, ref: BatchRef) -> _Batch:
        global _inflight_total
        b = _Batch(ref.gap_ok, ref.flow)
        self.open[bid] = b
        _inflight_total += 1
        self._init_flow(b)
        self._arm(bid, b)
        return b

    def _init_flow(self, b: _Batch) -> None:
        """The only batch gets what its publisher allows; with others open it starts at 1 and ramps up."""
        b.ack_msgs = 1 if len(self.open) > 1 else min(MAX_FLOW, b.max_ack)

    def _arm(self, bid: str, b: _Batch) -> None:
        loop = self.stream.js.server.loop
        b.active = loop.time()
        if b.timer is None:
            b.timer = loop.call_later(TIMEOUT, self._expire, bid, b)

    def _expire(self, bid: str, b: _Batch) -> None:
        """The inactivity timer: the batch goes TIMEOUT after its last message."""
        loop = self.stream.js.server.loop
        idle = loop.time() - b.active
        if idle < TIMEOUT and not b.commit:
            b.timer = loop.call_later(TIMEOUT - idle, self._expire, bid, b)
            return
        b.timer = None
        self._drop(bid, b)

    def _drop(self, bid: str, b: _Batch) -> None:
        global _inflight_total
        if self.open.get(bid) is b:
            del self.open[bid]
            _inflight_total = max(0, _inflight_total - 1)
        if b.timer is not None:
            b.timer.cancel()
            b.timer = None

    def clear(self) -> None:
        """The stream stops taking fast batches (deleted, or `allow_batched` turned off)."""
        for bid, b in list(self.open.items()):
            self._drop(bid, b)

    # ---------------------------------------------------------------- the publish path

    def publish(self, ref: BatchRef, subject: str, reply: str, hdr: bytes | None, payload: bytes) -> None:
        """One message of a fast batch, in nats-server's order of checks; JSApiError = an ordinary
        publish error reply (the stream's `_refused`)."""
        global _inflight_total
        s = self.stream
        # what nats-server checks before the batch: sealed, the disk and account limits, the size
        if s.sealed:
            raise api_error("JSStreamSealedErr")
        s._check_room(s.store.msg_size(subject, hdr or b"", payload))
        if s.max_msg_size >= 0 and len(hdr or b"") + len(payload) > s.max_msg_size:
            raise api_error("JSStreamMessageExceedsMaximumErr")
        if not s.config.get("allow_batched"):
            raise api_error("JSBatchPublishDisabledErr")
        if ref is INVALID:
            raise api_error("JSBatchPublishInvalidPatternErr")
        if len(ref.id) > MAX_ID:
            raise api_error("JSBatchPublishInvalidBatchIDErr")
        bid = ref.id
        b = self.open.get(bid)
        if b is None:
            if ref.seq != 1:
                raise api_error("JSBatchPublishUnknownBatchIDErr")
            if len(self.open) + 1 > INFLIGHT_PER_STREAM or _inflight_total + 1 > INFLIGHT_TOTAL:
                raise api_error("JSBatchPublishTooManyInflight")
            b = self._new(bid, ref)
        else:
            self._arm(bid, b)
        if hdr and get_header(hdr, REQUIRED_LEVEL_HEADER) is not None:
            if refuses_required_level(hdr):  # the batch cannot be what its publisher needs
                self._drop(bid, b)
                raise api_error("JSRequiredApiLevelErr")
            hdr = remove_headers(hdr, {REQUIRED_LEVEL_HEADER})
        if ref.ping:
            self._ping(bid, b, ref, reply)
            return
        if b.commit:
            return  # committing already (after an error): the publisher waits for the PubAck
        b.lseq += 1
        if b.lseq != ref.seq:
            if ref.seq > b.lseq:
                self._send(reply, {"type": "gap", "last_seq": b.lseq, "seq": ref.seq})
            if b.gap_ok and ref.seq > b.lseq:
                b.lseq = ref.seq
            else:  # a step back, or a gap in gap-fail mode: the batch ends here
                b.lseq -= 1
                self._commit(bid, b, reply)
                return
        if ref.commit:
            if ref.commit_eob:  # the end-of-batch marker is no message
                b.lseq -= 1
                if b.pending == 0:
                    b.pseq = b.lseq
                self._commit(bid, b, reply)
                return
            b.commit = True
        elif ref.seq == 1:
            self._flow(b, 0, reply)  # the first message learns the flow the server offers
        try:
            res = s.process(subject, "", hdr, payload)
        except JSApiError as e:
            self._failed(bid, b, ref, reply, e)
            return
        if res is None:  # a duplicate (Nats-Msg-Id): nothing stored, counted as stored
            if b.pending == 0:
                b.pseq = ref.seq
                self._check_flow(b, reply)
            if b.commit:
                b.commit = False
                self._commit(bid, b, reply)
            return
        seq, committed = res
        b.pending += 1
        if hasattr(committed, "add_done_callback"):
            waiting = self._waiting.get(committed)
            if waiting is None:
                waiting = self._waiting[committed] = []
                committed.add_done_callback(self._committed)
            waiting.append((bid, b, ref.seq, seq, reply))
        else:
            self._stored(bid, b, ref.seq, seq, reply, None)

    def _failed(self, bid: str, b: _Batch, ref: BatchRef, reply: str, e: JSApiError) -> None:
        """A message of the batch refused by the stream's checks."""
        if not b.gap_ok and b.lseq == 1:  # the first message: answered as an ordinary publish
            self._drop(bid, b)
            raise e
        self._send(reply, {"type": "err", "seq": ref.seq, "error": e.to_dict()})
        if b.gap_ok and not ref.commit:
            return
        b.lseq -= 1
        if b.pending == 0:
            b.pseq = b.lseq
        b.commit = False
        self._commit(bid, b, reply)

    def _ping(self, bid: str, b: _Batch, ref: BatchRef, reply: str) -> None:
        """The publisher asks where the batch stands (its acks may have been lost): a gap report if it
        sent more than arrived, then the last flow ack again."""
        flow = True
        if ref.seq > b.lseq:
            self._send(reply, {"type": "gap", "last_seq": b.lseq + 1, "seq": ref.seq + 1})
            if b.gap_ok:
                b.lseq = ref.seq
                if b.pending == 0:
                    b.pseq = b.lseq
                flow = not self._check_flow(b, reply)
            elif self._commit(bid, b, reply):
                flow = False
        if flow:
            self._flow(b, b.fseq, reply)

    def _commit(self, bid: str, b: _Batch, reply: str) -> bool:
        """End the batch: the PubAck now if everything is stored, else once its last message is."""
        b.commit = True
        if b.lseq == b.pseq:
            self._drop(bid, b)
            self._puback(bid, b, reply)
            return True
        return False

    def _committed(self, f: Any) -> None:
        exc = None if f.cancelled() else f.exception()
        for bid, b, bseq, seq, reply in self._waiting.pop(f, ()):
            self._stored(bid, b, bseq, seq, reply, exc)

    def _stored(self, bid: str, b: _Batch, bseq: int, seq: int, reply: str, exc: BaseException | None) -> None:
        """A message of the batch is committed (nats-server's fastBatchRegisterSequences)."""
        if exc is not None or self.open.get(bid) is not b:
            return  # not stored (the batch times out), or the batch is gone
        self._in_commit = True
        try:
            self._register(bid, b, bseq, seq, reply)
        finally:
            self._in_commit = False

    def _register(self, bid: str, b: _Batch, bseq: int, seq: int, reply: str) -> None:
        b.reply = reply
        if b.pending > 0:
            b.pending -= 1
        b.sseq = seq
        b.pseq = b.lseq if b.pending == 0 else bseq
        if b.lseq == b.pseq and b.commit:
            self._drop(bid, b)
            self._puback(bid, b, reply)
            return
        self._check_flow(b, reply)

    def _check_flow(self, b: _Batch, reply: str) -> bool:
        """A flow ack once `ack_msgs` more messages are stored, the interval ramped up or down toward
        what the server can take with this many batches open (at most the publisher's own limit)."""
        am = b.ack_msgs
        if b.pseq < b.fseq + am:
            return False
        b.fseq += (b.pseq - b.fseq) // am * am
        most = max(1, min(MAX_FLOW // max(1, len(self.open)), b.max_ack))
        if b.ack_msgs < most:
            b.ack_msgs = min(b.ack_msgs * 2, most)
        elif b.ack_msgs > most:
            b.ack_msgs = max(b.ack_msgs // 2, most)
        self._flow(b, b.fseq, reply)
        return True
