"""Spark data source `edged-store`: a stream read straight from an edged store file, read-only.

The file is edged's SQLite database (`<store_dir>/jetstream/jetstream.sqlite3`, storage/sqlite.py):
a stream's messages are rows of `msgs` keyed by `rowid = stream id << 44 | seq`, with the header block
as stored (`hdr`) and the time in unix ns (`ts`). The connection is opened `mode=ro`: WAL readers never
block edged's writer and see only committed rows, so this is safe while edged runs, and works on a
copy taken off a gateway (with its -wal file, if there was one).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import quote

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from edged.routing.subjects import subject_matches
from pipeline.jsread import rows_to_batch
from pipeline.options import PipelineError, StoreOptions, split_range
from pipeline.partitions import SeqRange
from pipeline.schema import SCHEMA_DDL

SEQ_BITS = 44  # storage/sqlite.py's layout; read here without importing the daemon
CHUNK = 8192


def open_ro(path: str) -> sqlite3.Connection:
    try:
        c = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, check_same_thread=False)
        c.execute("PRAGMA query_only = 1")
        c.execute("PRAGMA busy_timeout = 5000")
        c.execute("SELECT 1 FROM streams LIMIT 1").fetchall()
    except sqlite3.Error as e:
        raise PipelineError(f"{path}: not a readable edged store: {e}") from None
    return c


def stream_row(c: sqlite3.Connection, opts: StoreOptions) -> tuple[int, int, int]:
    """(stream id, first seq, last seq) as the store has them committed."""
    row = c.execute("SELECT id, first_seq, last_seq FROM streams WHERE account = ? AND name = ?",
                    (opts.account, opts.stream)).fetchone()
    if row is None:
        names = [r[0] for r in c.execute("SELECT name FROM streams WHERE account = ? ORDER BY name", (opts.account,))]
        raise PipelineError(f"stream {opts.stream!r} not in {opts.path} (account {opts.account}; "
                            f"streams: {', '.join(names) or 'none'})")
    sid, first, last = row
    base = sid << SEQ_BITS
    # the streams row is written with each batch; the message rows are the truth for the bounds
    lo_hi = c.execute("SELECT min(rowid), max(rowid) FROM msgs WHERE rowid BETWEEN ? AND ?",
                      (base, base + (1 << SEQ_BITS) - 1)).fetchone()
    if lo_hi[0] is None:
        return sid, last + 1, last
    return sid, lo_hi[0] - base, max(last, lo_hi[1] - base)


class EdgedStoreDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "edged-store"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return EdgedStoreReader(StoreOptions.from_options(self.options))


class EdgedStoreReader(DataSourceReader):
    def __init__(self, opts: StoreOptions) -> None:
        self.opts = opts
        c = open_ro(opts.path)
        try:
            self.sid, first, last = stream_row(c, opts)
            lo = opts.start_seq if opts.start_seq is not None else first
            if opts.start_time is not None:
                ns = int(opts.start_time.timestamp() * 1e9)
                base = self.sid << SEQ_BITS
                r = c.execute("SELECT min(rowid) FROM msgs WHERE rowid BETWEEN ? AND ? AND ts >= ?",
                              (base + max(lo, 1), base + last, ns)).fetchone()[0]
                lo = last + 1 if r is None else r - base
            self.lo = max(lo, 1)
            self.hi = last if opts.end_seq is None else min(opts.end_seq, last)
        finally:
            c.close()

    def partitions(self) -> Sequence[InputPartition]:
        return [SeqRange(lo, hi) for lo, hi in split_range(self.lo, self.hi, self.opts.partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SeqRange)
        if partition.lo > partition.hi:
            return
        o = self.opts
        base = self.sid << SEQ_BITS
        filt = o.filter_subject
        literal = filt if filt and "*" not in filt.split(".") and ">" not in filt.split(".") else None
        sql = "SELECT rowid - ?, subject, ts, hdr, data FROM msgs WHERE rowid BETWEEN ? AND ?"
        args: list[Any] = [base, base + partition.lo, base + partition.hi]
        if literal is not None:
            sql += " AND stream = ? AND subject = ?"
            args += [self.sid, literal]
        c = open_ro(o.path)
        try:
            cur = c.execute(sql + " ORDER BY rowid", args)
            while rows := cur.fetchmany(CHUNK):
                if filt and literal is None:
                    rows = [r for r in rows if subject_matches(filt, r[1])]
                if rows:
                    yield rows_to_batch(o.stream, rows)
        finally:
            c.close()
