"""Batch reads of the `jetstream` source equal a direct read of every message, against nats-server and edged."""

from __future__ import annotations

from typing import Any

import nats
import pytest

from tests.pipeline.conftest import PIPELINE, raw_publish, reference_read, run, wait_stored

pytestmark = PIPELINE


def _rows(spark: Any, url: str, stream: str, **opts: str) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    df = spark.read.format("jetstream").option("servers", url).option("stream", stream).options(**opts).load()
    out = df.select("stream", "seq", "subject", "headers", "data", F.unix_micros("time").alias("us"),
                    F.spark_partition_id().alias("part")).collect()
    return [r.asDict() for r in out]


def _same(got: list[dict[str, Any]], want: list[dict[str, Any]], stream: str) -> None:
    assert [r["seq"] for r in got] == [w["seq"] for w in want]
    for r, w in zip(got, want, strict=True):
        assert r["stream"] == stream
        assert r["subject"] == w["subject"], w["seq"]
        assert r["data"] == w["data"], w["seq"]
        assert r["headers"] == w["headers"], w["seq"]
        assert r["us"] == int(w["time"].timestamp()) * 1_000_000 + w["time"].microsecond, w["seq"]


def _fill(url: str, stream: str, n: int, **cfg: Any) -> None:
    async def go() -> None:
        nc = await nats.connect(url)
        await nc.jetstream().add_stream(name=stream, subjects=[f"{stream.lower()}.>"], **cfg)
        await nc.close()

    run(go())
    msgs = []
    for i in range(n):
        subj = f"{stream.lower()}.{i % 5}.x"
        if i % 3 == 0:
            hdr = (b"NATS/1.0\r\nTag: a\r\nTag: b %d\r\nOne: %d\r\nTag: c\r\n\r\n" % (i, i))
        elif i % 3 == 1:
            hdr = b""
        else:
            hdr = b"NATS/1.0\r\nEmpty:\r\n\r\n"
        msgs.append((subj, hdr, bytes([i % 256]) * (i % 40) + b"\x00\xff"))
    raw_publish(url, msgs)
    wait_stored(url, stream, n)


def test_batch_read_equals_direct_read_with_partitions(spark: Any, server: Any) -> None:
    """Defaults (no allow_direct), repeated header keys, binary payloads; then interior deletes and a purge
    of the front: 1, 2 and 3 partitions give every message once, each partition its own sequence range."""
    _fill(server.url, "BR", 600)
    want = reference_read(server.url, "BR")
    assert len(want) == 600
    assert want[0]["headers"] == {"Tag": ["a", "b 0", "c"], "One": ["0"]}
    _same(_rows(spark, server.url, "BR"), want, "BR")

    async def holes() -> None:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        for seq in (2, 3, 150, 299, 300, 301, 599):
            await js.delete_msg("BR", seq)
        await js.purge_stream("BR", seq=41)  # everything below 41 goes
        await nc.close()

    run(holes())
    want = reference_read(server.url, "BR")
    assert len(want) == 600 - 40 - 5
    for n in (1, 2, 3):
        got = _rows(spark, server.url, "BR", partitions=str(n))
        _same(sorted(got, key=lambda r: r["seq"]), want, "BR")
        spans = {}
        for r in got:
            lo, hi = spans.get(r["part"], (r["seq"], r["seq"]))
            spans[r["part"]] = (min(lo, r["seq"]), max(hi, r["seq"]))
        assert len(spans) == n
        ordered = sorted(spans.values())
        assert all(a[1] < b[0] for a, b in zip(ordered, ordered[1:], strict=False))  # ranges, no overlap


def test_options_range_filter_and_empty(spark: Any, server: Any) -> None:
    _fill(server.url, "OP", 100)
    want = reference_read(server.url, "OP")
    got = _rows(spark, server.url, "OP", start_seq="10", end_seq="60", partitions="4")
    _same(sorted(got, key=lambda r: r["seq"]), [w for w in want if 10 <= w["seq"] <= 60], "OP")
    got = _rows(spark, server.url, "OP", filter_subject="op.3.*", partitions="3")
    _same(sorted(got, key=lambda r: r["seq"]), [w for w in want if w["subject"] == "op.3.x"], "OP")
    # a range past the end, and more partitions than messages
    assert _rows(spark, server.url, "OP", start_seq="500") == []
    got = _rows(spark, server.url, "OP", start_seq="99", partitions="5")
    assert [r["seq"] for r in got] == [99, 100]
    t = want[70]["time"]
    got = _rows(spark, server.url, "OP", start_time=t.isoformat())
    assert got[0]["seq"] <= 71 and [r["seq"] for r in got] == list(range(got[0]["seq"], 101))

    async def empty() -> None:
        nc = await nats.connect(server.url)
        await nc.jetstream().add_stream(name="EMPTY", subjects=["empty.>"])
        await nc.close()

    run(empty())
    assert _rows(spark, server.url, "EMPTY", partitions="2") == []


@pytest.mark.parametrize("opts,needle", [
    ({"stream": "NOPE"}, "stream 'NOPE' not found"),
    ({"stream": "X", "partitions": "0"}, "partitions: must be >= 1"),
    ({"stream": "X", "partitions": "two"}, "partitions: want an integer"),
    ({"stream": "X", "bogus": "1"}, "unknown option(s) bogus"),
    ({"stream": "a.b"}, "option stream: want a stream name"),
    ({"stream": "X", "start_seq": "1", "start_time": "2026-01-01T00:00:00Z"}, "exclude each other"),
])
def test_clear_errors(spark: Any, server: Any, opts: dict[str, str], needle: str) -> None:
    with pytest.raises(Exception) as e:
        spark.read.format("jetstream").option("servers", server.url).options(**opts).load().collect()
    assert needle in str(e.value)


def test_unreachable_and_bad_credentials(spark: Any) -> None:
    from tests.support.servers import ServerProcess, free_port

    with pytest.raises(Exception) as e:
        spark.read.format("jetstream").option("servers", f"nats://127.0.0.1:{free_port()}") \
            .option("stream", "X").option("timeout", "2").load().collect()
    assert "cannot reach a NATS server at nats://127.0.0.1:" in str(e.value)
    with ServerProcess("nats-server", ["-js", "--user", "u", "--pass", "right"]) as srv:
        with pytest.raises(Exception) as e:
            spark.read.format("jetstream").option("servers", srv.url).option("stream", "X") \
                .option("user", "u").option("password", "wrong").load().collect()
        assert "refused the credentials" in str(e.value)
        with pytest.raises(Exception) as e:  # the right ones get as far as the (missing) stream
            spark.read.format("jetstream").option("servers", srv.url).option("stream", "X") \
                .option("user", "u").option("password", "right").load().collect()
        assert "stream 'X' not found" in str(e.value)
