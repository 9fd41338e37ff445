"""The fleet telemetry rollup job: its Parquet output equals aggregates computed in plain Python, across runs."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import nats
import pyarrow.dataset as ds
import pytest

from pipeline.jobs import rollup
from tests.pipeline.conftest import PIPELINE, reference_read, run
from tests.support.servers import ServerProcess

pytestmark = PIPELINE

@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """The hub's nats-server only: where the job runs (reads from edged are covered by the other modules)."""
    p = ServerProcess("nats-server", ["-js", "-sd", tempfile.mkdtemp(prefix="pl-")]).start()
    yield p
    p.stop()


DAY_END = datetime(2026, 1, 1, 23, 58, tzinfo=UTC).timestamp()


def _payloads(wave: int) -> list[tuple[str, bytes]]:
    out = []
    for i in range(240):
        dev, metric = f"d{i % 4}", ("temp", "hum")[i % 2]
        value = (i * 7 % 90) + wave * 0.25 + (60 if (dev, metric) == ("d0", "temp") else 0)  # d0 runs hot
        t = DAY_END + (i % 6) * 40 + wave * 3  # minutes on both sides of midnight, the same in both waves
        form = i % 5
        body: dict[str, Any] = {"value": value}
        if form == 0:
            body["ts"] = t
        elif form == 1:
            body["ts"] = datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")
        elif form == 2:
            body["ts"] = datetime.fromtimestamp(t, UTC).astimezone(timezone_plus2()).isoformat()
        elif form == 3:
            body["ts"] = "not a time"  # the message time, then
        out.append((f"telemetry.{dev}.{metric}", json.dumps(body).encode()))
    # not telemetry the job can use: skipped by it and by the reference alike
    out += [("telemetry.d9.temp", b"not json"), ("telemetry.d9.temp", b'{"value": "12"}'),
            ("telemetry.d9", b'{"value": 1}'), ("telemetry.d9.temp", b'{"value": true}')]
    return out


def timezone_plus2() -> Any:
    from datetime import timezone

    return timezone(timedelta(hours=2))


def _publish(url: str, msgs: list[tuple[str, bytes]], create: bool) -> None:
    async def go() -> None:
        nc = await nats.connect(url)
        js = nc.jetstream()
        if create:
            await js.add_stream(name="telemetry", subjects=["telemetry.>"])
            await js.add_stream(name="CMD", subjects=["cmd.>"])
        for subject, data in msgs:
            await js.publish(subject, data)
        await nc.close()

    run(go())


def _expected(url: str) -> dict[tuple[str, str, datetime], tuple[int, float, float, float]]:
    """count, min, max, mean per (device, metric, minute), from every message, in plain Python."""
    acc: dict[tuple[str, str, datetime], list[float]] = {}
    for m in reference_read(url, "telemetry"):
        parts = m["subject"].split(".")
        if len(parts) < 3:
            continue
        try:
            body = json.loads(m["data"])
        except ValueError:
            continue
        v = body.get("value") if isinstance(body, dict) else None
        if isinstance(v, bool) or not isinstance(v, int | float) or math.isnan(v):
            continue
        ts = body.get("ts")
        t = m["time"]
        if isinstance(ts, int | float) and not isinstance(ts, bool):
            t = datetime.fromtimestamp(ts, UTC)
        elif isinstance(ts, str):
            try:
                t = datetime.fromtimestamp(float(ts), UTC)
            except ValueError:
                try:
                    t = datetime.fromisoformat(ts.replace("Z", "+00:00"))
                    t = t if t.tzinfo else t.replace(tzinfo=UTC)
                except ValueError:
                    pass
        minute = t.astimezone(UTC).replace(second=0, microsecond=0)
        acc.setdefault((parts[1], ".".join(parts[2:]), minute), []).append(float(v))
    return {k: (len(vs), min(vs), max(vs), sum(vs) / len(vs)) for k, vs in acc.items()}


def _output(out: str) -> dict[tuple[str, str, datetime], tuple[int, float, float, float]]:
    rows = ds.dataset(out, format="parquet", partitioning="hive").to_table().to_pylist()
    got = {}
    for r in rows:
        key = (r["device"], r["metric"], r["minute"])
        assert key not in got, key  # one row a minute
        assert str(r["date"]) == r["minute"].strftime("%Y-%m-%d")
        got[key] = (r["count"], r["min"], r["max"], r["mean"])
    for name in os.listdir(out):
        if name.startswith("date="):
            assert len(os.listdir(os.path.join(out, name))) == 1  # one file a date, tidy
    return got


def _same(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for k, (c, lo, hi, mean) in want.items():
        gc, glo, ghi, gmean = got[k]
        assert (gc, glo, ghi) == (c, lo, hi), k
        assert math.isclose(gmean, mean, rel_tol=1e-12), k


def test_rollup_equals_python_aggregates_across_runs(spark: Any, server: Any) -> None:
    out, ckpt = tempfile.mkdtemp(prefix="rollup-"), tempfile.mkdtemp(prefix="rollup-ckpt-")
    args = ["--servers", server.url, "--stream", "telemetry", "--out", out, "--checkpoint", ckpt, "--once",
            "--partitions", "2", "--alerts-subject", "cmd", "--alert-threshold", "60", "--alert-metric", "temp"]
    _publish(server.url, _payloads(0), create=True)
    assert rollup.main(args) == 0
    want = _expected(server.url)
    assert {datetime(2026, 1, 1).date(), datetime(2026, 1, 2).date()} <= {k[2].date() for k in want}  # midnight
    _same(_output(out), want)
    first_alerts = reference_read(server.url, "CMD")
    hot = {k[0] for k, v in want.items() if k[1] == "temp" and v[3] > 60}
    assert "d0" in hot and len(hot) < 4 and sorted(m["subject"] for m in first_alerts) == sorted(f"cmd.{d}" for d in hot)
    for m in first_alerts:
        cmd = json.loads(m["data"])
        assert cmd["cmd"] == "alert" and cmd["mean"] > 60 and m["subject"] == f"cmd.{cmd['device']}"

    # a second wave into the same minutes, with more: merged into the rows already written
    _publish(server.url, _payloads(1), create=False)
    assert rollup.main(args[:-6] + ["--max-msgs-per-trigger", "100"]) == 0
    _same(_output(out), _expected(server.url))
    # nothing new: the output stays as it is
    assert rollup.main(args[:-6]) == 0
    _same(_output(out), _expected(server.url))


def test_replayed_batch_is_not_merged_twice() -> None:
    """A micro-batch Spark replays after a crash (same id, same rows) leaves the output as it was."""
    out = tempfile.mkdtemp(prefix="merge-")
    minute = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    b0 = [{"device": "a", "metric": "t", "minute": minute, "count": 2, "min": 1.0, "max": 3.0, "sum": 4.0}]
    b1 = [{"device": "a", "metric": "t", "minute": minute, "count": 1, "min": 0.5, "max": 0.5, "sum": 0.5},
          {"device": "b", "metric": "t", "minute": minute + timedelta(days=1), "count": 1, "min": 9.0,
           "max": 9.0, "sum": 9.0}]
    rollup.merge_batch(out, 0, b0)
    rollup.merge_batch(out, 1, b1)
    once = _output(out)
    touched = rollup.merge_batch(out, 1, b1)  # the replay
    assert _output(out) == once
    assert once[("a", "t", minute)] == (3, 0.5, 3.0, 4.5 / 3)
    assert sorted(r["device"] for r in touched) == ["a", "b"]
    # a crash between writing the new file and removing the old one: the next run keeps the newest
    date_dir = os.path.join(out, "date=2026-03-01")
    import shutil

    shutil.copy(os.path.join(date_dir, "part-000000000001.parquet"), os.path.join(date_dir, "part-000000000000.parquet"))
    rollup.tidy(out)
    assert _output(out) == once
