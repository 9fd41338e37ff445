"""Spark data source `jetstream`: batch and streaming reads of a JetStream stream, and the sink.

Offsets are stream sequences: a micro-batch reads (start, end], planned on the driver from the stream's
last sequence, and split into `partitions` ranges that executors read with `jsread.read_range`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from pipeline import natsconn
from pipeline.jsread import read_range, resolve_range, seq_at_time
from pipeline.options import ReadOptions, split_range
from pipeline.partitions import SeqRange
from pipeline.schema import SCHEMA_DDL

try:  # Spark >= 4.2: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - Spark 4.0/4.1: Spark caps availableNow runs itself
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


class JetStreamDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "jetstream"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return JetStreamBatchReader(ReadOptions.from_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return JetStreamStreamReader(ReadOptions.from_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from pipeline.sink import JetStreamWriter

        return JetStreamWriter(self.options, schema)


class JetStreamBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        # planned now, on the driver: the stream's range at planning time (and its errors, before any task)
        self.lo, self.hi = natsconn.run(
            lambda nc: resolve_range(nc, opts.conn, opts.stream, opts.start_seq, opts.end_seq, opts.start_time),
            opts.conn)

    def partitions(self) -> Sequence[InputPartition]:
        return [SeqRange(lo, hi) for lo, hi in split_range(self.lo, self.hi, self.opts.partitions)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SeqRange)
        o = self.opts
        return read_range(o.conn, o.stream, partition.lo, partition.hi, o.filter_subject)


class JetStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offset `{"seq": n}`: every message up to sequence n has been handed to Spark."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._target: int | None = None  # Trigger.AvailableNow: the last sequence when the query began
        self._last_end: int | None = None

    def _last_seq(self) -> int:
        o = self.opts

        async def last(nc: natsconn.RawClient) -> int:
            info = await natsconn.stream_info(nc, o.conn, o.stream)
            return info.state.last_seq

        return natsconn.run(last, o.conn)

    def initialOffset(self) -> dict:
        o = self.opts
        if o.start_seq is not None:
            return {"seq": o.start_seq - 1}

        async def initial(nc: natsconn.RawClient) -> int:
            info = await natsconn.stream_info(nc, o.conn, o.stream)
            if o.start_time is not None:
                return await seq_at_time(nc, o.conn, o.stream, o.start_time, info.state.last_seq) - 1
            return max(info.state.first_seq - 1, 0)

        return {"seq": natsconn.run(initial, o.conn)}

    def getDefaultReadLimit(self) -> Any:
        n = self.opts.max_msgs_per_trigger
        if n and ReadMaxRows is not None:
            return ReadMaxRows(n)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._last_seq()

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        if start is None:  # Spark < 4.2 calls latestOffset() alone
            start = {"seq": self._last_end} if self._last_end is not None else self.initialOffset()
        last = self._target if self._target is not None else self._last_seq()
        if self.opts.end_seq is not None:
            last = min(last, self.opts.end_seq)
        cap = None
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            cap = limit.max_rows
        elif limit is None and self.opts.max_msgs_per_trigger:
            cap = self.opts.max_msgs_per_trigger
        end = max(start["seq"], last)
        if cap is not None:
            end = min(end, start["seq"] + cap)
        self._last_end = end
        return {"seq": end}

    def reportLatestOffset(self) -> dict | None:
        return {"seq": self._last_seq()}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        lo, hi = start["seq"] + 1, end["seq"]
        if lo > hi:
            return []
        n = min(self.opts.partitions, hi - lo + 1)
        return [SeqRange(a, b) for a, b in split_range(lo, hi, n)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SeqRange)
        o = self.opts
        return read_range(o.conn, o.stream, partition.lo, partition.hi, o.filter_subject)

    def commit(self, end: dict) -> None:
        """Nothing to release: reads use ephemeral consumers that are gone when the read ends."""
