"""Issue 22's row: a Spark batch read of a 200 000-message stream through the `jetstream` source, with 1, 2
and 4 partitions, beside one plain nats-py ordered consumer reading the same stream in the same run.

Both read from one nats-server (the hub, where Spark runs); the figure is rows/s from the start of the
read until the last row is in (Spark: `write.format("noop")`, which materialises every column of every
row, in a session started and warmed up beforehand). In the table the Spark read stands in the `edged`
column and the ordered consumer in the `nats-server` column; target: ≥ 1.0× with 2 partitions.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from typing import Any

import nats

from bench.harness import Report, Server, publish_in_flight

SUBJECT = "bench.pipe"


def _fill(url: str, n: int, size: int = 128) -> None:
    """n messages, 1000 PubAcks outstanding at a time (a raw flood without acks can outrun the stream)."""

    async def go() -> None:
        nc = await nats.connect(url)
        js = nc.jetstream(timeout=30)
        await js.add_stream(name="PIPE", subjects=[SUBJECT])
        assert await publish_in_flight(js, SUBJECT, n, size, 1000) == 0, "publish errors while filling"
        assert (await js.stream_info("PIPE")).state.messages == n
        await nc.close()

    asyncio.run(go())


def ordered_consumer(url: str, n: int) -> float:
    """rows/s of one nats-py ordered consumer reading the stream from the start."""

    async def go() -> float:
        nc = await nats.connect(url, pending_size=64 * 1024 * 1024)
        js = nc.jetstream()
        done = asyncio.Event()
        count = 0

        async def cb(m: Any) -> None:
            nonlocal count
            count += 1
            if count >= n:
                done.set()

        t0 = time.perf_counter()
        sub = await js.subscribe(SUBJECT, cb=cb, ordered_consumer=True, pending_msgs_limit=10_000_000,
                                 pending_bytes_limit=1 << 31)
        await asyncio.wait_for(done.wait(), 600)
        dt = time.perf_counter() - t0
        await sub.unsubscribe()
        await nc.close()
        return n / dt

    return asyncio.run(go())


def spark_session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import pipeline

    s = (SparkSession.builder.master("local[4]").appName("edged-bench-pipeline")
         .config("spark.ui.enabled", "false").config("spark.driver.memory", "2g").getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    pipeline.register(s)
    return s


def spark_read(spark: Any, url: str, n: int, partitions: int) -> float:
    t0 = time.perf_counter()
    (spark.read.format("jetstream").option("servers", url).option("stream", "PIPE")
     .option("partitions", str(partitions)).load().write.format("noop").mode("overwrite").save())
    return n / (time.perf_counter() - t0)


def run(report: Report) -> None:
    n = 20_000 if report.quick else 200_000
    reps = 1 if report.quick else 3
    try:
        spark = spark_session()
    except Exception as e:  # no pyspark, or no java: the rest of the benchmarks still run
        report.note(f"pipe: Spark not available ({type(e).__name__}: {e}); pip install -e '.[spark]' and Java 17")
        return
    try:
        with Server("nats-server", ["-js", "-sd", tempfile.mkdtemp(prefix="bench-pipe-")]) as srv:
            _fill(srv.url, n)
            spark_read(spark, srv.url, n, 2)  # warm-up: Python workers started, classes loaded
            base: list[float] = []
            reads: dict[int, list[float]] = {1: [], 2: [], 4: []}
            for _ in range(reps):  # interleaved, so load on the shared machine falls on all alike
                base.append(ordered_consumer(srv.url, n))
                for p in reads:
                    reads[p].append(spark_read(spark, srv.url, n, p))
    finally:
        spark.stop()
    b = max(base)
    for p, rs in reads.items():
        report.add("pipe", f"Spark batch read, {p} partition{'s' if p > 1 else ''}", "rows/s", max(rs), b,
                   target="≥ 1.0×" if p == 2 else "", check=(lambda r: r.ratio >= 1.0) if p == 2 else None,
                   runs={"spark": [round(x) for x in rs], "ordered_consumer": [round(x) for x in base]})
    report.note(f"pipe: {n} messages of 128 B from one nats-server; 'edged' column = Spark read (local[4], "
                "noop sink), 'nats-server' column = one nats-py ordered consumer in the same run")


if __name__ == "__main__":
    r = Report(quick="--quick" in sys.argv)
    run(r)
    print(r.table())
