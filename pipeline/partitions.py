"""How a read is split for Spark's executors: ranges of stream sequences, shared by both data sources."""

from __future__ import annotations

from pyspark.sql.datasource import InputPartition


class SeqRange(InputPartition):
    """Stream sequences [lo, hi] (empty when lo > hi)."""

    def __init__(self, lo: int, hi: int) -> None:
        super().__init__((lo, hi))
        self.lo, self.hi = lo, hi
