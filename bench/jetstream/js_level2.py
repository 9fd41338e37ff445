"""Issue 23's level 2 rows: atomic batch publish of 100-message batches and counter increments, edged
vs nats-server, from a bare socket (prebuilt HPUBs; the client costs about a microsecond a message, so
the rows measure the servers). A batch's staged messages go without a reply, its commit with one, and
BATCHES_IN_FLIGHT batches are kept in flight; increments go to 100 counters, 1000 in flight, each with
its own reply. msg/s and server CPU µs per message (edged: the event loop and the SQLite writer)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import nats

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.harness import KINDS, Report, raw_connection, send_counting_acks  # noqa: E402
from bench.jetstream.js_publish import _loop_run, _measure  # noqa: E402

BATCH = 100
BATCHES_IN_FLIGHT = 10


async def _raw(url: str, stream_cfg: str, frames: list[bytes], acks_per_frame: int, window: int) -> float:
    """Send `frames` (each answered by `acks_per_frame` PubAcks) keeping `window` acks outstanding;
    msg/s counted by the messages in the frames."""
    nc = await nats.connect(url)
    name = stream_cfg.split('"name":"', 1)[1].split('"', 1)[0]
    r = await nc.request(f"$JS.API.STREAM.CREATE.{name}", stream_cfg.encode(), timeout=10)
    if b'"error"' in r.data:
        raise RuntimeError(r.data.decode())
    rd, w = await raw_connection(url)
    dt = await send_counting_acks(rd, w, frames, acks_per_frame, window)
    await nc.request(f"$JS.API.STREAM.DELETE.{name}", b"", timeout=30)
    await nc.close()
    return dt


def _hpub(subject: bytes, reply: bytes, hdr: bytes, payload: bytes) -> bytes:
    head = b"HPUB %s %s" % (subject, reply) if reply else b"HPUB %s" % subject
    return b"%s %d %d\r\n%s%s\r\n" % (head, len(hdr), len(hdr) + len(payload), hdr, payload)


def _batch_frames(batches: int, size: int) -> list[bytes]:
    """One frame per batch: BATCH HPUBs, the last (the commit) with a reply."""
    payload = b"x" * size
    frames = []
    for b in range(batches):
        parts = []
        for i in range(1, BATCH + 1):
            hdr = b"NATS/1.0\r\nNats-Batch-Id: b%d\r\nNats-Batch-Sequence: %d\r\n" % (b, i)
            if i == BATCH:
                hdr += b"Nats-Batch-Commit: 1\r\n"
            parts.append(_hpub(b"ab.%d" % (i % 10), b"_R.%d" % b if i == BATCH else b"", hdr + b"\r\n", payload))
        frames.append(b"".join(parts))
    return frames


def _incr_frames(n: int) -> list[bytes]:
    hdr = b"NATS/1.0\r\nNats-Incr: 1\r\n\r\n"
    return [_hpub(b"cnt.%d" % (i % 100), b"_R.%d" % i, hdr, b"") for i in range(n)]


def run(report: Report) -> None:
    q = report.quick
    reps = 1 if q else 2
    n_batches = 50 if q else 500
    n_incr = 10_000 if q else 100_000
    confs = {k: f'jetstream {{ store_dir: "{tempfile.mkdtemp(prefix=f"bench-l2-{k}-")}" }}\n' for k in KINDS}
    batch_frames = _batch_frames(n_batches, 128)
    incr_frames = _incr_frames(n_incr)
    batch_cfg = '{"name":"AB","subjects":["ab.>"],"allow_atomic":true}'
    cnt_cfg = '{"name":"CNT","subjects":["cnt.>"],"allow_msg_counter":true}'

    def batches(url: str) -> tuple[float, int]:
        dt = _loop_run(_raw(url, batch_cfg, batch_frames, 1, BATCHES_IN_FLIGHT))
        return n_batches * BATCH / dt, n_batches * BATCH

    def increments(url: str) -> tuple[float, int]:
        dt = _loop_run(_raw(url, cnt_cfg, incr_frames, 1, 1000))
        return n_incr / dt, n_incr

    b = _measure(confs, batches, reps)
    c = _measure(confs, increments, reps)
    report.add("jsl2", f"atomic batch publish, {BATCH}-msg batches, {BATCHES_IN_FLIGHT} in flight", "msg/s",
               b["edged"][0], b["nats-server"][0])
    report.add("jsl2", "atomic batch publish, server CPU", "µs/msg", b["edged"][1], b["nats-server"][1],
               higher_is_better=False)
    report.add("jsl2", "counter increment, 1000 in flight", "msg/s", c["edged"][0], c["nats-server"][0])
    report.add("jsl2", "counter increment, server CPU", "µs/msg", c["edged"][1], c["nats-server"][1],
               higher_is_better=False)


if __name__ == "__main__":
    r = Report(quick="--quick" in sys.argv)
    run(r)
    print(r.table())
