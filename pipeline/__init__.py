"""Spark data sources and jobs over JetStream streams and edged store files (`pip install 'edged[spark]'`).

Nothing here is imported by the daemon: pyspark, pyarrow and nats-py are this package's own needs.
"""

from __future__ import annotations

from typing import Any

from pipeline.options import PipelineError

__all__ = ["PipelineError", "register"]


def register(spark: Any) -> None:
    """Register the `jetstream` (read, stream, write) and `edged-store` (read) formats on a SparkSession."""
    from pipeline.jetstream_source import JetStreamDataSource
    from pipeline.store_source import EdgedStoreDataSource

    spark.dataSource.register(JetStreamDataSource)
    spark.dataSource.register(EdgedStoreDataSource)
