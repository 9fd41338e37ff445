"""Streaming reads of the `jetstream` source: the sequence is the offset; restarts continue exactly once."""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any

import nats
import pyarrow.parquet as pq

from tests.pipeline.conftest import PIPELINE, run

pytestmark = PIPELINE


def _publish(url: str, stream: str, subjects: list[str], start: int, n: int) -> None:
    async def go() -> None:
        nc = await nats.connect(url)
        js = nc.jetstream()
        if start == 0:
            await js.add_stream(name=stream, subjects=subjects)
        for i in range(start, start + n):
            await js.publish(f"{subjects[0].rstrip('>')}{i % 7}", b"m%d" % i)
        await nc.close()

    run(go())


def _seqs(out: str) -> list[int]:
    """The seqs in the files the sink committed (its _spark_metadata log), not the ones being written."""
    log = os.path.join(out, "_spark_metadata")
    files = set()
    for name in os.listdir(log) if os.path.isdir(log) else []:
        if name.split(".")[0].isdigit():
            with open(os.path.join(log, name)) as f:
                for line in f.read().splitlines()[1:]:
                    entry = json.loads(line)
                    if entry.get("action") == "add":
                        files.add(entry["path"].removeprefix("file:"))
    return sorted(s for f in files for s in pq.read_table(f, columns=["seq"]).column("seq").to_pylist())


def _available_now(spark: Any, url: str, stream: str, out: str, ckpt: str, **opts: str) -> None:
    q = (spark.readStream.format("jetstream").option("servers", url).option("stream", stream)
         .option("partitions", "2").options(**opts).load()
         .writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
         .trigger(availableNow=True).start())
    assert q.awaitTermination(120)
    assert q.exception() is None


def test_available_now_restarts_exactly_once(spark: Any, server: Any) -> None:
    out, ckpt = tempfile.mkdtemp(prefix="out-"), tempfile.mkdtemp(prefix="ckpt-")
    _publish(server.url, "ST", ["st.>"], 0, 300)
    _available_now(spark, server.url, "ST", out, ckpt, max_msgs_per_trigger="70")
    assert _seqs(out) == list(range(1, 301))
    # 70 at a time: five micro-batches, each committed
    assert len([f for f in os.listdir(os.path.join(ckpt, "commits")) if f.isdigit()]) == 5
    _available_now(spark, server.url, "ST", out, ckpt)  # nothing new: nothing written
    assert _seqs(out) == list(range(1, 301))
    _publish(server.url, "ST", ["st.>"], 300, 150)
    _available_now(spark, server.url, "ST", out, ckpt, max_msgs_per_trigger="100")
    assert _seqs(out) == list(range(1, 451))


def test_processing_time_picks_up_new_messages(spark: Any, server: Any) -> None:
    out, ckpt = tempfile.mkdtemp(prefix="out-"), tempfile.mkdtemp(prefix="ckpt-")
    _publish(server.url, "PT", ["pt.>"], 0, 50)
    q = (spark.readStream.format("jetstream").option("servers", server.url).option("stream", "PT")
         .option("start_seq", "11").load()
         .writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
         .trigger(processingTime="1 second").start())
    try:
        deadline = time.monotonic() + 60
        while _seqs(out) != list(range(11, 51)):
            assert time.monotonic() < deadline and q.exception() is None, q.exception()
            time.sleep(0.5)
        _publish(server.url, "PT", ["pt.>"], 50, 25)
        while _seqs(out) != list(range(11, 76)):
            assert time.monotonic() < deadline and q.exception() is None, q.exception()
            time.sleep(0.5)
    finally:
        q.stop()
    # restarted from the checkpoint, with more messages meanwhile: from where it stopped
    _publish(server.url, "PT", ["pt.>"], 75, 5)
    _available_now(spark, server.url, "PT", out, ckpt)
    assert _seqs(out) == list(range(11, 81))
