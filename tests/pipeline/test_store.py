"""The `edged-store` source: edged's SQLite file read directly equals the `jetstream` source on the same stream."""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from typing import Any

import nats
import pytest

from tests.pipeline.conftest import PIPELINE, raw_publish, run, wait_stored
from tests.support.servers import ServerProcess

pytestmark = PIPELINE

COLS = ["stream", "seq", "subject", "time", "headers", "data"]


def _collect(df: Any) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in df.select(*COLS).orderBy("seq").collect()]


def test_store_equals_jetstream_while_edged_runs(spark: Any) -> None:
    sd = tempfile.mkdtemp(prefix="store-")
    with ServerProcess("edged", ["-js", "-sd", sd]) as edge:
        async def setup() -> None:
            nc = await nats.connect(edge.url)
            js = nc.jetstream()
            await js.add_stream(name="TEL", subjects=["tel.>"])
            await js.add_stream(name="OTHER", subjects=["other.>"])
            await js.publish("other.x", b"not this one")
            await nc.close()

        run(setup())
        msgs = [(f"tel.d{i % 4}.temp", b"NATS/1.0\r\nA: 1\r\nA: 2\r\n\r\n" if i % 2 else b"", b"%d" % i)
                for i in range(500)]
        raw_publish(edge.url, msgs)
        wait_stored(edge.url, "TEL", 500)

        async def holes() -> None:
            nc = await nats.connect(edge.url)
            js = nc.jetstream()
            for seq in (5, 6, 250):
                await js.delete_msg("TEL", seq)
            await js.purge_stream("TEL", seq=21)
            await nc.close()

        run(holes())
        path = os.path.join(sd, "jetstream", "jetstream.sqlite3")
        live = _collect(spark.read.format("jetstream").option("servers", edge.url).option("stream", "TEL")
                        .option("partitions", "2").load())
        assert len(live) == 500 - 20 - 1  # 5 and 6 went with the purge
        for parts in ("1", "3"):
            stored = _collect(spark.read.format("edged-store").option("path", path).option("stream", "TEL")
                              .option("partitions", parts).load())
            assert stored == live
        # the store_dir names the file too, and the options narrow the range as the jetstream source's do
        narrow = _collect(spark.read.format("edged-store").option("path", sd).option("stream", "TEL")
                          .option("start_seq", "100").option("end_seq", "200")
                          .option("filter_subject", "tel.d1.*").load())
        assert narrow == [r for r in live if 100 <= r[1] <= 200 and r[2] == "tel.d1.temp"]
        copy = tempfile.mkdtemp(prefix="copy-")
        for f in os.listdir(os.path.dirname(path)):
            if f.startswith("jetstream.sqlite3"):
                shutil.copy(os.path.join(os.path.dirname(path), f), copy)
    # a copy taken off the gateway (file and -wal), read after edged stopped
    copied = _collect(spark.read.format("edged-store").option("path", os.path.join(copy, "jetstream.sqlite3"))
                      .option("stream", "TEL").load())
    assert copied == live


def test_store_errors(spark: Any) -> None:
    with pytest.raises(Exception) as e:
        spark.read.format("edged-store").option("path", "/nonexistent/x.sqlite3").option("stream", "T").load() \
            .collect()
    assert "no edged store file" in str(e.value)
    d = tempfile.mkdtemp()
    p = os.path.join(d, "jetstream.sqlite3")
    sqlite3.connect(p).execute("CREATE TABLE t(x)").connection.commit()
    with pytest.raises(Exception) as e:
        spark.read.format("edged-store").option("path", p).option("stream", "T").load().collect()
    assert "not a readable edged store" in str(e.value)
