"""The message-store interface shared by the SQLite and memory backends.

All mutators are *synchronous*: they assign sequences and update in-memory state immediately, so the
JetStream engine (one asyncio loop) can check expected-last-seq, limits and dedupe in order. Durability
is separate: `append` returns an awaitable that resolves when its row is committed, and `durable()`
returns one covering everything queued so far (one shared future per commit batch, not per message).

Policy (discard old/new, which limit applies) belongs to the engine; this module offers the primitives
(`trim_msgs`, `trim_bytes`, `remove_older_than`, `trim_subject`, `expire_due`) and implements purge with
nats-server's `PurgeEx`/`Compact` semantics once, on top of a handful of backend primitives.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from edged.routing.subjects import CompiledFilter, FilterArg, compile_filter, is_literal

DEFAULT_ACCOUNT = "$G"
# The sequence space of a stream: the SQLite store keeps a message's sequence in the low SEQ_BITS bits
# of its row key (the stream's id above them). Part of the interface, so that JetStream can refuse a
# request past it without knowing the backend.
SEQ_BITS = 44
MAX_SEQ = (1 << SEQ_BITS) - 1


class StoreError(Exception):
    """Any store failure; the engine maps it to a JetStream API error (e.g. 10077 store failed)."""


class StoreFullError(StoreError):
    """The disk (or the configured page limit) is full; nothing of the failed batch was stored."""


class StoreClosedError(StoreError):
    """The store or stream was closed or deleted."""


class StreamExistsError(StoreError):
    pass


class StoredMsg(NamedTuple):
    seq: int
    subject: str
    hdr: bytes
    data: bytes
    ts: int  # unix ns
    ttl: int = 0  # ns; 0 = no per-message TTL


class Meta(NamedTuple):
    """What scans yield when payloads are not needed."""

    seq: int
    subject: str
    size: int
    ts: int


@dataclass(slots=True)
class StreamState:
    msgs: int
    bytes: int
    first_seq: int
    first_ts: int  # ns, 0 when empty (nats-server reports the zero time)
    last_seq: int
    last_ts: int
    num_deleted: int
    num_subjects: int
    consumers: int
    deleted: list[int] | None = None
    subjects: dict[str, int] | None = field(default=None)


class _Done:
    """An awaitable that is already complete: what the memory backend hands out for durability."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # pragma: no cover - makes this a generator

    def done(self) -> bool:
        return True


DONE: Awaitable[None] = _Done()


class Stream(ABC):
    """One stream's messages, state and consumers. Obtain it from a `Store`."""

    # Per-message overhead function; backends mirror nats-server's memStoreMsgSize / fileStoreMsgSize.
    @staticmethod
    @abstractmethod
    def msg_size(subject: str, hdr: bytes, data: bytes) -> int: ...

    def __init__(self, account: str, name: str, config: bytes, created_ns: int, first_seq: int) -> None:
        self.account = account
        self.name = name
        self.config = config
        self.created_ns = created_ns
        # created without a first sequence (0) and never purged: while it holds no sequence yet,
        # nats-server reports first_seq 0 for such a stream, 1 once purged or created with first_seq 1
        self.pristine = first_seq == 0
        first_seq = first_seq or 1
        self.first_seq = first_seq
        self.last_seq = first_seq - 1
        # the messages the last limit removal (trim_*, remove_older_than) took: whoever keeps messages
        # of its own (a consumer's pending ones) learns which went, also from the middle of the stream
        self.last_removed: list[Meta] = []
        # counts how often state was rebuilt from disk (after a failed commit): whatever a caller keeps
        # about this stream's messages (a KV bucket's last sequence per key) is stale once it changes
        self.epoch = 0
        # remember what was stored lately for `recent_meta` (set by the owner: an interest or workqueue stream)
        self.track_recent = False
        self.last_ts = 0
        self.msgs = 0
        self.bytes = 0
        self.subjects: dict[str, int] = {}
        self.consumers: dict[str, tuple[bytes, bytes]] = {}
        self._dead = False
        self._chunk_hint = 0

    # ---- backend primitives ------------------------------------------------------------------
    @abstractmethod
    def append(
        self, subject: str, hdr: bytes = b"", data: bytes = b"", ts: int = 0, ttl: int = 0, size: int = 0
    ) -> tuple[int, int, Awaitable[None]]:
        """Store one message. Returns (seq, ts_ns, committed). `ttl` is in ns (0 = none). `size` is
        `msg_size(subject, hdr, data)` when the caller has it already (0: computed here)."""

    def append_run(self, subjects: Sequence[str], hdrs: Sequence[bytes], datas: Sequence[bytes], tss: Sequence[int],
                   sizes: Sequence[int]) -> None:
        """`append` of each message in turn (the i-th of each column), at consecutive sequences, without a TTL
        (a mirror's run of deliveries); a backend may do it in one go. Columns, not rows: a run arrives as
        columns and a backend builds its rows from them without a Python step per message. Committed with
        what else is queued."""
        append = self.append
        for subject, hdr, data, ts, size in zip(subjects, hdrs, datas, tss, sizes, strict=True):
            append(subject, hdr, data, ts, 0, size)

    @abstractmethod
    def durable(self) -> Awaitable[None]:
        """Resolves when everything queued so far (any stream of the same store) is committed."""

    @abstractmethod
    def _get(self, seq: int) -> StoredMsg | None:
        """Point read; caller guarantees first_seq <= seq <= last_seq."""

    @abstractmethod
    def _scan(
        self, lo: int, hi: int, filt: CompiledFilter, reverse: bool, full: bool
    ) -> Iterator[Any]:
        """Live messages with lo <= seq <= hi matching filt, in seq order (StoredMsg or Meta)."""

    @abstractmethod
    def _drop_one(self, seq: int) -> None:
        """Remove the row (bookkeeping is done by the caller)."""

    def _drop_later(self, seq: int) -> None:
        """Remove a live message whose removal nobody waits on (a limit's, e.g. a KV bucket's previous
        revision): a backend may make it durable after what is being appended now."""
        self._drop_one(seq)

    def _drop_acked(self, seq: int) -> None:
        """Remove an acked message of an interest or workqueue stream (nobody waits on it): a backend may
        make it durable with a later commit."""
        self._drop_one(seq)

    def _drop_acked_run(self, metas: list[Meta]) -> None:
        """`_drop_acked` of each (a run of acks): a backend may do the lot in one call."""
        for m in metas:
            self._drop_acked(m.seq)

    @abstractmethod
    def _drop_range(self, lo: int, hi: int) -> None:
        """Remove every row with lo <= seq <= hi."""

    @abstractmethod
    def _persist_meta(self) -> None:
        """Make sure first/last seq and last_ts get persisted with the current batch."""

    def _persist_meta_later(self) -> None:
        """`_persist_meta` for removals made with `_drop_acked`: with the commit that takes them."""
        self._persist_meta()

    def update_consumer_state_later(self, name: str, state: Callable[[], bytes | None]) -> None:
        """A consumer's state changed and nobody waits for it on disk (deliveries, plain acks): `state()`
        gives the blob, or None when there is nothing to write any more. A backend may ask for it as a
        later commit starts, so many changes cost one encoding and one write, riding with that commit."""
        blob = state()
        if blob is not None and name in self.consumers:
            self.update_consumer_state(name, blob)

    @abstractmethod
    def _expired_metas(self, now_ns: int) -> list[Meta]:
        """Live messages whose per-message TTL expiry is <= now_ns."""

    @abstractmethod
    def next_expiry(self) -> int:
        """Earliest per-message TTL expiry (unix ns) among live messages, 0 if none."""

    @abstractmethod
    def _put_consumer(self, name: str, config: bytes, state: bytes) -> None: ...

    @abstractmethod
    def _del_consumer(self, name: str) -> None: ...

    @abstractmethod
    def _put_config(self, config: bytes) -> None: ...

    # ---- reads -------------------------------------------------------------------------------
    def _check(self) -> None:
        if self._dead:
            raise StoreClosedError(f"stream {self.name!r} is closed or deleted")

    def load(self, seq: int) -> StoredMsg | None:
        """The message at seq, or None if it never existed or was removed."""
        if seq < self.first_seq or seq > self.last_seq or self.msgs == 0:
            return None
        return self._get(seq)

    def load_next(self, start: int, filter: FilterArg = None) -> StoredMsg | None:
        """First message with seq >= start matching the filter(s). None when there is none: the engine
        may then resume from `last_seq + 1`, everything up to it has been looked at."""
        filt = compile_filter(filter)
        if filt.literal_only and not any(s in self.subjects for s in filt.literals):
            return None
        for m in self._scan(max(start, self.first_seq), self.last_seq, filt, False, True):
            return m  # type: ignore[no-any-return]
        return None

    def read_batch(self, start: int, filter: FilterArg = None, limit: int = 256) -> list[StoredMsg]:
        """Up to `limit` messages with seq >= start matching the filter, in order: one read for many
        deliveries (a consumer's read-ahead)."""
        out: list[StoredMsg] = []
        if limit <= 0:
            return out
        lo = max(start, self.first_seq)
        self._chunk_hint = limit  # backends that read in chunks can fetch the batch in one go
        try:
            for m in self._scan(lo, self.last_seq, compile_filter(filter), False, True):
                out.append(m)
                if len(out) >= limit:
                    break
        finally:
            self._chunk_hint = 0
        return out

    def metas(self, lo: int, hi: int, filter: FilterArg = None) -> list[Meta]:
        """The live messages lo..hi matching the filter, without their payloads, taken whole first so the
        caller may remove some of them as it goes."""
        lo, hi = max(lo, self.first_seq), min(hi, self.last_seq)
        return list(self._scan(lo, hi, compile_filter(filter), False, False)) if lo <= hi else []

    def read_rows(self, start: int, filter: FilterArg = None, limit: int = 256) -> list[tuple[Any, ...]]:
        """read_batch for a consumer's read-ahead: tuples that start (seq, subject, hdr, data, ts), as a
        StoredMsg does, but need not be StoredMsgs (a backend may skip building them)."""
        return self.read_batch(start, filter, limit)  # type: ignore[return-value]

    def read_run(self, start: int, filter: FilterArg, limit: int) -> list[tuple[bytes, bytes, bytes, int]] | None:
        """Every message from `start` on, at most `limit`, when none is missing and all match the filter:
        (subject as bytes, hdr, data, ts) rows for the sequences start, start + 1, ... with no gap, so a
        consumer derives each delivery's numbers from the row's place. None otherwise (a gap, a filter that
        leaves some out): the caller goes message by message."""
        hi = min(start + limit - 1, self.last_seq)
        if start < self.first_seq or hi < start or not compile_filter(filter).all:
            return None
        rows = self.read_batch(start, None, hi - start + 1)
        if len(rows) != hi - start + 1 or rows[-1].seq != hi:
            return None
        return [(m.subject.encode("utf-8", "surrogateescape"), m.hdr, m.data, m.ts) for m in rows]

    def load_prev(self, start: int, filter: FilterArg = None) -> StoredMsg | None:
        """Last message with seq <= start matching the filter(s)."""
        filt = compile_filter(filter)
        if filt.literal_only and not any(s in self.subjects for s in filt.literals):
            return None
        for m in self._scan(self.first_seq, min(start, self.last_seq), filt, True, True):
            return m  # type: ignore[no-any-return]
        return None

    def newest_first(self, start: int) -> Iterator[StoredMsg]:
        """Messages with seq <= start, newest first, read in chunks: a walk back over the latest ones (a
        restart's duplicate window) costs a read per chunk, where load_prev costs one per message."""
        return self._scan(self.first_seq, min(start, self.last_seq), compile_filter(None), True, True)

    def load_last(self, filter: FilterArg = None) -> StoredMsg | None:
        """Last message whose subject matches the filter (wildcards allowed)."""
        return self.load_prev(self.last_seq, filter)

    def count(self, start: int = 0, filter: FilterArg = None) -> int:
        """Messages with seq >= start matching the filter (a consumer's num_pending)."""
        filt = compile_filter(filter)
        start = max(start, self.first_seq)
        if start <= self.first_seq:
            if filt.all:
                return self.msgs
            if filt.literal_only:
                return sum(self.subjects.get(s, 0) for s in filt.literals)
        if filt.literal_only and not any(s in self.subjects for s in filt.literals):
            return 0
        n = 0
        for _ in self._scan(start, self.last_seq, filt, False, False):
            n += 1
        return n

    def subject_counts(self, filter: FilterArg = None) -> dict[str, int]:
        """Per-subject message counts, for subjects matching the filter."""
        filt = compile_filter(filter)
        if filt.all:
            return dict(self.subjects)
        if filt.literal_only:
            return {s: self.subjects[s] for s in filt.literals if s in self.subjects}
        return {s: n for s, n in self.subjects.items() if filt.matches(s)}

    def deleted(self) -> list[int]:
        """Interior deletes: sequences between first and last that hold no message."""
        out: list[int] = []
        if self.msgs == 0:
            return out
        nxt = self.first_seq
        for m in self._scan(self.first_seq, self.last_seq, compile_filter(None), False, False):
            if m.seq > nxt:
                out.extend(range(nxt, m.seq))
            nxt = m.seq + 1
        out.extend(range(nxt, self.last_seq + 1))
        return out

    def state(self, deleted: bool = False, subjects_filter: FilterArg | bool = None) -> StreamState:
        """Stream info state. `deleted=True` lists interior deletes; a subjects filter (or True for
        all) adds per-subject counts."""
        first_ts = 0
        if self.msgs:
            m = self._get(self.first_seq)
            first_ts = m.ts if m is not None else 0
        nd = (self.last_seq - self.first_seq + 1 - self.msgs) if self.msgs else 0
        st = StreamState(
            msgs=self.msgs,
            bytes=self.bytes,
            first_seq=self.first_seq,
            first_ts=first_ts,
            last_seq=self.last_seq,
            last_ts=self.last_ts,
            num_deleted=nd,
            num_subjects=len(self.subjects),
            consumers=len(self.consumers),
        )
        if deleted:
            st.deleted = self.deleted()
        if subjects_filter is True:
            st.subjects = self.subject_counts(None)
        elif subjects_filter not in (None, False):
            st.subjects = self.subject_counts(subjects_filter)  # type: ignore[arg-type]
        return st

    # ---- removal -----------------------------------------------------------------------------
    def _forget(self, subject: str, size: int) -> None:
        self.msgs -= 1
        self.bytes -= size
        n = self.subjects.get(subject, 0) - 1
        if n > 0:
            self.subjects[subject] = n
        else:
            self.subjects.pop(subject, None)

    def _forget_run(self, metas: list[Meta]) -> None:
        """`_forget` of each, in one pass."""
        subjects = self.subjects
        size = 0
        for m in metas:
            size += m.size
            subject = m.subject
            n = subjects.get(subject, 0) - 1
            if n > 0:
                subjects[subject] = n
            else:
                subjects.pop(subject, None)
        self.msgs -= len(metas)
        self.bytes -= size

    def _advance_first(self) -> None:
        """After the first message went away, first_seq moves to the next live one (or last+1)."""
        if self.msgs == 0:
            self.first_seq = self.last_seq + 1
            return
        self.first_seq = self._next_live(self.first_seq)

    def _next_live(self, after: int) -> int:
        """The first live sequence after `after`, or last_seq + 1."""
        for m in self._scan(after + 1, self.last_seq, compile_filter(None), False, False):
            return m.seq  # type: ignore[no-any-return]
        return self.last_seq + 1

    def delete(self, seq: int, erase: bool = False) -> bool:
        """Remove one message. `erase` (secure erase) is accepted for API parity: both backends make
        the payload unrecoverable the same way (see the backend docstrings). False if absent."""
        self._check()
        m = self.load(seq)
        if m is None:
            return False
        self._drop_one(seq)
        self._forget(m.subject, self.msg_size(m.subject, m.hdr, m.data))
        if seq == self.first_seq:
            self._advance_first()
        self._persist_meta()
        return True

    def delete_many(self, seqs: list[int], later: bool = False) -> list[Meta]:
        """Remove these messages, those still there, and return what went. Acks come in runs of nearby
        sequences: one scan of their range then stands for a read per message (a few are read one by one,
        by key, which costs less than a scan's setup). `later`: nobody waits on the removal (acked
        messages of an interest or workqueue stream): a backend may make it durable with a later commit
        (`_drop_acked`) rather than one of its own."""
        self._check()
        if not seqs:
            return []
        seqs = sorted(set(seqs))
        known: list[Meta] = []
        if later and self.track_recent:
            # messages stored lately are known without a read (`recent_meta`)
            known, rest = self.recent_metas(seqs)
            if not rest:
                self._remove_metas(known, False, later)
                return known
            seqs = rest
        lo, hi = seqs[0], seqs[-1]
        if len(seqs) > 4 and hi - lo < 4 * len(seqs) + 64:
            want = set(seqs)
            metas = [m for m in self.metas(lo, hi) if m.seq in want]
        else:
            metas = [Meta(m.seq, m.subject, self.msg_size(m.subject, m.hdr, m.data), m.ts)
                     for m in map(self.load, seqs) if m is not None]
        if known:
            metas = sorted(known + metas)
        self._remove_metas(metas, False, later)
        return metas

    def recent_metas(self, seqs: list[int]) -> tuple[list[Meta], list[int]]:
        """`recent_meta` of each: (the Metas known, in order; the sequences not known)."""
        known: list[Meta] = []
        rest: list[int] = []
        for seq in seqs:
            m = self.recent_meta(seq)
            if m is None:
                rest.append(seq)
            else:
                known.append(m)
        return known, rest

    def recent_meta(self, seq: int) -> Meta | None:
        """A live message's Meta known without a read (a backend may remember what it stored lately, when
        `track_recent` is set: an interest or workqueue stream, whose messages are removed soon after); its
        `ts` may be 0. None: not known."""
        return None

    def delete_known(self, seq: int, subject: str, size: int) -> None:
        """Remove a message the caller knows is live, with its subject and stored size (`msg_size`):
        a KV bucket replacing a key's previous value, without reading that value back first. It is a
        limit's removal: see `_drop_later`."""
        self._check()
        self._drop_later(seq)
        self._forget(subject, size)
        if seq == self.first_seq:
            self._advance_first()
        self._persist_meta()

    def _remove_metas(self, metas: list[Meta], contiguous: bool, later: bool = False) -> int:
        """Remove the given live messages (ascending seq). `contiguous` means they are *all* the live
        messages in their seq range (an unfiltered scan); a run from the front then becomes one range
        delete, which keeps purges of millions of rows cheap."""
        self.last_removed = metas
        if not metas:
            return 0
        front = metas[0].seq == self.first_seq
        if front and contiguous and len(metas) > 8:
            self._drop_range(self.first_seq, metas[-1].seq)
        elif later:
            self._drop_acked_run(metas)
        else:
            for m in metas:
                self._drop_one(m.seq)
        self._forget_run(metas)
        if front:
            if contiguous:
                self.first_seq = metas[-1].seq
            self._advance_first()
        if later:
            self._persist_meta_later()
        else:
            self._persist_meta()
        return len(metas)

    def purge(self, filter: str | None = None, seq: int = 0, keep: int = 0) -> int:
        """JetStream purge: everything; or only `filter`'s subjects; `seq` = remove below seq (not
        including); `keep` = keep the newest N (of the filter's subjects). seq and keep together are
        rejected, as the JetStream API does. Returns the number of messages removed."""
        self._check()
        if seq and keep:
            raise ValueError("purge: seq and keep are mutually exclusive")
        if seq == 1:
            return 0
        if filter in (None, "", ">"):
            if keep == 0 and seq == 0:
                return self._purge_all(self.last_seq + 1)
            if seq > 1:
                return self.compact(seq)
            filter = ">"
        filt = compile_filter(filter)
        total = self.count(0, filt)
        if total == 0:
            return 0
        maxp = total
        if keep:
            if keep >= total:
                return 0
            maxp = total - keep
        hi = self.last_seq if not seq else min(self.last_seq, seq - 1)
        metas: list[Meta] = []
        for m in self._scan(self.first_seq, hi, filt, False, False):
            metas.append(m)
            if len(metas) >= maxp:
                break
        return self._remove_metas(metas, filt.all)

    def _purge_all(self, new_first: int) -> int:
        n = self.msgs
        if self.msgs:
            self._drop_range(self.first_seq, self.last_seq)
        self.msgs = 0
        self.bytes = 0
        self.subjects.clear()
        self.pristine = False
        self.first_seq = new_first
        if new_first - 1 > self.last_seq:
            self.last_seq = new_first - 1
        self._persist_meta()
        return n

    def compact(self, seq: int) -> int:
        """Remove everything below seq (nats-server Compact). Past the end, the stream is emptied and
        the next append gets `seq`."""
        self._check()
        if seq == 0:
            return self._purge_all(self.last_seq + 1)
        if self.first_seq > seq:
            return 0
        if seq > self.last_seq:
            return self._purge_all(seq)
        metas = list(self._scan(self.first_seq, seq - 1, compile_filter(None), False, False))
        if not metas:
            self.first_seq = seq
            self._advance_first_from(seq)
            self._persist_meta()
            return 0
        return self._remove_metas(metas, True)

    def skip_to(self, seq: int) -> None:
        """The next append gets `seq`: a mirror keeps its origin's sequences, so the origin's gaps (deleted
        or expired messages) become interior deletes here; an empty stream moves its front instead."""
        self._check()
        if seq <= self.last_seq + 1:
            return
        if self.msgs == 0:
            self._purge_all(seq)
            return
        self.last_seq = seq - 1
        self._persist_skip()

    def _persist_skip(self) -> None:  # noqa: B027 - a backend without a stream row needs nothing
        """The last sequence moved past the last row: make it stick (the memory backend keeps it as is)."""

    def _advance_first_from(self, seq: int) -> None:
        for m in self._scan(seq, self.last_seq, compile_filter(None), False, False):
            self.first_seq = m.seq
            return
        self.first_seq = self.last_seq + 1

    def trim_msgs(self, max_msgs: int) -> int:
        """Remove the oldest messages until at most max_msgs remain (max_msgs limit, discard old)."""
        self._check()
        excess = self.msgs - max_msgs
        if max_msgs < 0 or excess <= 0:
            return 0
        metas: list[Meta] = []
        for m in self._scan(self.first_seq, self.last_seq, compile_filter(None), False, False):
            metas.append(m)
            if len(metas) >= excess:
                break
        return self._remove_metas(metas, True)

    def trim_bytes(self, max_bytes: int) -> int:
        """Remove the oldest messages until bytes <= max_bytes."""
        self._check()
        if max_bytes < 0 or self.bytes <= max_bytes:
            return 0
        need = self.bytes - max_bytes
        metas: list[Meta] = []
        for m in self._scan(self.first_seq, self.last_seq, compile_filter(None), False, False):
            metas.append(m)
            need -= m.size
            if need <= 0:
                break
        return self._remove_metas(metas, True)

    def remove_older_than(self, cutoff_ns: int) -> int:
        """max_age: remove messages from the front while their timestamp <= cutoff (nats-server stops
        at the first younger message, so do we)."""
        self._check()
        metas: list[Meta] = []
        for m in self._scan(self.first_seq, self.last_seq, compile_filter(None), False, False):
            if m.ts > cutoff_ns:
                break
            metas.append(m)
        return self._remove_metas(metas, True)

    def trim_subject(self, subject: str, keep: int) -> int:
        """max_msgs_per_subject: remove the oldest messages of one literal subject until `keep` remain."""
        self._check()
        if not is_literal(subject):
            raise ValueError("trim_subject needs a literal subject")
        excess = self.subjects.get(subject, 0) - keep
        if keep < 0 or excess <= 0:
            return 0
        metas: list[Meta] = []
        for m in self._scan(self.first_seq, self.last_seq, compile_filter(subject), False, False):
            metas.append(m)
            if len(metas) >= excess:
                break
        return self._remove_metas(metas, False)

    def expire_due(self, now_ns: int | None = None) -> list[int]:
        """Remove messages whose per-message TTL has passed; returns their sequences. Run it from a
        timer armed at `next_expiry()`."""
        self._check()
        if now_ns is None:
            now_ns = time.time_ns()
        metas = self._expired_metas(now_ns)
        if not metas:
            return []
        metas.sort()
        for m in metas:
            self._drop_one(m.seq)
            self._forget(m.subject, m.size)
        if metas[0].seq == self.first_seq:
            self._advance_first()
        self._persist_meta()
        return [m.seq for m in metas]

    def expiring(self, now_ns: int) -> list[Meta]:
        """The messages whose per-message TTL has passed, by sequence, left in place: a stream with
        subject delete markers replaces some of them by a marker. The caller removes each one (the
        memory store's timer forgets them here)."""
        self._check()
        return sorted(self._expired_metas(now_ns))

    # ---- config and consumers ----------------------------------------------------------------
    def update_config(self, config: bytes) -> Awaitable[None]:
        """Replace the stored config JSON (persisted with the next batch)."""
        self._check()
        self.config = config
        self._put_config(config)
        return self.durable()

    def put_consumer(self, name: str, config: bytes, state: bytes = b"") -> Awaitable[None]:
        """Create or replace a consumer's config JSON and state blob."""
        self._check()
        self.consumers[name] = (config, state)
        self._put_consumer(name, config, state)
        return self.durable()

    def update_consumer_state(self, name: str, state: bytes) -> Awaitable[None]:
        """Replace a consumer's state blob; repeated updates within a batch cost one write."""
        self._check()
        cfg = self.consumers.get(name)
        if cfg is None:
            raise StoreError(f"consumer {name!r} not found")
        self.consumers[name] = (cfg[0], state)
        self._put_consumer(name, cfg[0], state)
        return self.durable()

    def get_consumer(self, name: str) -> tuple[bytes, bytes] | None:
        """(config, state) or None."""
        return self.consumers.get(name)

    def delete_consumer(self, name: str) -> bool:
        self._check()
        if self.consumers.pop(name, None) is None:
            return False
        self._del_consumer(name)
        return True


class Store(ABC):
    """A set of streams with one durability domain (one SQLite file, or memory)."""

    @abstractmethod
    async def open(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    def create_stream(
        self, name: str, config: bytes, *, account: str = DEFAULT_ACCOUNT, first_seq: int = 0
    ) -> Stream: ...

    @abstractmethod
    def delete_stream(self, name: str, *, account: str = DEFAULT_ACCOUNT) -> bool: ...

    @abstractmethod
    def get_stream(self, name: str, *, account: str = DEFAULT_ACCOUNT) -> Stream | None: ...

    @abstractmethod
    def streams(self, account: str | None = None) -> list[Stream]: ...

    @abstractmethod
    def durable(self) -> Awaitable[None]: ...

    async def flush(self) -> None:
        """Wait until everything queued so far is committed."""
        await self.durable()
