"""The `jetstream` sink: rows published, PubAcks awaited, a retried task publishing nothing twice."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import nats
import pytest

from tests.pipeline.conftest import PIPELINE, reference_read, run
from tests.support.tcpproxy import TCPProxy

pytestmark = PIPELINE


def _stream(url: str, name: str, subjects: list[str], **cfg: Any) -> None:
    async def go() -> None:
        nc = await nats.connect(url)
        await nc.jetstream().add_stream(name=name, subjects=subjects, **cfg)
        await nc.close()

    run(go())


def test_write_rows_with_headers_and_msg_ids(spark: Any, server: Any) -> None:
    _stream(server.url, "SK", ["sk.>"])
    rows = [(f"sk.{i % 3}", b"d%d" % i, {"K": ["a", f"v{i}"], "One": [str(i)]} if i % 2 else None,
             f"id-{i}" if i < 10 else None) for i in range(40)]
    df = spark.createDataFrame(rows, "subject string, data binary, headers map<string,array<string>>, msg_id string")
    df.write.format("jetstream").option("servers", server.url).mode("append").save()
    got = sorted(reference_read(server.url, "SK"), key=lambda g: int(g["data"][1:]))  # tasks run side by side
    assert [(g["subject"], g["data"]) for g in got] == [(r[0], r[1]) for r in rows]
    for g, r in zip(got, rows, strict=True):
        hdrs = dict(g["headers"])
        msg_id = hdrs.pop("Nats-Msg-Id")
        assert len(msg_id) == 1 and (msg_id[0] == r[3] if r[3] else msg_id[0])
        assert hdrs == (r[2] or {})
    # the same explicit ids again: the duplicate window drops them
    spark.createDataFrame(rows[:10], df.schema).write.format("jetstream") \
        .option("servers", server.url).mode("append").save()
    assert len(reference_read(server.url, "SK")) == 40
    # a subject no stream captures is a plain publish (no PubAck to wait for)
    spark.createDataFrame([("elsewhere.x", "text")], "subject string, data string").write \
        .format("jetstream").option("servers", server.url).mode("append").save()


def test_retried_task_publishes_nothing_twice(spark: Any, server: Any) -> None:
    """The connection is cut under the first attempt once part of its rows are stored; the task fails,
    Spark tries it again from its first row, and the stream holds every row once."""
    from pyspark.sql import functions as F

    _stream(server.url, "RT", ["rt.>"])
    n = 6000
    with TCPProxy("127.0.0.1", server.port) as proxy:
        cut_at: list[int] = []

        def cut_midway() -> None:
            async def watch() -> None:
                nc = await nats.connect(server.url)
                js = nc.jetstream()
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    stored = (await js.stream_info("RT")).state.messages
                    if stored >= 500:
                        proxy.cut()
                        cut_at.append(stored)
                        break
                    await asyncio.sleep(0.01)
                await nc.close()

            asyncio.run(watch())

        watcher = threading.Thread(target=cut_midway)
        watcher.start()
        df = spark.range(0, n, numPartitions=1).select(
            F.concat(F.lit("rt."), (F.col("id") % 4).cast("string")).alias("subject"),
            F.col("id").cast("string").cast("binary").alias("data"))
        df.write.format("jetstream").option("servers", f"nats://127.0.0.1:{proxy.port}") \
            .option("timeout", "3").mode("append").save()
        watcher.join(60)
    assert cut_at and cut_at[0] < n, cut_at  # the first attempt was cut short, after storing rows
    got = reference_read(server.url, "RT")
    assert sorted(int(g["data"]) for g in got) == list(range(n))


def test_failed_publish_fails_the_write(spark: Any, server: Any) -> None:
    _stream(server.url, "FULL", ["full.>"], max_msgs=5, discard="new")
    df = spark.createDataFrame([("full.a", b"x%d" % i) for i in range(8)], "subject string, data binary")
    with pytest.raises(Exception) as e:
        df.coalesce(1).write.format("jetstream").option("servers", server.url).mode("append").save()
    assert "publish to full.a" in str(e.value) and "err_code" in str(e.value)
    with pytest.raises(Exception) as e:
        spark.createDataFrame([(b"x",)], "data binary").write.format("jetstream") \
            .option("servers", server.url).mode("append").save()
    assert "needs a `subject` column" in str(e.value)
