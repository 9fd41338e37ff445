"""Process usage for /varz (RSS, CPU%, cores) and the per-server monitoring state that owns the sampler."""

from __future__ import annotations

import os
import time
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edged.server import Server


class _ProcUsage:
    """RSS and CPU% of this process. CPU is averaged since the previous sample, like nats-server's pse."""

    def __init__(self) -> None:
        self._last_cpu = _cpu_seconds()
        self._last_wall = time.monotonic()
        self._pcpu = 0.0

    def sample(self) -> tuple[float, int]:
        now = time.monotonic()
        cpu = _cpu_seconds()
        dt = now - self._last_wall
        if dt >= 0.5:
            self._pcpu = round(100.0 * (cpu - self._last_cpu) / dt, 1)
            self._last_cpu, self._last_wall = cpu, now
        return self._pcpu, rss_bytes()


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def num_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class MonitorState:
    """Per-server monitoring state kept outside Server: HTTP request counts and the CPU sampler."""

    def __init__(self) -> None:
        self.http_req_stats: dict[str, int] = {}
        self.usage = _ProcUsage()


# keyed weakly so a stopped Server (tests start many) takes its state with it
_STATES: weakref.WeakKeyDictionary[Server, MonitorState] = weakref.WeakKeyDictionary()


def state_of(server: Server) -> MonitorState:
    st = _STATES.get(server)
    if st is None:
        st = _STATES[server] = MonitorState()
    return st
