"""Issue 3's table: JetStream publish, edged vs nats-server with the same nats-py client and the same
store settings: synchronous (await each PubAck), pipelined (1000 in flight), and every ack fsynced
(`sync_interval: always` on both), from one publisher and from FLEET publisher processes.

Why the fsync row has a fleet: with every ack fsynced nats-server is bound by the disk (one fsync per
message), edged by whoever feeds it, because group commit puts all that is in flight into one fsync.
One nats-py process tops out near 25-27 k PubAcks/s with 1000 in flight, the same with and without
fsync, with edged's CPU at about a third of a core: that row measures the client. FLEET processes
(1000 in flight between them), the devices of a gateway publishing at once, are what group commit is
for; both servers get the same fleet, and the one-publisher row stays for comparison.

The raw-client row (no target) is what each server can take: a bare socket with prebuilt publishes
keeps 1000 in flight at about a microsecond of client CPU per message."""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nats

if __package__ in (None, ""):  # run as `python bench/jetstream/js_publish.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.core import CTX, START_TIMEOUT, Procs, _wait_event  # noqa: E402
from bench.harness import (  # noqa: E402
    KINDS,
    Report,
    Server,
    interleaved,
    publish_in_flight,
    raw_connection,
    send_counting_acks,
)

FLEET = 4  # publisher processes of the fleet row


async def _sync_publish(url: str, n: int, size: int) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=30)
    await js.add_stream(name="BSYNC", subjects=["bsync"])
    payload = b"x" * size
    t0 = time.perf_counter()
    for _ in range(n):
        await js.publish("bsync", payload)
    dt = time.perf_counter() - t0
    await js.delete_stream("BSYNC")
    await nc.close()
    return n / dt


WARM = 5000  # messages published before the pipelined rows are timed


async def _pipelined(url: str, n: int, size: int, window: int, stream: str) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=60)
    await js.add_stream(name=stream, subjects=[stream.lower()])
    # timed into a stream that already has messages, on a connection that has carried some: a first burst
    # on a fresh connection is read in smaller pieces while TCP grows its window, which hid that edged
    # once took a whole window of publishes as one block
    await publish_in_flight(js, stream.lower(), min(WARM, n), size, window)
    t0 = time.perf_counter()
    errors = await publish_in_flight(js, stream.lower(), n, size, window)
    dt = time.perf_counter() - t0
    await js.delete_stream(stream)
    await nc.close()
    if errors:
        raise RuntimeError(f"{errors} publishes failed")
    return n / dt


async def _raw_in_flight(url: str, n: int, size: int, window: int, stream: str) -> float:
    """`n` publishes from a bare socket, `window` in flight, each with its own reply; the PubAcks are
    counted, not decoded (an error reply fails the run). The client costs about a microsecond per message,
    so this measures the server: nats-py spends ~40 us of CPU per publish, enough to cap both servers."""
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=30)
    await js.add_stream(name=stream, subjects=[stream.lower()])
    r, w = await raw_connection(url)
    chunk = 100
    subj = stream.lower().encode()
    payload = b"x" * size
    chunks = [b"".join(b"PUB %s _R.%d %d\r\n%s\r\n" % (subj, c * chunk + i, size, payload) for i in range(chunk))
              for c in range(n // chunk)]
    dt = await send_counting_acks(r, w, chunks, chunk, window)
    await js.delete_stream(stream)
    await nc.close()
    return len(chunks) * chunk / dt


def _fleet_member(url: str, subj: str, n: int, size: int, window: int, go: Any, out: Any, ready: Any) -> None:
    """One publisher process of the fleet: connects, waits for `go`, publishes, reports when it is done."""
    async def main() -> None:
        nc = await nats.connect(url, allow_reconnect=False)
        js = nc.jetstream(timeout=60)
        ready.set()
        if not await asyncio.get_running_loop().run_in_executor(None, _wait_event, go, START_TIMEOUT):
            out.put((0.0, n))
            return
        errors = await publish_in_flight(js, subj, n, size, window)
        out.put((time.monotonic(), errors))
        await nc.close()

    asyncio.run(main())


def _fleet(url: str, n: int, size: int, window: int, stream: str, procs: int = FLEET) -> float:
    """`procs` publisher processes, `window` in flight between them, into one stream: msg/s from `go`
    until the last one has its last PubAck."""
    async def admin(create: bool) -> None:
        nc = await nats.connect(url)
        js = nc.jetstream(timeout=30)
        if create:
            await js.add_stream(name=stream, subjects=[stream.lower()])
        else:
            await js.delete_stream(stream)
        await nc.close()

    asyncio.run(admin(True))
    go, out = CTX.Event(), CTX.Queue()
    with Procs() as ps:
        for _ in range(procs):
            ps.start(_fleet_member, url, stream.lower(), n // procs, size, window // procs, go, out)
        t0 = time.monotonic()
        go.set()
        done = [out.get(timeout=300) for _ in range(procs)]
    asyncio.run(admin(False))
    errors = sum(e for _, e in done)
    if errors:
        raise RuntimeError(f"{errors} publishes failed")
    return n // procs * procs / (max(t for t, _ in done) - t0)


def _loop_run(coro: Any) -> Any:
    """On uvloop when it is there (the `speed` extra): the raw client should cost as little as it can."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def _measure(configs: dict[str, str], fn: Any, reps: int) -> dict[str, tuple[float, float]]:
    """Both servers up at once, the runs alternating between them (harness.interleaved): whatever else
    the machine does during the section falls on both alike. Best rate of `reps` and its CPU per msg."""
    with Server(KINDS[0], config=configs[KINDS[0]]) as a, Server(KINDS[1], config=configs[KINDS[1]]) as b:

        def one(kind: str, srv: Server) -> tuple[float, float]:
            c0 = srv.cpu()
            rate, n = fn(srv.url)
            return rate, (srv.cpu() - c0) / n * 1e6

        runs = interleaved({KINDS[0]: a, KINDS[1]: b}, reps, one)
    return {k: max(v) for k, v in runs.items()}


def run(report: Report) -> None:
    q = report.quick
    reps = 1 if q else 4  # even: each server goes first in as many runs (see js_consume.REPS)
    n_sync = 1000 if q else 5000
    n_pipe = 10_000 if q else 50_000
    n_always = 5000 if q else 20_000
    n_raw = 20_000 if q else 200_000
    res: dict[str, dict[str, tuple[float, float]]] = {k: {} for k in KINDS}

    def confs(extra: str) -> dict[str, str]:
        return {k: f'jetstream {{ store_dir: "{tempfile.mkdtemp(prefix=f"bench-js-{k}-")}"{extra} }}\n' for k in KINDS}

    plain = confs("")
    for key, conf, fn in (
        ("sync", plain, lambda u: (asyncio.run(_sync_publish(u, n_sync, 128)), n_sync)),
        ("pipe", plain, lambda u: (asyncio.run(_pipelined(u, n_pipe, 128, 1000, "BPIPE")), n_pipe)),
        ("always", always := confs(", sync_interval: always"),
         lambda u: (asyncio.run(_pipelined(u, n_always, 128, 1000, "BALWAYS")), n_always)),
        ("fleet", always, lambda u: (_fleet(u, n_always, 128, 1000, "BFLEET"), n_always)),
        ("raw", plain, lambda u: (_loop_run(_raw_in_flight(u, n_raw, 128, 1000, "BRAW")), n_raw)),
    ):
        for kind, r in _measure(conf, fn, reps).items():
            res[kind][key] = r
    e, n = res["edged"], res["nats-server"]
    report.add("js", "publish, await each ack", "msg/s", e["sync"][0], n["sync"][0], target="≥ 0.8×",
               check=lambda r: r.ratio >= 0.8)
    report.add("js", "publish, 1000 in flight", "msg/s", e["pipe"][0], n["pipe"][0], target="≥ 1.0×",
               check=lambda r: r.ratio >= 1.0)
    report.add("js", "publish, 1000 in flight, server CPU", "µs/msg", e["pipe"][1], n["pipe"][1],
               higher_is_better=False)
    report.add("js", "publish, fsync every commit", "msg/s", e["always"][0], n["always"][0])
    report.add("js", f"publish, fsync every commit, {FLEET} procs", "msg/s", e["fleet"][0], n["fleet"][0],
               target="≥ 5×", check=lambda r: r.ratio >= 5.0)
    report.add("js", f"publish, fsync, {FLEET} procs, server CPU", "µs/msg", e["fleet"][1],
               n["fleet"][1], higher_is_better=False)
    report.add("js", "publish, raw client, 1000 in flight", "msg/s", e["raw"][0], n["raw"][0])
    report.add("js", "publish, raw client, server CPU", "µs/msg", e["raw"][1], n["raw"][1],
               higher_is_better=False)


if __name__ == "__main__":
    r = Report(quick="--quick" in sys.argv)
    run(r)
    print(r.table())
