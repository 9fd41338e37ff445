"""Fast batch publishing (`allow_batched`, nats-server 2.14), edged vs nats-server: one publisher streams a
batch from a bare socket (the reply subject names the batch: `<prefix>.<id>.<flow>.fail.<seq>.<op>.$FI`),
keeping no more than twice the server's current ack interval beyond the last flow ack, and commits with the
last message; msg/s until the commit's PubAck, and server CPU per message."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nats

if __package__ in (None, ""):  # run as `python bench/jetstream/js_fast_batch.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.harness import KINDS, Report, Server, interleaved, raw_connection  # noqa: E402

FLOW = 500  # the most messages between flow acks the publisher allows (the server's own maximum)


async def fast_batch(url: str, n: int, size: int, stream: str = "BFAST", bid: str = "b") -> float:
    """`n` messages in one fast batch, the last one the commit: msg/s until its PubAck."""
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=30)
    await nc.request(f"$JS.API.STREAM.CREATE.{stream}", json.dumps(
        {"name": stream, "subjects": [stream.lower()], "allow_batched": True}).encode(), timeout=10)
    r, w = await raw_connection(url, "_FB.>")
    subj, payload = stream.lower().encode(), b"x" * size
    acked, window, done = 0, 1, asyncio.Event()
    more = asyncio.Event()
    result: dict[str, Any] = {}

    async def reader() -> None:
        nonlocal acked, window
        buf = b""
        while not done.is_set():
            d = await r.read(1 << 16)
            if not d:
                raise RuntimeError("connection closed")
            buf += d
            while True:
                i = buf.find(b"\r\n")
                if i < 0:
                    break
                line = buf[:i]
                if line.startswith(b"MSG "):
                    ln = int(line.rsplit(b" ", 1)[1])
                    if len(buf) < i + 2 + ln + 2:
                        break
                    body = json.loads(buf[i + 2:i + 2 + ln])
                    buf = buf[i + 2 + ln + 2:]
                    if body.get("type") == "ack":
                        acked, window = max(acked, body["seq"]), max(1, body["msgs"])
                        more.set()
                    elif "stream" in body:
                        result.update(body)
                        done.set()
                    elif body.get("type") in ("gap", "err"):
                        raise RuntimeError(f"fast batch failed: {body}")
                else:
                    buf = buf[i + 2:]
                    if line.startswith(b"PING"):
                        w.write(b"PONG\r\n")

    task = asyncio.ensure_future(reader())
    t0 = time.perf_counter()
    seq = 0
    while seq < n:
        while seq - acked >= 2 * window and not task.done():
            more.clear()
            await more.wait()
        if task.done():
            task.result()
        out = []
        for _ in range(min(100, n - seq, max(1, 2 * window - (seq - acked)))):
            seq += 1
            op = 0 if seq == 1 else (2 if seq == n else 1)
            rep = b"_FB.%s.%d.fail.%d.%d.$FI" % (bid.encode(), FLOW, seq, op)
            out.append(b"PUB %s %s %d\r\n%s\r\n" % (subj, rep, size, payload))
        w.write(b"".join(out))
        await w.drain()
    await asyncio.wait_for(done.wait(), 60)
    dt = time.perf_counter() - t0
    task.cancel()
    w.close()
    await js.delete_stream(stream)
    await nc.close()
    if result.get("count") != n:
        raise RuntimeError(f"fast batch PubAck: {result}")
    return n / dt


def run(report: Report) -> None:
    q = report.quick
    reps = 1 if q else 2
    n = 20_000 if q else 100_000
    configs = {k: f'jetstream {{ store_dir: "{tempfile.mkdtemp(prefix=f"bench-fb-{k}-")}" }}\n' for k in KINDS}
    with Server(KINDS[0], config=configs[KINDS[0]]) as a, Server(KINDS[1], config=configs[KINDS[1]]) as b:

        def one(kind: str, srv: Server) -> tuple[float, float]:
            c0 = srv.cpu()
            rate = asyncio.run(fast_batch(srv.url, n, 128))
            return rate, (srv.cpu() - c0) / n * 1e6

        runs = interleaved({KINDS[0]: a, KINDS[1]: b}, reps, one)
    res = {k: max(v) for k, v in runs.items()}
    e, ns = res["edged"], res["nats-server"]
    report.add("js", "fast batch publish (allow_batched), 1 publisher", "msg/s", e[0], ns[0])
    report.add("js", "fast batch publish, server CPU", "µs/msg", e[1], ns[1], higher_is_better=False)


if __name__ == "__main__":
    rep = Report(quick="--quick" in sys.argv)
    run(rep)
    print(rep.table())
