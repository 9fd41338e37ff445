"""Side-by-side benchmark plumbing: start edged and nats-server on free ports, read their CPU time and RSS
from /proc, run a measurement against both (interleaved, repeated), and collect rows into one table
(edged, nats-server, ratio, target, ok/MISSED) that is printed and written as JSON.

Server CPU is read from /proc, so it is the server's own cost whatever the client costs:
- `/proc/<pid>/stat` utime + stime covers every thread, dead ones included, but in 10 ms ticks;
- `/proc/<pid>/task/*/sched` `se.sum_exec_runtime` is exact (ns) but only for live threads.
Both are lower bounds of the true figure; `cpu_seconds` takes the larger, so a window is exact to
the nanosecond unless a thread exits inside it, and then within one tick pair (20 ms).
"""

from __future__ import annotations

import asyncio
import glob
import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.servers import ServerProcess, free_port, nats_server_path  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
KINDS = ("edged", "nats-server")
RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"
T = TypeVar("T")


def stat_cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (all threads, living and dead), in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / CLK_TCK


def threads_cpu_seconds(pid: int) -> float | None:
    """Exact on-CPU time summed over the live threads (None if the kernel does not expose it)."""
    total = 0.0
    found = False
    for path in glob.glob(f"/proc/{pid}/task/*/sched"):
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith("se.sum_exec_runtime"):
                        total += float(line.split(":", 1)[1]) / 1000.0  # milliseconds
                        found = True
                        break
        except OSError:  # the thread exited between glob and open
            continue
    return total if found else None


def cpu_seconds(pid: int) -> float:
    """Best lower bound of the process's CPU time so far (see the module docstring)."""
    stat = stat_cpu_seconds(pid)
    exact = threads_cpu_seconds(pid)
    return stat if exact is None else max(stat, exact)


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Server:
    """A server under test (tests/servers.py's ServerProcess); `cpu()` is its CPU seconds so far."""

    def __init__(self, kind: str, args: list[str] | None = None, config: str | None = None) -> None:
        self.kind = kind
        self.proc = ServerProcess(kind, args, config=config)

    def __enter__(self) -> Server:
        self.proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.stop()

    @property
    def url(self) -> str:
        return self.proc.url

    @property
    def port(self) -> int:
        return self.proc.port

    @property
    def pid(self) -> int:
        assert self.proc.proc is not None
        return self.proc.proc.pid

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def rss(self) -> int:
        return rss_bytes(self.pid)


class CpuWindow:
    """`with CpuWindow(srv) as w:` ... then `w.cpu` (server CPU s), `w.wall` (s), `w.busy` (cores)."""

    def __init__(self, srv: Server) -> None:
        self.srv = srv
        self.cpu = 0.0
        self.wall = 0.0

    def __enter__(self) -> CpuWindow:
        self._c0, self._t0 = self.srv.cpu(), time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu = self.srv.cpu() - self._c0
        self.wall = time.monotonic() - self._t0

    @property
    def busy(self) -> float:
        return self.cpu / self.wall if self.wall else 0.0


def interleaved(servers: dict[str, T], reps: int, fn: Callable[[str, T], Any]) -> dict[str, list[Any]]:
    """Run `fn(kind, server)` `reps` times per server, alternating which server goes first, so that
    load from other processes on shared cores falls on both alike."""
    out: dict[str, list[Any]] = {k: [] for k in servers}
    kinds = list(servers)
    for i in range(reps):
        for k in (kinds if i % 2 == 0 else kinds[::-1]):
            out[k].append(fn(k, servers[k]))
    return out


def best(values: Sequence[float], higher_is_better: bool = True) -> float:
    return max(values) if higher_is_better else min(values)


@dataclass
class Row:
    section: str
    name: str
    unit: str
    edged: float
    nats: float
    higher_is_better: bool = True
    target: str = ""
    ok: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """edged / nats-server (0 when nats-server's figure is 0)."""
        if not self.nats:
            return 0.0
        return self.edged / self.nats


def environment() -> dict[str, Any]:
    """What the figures depend on: machine, load, versions, and edged's event loop."""
    def version(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "-"

    try:
        ns = subprocess.run([nats_server_path(), "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, RuntimeError, subprocess.SubprocessError):
        ns = "-"
    uv = importlib.util.find_spec("uvloop") is not None
    return {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "loadavg_start": os.getloadavg()[0],
        "nats_server": ns.strip().rsplit(" ", 1)[-1] or "-",
        "nats_py": version("nats-py"),
        "edged_loop": f"uvloop {version('uvloop')}" if uv else "asyncio",
        "client_loop": "asyncio",
    }


class Report:
    """Rows from every section; `table()` prints them aligned, `save()` writes JSON."""

    def __init__(self, quick: bool = False) -> None:
        self.quick = quick
        self.rows: list[Row] = []
        self.notes: list[str] = []
        self.meta: dict[str, Any] = environment()

    def add(self, section: str, name: str, unit: str, edged: float, nats: float, *, higher_is_better: bool = True,
            target: str = "", check: Callable[[Row], bool] | None = None, **extra: Any) -> Row:
        row = Row(section, name, unit, float(edged), float(nats), higher_is_better, target, None, extra)
        if check is not None:
            row.ok = bool(check(row))
        self.rows.append(row)
        print("  " + self._line(row), flush=True)
        return row

    def note(self, text: str) -> None:
        """A line for the end of the table (skipped sections, lost messages, how something was run)."""
        self.notes.append(text)
        print(f"  note: {text}", flush=True)

    @staticmethod
    def _line(r: Row) -> str:
        ratio = f"{r.ratio:6.2f}" if r.nats else f"{'-':>6}"
        mark = "" if r.ok is None else ("ok" if r.ok else "MISSED")
        return (f"{r.section:5} {r.name:40} {fmt(r.edged):>11} {fmt(r.nats):>11} {r.unit:8} {ratio}  "
                f"{r.target:10} {mark}").rstrip()

    def header(self) -> str:
        m = self.meta
        return (f"edged ({m['edged_loop']}) vs nats-server {m['nats_server']}, nats-py {m['nats_py']} clients, "
                f"Python {m['python']}, {m['cpus']} CPUs, load {m['loadavg_start']:.2f} at start"
                + (", --quick (one run, small counts)" if self.quick else ", best of repeated runs"))

    def table(self) -> str:
        head = (f"{'sect':5} {'measure':40} {'edged':>11} {'nats-server':>11} {'unit':8} {'ratio':>6}  "
                f"{'target':10} result")
        lines = [self.header(), "", head, "-" * len(head)]
        lines += [self._line(r) for r in self.rows]
        checked = [r for r in self.rows if r.ok is not None]
        missed = [r for r in checked if not r.ok]
        lines.append("-" * len(head))
        lines.append(f"targets: {len(checked) - len(missed)} of {len(checked)} met"
                     + (f"; missed: {', '.join(r.section + '/' + r.name for r in missed)}" if missed else ""))
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def save(self, path: Path = RESULTS) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = self.meta | {"loadavg_end": os.getloadavg()[0]}
        data = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "quick": self.quick, "env": meta,
                "python": meta["python"], "notes": self.notes,
                "rows": [asdict(r) | {"ratio": r.ratio} for r in self.rows]}
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


__all__ = ["KINDS", "RESULTS", "CpuWindow", "Report", "Row", "Server", "best", "cpu_seconds", "free_port",
           "interleaved", "rss_bytes", "stat_cpu_seconds", "threads_cpu_seconds"]


async def publish_in_flight(js: Any, subj: str, n: int, size: int, window: int) -> int:
    """Publish n messages keeping `window` PubAcks outstanding; returns how many failed."""
    payload = b"x" * size
    sem = asyncio.Semaphore(window)
    errors = 0

    async def one() -> None:
        nonlocal errors
        try:
            await js.publish(subj, payload)
        except Exception:
            errors += 1
        finally:
            sem.release()

    tasks = []
    for _ in range(n):
        await sem.acquire()
        tasks.append(asyncio.ensure_future(one()))
    await asyncio.gather(*tasks)
    return errors


async def raw_connection(url: str, sub: str = "_R.*") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A bare NATS connection (headers on) subscribed to `sub`, the reply subjects its raw frames use."""
    host, port = url.rsplit("//", 1)[1].rsplit(":", 1)
    r, w = await asyncio.open_connection(host, int(port))
    await r.readline()
    w.write(b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\nSUB %s 1\r\nPING\r\n' % sub.encode())
    while not (await r.readline()).startswith(b"PONG"):
        pass
    return r, w


async def send_counting_acks(r: asyncio.StreamReader, w: asyncio.StreamWriter, frames: Sequence[bytes],
                             acks_per_frame: int, window: int) -> float:
    """Write `frames` (each answered by `acks_per_frame` PubAcks) keeping at most `window` acks outstanding.
    The PubAcks are counted, not decoded, so the client costs about a microsecond per message; an error
    reply fails the run. Returns the seconds taken; closes the writer."""
    total = len(frames) * acks_per_frame
    acked = errors = 0
    more = asyncio.Event()

    async def reader() -> None:
        nonlocal acked, errors
        tail = b""
        while acked < total:
            d = await r.read(1 << 18)
            if not d:
                raise RuntimeError("connection closed")
            d = tail + d
            cut = d.rfind(b"\n") + 1  # whole lines only: a marker is never split between reads
            tail = d[cut:]
            acked += d.count(b'"seq":', 0, cut)
            errors += d.count(b'"error"', 0, cut)
            more.set()

    t0 = time.perf_counter()
    task = asyncio.ensure_future(reader())
    sent = 0
    for f in frames:
        while sent - acked >= window and not task.done():
            more.clear()
            await more.wait()
        w.write(f)
        sent += acks_per_frame
    await task
    dt = time.perf_counter() - t0
    w.close()
    if errors:
        raise RuntimeError(f"{errors} publishes failed")
    return dt
