"""File storage: every stream of a store_dir in one SQLite database in WAL mode, with group commit.

Layout. One file, `<store_dir>/jetstream.sqlite3`, for all accounts and streams: one writer
connection means one transaction (and one fsync) covers appends to every stream at once, which is
what makes group commit pay off on an SD card; per-stream or per-account files would need one writer
(and one fsync) each. Message rows are keyed by `rowid = stream_id << 44 | seq`, so a stream's
messages are one contiguous range of the table b-tree: point reads are a rowid lookup and range
purges are one `DELETE ... BETWEEN`. (Sequences must stay below 2**44; stream ids below 2**19.)

Threads. One writer connection on one worker thread (a single-thread executor), not aiosqlite:
aiosqlite hops to its thread once per statement; here the whole batch (executemany inserts,
deletes, state rows, consumers, COMMIT) is one function call on the worker, i.e. one thread hop
and one future per batch. Reads use a second connection on the event-loop thread, synchronously:
WAL readers never block on the writer, and point reads by rowid take microseconds.

Group commit. `append` assigns the sequence, updates in-memory state, queues the row into the open
batch and returns that batch's future. When no commit is running the batch is handed to the worker
on the next loop iteration; everything appended while a commit runs goes into the next one.
Rows not yet committed are kept in an overlay (`_pend`, and `_gone` for removals) so reads see
them. If a commit fails (SQLITE_FULL, I/O error...), the failed batch and every op queued behind it
fail with the same `StoreError`, and all in-memory state is reloaded from the database, so no
failed sequence ever appears in state (those sequences were never acknowledged and are reused).

`sync_interval` (nats-server's setting):
- `"always"`: `synchronous=FULL`; the WAL is fsynced at every commit before its future resolves. A
  resolved future survives power loss.
- a duration in seconds (default 120): `synchronous=NORMAL`; commits are written to the WAL (the OS
  page cache) without fsync, and a timer fsyncs the WAL and runs a PASSIVE checkpoint every
  interval. A resolved future survives a crash or `kill -9` of edged; on power loss the commits of
  the last interval may be lost, but the database is never corrupted (SQLite's WAL guarantee).

WAL growth is bounded by a PASSIVE checkpoint on the writer thread, on a connection of its own,
every `wal_autocheckpoint` (4000, 16 MB) pages written (estimated from the batches). SQLite's own
autocheckpoint is off: it runs inside the committing call, and a small batch commits on the loop
thread, where the checkpoint's fdatasyncs would stall every connection. Small commits go on beside
a checkpoint; once the -wal file holds three intervals, one then holds them back for a short second
pass, because SQLite only starts the -wal file over when a write begins with every frame copied back
(so the -wal file stays under about four intervals). Each checkpoint reports the frames really in
the file, which replaces the estimate so far (for KV puts, about three times the real count). The
interval is SQLite's default times four: each checkpoint fsyncs the -wal file, and a commit landing meanwhile can wait for that write-back (a frame shares
its first page with the one before), which at 1000 pages put a publisher awaiting each ack behind
an fsync every few hundred messages. Also a PASSIVE checkpoint when
the writer goes idle after a burst, and `journal_size_limit`, which truncates the -wal file after a
checkpoint. Deletes use `secure_delete=FAST`, so freed cells are zeroed in the pages they live on;
`erase=True` is therefore the same as a plain delete here (old page images can linger in the WAL
until the next checkpoint overwrites them).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import operator
import os
import sqlite3
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from edged.routing.subjects import CompiledFilter, FilterArg, compile_filter, to_glob
from storage.base import (
    DEFAULT_ACCOUNT,
    MAX_SEQ,
    SEQ_BITS,
    Meta,
    Store,
    StoreClosedError,
    StoredMsg,
    StoreError,
    StoreFullError,
    Stream,
    StreamExistsError,
)

SEQ_MASK = MAX_SEQ  # a row key's sequence bits
MAX_STREAM_ID = (1 << 19) - 1
DB_NAME = "jetstream.sqlite3"
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS streams(
    id INTEGER PRIMARY KEY,
    account TEXT NOT NULL,
    name TEXT NOT NULL,
    config BLOB NOT NULL,
    created_ns INTEGER NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    last_ts INTEGER NOT NULL,
    UNIQUE(account, name)
);
CREATE TABLE IF NOT EXISTS msgs(
    stream INTEGER NOT NULL,
    subject TEXT NOT NULL,
    hdr BLOB NOT NULL,
    data BLOB NOT NULL,
    ts INTEGER NOT NULL,
    ttl INTEGER NOT NULL,
    expires INTEGER NOT NULL,
    size INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS msgs_subject ON msgs(stream, subject);
CREATE INDEX IF NOT EXISTS msgs_expires ON msgs(stream, expires) WHERE expires > 0;
CREATE TABLE IF NOT EXISTS consumers(
    stream INTEGER NOT NULL,
    name TEXT NOT NULL,
    config BLOB NOT NULL,
    state BLOB NOT NULL,
    PRIMARY KEY(stream, name)
);
"""

_INSERT_INTO = "INSERT INTO msgs(rowid, stream, subject, hdr, data, ts, ttl, expires, size) VALUES "
_ROW = "(?,?,?,?,?,?,?,?,?)"
_INSERT = _INSERT_INTO + _ROW
# statements for many rows at once (see _execute_rows), by row count; 9 parameters a row: 576 at most,
# under the 999 of old SQLite builds
_INSERTS = {k: _INSERT_INTO + ",".join([_ROW] * k) for k in (64, 16, 4, 1)}
_DELETE_ONE = "DELETE FROM msgs WHERE rowid = ?"
_DELETES = {k: "DELETE FROM msgs WHERE rowid IN (" + ",".join("?" * k) + ")" for k in (64, 16, 4)} | {1: _DELETE_ONE}
_DELETE_RANGE = "DELETE FROM msgs WHERE rowid BETWEEN ? AND ?"
_STREAM_INSERT = (
    "INSERT INTO streams(id, account, name, config, created_ns, first_seq, last_seq, last_ts)"
    " VALUES (?,?,?,?,?,?,?,?)"
)
_STREAM_META = "UPDATE streams SET first_seq = ?, last_seq = ?, last_ts = ? WHERE id = ?"
_STREAM_CONFIG = "UPDATE streams SET config = ? WHERE id = ?"
_CONSUMER_PUT = "INSERT OR REPLACE INTO consumers(stream, name, config, state) VALUES (?,?,?,?)"
_CONSUMER_DEL = "DELETE FROM consumers WHERE stream = ? AND name = ?"
_CONSUMER_STATE = "UPDATE consumers SET state = ? WHERE stream = ? AND name = ?"

_FULL = "rowid, subject, hdr, data, ts, ttl"
# read_batch's query: the sequence is computed by SQLite, so each row is a StoredMsg as it comes;
# read_rows leaves out ttl, which no consumer needs (a column less to convert per row)
_BATCH = "SELECT rowid - ?, subject, hdr, data, ts, ttl FROM msgs WHERE rowid BETWEEN ? AND ?"
_ROWS = "SELECT rowid - ?, subject, hdr, data, ts FROM msgs WHERE rowid BETWEEN ? AND ?"
_BATCH_END = " ORDER BY rowid LIMIT ?"
_RUN = "SELECT CAST(subject AS BLOB), hdr, data, ts FROM msgs WHERE rowid BETWEEN ? AND ? ORDER BY rowid"
_BY_SUBJECT = " AND stream = ? AND subject = ?"
_as_msg = partial(tuple.__new__, StoredMsg)  # a row tuple as a StoredMsg, without a Python-level call
_META = "rowid, subject, size, ts"
_FRONT_READ = 64
_NEXT_LIVE = f"SELECT rowid FROM msgs WHERE rowid BETWEEN ? AND ? ORDER BY rowid LIMIT {_FRONT_READ}"

IDLE_CHECKPOINT_DELAY = 1.0


def _blen(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode())


def _wrap(exc: BaseException) -> StoreError:
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if code == sqlite3.SQLITE_FULL:
            err: StoreError = StoreFullError(f"store full: {exc}")
        else:
            err = StoreError(f"store failed: {exc}")
    else:
        err = StoreError(f"store failed: {exc!r}")
    err.__cause__ = exc
    return err


def parse_sync_interval(v: float | str) -> float | None:
    """None means "always"; otherwise seconds between fsyncs."""
    if isinstance(v, str):
        if v.strip().lower() == "always":
            return None
        try:
            v = float(v)
        except ValueError:
            raise ValueError(f"sync_interval: want seconds or 'always', got {v!r}") from None
    if v <= 0:
        raise ValueError("sync_interval must be > 0 seconds or 'always'")
    return float(v)


LATER_DELAY = 0.002  # seconds the removals held back from publishers' commits gather before their own commit
RECENT_MAX = 8192  # messages a stream with track_recent remembers (see SQLiteStream._recent)
INLINE_MAX_ROWS = 32  # batches up to this size commit on the loop thread when not fsyncing (paho: 20 in flight)


class _Batch:
    """Everything queued between two commits; executed in one transaction."""

    __slots__ = (
        "fut",
        "inserts",
        "deletes",
        "ranges",
        "creates",
        "drops",
        "configs",
        "consumers",
        "states",
        "touched",
        "metas",
        "meta_needed",
    )

    def __init__(self, fut: asyncio.Future[None]) -> None:
        self.fut = fut
        self.inserts: list[tuple[Any, ...]] = []
        self.deletes: list[tuple[int]] = []
        self.ranges: list[tuple[int, int]] = []
        self.creates: list[tuple[Any, ...]] = []
        self.drops: list[SQLiteStream] = []
        self.configs: dict[int, bytes] = {}
        self.consumers: dict[tuple[int, str], tuple[bytes, bytes] | None] = {}
        # consumer states alone (rows already there): an UPDATE in place, cheaper than REPLACE of the row
        self.states: dict[tuple[int, str], bytes] = {}
        self.touched: dict[int, SQLiteStream] = {}
        self.metas: list[tuple[int, int, int, int]] = []
        # streams whose (first_seq, last_seq, last_ts) row must be written: removals happened. Insert-only
        # batches skip it (one page write less per commit); load derives those values from the rows.
        self.meta_needed: set[int] = set()


def _execute_rows(c: sqlite3.Connection, sqls: dict[int, str], rows: list[tuple[Any, ...]]) -> None:
    """Run `sqls[k]` (one statement for k rows, largest k first, down to 1) over `rows`, many rows to a
    statement. executemany steps, and lets go of the GIL, once per row, which beside a busy event loop
    means waiting to get the GIL back after every row; one statement of 64 rows is one step, and for
    inserts a third less CPU per row (measured: 2.1-2.3 against 3.1-3.2 us)."""
    i = 0
    n = len(rows)
    chain = itertools.chain.from_iterable
    for k, sql in sqls.items():
        if k == 1:
            if i < n:
                c.executemany(sql, rows[i:])
            return
        while n - i >= k:
            c.execute(sql, list(chain(rows[i : i + k])))
            i += k


_PLAIN = 64  # rows of a plain insert statement (see _insert_rows)
_PLAIN_INSERTS: dict[int, str] = {}  # stream id -> its plain insert statement


def _insert_rows(c: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    """`_execute_rows` for inserts, where each 64 rows of one stream without headers or TTLs (a mirror's
    backlog, plain publishes) go as a statement with those columns written in it: five parameters a row
    instead of nine. Binding holds the GIL, which the event loop then waits for, and an empty header
    bound as a blob costs as much as the payload's (measured: 2.6 against 3.1 us a row)."""
    i = 0
    n = len(rows)
    k = _PLAIN
    chain = itertools.chain.from_iterable
    while n - i >= k:
        chunk = rows[i : i + k]
        rowid, sid, subject, hdr, data, ts, ttl, expires, size = zip(*chunk, strict=True)
        if sid.count(sid[0]) == k and hdr.count(b"") == k and ttl.count(0) == k and expires.count(0) == k:
            sql = _PLAIN_INSERTS.get(sid[0])
            if sql is None:
                sql = _PLAIN_INSERTS[sid[0]] = _INSERT_INTO + ",".join([f"(?,{int(sid[0])},?,X'',?,?,0,0,?)"] * k)
            c.execute(sql, list(chain(zip(rowid, subject, data, ts, size, strict=True))))
        else:
            c.execute(_INSERTS[k], list(chain(chunk)))
        i += k
    if i < n:
        _execute_rows(c, _INSERTS, rows[i:])


_size_of = operator.itemgetter(8)  # an insert row's stored size


def _pages_written(b: _Batch) -> int:
    """A generous estimate of the WAL frames one committed batch wrote (table and index pages)."""
    n = 2 + 2 * (len(b.deletes) + len(b.consumers) + len(b.states) + len(b.configs) + len(b.creates) + len(b.metas))
    if b.inserts:
        n += 2 + sum(map(_size_of, b.inserts)) // 2048
    for lo, hi in b.ranges:
        n += 2 + min(hi - lo + 1, 1 << 24) // 16
    for st in b.drops:
        n += 2 + st.bytes // 2048
    return n


class SQLiteStream(Stream):
    """A stream of a `SQLiteStore`. `bytes` uses nats-server's fileStoreMsgSize."""

    @staticmethod
    def msg_size(subject: str, hdr: bytes, data: bytes) -> int:
        if hdr:
            return 34 + _blen(subject) + len(hdr) + len(data)
        return 30 + _blen(subject) + len(data)

    def __init__(
        self,
        store: SQLiteStore,
        sid: int,
        account: str,
        name: str,
        config: bytes,
        created_ns: int,
        first_seq: int,
    ) -> None:
        super().__init__(account, name, config, created_ns, first_seq)
        self._store = store
        self._sid = sid
        self._base = sid << SEQ_BITS
        # Uncommitted rows (seq -> insert params) and uncommitted single deletes.
        self._pend: dict[int, tuple[Any, ...]] = {}
        self._pend_lo = self.last_seq + 1  # every live seq >= _pend_lo is in _pend
        self._gone: set[int] = set()
        # Committed live sequences just after first_seq, read ahead by _next_live: a KV bucket that
        # cycles through its keys deletes its first message on every put, and each would otherwise
        # cost a query to find the next one. Cleared by any removal inside its range.
        self._front: deque[int] = deque()
        # with track_recent: seq -> (subject, stored size) of messages appended lately and still there, for
        # recent_meta (acked messages of an interest stream are removed without reading them back); any
        # removal forgets its entries, and the whole map goes past RECENT_MAX (a bound, not a cache policy)
        self._recent: dict[int, tuple[str, int]] = {}

    # ---- append (hot path) ---------------------------------------------------------------------
    def append(
        self, subject: str, hdr: bytes = b"", data: bytes = b"", ts: int = 0, ttl: int = 0, size: int = 0
    ) -> tuple[int, int, Awaitable[None]]:
        if self._dead:
            raise StoreClosedError(f"stream {self.name!r} is closed or deleted")
        seq = self.last_seq + 1
        if seq > SEQ_MASK:
            raise StoreError("sequence space exhausted (2**44)")
        if not ts:
            ts = time.time_ns()
        if not size:
            size = (34 + _blen(subject) + len(hdr) + len(data)) if hdr else (30 + _blen(subject) + len(data))
        row = (self._base + seq, self._sid, subject, hdr, data, ts, ttl, ts + ttl if ttl > 0 else 0, size)
        b = self._store._batch()
        b.inserts.append(row)
        b.touched[self._sid] = self
        self._pend[seq] = row
        if self.track_recent:
            recent = self._recent
            if len(recent) >= RECENT_MAX:
                recent.clear()
            recent[seq] = (subject, size)
        self.last_seq = seq
        self.last_ts = ts
        self.msgs += 1
        self.bytes += size
        subs = self.subjects
        subs[subject] = subs.get(subject, 0) + 1
        return seq, ts, b.fut

    def append_run(self, subjects: Sequence[str], hdrs: Sequence[bytes], datas: Sequence[bytes], tss: Sequence[int],
                   sizes: Sequence[int]) -> None:
        """`append` of each message in turn, with the checks and the batch lookup done once and the rows built
        by zip and map (no Python step per message)."""
        n = len(subjects)
        if not n:
            return
        if self._dead:
            raise StoreClosedError(f"stream {self.name!r} is closed or deleted")
        seq = self.last_seq
        if seq + n > SEQ_MASK:
            raise StoreError("sequence space exhausted (2**44)")
        if not all(tss):
            tss = [ts or time.time_ns() for ts in tss]
        if not all(sizes):
            msg_size = self.msg_size
            sizes = [size or msg_size(*m) for size, *m in zip(sizes, subjects, hdrs, datas, strict=True)]
        b = self._store._batch()
        b.touched[self._sid] = self
        base = self._base + seq
        rep = itertools.repeat
        rows = list(zip(range(base + 1, base + n + 1), rep(self._sid, n), subjects, hdrs, datas, tss, rep(0, n),
                        rep(0, n), sizes, strict=True))
        b.inserts += rows
        seqs = range(seq + 1, seq + n + 1)
        self._pend.update(zip(seqs, rows, strict=True))
        if self.track_recent:
            recent = self._recent
            if len(recent) + n > RECENT_MAX:
                recent.clear()
            recent.update(zip(seqs, zip(subjects, sizes, strict=True), strict=True))
        subs = self.subjects
        for subject, k in Counter(subjects).items():
            subs[subject] = subs.get(subject, 0) + k
        self.last_seq = seq + n
        self.last_ts = tss[-1]
        self.msgs += n
        self.bytes += sum(sizes)

    def durable(self) -> Awaitable[None]:
        return self._store.durable()

    def recent_meta(self, seq: int) -> Meta | None:
        k = self._recent.get(seq)
        return Meta(seq, k[0], k[1], 0) if k is not None else None

    def recent_metas(self, seqs: list[int]) -> tuple[list[Meta], list[int]]:
        get = self._recent.get
        known: list[Meta] = []
        rest: list[int] = []
        for seq in seqs:
            k = get(seq)
            if k is None:
                rest.append(seq)
            else:
                known.append(Meta(seq, k[0], k[1], 0))
        return known, rest

    # ---- reads ---------------------------------------------------------------------------------
    def _get(self, seq: int) -> StoredMsg | None:
        r = self._pend.get(seq)
        if r is not None:
            return StoredMsg(seq, r[2], r[3], r[4], r[5], r[6])
        if seq >= self._pend_lo or seq in self._gone:
            return None
        row = self._store._rconn.execute(
            "SELECT subject, hdr, data, ts, ttl FROM msgs WHERE rowid = ?", (self._base + seq,)
        ).fetchone()
        if row is None:
            return None
        return StoredMsg(seq, row[0], row[1], row[2], row[3], row[4])

    def read_batch(self, start: int, filter: FilterArg = None, limit: int = 256) -> list[StoredMsg]:
        """One query for the whole batch when the filter is everything or one subject: rows become
        StoredMsgs in C, without the generic scan's per-row generators."""
        out = self._read_fast(_BATCH, start, filter, limit)
        if out is None:
            return super().read_batch(start, filter, limit)
        return list(map(_as_msg, out)) if out and type(out[0]) is tuple else out

    def read_rows(self, start: int, filter: FilterArg = None, limit: int = 256) -> list[tuple[Any, ...]]:
        out = self._read_fast(_ROWS, start, filter, limit)
        return super().read_batch(start, filter, limit) if out is None else out  # type: ignore[return-value]

    def read_run(self, start: int, filter: FilterArg, limit: int) -> list[tuple[bytes, bytes, bytes, int]] | None:
        """Committed rows in one query: the sequences are rowids, so as many rows as the range has rowids have
        no gap (the subject comes as SQLite holds it, UTF-8, with no str in between). From the uncommitted
        overlay on (a backlog the writer has not caught up with yet), its rows."""
        plo = self._pend_lo
        hi = min(start + limit - 1, self.last_seq)
        if start < self.first_seq or hi < start or not compile_filter(filter).all:
            return None
        gone = self._gone
        if gone and any(start <= s <= hi for s in gone):
            return None  # removed, the removal not yet committed
        if start >= plo:
            rows = list(map(self._pend.get, range(start, hi + 1)))
            if None in rows:
                return None
            return [(r[2].encode("utf-8", "surrogateescape"), r[3], r[4], r[5]) for r in rows]
        hi = min(hi, plo - 1)
        base = self._base
        out = self._store._rconn.execute(_RUN, (base + start, base + hi)).fetchall()
        return out if len(out) == hi - start + 1 else None

    def _read_fast(self, sql: str, start: int, filter: FilterArg, limit: int) -> list[Any] | None:
        """Rows from `start` on in one query (and the uncommitted overlay after them), or None when the
        generic scan must do it (a wildcard filter, reads only in the overlay, deletes not committed)."""
        filt = compile_filter(filter)
        lo = max(start, self.first_seq)
        plo = self._pend_lo
        if limit <= 0 or lo >= plo or lo > self.last_seq or not (
                filt.all or (filt.literal_only and len(filt.literals) == 1)):
            return None
        hi = min(self.last_seq, plo - 1)
        base = self._base
        if filt.all:
            out = self._store._rconn.execute(sql + _BATCH_END, (base, base + lo, base + hi, limit)).fetchall()
        else:
            if filt.literals[0] not in self.subjects:
                return []
            out = self._store._rconn.execute(
                sql + _BY_SUBJECT + _BATCH_END, (base, base + lo, base + hi, self._sid, filt.literals[0], limit)
            ).fetchall()
        gone = self._gone
        if gone and any(r[0] in gone for r in out):
            return None
        if len(out) < limit and hi < self.last_seq:
            # the committed rows ran out before the batch did: go on in the uncommitted overlay
            out.extend(itertools.islice(self._scan_pend(plo, self.last_seq, filt, False, True), limit - len(out)))
        return out

    def _row(self, r: tuple[Any, ...], full: bool) -> Any:
        seq = r[0] & SEQ_MASK
        if full:
            return StoredMsg(seq, r[1], r[2], r[3], r[4], r[5])
        return Meta(seq, r[1], r[2], r[3])

    def _pend_row(self, seq: int, r: tuple[Any, ...], full: bool) -> Any:
        if full:
            return StoredMsg(seq, r[2], r[3], r[4], r[5], r[6])
        return Meta(seq, r[2], r[8], r[5])

    def _scan(self, lo: int, hi: int, filt: CompiledFilter, reverse: bool, full: bool) -> Iterator[Any]:
        if lo > hi:
            return
        plo = self._pend_lo
        if reverse:
            if hi >= plo:
                yield from self._scan_pend(max(lo, plo), hi, filt, True, full)
            if lo < plo:
                yield from self._scan_db(lo, min(hi, plo - 1), filt, True, full)
        else:
            if lo < plo:
                yield from self._scan_db(lo, min(hi, plo - 1), filt, False, full)
            if hi >= plo:
                yield from self._scan_pend(max(lo, plo), hi, filt, False, full)

    def _scan_pend(self, lo: int, hi: int, filt: CompiledFilter, reverse: bool, full: bool) -> Iterator[Any]:
        pend = self._pend
        if not pend:
            return
        rng = range(hi, lo - 1, -1) if reverse else range(lo, hi + 1)
        if len(rng) > 2 * len(pend) + 16:
            keys = sorted(k for k in pend if lo <= k <= hi)
            rng = keys[::-1] if reverse else keys  # type: ignore[assignment]
        for seq in rng:
            r = pend.get(seq)
            if r is not None and (filt.all or filt.matches(r[2])):
                yield self._pend_row(seq, r, full)

    def _scan_db(self, lo: int, hi: int, filt: CompiledFilter, reverse: bool, full: bool) -> Iterator[Any]:
        if filt.all:
            yield from self._db_chunks(lo, hi, None, (), reverse, full)
        elif filt.literal_only and len(filt.literals) == 1:
            yield from self._db_chunks(lo, hi, "stream = ? AND subject = ?", (self._sid, filt.literals[0]),
                                       reverse, full)
        elif filt.literal_only and len(filt.literals) <= 16:
            its = [
                self._db_chunks(lo, hi, "stream = ? AND subject = ?", (self._sid, s), reverse, full)
                for s in filt.literals
                if s in self.subjects
            ]
            yield from heapq.merge(*its, key=lambda m: m.seq, reverse=reverse)
        else:
            # Wildcards: scan in seq order with a C-level GLOB prefilter (unary + keeps the planner on
            # the rowid order), then the exact NATS match in Python.
            parts = ["+subject = ?"] * len(filt.literals) + ["+subject GLOB ?"] * len(filt.wilds)
            args = list(filt.literals) + [to_glob(".".join(w)) for w in filt.wilds]
            where = "(" + " OR ".join(parts) + ")"
            for m in self._db_chunks(lo, hi, where, tuple(args), reverse, full):
                if filt.matches(m.subject):
                    yield m

    def _db_chunks(
        self, lo: int, hi: int, where: str | None, args: tuple[Any, ...], reverse: bool, full: bool
    ) -> Iterator[Any]:
        cols = _FULL if full else _META
        order = "DESC" if reverse else "ASC"
        cond = "rowid BETWEEN ? AND ?" + (" AND " + where if where else "")
        sql = f"SELECT {cols} FROM msgs WHERE {cond} ORDER BY rowid {order} LIMIT ?"
        base = self._base
        gone = self._gone
        conn = self._store._rconn
        limit = self._chunk_hint or 8
        cap = max(64 if full else 1024, limit)
        while lo <= hi:
            rows = conn.execute(sql, (base + lo, base + hi, *args, limit)).fetchall()
            for r in rows:
                seq = r[0] & SEQ_MASK
                if seq not in gone:
                    yield self._row(r, full)
            if len(rows) < limit:
                return
            edge = rows[-1][0] & SEQ_MASK
            if reverse:
                hi = edge - 1
            else:
                lo = edge + 1
            limit = min(limit * 4, cap)

    def _next_live(self, after: int) -> int:
        front = self._front
        gone = self._gone
        while front:
            s = front.popleft()
            if s > after and s not in gone:
                return s
        recent = self._recent
        if recent:
            # an acked run removed the front: past the messages just removed (`_gone`), the next one is
            # usually one stored lately, so live (a removal forgets it), and known without a read
            s = after + 1
            end = min(self.last_seq, after + 256)
            while s <= end:
                if s in recent:
                    return s
                if s not in gone:
                    break  # not known either way: the rows tell
                s += 1
        lo = after + 1
        plo = self._pend_lo
        hi = min(self.last_seq, plo - 1)
        base = self._base
        conn = self._store._rconn
        while lo <= hi:
            rows = conn.execute(_NEXT_LIVE, (base + lo, base + hi)).fetchall()
            live = [s for s in (r[0] & SEQ_MASK for r in rows) if s not in gone]
            if live:
                front.extend(live[1:])
                return live[0]
            if len(rows) < _FRONT_READ:
                break
            lo = (rows[-1][0] & SEQ_MASK) + 1
        lo = after + 1
        # pending rows are in ascending order (appends only add higher sequences)
        return next((k for k in self._pend if k >= lo), self.last_seq + 1)

    # ---- removal primitives --------------------------------------------------------------------
    def _uncache(self, seq: int) -> None:
        """A removed row leaves what is kept in memory to save reads: the recently stored rows and the
        live sequences read ahead (cleared when it falls among them)."""
        if self._recent:
            self._recent.pop(seq, None)
        front = self._front
        if front and front[0] <= seq <= front[-1]:
            front.clear()

    def _drop_one(self, seq: int) -> None:
        self._uncache(seq)
        b = self._store._batch()
        b.deletes.append((self._base + seq,))
        b.touched[self._sid] = self
        if seq >= self.last_seq:
            b.meta_needed.add(self._sid)  # the rows no longer tell the last sequence (see _load_state)
        self._pend.pop(seq, None)
        # Always hide it: a pending row may be committed (and leave the overlay) before this delete is.
        self._gone.add(seq)

    def _drop_later(self, seq: int) -> None:
        """The row goes in a commit after the one being gathered now (see `SQLiteStore._later`): a KV
        put's commit, which its PubAck waits on, then writes the new row's pages only, not also those of
        the previous revision; the removals of a few milliseconds of puts then share one commit (their
        rows and index entries mostly share pages too). The last message goes the usual way: its
        removal must write the stream row in the same commit."""
        if seq >= self.last_seq:
            self._drop_one(seq)
            return
        self._uncache(seq)
        store = self._store
        store._later.append((self._base + seq,))
        store._later_soon()
        self._pend.pop(seq, None)
        self._gone.add(seq)

    def _drop_acked(self, seq: int) -> None:
        """An acked message of an interest or workqueue stream: its row goes with the next commit, whatever
        it is (a publish's, most often, whose pages it shares: it was stored just before), or on its own
        within LATER_DELAY; the acks of a run cost no commit of their own. The last message's removal
        writes the stream row in that commit too (see _load_state)."""
        self._uncache(seq)
        store = self._store
        store._ride.append((self._base + seq,))
        if seq >= self.last_seq:
            store._later_meta[self._sid] = self
        store._later_soon()
        self._pend.pop(seq, None)
        self._gone.add(seq)

    def _drop_acked_run(self, metas: list[Meta]) -> None:
        """`_drop_acked` of each of a run of acked messages, with the lookups done once."""
        store = self._store
        ride = store._ride
        recent = self._recent
        pend = self._pend
        gone = self._gone
        base = self._base
        for m in metas:
            seq = m.seq
            if self._front:
                self._uncache(seq)
            elif recent:
                recent.pop(seq, None)
            ride.append((base + seq,))
            pend.pop(seq, None)
            gone.add(seq)
        if metas and metas[-1].seq >= self.last_seq:
            store._later_meta[self._sid] = self
        store._later_soon()

    def _drop_range(self, lo: int, hi: int) -> None:
        self._recent.clear()
        if self._front and hi >= self._front[0]:
            self._front.clear()
        # Callers only drop ranges starting at first_seq and move first_seq past them, which is
        # what hides the committed rows from reads; pending ones are dropped here.
        b = self._store._batch()
        b.ranges.append((self._base + lo, self._base + hi))
        b.touched[self._sid] = self
        if hi >= self.last_seq:
            b.meta_needed.add(self._sid)
        pend = self._pend
        if pend:
            if hi - lo + 1 > len(pend):
                for k in [k for k in pend if lo <= k <= hi]:
                    del pend[k]
            else:
                for k in range(max(lo, self._pend_lo), hi + 1):
                    pend.pop(k, None)

    def _persist_meta(self) -> None:
        # _load_state derives first_seq from the first live row and last_seq from the last one; the
        # stream row is only needed when that derivation would be wrong: an empty stream (its first and
        # last sequences are the row's), or a removed last message (_drop_one/_drop_range mark that).
        # A KV bucket replacing a key's older revision so writes one page less per put.
        if self.msgs == 0:
            b = self._store._batch()
            b.touched[self._sid] = self
            b.meta_needed.add(self._sid)

    def _persist_meta_later(self) -> None:
        if self.msgs == 0:
            self._store._later_meta[self._sid] = self
            self._store._later_soon()

    def update_consumer_state_later(self, name: str, state: Callable[[], bytes | None]) -> None:
        """Asked for as the commit that takes the held-back removals starts (see `SQLiteStore._later`)."""
        store = self._store
        store._later_cons[(self._sid, name)] = (self, name, state)
        store._later_soon()

    def _persist_skip(self) -> None:
        b = self._store._batch()
        b.touched[self._sid] = self
        b.meta_needed.add(self._sid)

    def _expired_metas(self, now_ns: int) -> list[Meta]:
        out: list[Meta] = []
        plo = self._pend_lo
        rows = self._store._rconn.execute(
            "SELECT rowid, subject, size, ts FROM msgs WHERE stream = ? AND expires > 0 AND expires <= ?"
            " AND rowid BETWEEN ? AND ?",
            (self._sid, now_ns, self._base + self.first_seq, self._base + min(self.last_seq, plo - 1)),
        ).fetchall()
        gone = self._gone
        for r in rows:
            seq = r[0] & SEQ_MASK
            if seq not in gone:
                out.append(Meta(seq, r[1], r[2], r[3]))
        for seq, r in self._pend.items():
            if 0 < r[7] <= now_ns:
                out.append(Meta(seq, r[2], r[8], r[5]))
        return out

    def next_expiry(self) -> int:
        best = 0
        plo = self._pend_lo
        if self.first_seq < plo:
            rows = self._store._rconn.execute(
                "SELECT rowid, expires FROM msgs WHERE stream = ? AND expires > 0 AND rowid BETWEEN ? AND ?"
                " ORDER BY expires LIMIT 64",
                (self._sid, self._base + self.first_seq, self._base + plo - 1),
            ).fetchall()
            for r in rows:
                if (r[0] & SEQ_MASK) not in self._gone:
                    best = r[1]
                    break
        for r in self._pend.values():
            if r[7] > 0 and (best == 0 or r[7] < best):
                best = r[7]
        return best

    def _put_consumer(self, name: str, config: bytes, state: bytes) -> None:
        b = self._store._batch()
        b.consumers[(self._sid, name)] = (config, state)

    def _del_consumer(self, name: str) -> None:
        b = self._store._batch()
        b.consumers[(self._sid, name)] = None

    def _put_config(self, config: bytes) -> None:
        b = self._store._batch()
        b.configs[self._sid] = config

    # ---- recovery ------------------------------------------------------------------------------
    def _load_state(self, first_seq: int, last_seq: int, last_ts: int) -> None:
        """(Re)build in-memory state from committed rows only."""
        conn = self._store._rconn
        lo, hi = self._base, self._base + SEQ_MASK
        n, nbytes, mn, mx = conn.execute(
            "SELECT count(*), coalesce(sum(size), 0), min(rowid), max(rowid) FROM msgs"
            " WHERE rowid BETWEEN ? AND ?",
            (lo, hi),
        ).fetchone()
        self.msgs = n
        self.bytes = nbytes
        self.last_seq = max(last_seq, (mx & SEQ_MASK) if mx is not None else 0)
        self.last_ts = last_ts
        if mx is not None and (mx & SEQ_MASK) > last_seq:
            # rows written after the stream row was last updated (insert-only batches): their own ts
            self.last_ts = conn.execute("SELECT ts FROM msgs WHERE rowid = ?", (mx,)).fetchone()[0]
        self.first_seq = (mn & SEQ_MASK) if n else max(first_seq, self.last_seq + 1)
        self.pristine = first_seq == 0 and self.last_seq == 0
        self.subjects = dict(
            conn.execute(
                "SELECT subject, count(*) FROM msgs WHERE stream = ? GROUP BY subject", (self._sid,)
            ).fetchall()
        )
        self.consumers = {
            name: (cfg, st)
            for name, cfg, st in conn.execute(
                "SELECT name, config, state FROM consumers WHERE stream = ?", (self._sid,)
            ).fetchall()
        }
        self._pend = {}
        self._gone = set()
        self._recent = {}
        self._front.clear()  # read ahead before a failed commit: may name rows that are back
        self._pend_lo = self.last_seq + 1
        self.epoch += 1


class SQLiteStore(Store):
    """All file-storage streams of one store_dir. Open with `await store.open()` on the event loop
    that will use it; every method except open/close/flush is synchronous and loop-thread only."""

    def __init__(
        self,
        store_dir: str,
        sync_interval: float | str = 120.0,
        *,
        max_page_count: int | None = None,
        wal_autocheckpoint: int = 4000,
        journal_size_limit: int = 64 * 1024 * 1024,
    ) -> None:
        self.store_dir = store_dir
        self.path = os.path.join(store_dir, DB_NAME)
        self.sync_interval = parse_sync_interval(sync_interval)
        self._max_page_count = max_page_count
        self._autockpt = wal_autocheckpoint
        self._jsl = journal_size_limit
        self._streams: dict[tuple[str, str], SQLiteStream] = {}
        self._by_id: dict[int, SQLiteStream] = {}
        self._next_id = 1
        self._open: _Batch | None = None
        self._inflight: _Batch | None = None
        self._kicked = False
        self._closed = True
        self._loop: asyncio.AbstractEventLoop | None = None
        self._exec: ThreadPoolExecutor | None = None
        self._exec_busy = 0  # blocking checkpoints queued on the writer thread (inline commits wait for none)
        self._ckpts = 0  # checkpoints queued or running on the writer thread
        self._since_restart = 0  # estimated WAL pages since the last checkpoint that held commits back
        self._restarting = False  # a checkpoint that will hold commits back is under way (both its passes)
        self._holding = False  # ... and holds them now (one of _exec_busy)
        self._wconn: sqlite3.Connection | None = None
        self._kconn: sqlite3.Connection | None = None  # checkpoints, on the writer thread
        self._rconn: sqlite3.Connection = None  # type: ignore[assignment]
        self._sync_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._last_commit = 0.0  # loop time of the last commit: the idle checkpoint waits for a quiet second
        # Called with each batch's future as it commits, before the future resolves: a publisher's
        # PubAck goes out from there (no done-callback turn of the loop between commit and ack).
        self.on_commit: Callable[[asyncio.Future[None]], None] | None = None
        # ... and after it, the same for other services (the MQTT PUBACKs of the batch)
        self.commit_listeners: list[Callable[[asyncio.Future[None]], None]] = []
        self._dirty = False  # commits since the last fsync/checkpoint
        self.commits = 0  # number of committed batches (observability, benchmarks)
        self._wal_pages = 0  # estimated WAL pages written since the last checkpoint was submitted
        # Limit removals (row keys) held out of the commits publishers wait on (`_drop_later`): committed
        # with the next batch that is not such a commit, or on their own within LATER_DELAY. A crash
        # before that leaves those rows behind: still over the stream's limits, and removed again when
        # the stream is restored.
        self._later: list[tuple[int]] = []
        # ... with the stream rows those removals need (the last message removed, the stream emptied), and
        # consumers' states that nobody waits on (deliveries, plain acks): asked for once, as that commit
        # starts, however often they changed meanwhile
        self._later_meta: dict[int, SQLiteStream] = {}
        self._ride: list[tuple[int]] = []  # acked messages' rows (`_drop_acked`): taken by any commit
        self._later_cons: dict[tuple[int, str], tuple[SQLiteStream, str, Callable[[], bytes | None]]] = {}
        self._later_timer: asyncio.TimerHandle | None = None  # commits them when no other commit takes them

    # ---- lifecycle -----------------------------------------------------------------------------
    async def open(self) -> None:
        self._loop = asyncio.get_running_loop()
        os.makedirs(self.store_dir, exist_ok=True)
        self._exec = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edged-sqlite")
        try:
            await self._loop.run_in_executor(self._exec, self._open_writer)
        except BaseException as e:
            self._exec.shutdown(wait=False)
            raise _wrap(e) from e
        self._rconn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._rconn.execute("PRAGMA query_only = 1")
        self._closed = False
        self._load_streams()
        if self.sync_interval is not None:
            self._sync_timer = self._loop.call_later(self.sync_interval, self._sync_tick)

    def _connect_writing(self) -> sqlite3.Connection:
        """A connection that writes to the database or its -wal file (the writer, the checkpointer):
        the same sync level, no autocheckpoint, the same -wal size limit and lock wait."""
        c = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        c.execute("PRAGMA synchronous = " + ("FULL" if self.sync_interval is None else "NORMAL"))
        c.execute("PRAGMA wal_autocheckpoint = 0")  # see the module docstring: _finish checkpoints instead
        c.execute(f"PRAGMA journal_size_limit = {int(self._jsl)}")
        c.execute("PRAGMA busy_timeout = 5000")
        return c

    def _open_writer(self) -> None:
        c = self._connect_writing()
        c.execute("PRAGMA journal_mode = WAL")
        c.execute("PRAGMA secure_delete = FAST")
        if self._max_page_count is not None:
            c.execute(f"PRAGMA max_page_count = {int(self._max_page_count)}")
        c.executescript(_SCHEMA)
        c.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        ver = c.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0]
        if int(ver) != SCHEMA_VERSION:
            c.close()
            raise StoreError(f"{self.path}: schema version {ver} not supported")
        self._wconn = c
        # Checkpoints get their own connection: a PASSIVE checkpoint (two fdatasyncs, a millisecond or
        # more) then runs on the writer thread beside inline commits on the loop thread, which WAL
        # allows, instead of holding the writer connection while a publisher waits for its ack.
        self._kconn = self._connect_writing()

    def _load_streams(self) -> None:
        rows = self._rconn.execute(
            "SELECT id, account, name, config, created_ns, first_seq, last_seq, last_ts FROM streams"
        ).fetchall()
        for sid, account, name, config, created_ns, first_seq, last_seq, last_ts in rows:
            st = SQLiteStream(self, sid, account, name, config, created_ns, first_seq)
            st._load_state(first_seq, last_seq, last_ts)
            self._streams[(account, name)] = st
            self._by_id[sid] = st
            self._next_id = max(self._next_id, sid + 1)

    async def close(self) -> None:
        if self._closed:
            return
        with contextlib.suppress(StoreError):
            await self.flush()
        self._closed = True
        for t in (self._sync_timer, self._idle_timer, self._later_timer):
            if t is not None:
                t.cancel()
        assert self._loop is not None and self._exec is not None
        await self._loop.run_in_executor(self._exec, self._close_writer)
        self._exec.shutdown(wait=True)
        self._rconn.close()
        for st in self._by_id.values():
            st._dead = True
        self._streams.clear()
        self._by_id.clear()

    def _close_writer(self) -> None:
        c = self._wconn
        if c is None:
            return
        if self._kconn is not None:
            self._kconn.close()
            self._kconn = None
        with contextlib.suppress(sqlite3.Error):
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        c.close()
        self._wconn = None

    # ---- streams -------------------------------------------------------------------------------
    def create_stream(
        self, name: str, config: bytes, *, account: str = DEFAULT_ACCOUNT, first_seq: int = 0
    ) -> SQLiteStream:
        """Create a stream (durable once `durable()` resolves). `first_seq` 0: not set (see Stream.pristine)."""
        self._check()
        key = (account, name)
        if key in self._streams:
            raise StreamExistsError(f"stream {name!r} exists")
        if not 0 <= first_seq <= SEQ_MASK:
            raise ValueError(f"first_seq must be in [0, 2**{SEQ_BITS}]")
        sid = self._next_id
        if sid > MAX_STREAM_ID:
            raise StoreError("too many streams created in this store")
        self._next_id += 1
        now = time.time_ns()
        st = SQLiteStream(self, sid, account, name, config, now, first_seq)
        b = self._batch()
        # a pristine stream's row says first_seq 0 (and last_seq 0) until a purge writes the row again
        b.creates.append((sid, account, name, config, now, first_seq, max(first_seq - 1, 0), 0))
        self._streams[key] = st
        self._by_id[sid] = st
        return st

    def delete_stream(self, name: str, *, account: str = DEFAULT_ACCOUNT) -> bool:
        """Delete a stream with its messages and consumers."""
        self._check()
        st = self._streams.pop((account, name), None)
        if st is None:
            return False
        del self._by_id[st._sid]
        st._dead = True
        b = self._batch()
        # Created in this very batch: never insert it (its name may be re-created right away).
        b.creates = [c for c in b.creates if c[0] != st._sid]
        b.drops.append(st)
        b.touched.pop(st._sid, None)
        return True

    def get_stream(self, name: str, *, account: str = DEFAULT_ACCOUNT) -> SQLiteStream | None:
        return self._streams.get((account, name))

    def streams(self, account: str | None = None) -> list[Stream]:
        return [s for (a, _), s in self._streams.items() if account is None or a == account]

    # ---- group commit --------------------------------------------------------------------------
    def _check(self) -> None:
        if self._closed:
            raise StoreClosedError("store is closed")

    def _batch(self) -> _Batch:
        b = self._open
        if b is None:
            if self._closed:
                raise StoreClosedError("store is closed")
            assert self._loop is not None
            b = self._open = _Batch(self._loop.create_future())
            if self._inflight is None and not self._kicked:
                self._kicked = True
                self._loop.call_soon(self._start)
        return b

    def durable(self) -> Awaitable[None]:
        b = self._open or self._inflight
        if b is not None:
            return b.fut
        assert self._loop is not None
        f = self._loop.create_future()
        f.set_result(None)
        return f

    def kick(self) -> None:
        """Start committing what is queued now instead of on the next loop turn (the server calls this
        at the end of each socket read, so a request's commit does not wait a turn)."""
        if self._kicked and self._open is not None and self._inflight is None:
            self._start()

    def _start(self) -> None:
        self._kicked = False
        b = self._open
        if self._inflight is not None or b is None:
            return
        self._open = None
        inline = (self.sync_interval is not None and self._exec_busy == 0 and len(b.inserts) <= INLINE_MAX_ROWS
                  and not b.drops and not b.ranges and not b.creates)
        if self._later and not (inline and b.inserts):
            # held back only from a small commit that publishers wait on; anything else takes them along
            self._take_later(b)
        if self._ride or self._later_meta or self._later_cons:
            self._take_ride(b)
        # In-memory state now reflects exactly the ops of this batch: snapshot it for the stream rows.
        b.metas = [(0 if st.pristine else st.first_seq, st.last_seq, st.last_ts, sid)
                   for sid, st in b.touched.items() if not st._dead]
        self._inflight = b
        assert self._loop is not None and self._exec is not None
        if inline:
            # A small batch without fsync costs less written here than the two thread hops of the
            # worker: this is what keeps a publisher that awaits each ack fast. fsync=always batches,
            # big ones and everything else go to the writer thread, off the loop.
            try:
                self._write(b)
            except Exception as e:
                self._finish(e)
            else:
                self._finish(None)
            return
        f = self._loop.run_in_executor(self._exec, self._write, b)
        f.add_done_callback(self._done)

    def _later_soon(self) -> None:
        """Something was held back: committed within LATER_DELAY if no other commit takes it first."""
        if self._later_timer is None and self._loop is not None:
            self._later_timer = self._loop.call_later(LATER_DELAY, self._later_due)

    def _later_due(self) -> None:
        self._later_timer = None
        if self._holds() and not self._closed:
            self._commit_held()

    def _holds(self) -> bool:
        """Something waits for a later commit: removals held back, acked rows, stream rows, consumer states."""
        return bool(self._later or self._ride or self._later_meta or self._later_cons)

    def _commit_held(self) -> None:
        """All that is held back goes into the open batch."""
        b = self._batch()
        self._take_later(b)
        self._take_ride(b)

    def _take_later(self, b: _Batch) -> None:
        """The removals held back from an earlier commit (`_drop_later`) go into `b`."""
        b.deletes += self._later
        self._later = []

    def _take_ride(self, b: _Batch) -> None:
        """What rides with the next commit (`_drop_acked`, `update_consumer_state_later`) goes into `b`."""
        # the states first: asking for one may settle queued acks, which remove more messages
        if self._later_cons:
            cons = self._later_cons
            self._later_cons = {}
            for key, (st, name, state) in cons.items():
                cfg = st.consumers.get(name)
                if st._dead or cfg is None:
                    continue
                blob = state()
                if blob is not None:
                    st.consumers[name] = (cfg[0], blob)
                    if b.consumers.get(key) is not None:
                        b.consumers[key] = (cfg[0], blob)  # written whole in this batch anyway
                    else:
                        b.states[key] = blob
        if self._ride:
            b.deletes += self._ride
            self._ride = []
        if self._later_meta:
            for sid, st in self._later_meta.items():
                if not st._dead:
                    b.touched[sid] = st
                    b.meta_needed.add(sid)
            self._later_meta = {}

    def _write(self, b: _Batch) -> None:
        c = self._wconn
        assert c is not None
        try:
            if (len(b.inserts) + len(b.deletes) == 1 and not b.ranges and not b.creates and not b.drops
                    and not b.configs and not b.meta_needed and not b.consumers and not b.states):
                # one row alone (a publisher awaiting each ack, the revision a KV put replaced): one
                # statement in autocommit mode is the same transaction without two more statements
                if b.inserts:
                    c.execute(_INSERT, b.inserts[0])
                else:
                    c.execute(_DELETE_ONE, b.deletes[0])
                return
            c.execute("BEGIN IMMEDIATE")
            for st in b.drops:  # first: a stream may be deleted and re-created under its name
                c.execute("DELETE FROM streams WHERE id = ?", (st._sid,))
            if b.creates:
                c.executemany(_STREAM_INSERT, b.creates)
            if b.inserts:
                _insert_rows(c, b.inserts)
            if b.deletes:
                _execute_rows(c, _DELETES, b.deletes)
            if b.ranges:
                c.executemany(_DELETE_RANGE, b.ranges)
            if b.configs:
                c.executemany(_STREAM_CONFIG, [(cfg, sid) for sid, cfg in b.configs.items()])
            if b.meta_needed:
                rows = [m for m in b.metas if m[3] in b.meta_needed]
                if rows:
                    c.executemany(_STREAM_META, rows)
            if b.states:  # before the rows written whole: one put after these in the batch is the newer
                c.executemany(_CONSUMER_STATE, [(v, sid, name) for (sid, name), v in b.states.items()])
            for (sid, name), v in b.consumers.items():
                if v is None:
                    c.execute(_CONSUMER_DEL, (sid, name))
                else:
                    c.execute(_CONSUMER_PUT, (sid, name, v[0], v[1]))
            for st in b.drops:
                c.execute(_DELETE_RANGE, (st._base, st._base + SEQ_MASK))
                c.execute("DELETE FROM consumers WHERE stream = ?", (st._sid,))
            c.execute("COMMIT")
        except BaseException as e:
            if c.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    c.execute("ROLLBACK")
            if getattr(e, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
                # Give the space held by the -wal file back, so that a purge can still get through.
                with contextlib.suppress(sqlite3.Error):
                    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            raise

    def _done(self, f: asyncio.Future[None]) -> None:
        self._finish(f.exception() if not f.cancelled() else StoreError("commit cancelled"))

    def _finish(self, exc: BaseException | None) -> None:
        b = self._inflight
        self._inflight = None
        assert b is not None
        if exc is None:
            self.commits += 1
            self._dirty = True
            if self.on_commit is not None:
                self.on_commit(b.fut)  # the PubAcks first; the overlays still answer reads meanwhile
            for listener in self.commit_listeners:
                listener(b.fut)
            self._settle(b)
            if not b.fut.done():
                b.fut.set_result(None)
            n = _pages_written(b)
            self._wal_pages += n
            self._since_restart += n
            if self._autockpt > 0:
                if self._restarting:
                    if not self._holding and self._since_restart >= 4 * self._autockpt:
                        self._hold()  # the first pass is taking long: the -wal file grows no further
                elif self._wal_pages >= self._autockpt and not self._ckpts:
                    # on the writer thread, beside the next inline commits; once the -wal file may hold
                    # three intervals, one that holds them back after (if its first pass finds it so)
                    self._submit_checkpoint(False, block=self._since_restart >= 3 * self._autockpt)
                elif self._since_restart >= 4 * self._autockpt:
                    # a checkpoint is running and the file grows on: hold commits back right after it
                    self._submit_checkpoint(False, block=True)
        else:
            self._fail(b, _wrap(exc))
        if self._closed or self._loop is None:
            return
        # one idle timer for a whole run of commits, not one per commit: it re-arms itself while
        # commits keep coming (see _idle_checkpoint)
        self._last_commit = self._loop.time()
        if self._open is not None:
            self._start()
        elif self._idle_timer is None:
            self._idle_timer = self._loop.call_later(IDLE_CHECKPOINT_DELAY, self._idle_checkpoint)

    def _settle(self, b: _Batch) -> None:
        """Committed: drop those rows from the overlays (reads now find them in the database)."""
        by_id = self._by_id
        st: SQLiteStream | None = None
        sid = -1
        for r in b.inserts:
            if r[1] != sid:
                sid = r[1]
                st = by_id.get(sid)
            if st is not None:
                st._pend.pop(r[0] & SEQ_MASK, None)
        sid = -1
        st = None
        for (key,) in b.deletes:
            s = key >> SEQ_BITS
            if s != sid:
                sid = s
                st = by_id.get(sid)
            if st is not None:
                st._gone.discard(key & SEQ_MASK)
        for _, last, _, sid in b.metas:
            st = by_id.get(sid)
            if st is not None and last + 1 > st._pend_lo:
                st._pend_lo = last + 1

    def _fail(self, b: _Batch, err: StoreError) -> None:
        """Commit failed: the database rolled back. Fail this batch and everything queued behind it
        (their sequences were assigned on top of the failed ones), then reload state from disk."""
        failed = [b]
        self._later = []  # the reload below brings back whatever those removals were about
        self._ride = []
        self._later_meta = {}
        if self._open is not None:
            failed.append(self._open)
            self._open = None
        dropped = [st for fb in failed for st in fb.drops]
        for fb in failed:
            if not fb.fut.done():
                fb.fut.set_exception(err)
                fb.fut.exception()  # retrieved: nobody awaiting is not an error worth logging
        self._reload(dropped)

    def _reload(self, dropped: list[SQLiteStream]) -> None:
        rows = {
            r[0]: r
            for r in self._rconn.execute(
                "SELECT id, account, name, config, created_ns, first_seq, last_seq, last_ts FROM streams"
            ).fetchall()
        }
        for st in list(self._by_id.values()) + dropped:
            r = rows.get(st._sid)
            key = (st.account, st.name)
            if r is None:
                st._dead = True
                if self._by_id.get(st._sid) is st:
                    del self._by_id[st._sid]
                if self._streams.get(key) is st:
                    del self._streams[key]
                continue
            st._dead = False
            st.config = r[3]
            st._load_state(r[5], r[6], r[7])
            self._by_id[st._sid] = st
            self._streams[key] = st

    # ---- fsync cadence and checkpoints ---------------------------------------------------------
    def _sync_tick(self) -> None:
        if self._closed or self._loop is None or self._exec is None:
            return
        if self._dirty:
            self._dirty = False
            self._submit_checkpoint(True)
        assert self.sync_interval is not None
        self._sync_timer = self._loop.call_later(self.sync_interval, self._sync_tick)

    def _idle_checkpoint(self) -> None:
        self._idle_timer = None
        if self._closed or self._loop is None or self._exec is None:
            return
        if self._inflight is not None or self._open is not None:
            self._idle_timer = self._loop.call_later(IDLE_CHECKPOINT_DELAY, self._idle_checkpoint)
            return
        wait = self._last_commit + IDLE_CHECKPOINT_DELAY - self._loop.time()
        if wait > 0.001:
            self._idle_timer = self._loop.call_later(wait, self._idle_checkpoint)
            return
        self._submit_checkpoint(False)

    def _submit_checkpoint(self, fsync_wal: bool, block: bool = False) -> None:
        """A PASSIVE checkpoint on the writer thread. Inline commits go on beside it, except once the
        -wal file holds three intervals (`block`): SQLite only starts the -wal file over when a write
        begins with every frame copied back, which commits landing during each checkpoint would prevent
        for as long as the load lasts. A blocking one first runs as a plain one, beside the commits, and
        only then once more holding them back (sending the commits behind it to the writer thread until
        it is done): that pass has only what was committed during the first to copy and fsync, so a publisher
        waits for a short pass, not for a whole interval's pages. Should the first pass take so long
        that another interval's pages are written meanwhile, commits are held from then on; should it
        find the file smaller than estimated (or started over by SQLite), there is no second pass."""
        assert self._loop is not None and self._exec is not None
        self._wal_pages = 0
        if block:
            self._restarting = True
        self._ckpts += 1
        f = self._loop.run_in_executor(self._exec, self._checkpoint, fsync_wal)
        since = self._since_restart

        def done(_: Any) -> None:
            self._ckpts -= 1
            frames = None if f.cancelled() or f.exception() is not None else f.result()
            if frames is not None and not self._holding and self._since_restart >= since:
                # the frames really in the -wal file, plus the estimate of what came after: the estimate
                # alone runs ahead (3-4x for KV puts), which would hold commits back needlessly often
                self._since_restart = min(self._since_restart, frames + self._since_restart - since)
            if block:
                if self._holding or self._since_restart >= 3 * self._autockpt:
                    self._hold_checkpoint()
                else:
                    self._restarting = False  # the -wal file is smaller than estimated: no holding yet

        f.add_done_callback(done)

    def _hold(self) -> None:
        """Commits go to the writer thread, behind the checkpoint, until it is done."""
        self._holding = True
        self._exec_busy += 1

    def _hold_checkpoint(self) -> None:
        """The blocking pass of a checkpoint (see `_submit_checkpoint`)."""
        if self._closed or self._loop is None or self._exec is None:
            if self._holding:
                self._exec_busy -= 1
            self._restarting = self._holding = False
            return
        if not self._holding:
            self._hold()
        self._ckpts += 1
        f = self._loop.run_in_executor(self._exec, self._checkpoint, False)

        def done(_: Any) -> None:
            self._ckpts -= 1
            self._exec_busy -= 1
            self._since_restart = 0
            self._restarting = self._holding = False

        f.add_done_callback(done)

    def _checkpoint(self, fsync_wal: bool) -> int | None:
        """Runs on the writer thread, on its own connection. fsyncing the -wal file makes every commit so
        far power-safe under synchronous=NORMAL; the PASSIVE checkpoint then bounds WAL growth. Returns
        the number of frames in the -wal file (None if unknown)."""
        c = self._kconn
        if c is None:
            return None
        if fsync_wal:
            with contextlib.suppress(OSError):
                fd = os.open(self.path + "-wal", os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        with contextlib.suppress(sqlite3.Error):
            row = c.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            if row is not None and row[1] >= 0:
                return int(row[1])
        return None

    async def flush(self) -> None:
        """Wait until everything queued so far is committed, the held-back removals too."""
        while True:
            if self._holds() and self._inflight is None and not self._closed:
                self._commit_held()
            b = self._open or self._inflight
            if b is None:
                return
            await b.fut

    async def probe(self) -> None:
        """Commit one tiny row on the writer thread, behind whatever it is writing: the proof of a
        working store that the systemd watchdog waits for (a stuck writer or a failing disk withholds it)."""
        self._check()
        assert self._loop is not None and self._exec is not None
        self._exec_busy += 1
        try:
            await self._loop.run_in_executor(self._exec, self._write_probe)
        except Exception as e:
            raise _wrap(e) from e
        finally:
            self._exec_busy -= 1

    def _write_probe(self) -> None:
        c = self._wconn
        assert c is not None
        c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('probe', ?)", (str(time.time_ns()),))

    async def sync(self) -> None:
        """Flush queued ops, then force an fsync + checkpoint now (e.g. before a planned shutdown)."""
        await self.flush()
        assert self._loop is not None and self._exec is not None
        self._exec_busy += 1
        try:
            await self._loop.run_in_executor(self._exec, self._checkpoint, True)
        finally:
            self._exec_busy -= 1
