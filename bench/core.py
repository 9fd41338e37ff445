"""Issue 2's table: core NATS messaging, edged vs nats-server with the same nats-py clients.

Publishers run in this process; subscribers run in a separate process (multiprocessing), so the
publisher's and the subscribers' Python are not one loop. Throughput is client-bound for both
servers (that is the point of "edged must not be the bottleneck"); the server's own CPU per message
shows what each server costs.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import socket
import statistics
import sys
import time
from typing import Any

import nats

from bench.harness import KINDS, Report, Server
from tests.servers import ServerProcess


def _subscriber(url: str, subject: str, n_conns: int, expect: int, ready: Any, done: Any) -> None:
    async def main() -> None:
        conns = [await nats.connect(url) for _ in range(n_conns)]
        got = 0
        first = 0.0
        fin = asyncio.Event()

        async def cb(msg: Any) -> None:
            nonlocal got, first
            if not got:
                first = time.perf_counter()
            got += 1
            if got >= expect:
                fin.set()

        for c in conns:
            await c.subscribe(subject, cb=cb, pending_msgs_limit=10_000_000, pending_bytes_limit=1 << 31)
            await c.flush()
        ready.set()
        try:
            await asyncio.wait_for(fin.wait(), 120)
        except TimeoutError:
            pass
        done.put((got, time.perf_counter() - first if first else 0.0))
        for c in conns:
            await c.close()

    asyncio.run(main())


async def _publish(url: str, subject: str, n: int, size: int) -> float:
    nc = await nats.connect(url, flush_timeout=60)
    payload = b"x" * size
    t0 = time.perf_counter()
    pub = nc.publish
    for _ in range(n):
        await pub(subject, payload)
    await nc.flush(timeout=60)
    dt = time.perf_counter() - t0
    await nc.close()
    return dt


def publish_only(srv: Server, n: int, size: int) -> tuple[float, float]:
    c0 = srv.cpu()
    dt = asyncio.run(_publish(srv.url, "bench.pub", n, size))
    return n / dt, (srv.cpu() - c0) / n * 1e6


def pub_sub(srv: Server, n: int, size: int, subscribers: int) -> tuple[float, float]:
    ctx = mp.get_context("spawn")
    ready, done = ctx.Event(), ctx.Queue()
    p = ctx.Process(target=_subscriber, args=(srv.url, "bench.ps", subscribers, n * subscribers, ready, done))
    p.start()
    if not ready.wait(30):
        p.kill()
        raise RuntimeError("subscriber process did not start")
    c0 = srv.cpu()
    t0 = time.perf_counter()
    asyncio.run(_publish(srv.url, "bench.ps", n, size))
    got, _ = done.get(timeout=180)
    dt = time.perf_counter() - t0
    cpu = srv.cpu() - c0
    p.join(30)
    return got / dt, cpu / max(got, 1) * 1e6


async def _req_reply(url: str, n: int) -> tuple[float, float, float]:
    svc = await nats.connect(url)
    cli = await nats.connect(url)

    async def handler(msg: Any) -> None:
        await msg.respond(msg.data)

    await svc.subscribe("bench.rr", cb=handler)
    await svc.flush()
    for _ in range(200):
        await cli.request("bench.rr", b"warm", timeout=5)
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        await cli.request("bench.rr", b"ping", timeout=5)
        lat.append(time.perf_counter() - t)
    await svc.close()
    await cli.close()
    lat.sort()
    return statistics.median(lat) * 1e6, lat[int(len(lat) * 0.99)] * 1e6, 0.0


def startup_time(kind: str) -> float:
    times = []
    for _ in range(3):
        sp = ServerProcess(kind)
        t0 = time.perf_counter()
        sp.start()
        times.append(time.perf_counter() - t0)
        sp.stop()
    return min(times) * 1000


def idle_conn_rss(srv: Server, n: int) -> tuple[float, float]:
    time.sleep(0.5)
    base = srv.rss()
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.recv(4096)
        s.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
        socks.append(s)
    for s in socks:
        s.settimeout(5)
        buf = b""
        while b"PONG" not in buf:
            buf += s.recv(4096)
    time.sleep(0.5)
    after = srv.rss()
    for s in socks:
        s.close()
    return base / 1e6, (after - base) / n / 1024


def run(report: Report) -> None:
    q = report.quick
    n_pub = 50_000 if q else 300_000
    n_ps = 30_000 if q else 200_000
    n_fan = 5_000 if q else 30_000
    n_rr = 500 if q else 5000
    reps = 1 if q else 3
    res: dict[str, dict[str, Any]] = {k: {} for k in KINDS}
    for kind in KINDS:
        with Server(kind) as srv:
            idle, per_conn = idle_conn_rss(srv, 100 if q else 500)
            res[kind]["idle_rss"], res[kind]["per_conn"] = idle, per_conn
            for size in (16, 128):
                runs = [publish_only(srv, n_pub, size) for _ in range(reps)]
                res[kind][f"pub{size}"] = max(runs)
            runs = [pub_sub(srv, n_ps, 16, 1) for _ in range(reps)]
            res[kind]["pubsub"] = max(runs)
            runs = [pub_sub(srv, n_fan, 16, 10) for _ in range(reps)]
            res[kind]["fanout"] = max(runs)
            rr = [asyncio.run(_req_reply(srv.url, n_rr)) for _ in range(reps)]
            res[kind]["rr"] = min(rr)
        res[kind]["startup"] = startup_time(kind)
    e, n = res["edged"], res["nats-server"]
    for size in (16, 128):
        report.add("core", f"publish only {size} B", "msg/s", e[f"pub{size}"][0], n[f"pub{size}"][0])
        report.add("core", f"publish only {size} B server CPU", "µs/msg", e[f"pub{size}"][1], n[f"pub{size}"][1],
                   higher_is_better=False)
    report.add("core", "pub→sub 16 B", "msg/s", e["pubsub"][0], n["pubsub"][0], target="≥ 0.9×",
               check=lambda r: r.ratio >= 0.9)
    report.add("core", "pub→sub server CPU", "µs/msg", e["pubsub"][1], n["pubsub"][1], higher_is_better=False,
               target="≤ 4 µs", check=lambda r: r.edged <= 4.0)
    report.add("core", "fan-out to 10 subscribers", "msg/s", e["fanout"][0], n["fanout"][0])
    report.add("core", "fan-out server CPU", "µs/msg", e["fanout"][1], n["fanout"][1], higher_is_better=False)
    report.add("core", "request/reply p50", "µs", e["rr"][0], n["rr"][0], higher_is_better=False,
               target="≤ 1.5×", check=lambda r: r.ratio <= 1.5)
    report.add("core", "request/reply p99", "µs", e["rr"][1], n["rr"][1], higher_is_better=False)
    report.add("core", "idle RSS", "MB", e["idle_rss"], n["idle_rss"], higher_is_better=False,
               target="≤ 35 MB", check=lambda r: r.edged <= 35)
    report.add("core", "RSS per idle connection", "KB", e["per_conn"], n["per_conn"], higher_is_better=False,
               target="≤ 40 KB", check=lambda r: r.edged <= 40)
    report.add("core", "start-up to accepting", "ms", e["startup"], n["startup"], higher_is_better=False,
               target="≤ 500 ms", check=lambda r: r.edged <= 500)


if __name__ == "__main__":
    r = Report(quick="--quick" in sys.argv)
    run(r)
    print(r.table())
