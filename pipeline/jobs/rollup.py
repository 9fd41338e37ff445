"""Fleet telemetry rollup: per device, metric and UTC minute, count/min/max/mean, to Parquet by date.

`python -m pipeline.jobs.rollup --servers URL --stream telemetry --out DIR --checkpoint DIR [--once]`

Reads `telemetry.<device>.<metric>` messages (JSON: a numeric `value`, an optional `ts`, ISO-8601 or
epoch seconds, else the message time) as a stream of the `jetstream` source. Each micro-batch is
aggregated by Spark and merged on the driver into `<out>/date=YYYY-MM-DD/part-<batch>.parquet`: one
file a date, rewritten whole, so a minute an earlier run wrote gets its row merged, not a second row.

Exactly once: Spark replays a micro-batch that did not commit with the same id and offsets; a date
directory whose file already carries that batch id (or a later one) is not merged again, and a new
file replaces the old by rename, the older one being removed after (a crash in between leaves two,
and the next run keeps only the newest). The output is tied to its checkpoint (`_rollup.json`): a
fresh checkpoint over old output would number batches from 0 again and is refused.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

PART = re.compile(r"^part-(\d+)\.parquet$")
COLUMNS = ("device", "metric", "minute", "count", "min", "max", "mean")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m pipeline.jobs.rollup", description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", required=True, help="NATS URL(s), comma-separated")
    ap.add_argument("--stream", default="telemetry")
    ap.add_argument("--out", required=True, help="output directory (Parquet, partitioned by date)")
    ap.add_argument("--checkpoint", required=True, help="Spark checkpoint directory for this output")
    ap.add_argument("--once", action="store_true", help="process everything in the stream up to now, then stop")
    ap.add_argument("--interval", default="30 seconds", help="trigger interval when not --once")
    ap.add_argument("--master", help="Spark master (default local[*], or spark-submit's)")
    ap.add_argument("--partitions", type=int, default=2, help="parallel reads per micro-batch")
    ap.add_argument("--max-msgs-per-trigger", type=int)
    ap.add_argument("--domain")
    ap.add_argument("--creds")
    ap.add_argument("--user")
    ap.add_argument("--password")
    ap.add_argument("--token")
    ap.add_argument("--tls-ca")
    ap.add_argument("--alerts-subject", help="publish a command per device whose mean crosses the threshold "
                                             "to <subject>.<device>")
    ap.add_argument("--alert-threshold", type=float, default=None)
    ap.add_argument("--alert-metric", help="only this metric's means raise alerts (default: any)")
    return ap


def source_options(a: argparse.Namespace) -> dict[str, str]:
    opts = {"servers": a.servers, "stream": a.stream, "partitions": str(a.partitions)}
    for key in ("domain", "creds", "user", "password", "token", "tls_ca", "max_msgs_per_trigger"):
        v = getattr(a, key)
        if v is not None:
            opts[key] = str(v)
    return opts


def parse_telemetry(raw: Any) -> Any:
    """device, metric, ts and value columns of the messages that carry a numeric value."""
    from pyspark.sql import functions as F

    parts = F.split(raw.subject, r"\.")
    j = F.from_json(F.col("data").cast("string"), "value double, ts string")
    ts_num = j.ts.try_cast("double")
    ts = F.coalesce(F.when(ts_num.isNotNull(), F.timestamp_micros((ts_num * 1_000_000).cast("long"))),
                    j.ts.try_cast("timestamp"), raw.time)
    out = raw.select(parts.getItem(1).alias("device"),
                     F.array_join(F.slice(parts, 3, 1_000), ".").alias("metric"),
                     ts.alias("ts"), j.value.alias("value"))
    return out.where((F.size(parts) >= 3) & F.col("value").isNotNull() & ~F.isnan("value"))


def aggregate(parsed: Any) -> Any:
    from pyspark.sql import functions as F

    return (parsed.groupBy("device", "metric", F.date_trunc("minute", "ts").alias("minute"))
            .agg(F.count("*").alias("count"), F.min("value").alias("min"), F.max("value").alias("max"),
                 F.sum("value").alias("sum")))


def _parts(d: str) -> list[tuple[int, str]]:
    if not os.path.isdir(d):
        return []
    return sorted((int(m.group(1)), os.path.join(d, name)) for name in os.listdir(d) if (m := PART.match(name)))


def tidy(out: str) -> None:
    """Keep only the newest file of each date (older ones are left behind by a crash mid-replace)."""
    if not os.path.isdir(out):
        return
    for name in os.listdir(out):
        if name.startswith("date="):
            for _, path in _parts(os.path.join(out, name))[:-1]:
                os.remove(path)


def merge_batch(out: str, batch_id: int, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge one micro-batch's aggregates (device, metric, minute, count, min, max, sum) into the output;
    returns the merged rows of the minutes the batch touched."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    by_date: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["minute"].tzinfo is None:  # a naive time is UTC here (the job's session time zone)
            r = {**r, "minute": r["minute"].replace(tzinfo=UTC)}
        by_date.setdefault(r["minute"].astimezone(UTC).strftime("%Y-%m-%d"), []).append(r)
    touched: list[dict[str, Any]] = []
    schema = pa.schema([("device", pa.string()), ("metric", pa.string()), ("minute", pa.timestamp("us", tz="UTC")),
                        ("count", pa.int64()), ("min", pa.float64()), ("max", pa.float64()),
                        ("mean", pa.float64())])
    for date, new in sorted(by_date.items()):
        d = os.path.join(out, f"date={date}")
        parts = _parts(d)
        for _, path in parts[:-1]:
            os.remove(path)
        parts = parts[-1:]
        keys = {(r["device"], r["metric"], r["minute"]) for r in new}
        if parts and parts[0][0] >= batch_id:  # this batch was merged here before a crash: not twice
            for old in pq.read_table(parts[0][1]).to_pylist():
                if (old["device"], old["metric"], old["minute"]) in keys:
                    touched.append(old)
            continue
        acc: dict[tuple[str, str, datetime], list[Any]] = {}
        if parts:
            for old in pq.read_table(parts[0][1]).to_pylist():
                acc[(old["device"], old["metric"], old["minute"])] = [
                    old["count"], old["min"], old["max"], old["mean"] * old["count"]]
        for r in new:
            k = (r["device"], r["metric"], r["minute"])
            a = acc.get(k)
            if a is None:
                acc[k] = [r["count"], r["min"], r["max"], r["sum"]]
            else:
                acc[k] = [a[0] + r["count"], min(a[1], r["min"]), max(a[2], r["max"]), a[3] + r["sum"]]
        merged = [{"device": k[0], "metric": k[1], "minute": k[2], "count": a[0], "min": a[1], "max": a[2],
                   "mean": a[3] / a[0]} for k, a in sorted(acc.items())]
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, f".part-{batch_id:012d}.parquet.tmp")
        pq.write_table(pa.Table.from_pylist(merged, schema=schema), tmp)
        os.replace(tmp, os.path.join(d, f"part-{batch_id:012d}.parquet"))
        for _, path in parts:
            os.remove(path)
        touched.extend(m for m in merged if (m["device"], m["metric"], m["minute"]) in keys)
    return touched


def alerts(touched: list[dict[str, Any]], threshold: float, metric: str | None) -> list[dict[str, Any]]:
    """One command per device: its newest minute whose mean is above the threshold."""
    newest: dict[str, dict[str, Any]] = {}
    for r in touched:
        if r["mean"] > threshold and (metric is None or r["metric"] == metric):
            cur = newest.get(r["device"])
            if cur is None or (r["minute"], r["metric"]) > (cur["minute"], cur["metric"]):
                newest[r["device"]] = r
    return list(newest.values())


def publish_alerts(spark: Any, a: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    out = []
    for r in rows:
        minute = r["minute"].astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {"cmd": "alert", "device": r["device"], "metric": r["metric"], "minute": minute,
                "mean": r["mean"], "threshold": a.alert_threshold}
        # the same alert from a replayed batch carries the same id: the stream's duplicate window drops it
        out.append((f"{a.alerts_subject}.{r['device']}", json.dumps(body).encode(),
                    f"rollup-{r['device']}-{r['metric']}-{minute}"))
    opts = {k: v for k, v in source_options(a).items() if k not in ("stream", "partitions", "max_msgs_per_trigger")}
    spark.createDataFrame(out, "subject string, data binary, msg_id string").write.format("jetstream") \
        .options(**opts).mode("append").save()


def check_checkpoint(out: str, checkpoint: str) -> str | None:
    """The query id the output belongs to, after refusing an output made under another checkpoint."""
    mine = None
    meta = os.path.join(checkpoint, "metadata")
    if os.path.isfile(meta):
        with open(meta) as f:
            mine = json.loads(f.readline()).get("id")
    tag = os.path.join(out, "_rollup.json")
    if os.path.isfile(tag):
        with open(tag) as f:
            theirs = json.load(f).get("query_id")
        if theirs != mine:
            raise SystemExit(f"{out} holds the output of another checkpoint (query {theirs}); "
                             f"{checkpoint} is query {mine}: use the checkpoint that wrote it, or a new --out")
    return mine


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if a.alerts_subject and a.alert_threshold is None:
        raise SystemExit("--alerts-subject needs --alert-threshold")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import pipeline

    builder = SparkSession.builder.appName("edged-telemetry-rollup")
    if a.master:
        builder = builder.master(a.master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit, which sets the master
        builder = builder.master("local[*]")
    spark = builder.getOrCreate()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    pipeline.register(spark)
    out, checkpoint = os.path.abspath(a.out), os.path.abspath(a.checkpoint)
    check_checkpoint(out, checkpoint)
    os.makedirs(out, exist_ok=True)
    tidy(out)

    def on_batch(df: Any, batch_id: int) -> None:
        # through Arrow: minutes come as UTC-aware datetimes, as they read back from Parquet
        rows = aggregate(parse_telemetry(df)).toArrow().to_pylist()
        touched = merge_batch(out, batch_id, rows)
        if a.alerts_subject:
            publish_alerts(spark, a, alerts(touched, a.alert_threshold, a.alert_metric))

    raw = spark.readStream.format("jetstream").options(**source_options(a)).load()
    writer = raw.writeStream.foreachBatch(on_batch).option("checkpointLocation", checkpoint)
    writer = writer.trigger(availableNow=True) if a.once else writer.trigger(processingTime=a.interval)
    query = writer.start()
    tag = os.path.join(out, "_rollup.json")
    if not os.path.exists(tag):
        with open(tag + ".tmp", "w") as f:
            json.dump({"query_id": str(query.id), "checkpoint": checkpoint}, f)
        os.replace(tag + ".tmp", tag)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    if query.exception() is not None:
        print(f"rollup failed: {query.exception()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
