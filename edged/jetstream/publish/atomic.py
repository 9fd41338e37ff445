"""Atomic batch publish (`allow_atomic`, nats-server 2.12): messages with `Nats-Batch-Id` and
`Nats-Batch-Sequence` 1..n are staged (each answered with an empty reply) until the one with
`Nats-Batch-Commit: 1` (or `eob`, an end marker not stored); then every message is checked, and only if
all pass are they stored, in one synchronous run: they join one group-commit batch of the SQLite store,
so they commit in ONE transaction and a crash leaves the batch whole or absent. The commit's PubAck
carries `batch` and `count`. Rules, limits and error codes from nats-server's
processJetStreamAtomicBatchMsg (stream.go) and checkMsgHeadersPreClusteredProposal
(jetstream_batching.go). Staged messages live in memory: a batch not committed before a restart is gone,
as one nats-server abandons."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from edged.jetstream.publish.counters import apply_incr, check_incr
from edged.jetstream.wire.errors import api_error
from edged.routing.headers import get_header

if TYPE_CHECKING:
    from edged.jetstream.stream import Stream

MAX_BATCH_SIZE = 1000  # nats-server's streamDefaultMaxAtomicBatchSize
MAX_INFLIGHT_PER_STREAM = 50
MAX_INFLIGHT_TOTAL = 1000
BATCH_TIMEOUT = 10.0  # seconds without a message before a batch is abandoned
MAX_ID_LEN = 64

_inflight_total = 0  # batches open across the whole server (one process)


class _Staged:
    __slots__ = ("msgs", "timer", "touched")

    def __init__(self) -> None:
        self.msgs: list[tuple[str, bytes, bytes]] = []
        self.timer: asyncio.TimerHandle | None = None
        self.touched = time.monotonic()


class AtomicBatches:
    """The open batches of one stream."""

    def __init__(self, stream: Stream, parse_ttl: Callable[[str], int]) -> None:
        self.stream = stream
        self.parse_ttl = parse_ttl  # the stream module's (which imports this one)
        self.open: dict[str, _Staged] = {}

    def _drop(self, batch_id: str) -> None:
        global _inflight_total
        b = self.open.pop(batch_id, None)
        if b is not None:
            _inflight_total -= 1
            if b.timer is not None:
                b.timer.cancel()

    def _abandon(self, batch_id: str, reason: str) -> None:
        """Drop a batch and say why, on `$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.<stream>` as nats-server."""
        self._drop(batch_id)
        st = self.stream
        st.js.advisory(st.jsa, f"STREAM.BATCH_ABANDONED.{st.name}", {
            "type": "io.nats.jetstream.advisory.v1.stream_batch_abandoned", "stream": st.name,
            "batch": batch_id, "reason": reason})

    def clear(self) -> None:
        for bid in list(self.open):
            self._drop(bid)

    def _arm(self, batch_id: str, b: _Staged) -> None:
        if b.timer is not None:
            b.timer.cancel()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        b.timer = loop.call_later(BATCH_TIMEOUT, self._abandon, batch_id, "timeout")

    def publish(self, batch_id: str, subject: str, reply: str, hdr: bytes, payload: bytes) -> None:
        """One message of a batch (already past the sealed and size checks); errors raise JSApiError."""
        global _inflight_total
        st = self.stream
        st._check_room(st.store.msg_size(subject, hdr, payload))
        if not st.config.get("allow_atomic"):
            raise api_error("JSAtomicPublishDisabledErr")
        if len(batch_id) > MAX_ID_LEN:
            raise api_error("JSAtomicPublishInvalidBatchIDErr")
        seq_text = get_header(hdr, "Nats-Batch-Sequence")
        if not seq_text:
            raise api_error("JSAtomicPublishMissingSeqErr")
        seq = int(seq_text) if seq_text.isascii() and seq_text.isdigit() else 0
        commit_text = get_header(hdr, "Nats-Batch-Commit")
        commit = commit_text is not None
        eob = commit_text == "eob"
        b = self.open.get(batch_id)
        if b is None:
            if seq != 1:
                if (seq - 1 if eob else seq) > MAX_BATCH_SIZE:
                    raise api_error("JSAtomicPublishTooLargeBatchErrF", size=MAX_BATCH_SIZE)
                raise api_error("JSAtomicPublishIncompleteBatchErr")
            if len(self.open) + 1 > MAX_INFLIGHT_PER_STREAM or _inflight_total + 1 > MAX_INFLIGHT_TOTAL:
                raise api_error("JSAtomicPublishTooManyInflight")
            b = self.open[batch_id] = _Staged()
            _inflight_total += 1
        if commit and not eob and commit_text != "1":
            self._drop(batch_id)
            raise api_error("JSAtomicPublishInvalidBatchCommitErr")
        if seq != len(b.msgs) + 1 or (seq == 1 and eob):
            self._abandon(batch_id, "incomplete")
            raise api_error("JSAtomicPublishIncompleteBatchErr")
        if (seq - 1 if eob else seq) > MAX_BATCH_SIZE:
            self._abandon(batch_id, "large")
            raise api_error("JSAtomicPublishTooLargeBatchErrF", size=MAX_BATCH_SIZE)
        if not eob:
            b.msgs.append((subject, hdr, payload))
        if not commit:
            self._arm(batch_id, b)
            if reply and not st.no_ack:  # staged: an empty reply, after the PubAcks still waiting
                st.pubacks.reply_in_order(st.jsa, reply, b"", st.store.durable())
            return
        msgs = b.msgs
        self._drop(batch_id)
        if eob:  # the last stored message gets the ordinary commit header
            s, h, p = msgs[-1]
            msgs[-1] = (s, h[:-2] + b"Nats-Batch-Commit: 1\r\n\r\n", p)
        self._check_all(msgs)
        self._store_all(batch_id, reply, msgs)

    def _check_all(self, msgs: list[tuple[str, bytes, bytes]]) -> None:
        """Every message against the stream as the batch before it would leave it: any failure refuses the
        whole batch before anything is stored."""
        st = self.stream
        store = st.store
        ids: set[str] = set()
        written: set[str] = set()
        now = time.time_ns()
        for i, (subject, hdr, payload) in enumerate(msgs):
            if get_header(hdr, "Nats-Expected-Last-Msg-Id"):
                raise api_error("JSAtomicPublishUnsupportedHeaderBatchErr", header="Nats-Expected-Last-Msg-Id")
            incr = get_header(hdr, "Nats-Incr")
            if incr:
                check_incr(incr, st.counter, hdr, payload)
            exp = get_header(hdr, "Nats-Expected-Stream")
            if exp and exp != st.name:
                raise api_error("JSStreamNotMatchErr")
            ttl_text = get_header(hdr, "Nats-TTL")
            if ttl_text:
                try:
                    ttl: int | None = self.parse_ttl(ttl_text)
                except ValueError:
                    ttl = None
                if ttl != 0 and not st.allow_ttl:
                    raise api_error("JSMessageTTLDisabledErr")
                if ttl is None:
                    raise api_error("JSMessageTTLInvalidErr")
            msg_id = get_header(hdr, "Nats-Msg-Id")
            if msg_id:
                prev = st.dedupe.get(msg_id)
                if msg_id in ids or (prev is not None and now - prev[1] < st.dup_window):
                    raise api_error("JSAtomicPublishContainsDuplicateMessageErr")
                ids.add(msg_id)
            if get_header(hdr, "Nats-Stream-Source"):
                raise api_error("JSMessageSourceHdrNotAllowedErr")
            if st.counter:
                if not incr:
                    raise api_error("JSMessageIncrMissingErr")
                if subject not in written:  # a broken stored total refuses the batch, not half of it
                    apply_incr(st.totals.last(store, subject), subject, hdr, payload)
            els = get_header(hdr, "Nats-Expected-Last-Sequence")
            if els:  # against the sequence the batch has reached; only its first message may expect one
                if not (els.isascii() and els.isdigit()) or int(els) != store.last_seq + i:
                    raise api_error("JSStreamWrongLastSequenceErrF", seq=store.last_seq + i)
                if i > 0:
                    raise api_error("JSStreamWrongLastSequenceConstantErr")
            elss = get_header(hdr, "Nats-Expected-Last-Subject-Sequence")
            elss_subject = get_header(hdr, "Nats-Expected-Last-Subject-Sequence-Subject")
            if elss:
                target = elss_subject or subject
                if target in written:
                    raise api_error("JSStreamWrongLastSequenceConstantErr")
                last = store.load_last(target)
                have = last.seq if last is not None else 0
                if not (elss.isascii() and elss.isdigit()) or int(elss) != have:
                    raise api_error("JSStreamWrongLastSequenceErrF", seq=have)
            elif elss_subject:
                raise api_error("JSStreamExpectedLastSeqPerSubjectInvalid")
            if st.schedules_check is not None:
                st.schedules_check(subject, hdr)
            rollup = (get_header(hdr, "Nats-Rollup") or "").lower()
            if rollup:
                if not st.allow_rollup or st.config.get("deny_purge"):
                    raise api_error("JSStreamRollupFailedF", err="rollup not permitted")
                if rollup not in ("sub", "all"):
                    raise api_error("JSStreamRollupFailedF", err=f'rollup value invalid: "{rollup}"')
            written.add(subject)
        size = sum(store.msg_size(s, h, p) for s, h, p in msgs)
        st._check_room(size)  # the account's limits, for the whole batch
        if st.discard_new:
            if st.max_msgs > 0 and store.msgs + len(msgs) > st.max_msgs:
                raise api_error("JSStreamStoreFailedF", err="maximum messages exceeded")
            if st.max_bytes > 0 and store.bytes + size > st.max_bytes:
                raise api_error("JSStreamStoreFailedF", err="maximum bytes exceeded")

    def _store_all(self, batch_id: str, reply: str, msgs: list[tuple[str, bytes, bytes]]) -> None:
        """Store the checked batch in one synchronous run (one group commit, one transaction) and answer
        the commit once that transaction is."""
        st = self.stream
        transform, st.transform = st.transform, None  # the subjects were transformed when staged
        st.committing_batch = True
        try:
            for subject, hdr, payload in msgs:
                st.process(subject, "", hdr, payload)
        finally:
            st.transform = transform
            st.committing_batch = False
        if reply and not st.no_ack:
            body = st.pubacks.puback_extra(st.name, st.store.last_seq, {"batch": batch_id, "count": len(msgs)})
            st._ack_body(reply, st.store.durable(), body)


