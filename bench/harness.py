"""Side-by-side benchmark plumbing: start edged and nats-server on free ports, read their CPU time and RSS
from /proc, and collect rows into one table (edged, nats-server, ratio, target).

CPU per op is (utime + stime of the server process over the measured window) / ops, so it is the
server's own cost, whatever the client costs. Each measurement runs `repeat` times and the best run
(highest throughput / lowest latency) is reported, which damps noise from other processes.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.servers import ServerProcess, free_port  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
KINDS = ("edged", "nats-server")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / CLK_TCK


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Server:
    """A server under test; `cpu()` is its CPU seconds so far."""

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
        if not self.nats:
            return 0.0
        return self.edged / self.nats


class Report:
    def __init__(self, quick: bool = False) -> None:
        self.quick = quick
        self.rows: list[Row] = []

    def add(self, section: str, name: str, unit: str, edged: float, nats: float, *, higher_is_better: bool = True,
            target: str = "", check: Callable[[Row], bool] | None = None, **extra: Any) -> Row:
        row = Row(section, name, unit, edged, nats, higher_is_better, target, None, extra)
        if check is not None:
            row.ok = bool(check(row))
        self.rows.append(row)
        print(f"  {section:8} {name:38} edged {fmt(edged):>10} {unit:9} nats-server {fmt(nats):>10}"
              f"  ratio {row.ratio:5.2f}  {target} {'' if row.ok is None else ('ok' if row.ok else 'MISSED')}",
              flush=True)
        return row

    def table(self) -> str:
        head = f"{'section':8} {'measure':38} {'edged':>11} {'nats-server':>11} {'unit':10} {'ratio':>6}  target"
        lines = [head, "-" * len(head)]
        for r in self.rows:
            mark = "" if r.ok is None else ("  ok" if r.ok else "  MISSED")
            lines.append(f"{r.section:8} {r.name:38} {fmt(r.edged):>11} {fmt(r.nats):>11} {r.unit:10} "
                         f"{r.ratio:6.2f}  {r.target}{mark}")
        return "\n".join(lines)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "quick": self.quick,
                "python": sys.version.split()[0], "rows": [asdict(r) | {"ratio": r.ratio} for r in self.rows]}
        path.write_text(json.dumps(data, indent=2))


def fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def best(values: list[float], higher_is_better: bool = True) -> float:
    return max(values) if higher_is_better else min(values)


__all__ = ["KINDS", "Report", "Row", "Server", "best", "cpu_seconds", "free_port", "rss_bytes"]
