"""Issue 2's table: core NATS messaging, edged vs nats-server with the same nats-py clients.

Both servers run at once and every measurement alternates between them (see harness.interleaved).
Each client side is its own process (multiprocessing "spawn"): one publisher process, one subscriber
process (holding 1 or 10 connections), one responder process; the benchmark process only starts
them, reads /proc and times. A single nats-py process is the throughput limit for both servers, so
the throughput ratio says whether edged keeps up, and server CPU µs per message (and the server's
busy fraction of one core) says what it costs. Timestamps are CLOCK_MONOTONIC, shared by processes.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import nats

from bench.harness import KINDS, ROOT, CpuWindow, Report, Server, interleaved
from tests.support.servers import ServerProcess

CTX = mp.get_context("spawn")
# nats-py only writes when its loop runs its flusher task: a publisher that never yields would buffer
# everything client-side and measure list appends. 500 x 16 B is ~15 KB per socket write.
YIELD_EVERY = 500
START_TIMEOUT = 60.0  # a spawned client process imports nats-py: slow on loaded shared cores
# What nats-py sends as CONNECT, for the raw idle connections.
CONNECT = (b'CONNECT {"verbose":false,"pedantic":false,"lang":"python3","version":"2.16.0","protocol":1,'
           b'"headers":true,"no_responders":true}\r\nPING\r\n')


# ---------------------------------------------------------------- client processes


def _wait_event(ev: Any, timeout: float) -> bool:
    return bool(ev.wait(timeout))


def _publisher(url: str, subject: str, n: int, size: int, go: Any, out: Any, ready: Any) -> None:
    """Publish n messages as fast as nats-py goes, yielding to the loop every YIELD_EVERY, then make
    sure the server has read them all."""
    async def main() -> None:
        nc = await nats.connect(url, flush_timeout=300, allow_reconnect=False)
        payload = b"x" * size
        pub = nc.publish
        ready.set()
        if not await asyncio.get_running_loop().run_in_executor(None, _wait_event, go, START_TIMEOUT):
            out.put(("pub", 0.0, 0.0))
            return
        t0 = time.monotonic()
        for i in range(0, n, YIELD_EVERY):
            for _ in range(min(YIELD_EVERY, n - i)):
                await pub(subject, payload)
            await asyncio.sleep(0)  # let nats-py's flusher task write the batch
        # nats-py writes flush()'s PING ahead of still-buffered commands: the first flush has the
        # flusher write everything, the second one's PONG comes after the server has read it all
        await nc.flush(timeout=300)
        await nc.flush(timeout=300)
        t1 = time.monotonic()
        out.put(("pub", t0, t1))
        await nc.close()

    asyncio.run(main())


def _subscriber(url: str, subject: str, n_conns: int, expect: int, out: Any, ready: Any) -> None:
    """n_conns connections subscribed to one subject; reports how many arrived and the last arrival."""
    async def main() -> None:
        conns = [await nats.connect(url, allow_reconnect=False) for _ in range(n_conns)]
        got = 0
        last = 0.0
        fin = asyncio.Event()

        async def cb(msg: Any) -> None:
            nonlocal got, last
            got += 1
            if got >= expect:
                last = time.monotonic()
                fin.set()

        for c in conns:
            await c.subscribe(subject, cb=cb, pending_msgs_limit=-1, pending_bytes_limit=-1)
            await c.flush()
        ready.set()
        cpu0 = time.process_time()
        # done when all arrived; gives up when nothing arrives for 5 s after the first (lost messages)
        deadline = time.monotonic() + 300
        seen = -1
        while not fin.is_set() and time.monotonic() < deadline:
            try:
                await asyncio.wait_for(fin.wait(), 5)
            except TimeoutError:
                if got and got == seen:
                    break
                seen = got
        if not fin.is_set():
            last = time.monotonic()
        out.put(("sub", got, last, time.process_time() - cpu0))
        for c in conns:
            await c.close()

    asyncio.run(main())


def _responder(url: str, subject: str, stop: Any, ready: Any) -> None:
    """A service echoing each request; runs until `stop` is set."""
    async def main() -> None:
        nc = await nats.connect(url, allow_reconnect=False)

        async def handler(msg: Any) -> None:
            await msg.respond(msg.data)

        await nc.subscribe(subject, cb=handler)
        await nc.flush()
        ready.set()
        await asyncio.get_running_loop().run_in_executor(None, _wait_event, stop, 600)
        await nc.close()

    asyncio.run(main())


def _run_client(target: Any, out: Any, args: tuple[Any, ...]) -> None:
    try:
        target(*args)
    except Exception as e:  # the benchmark process waits on `out`: tell it now, not after its timeout
        out.put(("error", f"{target.__name__}: {type(e).__name__}: {e}"))
        raise


class Procs:
    """Client processes of one measurement; all are killed on exit, whatever happened."""

    def __init__(self) -> None:
        self.procs: list[Any] = []

    def start(self, target: Any, *args: Any, out: Any = None) -> Any:
        """Start `target(*args, ready)` and wait until it sets `ready`. With `out` (a queue the benchmark
        waits on), a failure in the client is put there as ("error", text) at once."""
        ready = CTX.Event()
        if out is None:
            p = CTX.Process(target=target, args=(*args, ready), daemon=True)
        else:
            p = CTX.Process(target=_run_client, args=(target, out, (*args, ready)), daemon=True)
        p.start()
        self.procs.append(p)
        if not ready.wait(START_TIMEOUT):
            raise RuntimeError(f"client process {target.__name__} did not get ready")
        return p

    def __enter__(self) -> Procs:
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(5)


# ---------------------------------------------------------------- measurements


@dataclass
class Run:
    rate: float  # ops/s (or latency in µs for request/reply)
    cpu_us: float  # server CPU µs per op
    busy: float  # server CPU s per wall s over the window
    info: dict[str, Any] = field(default_factory=dict)


def _get(q: Any, tag: str, timeout: float) -> tuple[Any, ...]:
    item = q.get(timeout=timeout)
    if item[0] != tag:
        raise RuntimeError(f"expected {tag} result, got {item!r}")
    return item


def publish_only(srv: Server, n: int, size: int) -> Run:
    """One nats-py publisher, no subscribers: what reading and routing to nobody costs."""
    out, go = CTX.Queue(), CTX.Event()
    with Procs() as ps:
        ps.start(_publisher, srv.url, "bench.pub", n, size, go, out)
        with CpuWindow(srv) as w:
            go.set()
            _, t0, t1 = _get(out, "pub", 600)
    return Run(n / (t1 - t0), w.cpu / n * 1e6, w.busy)


def pub_sub(srv: Server, n: int, size: int, subscribers: int) -> Run:
    """One publisher process, one subscriber process with `subscribers` connections on the subject.
    Rate is deliveries/s from the first publish to the last arrival; CPU is per delivery."""
    out, go = CTX.Queue(), CTX.Event()
    expect = n * subscribers
    with Procs() as ps:
        ps.start(_subscriber, srv.url, "bench.ps", subscribers, expect, out)
        ps.start(_publisher, srv.url, "bench.ps", n, size, go, out)
        with CpuWindow(srv) as w:
            go.set()
            res = {item[0]: item for item in (out.get(timeout=900), out.get(timeout=900))}
    _, t0, _t1 = res["pub"]
    _, got, last, sub_cpu = res["sub"]
    return Run(got / (last - t0), w.cpu / max(got, 1) * 1e6, w.busy,
               {"lost": expect - got, "sub_cpu_us": sub_cpu / max(got, 1) * 1e6, "sub_busy": sub_cpu / (last - t0)})


async def _requests(url: str, n: int, srv: Server) -> tuple[list[float], CpuWindow]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        for _ in range(200):  # warm: inbox subscription, caches
            await nc.request("bench.rr", b"warm", timeout=5)
        lat = []
        with CpuWindow(srv) as w:
            for _ in range(n):
                t = time.perf_counter()
                await nc.request("bench.rr", b"ping", timeout=5)
                lat.append(time.perf_counter() - t)
    finally:
        await nc.close()
    return lat, w


def request_reply(srv: Server, n: int) -> Run:
    """Sequential requests from this process to a responder process; rate field holds p50 µs."""
    stop = CTX.Event()
    with Procs() as ps:
        try:
            ps.start(_responder, srv.url, "bench.rr", stop)
            lat, w = asyncio.run(_requests(srv.url, n, srv))
        finally:
            stop.set()
    lat.sort()
    p50 = statistics.median(lat) * 1e6
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e6
    return Run(p50, w.cpu / n * 1e6, w.busy, {"p99": p99})


def idle_conn_rss(srv: Server, n: int) -> tuple[float, float]:
    """Open n raw connections (nats-py's CONNECT, then PING/PONG) and read RSS. Returns (marginal,
    average) KB per connection: marginal is the RSS slope over the second half of them, which leaves
    out the free room in the heap that the first few hundred fill; average is (RSS(n) - RSS(0)) / n."""
    socks: list[socket.socket] = []

    def open_more(k: int) -> None:
        batch = []
        for _ in range(k):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            s.sendall(CONNECT)
            batch.append(s)
        for s in batch:  # INFO, then PONG: the server has set the connection up
            buf = b""
            while b"PONG" not in buf:
                chunk = s.recv(4096)
                if not chunk:
                    raise RuntimeError(f"{srv.kind} closed an idle connection: {buf[-200:]!r}")
                buf += chunk
        socks.extend(batch)

    try:
        time.sleep(0.3)
        base = srv.rss()
        first = n // 2
        open_more(first)
        time.sleep(0.3)
        mid = srv.rss()
        open_more(n - first)
        time.sleep(0.3)
        after = srv.rss()
    finally:
        for s in socks:
            s.close()
    return (after - mid) / (n - first) / 1024, (after - base) / n / 1024


def startup_ms(kind: str, runs: int) -> tuple[float, float]:
    """Process spawn to the first INFO read on a fresh TCP connection (polled every 1 ms).
    Returns (best, median) ms."""
    times = []
    for _ in range(runs):
        sp = ServerProcess(kind)  # its command line and work dir; spawned here to time it closely
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        log = open(sp.log_path, "ab")
        t0 = time.perf_counter()
        p = subprocess.Popen(sp.command(), cwd=sp.workdir, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = t0 + 30
            while True:
                if p.poll() is not None or time.perf_counter() > deadline:
                    raise RuntimeError(f"{kind} did not start: {sp.log_tail()}")
                try:
                    with socket.create_connection(("127.0.0.1", sp.port), timeout=5) as s:
                        if s.recv(4096).startswith(b"INFO "):
                            times.append((time.perf_counter() - t0) * 1000)
                            break
                except OSError:
                    time.sleep(0.001)
        finally:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
            log.close()
    return min(times), statistics.median(times)


# ---------------------------------------------------------------- the table


def run(report: Report) -> None:
    q = report.quick
    n_pub = 50_000 if q else 500_000
    n_ps = 30_000 if q else 200_000
    n_fan = 3_000 if q else 30_000
    n_rr = 500 if q else 5_000
    n_idle = 300 if q else 1000
    reps = 1 if q else 3
    servers: dict[str, Server] = {}
    try:
        for kind in KINDS:
            servers[kind] = Server(kind).__enter__()
        time.sleep(1.0)
        idle_rss = {k: s.rss() / 1e6 for k, s in servers.items()}
        per_conn = {k: idle_conn_rss(s, n_idle) for k, s in servers.items()}
        pub = {size: interleaved(servers, reps, lambda k, s, size=size: publish_only(s, n_pub, size))
               for size in (16, 128)}
        ps = interleaved(servers, reps, lambda k, s: pub_sub(s, n_ps, 16, 1))
        fan = interleaved(servers, reps, lambda k, s: pub_sub(s, n_fan, 16, 10))
        rr = interleaved(servers, reps, lambda k, s: request_reply(s, n_rr))
    finally:
        for s in servers.values():
            s.__exit__(None, None, None)
    start = {k: startup_ms(k, 2 if q else 5) for k in KINDS}

    def top(runs: dict[str, list[Run]], low: bool = False) -> dict[str, Run]:
        """The best run per server (highest rate, or lowest latency when `low`)."""
        return {k: (min if low else max)(v, key=lambda r: r.rate) for k, v in runs.items()}

    def all_rates(runs: dict[str, list[Run]]) -> dict[str, list[float]]:
        return {k: [round(r.rate, 1) for r in v] for k, v in runs.items()}

    e, n = "edged", "nats-server"
    add = report.add
    for size in (16, 128):
        b = top(pub[size])
        add("core", f"publish only {size} B", "msg/s", b[e].rate, b[n].rate, runs=all_rates(pub[size]))
        add("core", f"publish only {size} B, server CPU", "µs/msg", b[e].cpu_us, b[n].cpu_us,
            higher_is_better=False)
    b = top(ps)
    add("core", "pub→sub 16 B", "msg/s", b[e].rate, b[n].rate, target="≥ 0.9×", check=lambda r: r.ratio >= 0.9,
        runs=all_rates(ps), lost={k: b[k].info["lost"] for k in KINDS})
    add("core", "pub→sub 16 B, server CPU", "µs/msg", b[e].cpu_us, b[n].cpu_us, higher_is_better=False,
        target="≤ 4 µs", check=lambda r: r.edged <= 4.0)
    add("core", "pub→sub 16 B, server busy", "% core", b[e].busy * 100, b[n].busy * 100, higher_is_better=False)
    add("core", "pub→sub 16 B, subscriber client busy", "% core", b[e].info["sub_busy"] * 100,
        b[n].info["sub_busy"] * 100, sub_cpu_us={k: round(b[k].info["sub_cpu_us"], 2) for k in KINDS})
    b = top(fan)
    add("core", "fan-out 1→10 subs 16 B (deliveries)", "msg/s", b[e].rate, b[n].rate, runs=all_rates(fan),
        lost={k: b[k].info["lost"] for k in KINDS})
    add("core", "fan-out, server CPU per delivery", "µs/msg", b[e].cpu_us, b[n].cpu_us, higher_is_better=False)
    for name, runs in (("pub→sub", ps), ("fan-out", fan)):
        lost = {k: [r.info["lost"] for r in v if r.info["lost"]] for k, v in runs.items()}
        for k, v in lost.items():
            if v:
                report.note(f"{name}: {k} lost messages in {len(v)} run(s): {v}")
    b = top(rr, low=True)
    add("core", "request/reply p50", "µs", b[e].rate, b[n].rate, higher_is_better=False, target="≤ 1.5×",
        check=lambda r: r.ratio <= 1.5, runs=all_rates(rr))
    p99 = {k: min(r.info["p99"] for r in v) for k, v in rr.items()}
    add("core", "request/reply p99", "µs", p99[e], p99[n], higher_is_better=False)
    add("core", "request/reply, server CPU", "µs/req", b[e].cpu_us, b[n].cpu_us, higher_is_better=False)
    add("core", "idle RSS", "MB", idle_rss[e], idle_rss[n], higher_is_better=False, target="≤ 35 MB",
        check=lambda r: r.edged <= 35)
    add("core", f"RSS per idle connection ({n_idle})", "KB", per_conn[e][0], per_conn[n][0],
        higher_is_better=False, target="≤ 40 KB", check=lambda r: r.edged <= 40,
        average_kb={k: round(v[1], 2) for k, v in per_conn.items()})
    add("core", "start-up to first INFO", "ms", start[e][0], start[n][0], higher_is_better=False,
        target="≤ 500 ms", check=lambda r: r.edged <= 500, median_ms={k: round(v[1], 1) for k, v in start.items()})


if __name__ == "__main__":
    r = Report(quick="--quick" in sys.argv)
    run(r)
    print()
    print(r.table())
