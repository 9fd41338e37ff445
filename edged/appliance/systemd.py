"""systemd integration: the notify protocol (READY, STATUS, RELOADING, STOPPING, WATCHDOG) for a unit
of `Type=notify` with `WatchdogSec=`.

Debian's python3-systemd (`systemd.daemon.notify`) is used when it can be imported; otherwise the
datagram is sent to $NOTIFY_SOCKET directly (a path, or `@name` for the abstract namespace), which is
all that library does. Outside systemd (no NOTIFY_SOCKET) nothing here runs.

The watchdog is fed from the event loop and only after the store has committed a probe row, so a
loop that no longer turns, or a store whose writer is stuck, stops the pings and systemd restarts
edged. Findings of the link doctor (edged/appliance/doctor.py) go to STATUS only: they are no reason to restart.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from edged.log import log

if TYPE_CHECKING:
    from edged.server import Server

STATUS_EVERY_S = 5.0  # how often STATUS= is refreshed (only sent when its text changed)
DEBUG_HANG_ENV = "EDGED_DEBUG_HANG"  # "1": SIGWINCH blocks the event loop (tests the watchdog)

Sender = Callable[[str], bool]


def socket_address(value: str) -> str | bytes:
    """$NOTIFY_SOCKET as a socket address: `@name` is the abstract namespace (a leading NUL byte)."""
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    return value


def raw_sender(address: str) -> Sender:
    """The notify protocol itself: one AF_UNIX datagram per message."""
    addr = socket_address(address)

    def send(state: str) -> bool:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.connect(addr)
                s.sendall(state.encode())
            return True
        except OSError as e:
            _notify_failed(address, e)
            return False

    return send


_warned: set[str] = set()


def _notify_failed(address: str, e: OSError) -> None:
    """Said once per socket as a warning (edged runs on without the service manager's view), then at debug."""
    if address in _warned:
        log.debug("systemd notify to %s failed: %s", address, e)
        return
    _warned.add(address)
    log.warning("systemd notify to %s failed: %s (edged runs on; the service manager does not hear from it)",
                address, e.strerror or e)


def library_sender(address: str) -> Sender | None:
    """python3-systemd's notify, when that package is installed."""
    try:
        from systemd import daemon  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return None
    notify = getattr(daemon, "notify", None)
    if notify is None:
        return None

    def send(state: str) -> bool:
        try:
            return bool(notify(state))
        except OSError as e:  # a socket we may not write to (another user's) must not stop edged
            _notify_failed(address, e)
            return False

    return send


class Notifier:
    """Sends notify messages to the service manager; `enabled` is False outside systemd."""

    def __init__(self, env: Mapping[str, str] | None = None, use_library: bool = True) -> None:
        env = os.environ if env is None else env
        self.address = env.get("NOTIFY_SOCKET", "")
        self.backend = ""
        self._send: Sender | None = None
        if not self.address:
            return
        lib = library_sender(self.address) if use_library else None
        if lib is not None:
            self._send, self.backend = lib, "python3-systemd"
        else:
            self._send, self.backend = raw_sender(self.address), "socket"

    @property
    def enabled(self) -> bool:
        return self._send is not None

    def send(self, *fields: str) -> bool:
        """One message of newline-separated `KEY=value` fields."""
        if self._send is None:
            return False
        return self._send("\n".join(fields))


def watchdog_interval(env: Mapping[str, str] | None = None, pid: int | None = None) -> float | None:
    """Seconds between WATCHDOG=1 pings (half of WATCHDOG_USEC, as sd_watchdog_enabled advises); None
    when the watchdog is off or meant for another process (WATCHDOG_PID)."""
    env = os.environ if env is None else env
    usec = env.get("WATCHDOG_USEC", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    wpid = env.get("WATCHDOG_PID", "")
    if wpid:
        if not wpid.isdigit() or int(wpid) != (os.getpid() if pid is None else pid):
            return None
    return int(usec) / 2e6


def monotonic_usec() -> int:
    """CLOCK_MONOTONIC in microseconds, the clock systemd compares a reload's MONOTONIC_USEC with."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def one_line(text: str) -> str:
    """STATUS= is one line: newlines would start new fields of the message."""
    return " ".join(text.split())


def status_text(server: Server, phase: str = "ready") -> str:
    """What a person reads in `systemctl status edged`: clients, leaf links, backlogs, doctor findings."""
    from edged.appliance.doctor import doctor_of, duration_text
    from edged.monitor.backlog import backlog

    parts = [f"{phase}: {len(server.clients)} clients"]
    doc = backlog(server)
    now = time.time()
    for r in doc.get("leaf_remotes", []):
        lk_url = r["url"] or (r["urls"][0] if r["urls"] else "?")
        if r["connected"]:
            lk = _link(server, r)
            up = f" up {duration_text(now - lk.connected_since)}" if lk is not None and lk.connected_since else " up"
            parts.append(f"leaf {_hostport(lk_url)}{up}")
        else:
            err = f" ({r['last_error']})" if r.get("last_error") else ""
            parts.append(f"leaf {_hostport(lk_url)} down{err}")
    syncs = doc.get("syncs", [])
    if syncs:
        behind = sum(int(s.get("msgs_behind") or 0) for s in syncs)
        kinds = sorted({s["kind"] + "s" for s in syncs})
        parts.append(f"{'/'.join(kinds)} {behind} msgs behind")
    origins = doc.get("origin_consumers", [])
    if origins:
        pending = sum(int(o.get("pending_msgs") or 0) for o in origins)
        parts.append(f"hub to take {pending} msgs")
    warnings = doctor_of(server).findings(now)
    if warnings:
        parts.append("WARNING: " + ", ".join(warnings))
    return one_line("; ".join(parts))


def _hostport(url: str) -> str:
    return url.split("://", 1)[-1].rsplit("@", 1)[-1].split("/", 1)[0]


def _link(server: Server, remote_doc: dict[str, Any]) -> Any:
    lm = server.leafnodes
    if lm is None:
        return None
    for lk in lm.links:
        if lk.is_connected and lk.conn is not None and lk.conn.url.redacted() == remote_doc["url"]:
            return lk
    return None


async def store_probe(server: Server, timeout: float) -> bool:
    """Does the JetStream file store commit? (True without one: nothing to prove.)"""
    js = server.jetstream
    store = getattr(js, "file_store", None) if js is not None else None
    probe = getattr(store, "probe", None)
    if probe is None:
        return True
    try:
        await asyncio.wait_for(probe(), timeout)
        return True
    except Exception as e:  # a timeout or a commit error: withhold the ping and say why
        log.warning("Watchdog: the store did not commit a probe within %.1fs: %s", timeout,
                    str(e) or type(e).__name__)
        return False


class Supervisor:
    """The service manager's view of one running server (created by `attach` under systemd only)."""

    def __init__(self, server: Server, notifier: Notifier, watchdog: float | None) -> None:
        self.server = server
        self.notifier = notifier
        self.watchdog = watchdog
        self.pings = 0
        self._status = ""
        self._tasks: list[asyncio.Task[None]] = []

    def ready(self) -> None:
        self._status = status_text(self.server)
        self.notifier.send("READY=1", f"STATUS={self._status}", f"MAINPID={os.getpid()}")
        log.info("systemd: READY=1 sent to %s (through %s)", self.notifier.address, self.notifier.backend)

    def reloading(self) -> None:
        self.notifier.send("RELOADING=1", f"MONOTONIC_USEC={monotonic_usec()}", "STATUS=reloading configuration")

    def reloaded(self) -> None:
        self._status = status_text(self.server)
        self.notifier.send("READY=1", f"STATUS={self._status}")

    def stopping(self) -> None:
        self.notifier.send("STOPPING=1", "STATUS=stopping: closing clients, committing the store")
        for t in self._tasks:
            t.cancel()
        self._tasks.clear()

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._refresh_status()))
        if self.watchdog is not None:
            self._tasks.append(loop.create_task(self._feed_watchdog(self.watchdog)))
            log.info("systemd watchdog: a ping every %.1fs while the loop answers and the store commits",
                     self.watchdog)

    async def _refresh_status(self) -> None:
        while True:
            await asyncio.sleep(STATUS_EVERY_S)
            if self.server.shutting_down:
                return
            try:
                text = status_text(self.server)
            except Exception as e:  # a view torn down mid-read: the next refresh sees a consistent state
                log.debug("status text: %s", e)
                continue
            if text != self._status:
                self._status = text
                self.notifier.send(f"STATUS={text}")

    async def _feed_watchdog(self, every: float) -> None:
        while True:
            started = time.monotonic()
            if await store_probe(self.server, timeout=every):
                self.notifier.send("WATCHDOG=1")
                self.pings += 1
            await asyncio.sleep(max(0.0, every - (time.monotonic() - started)))


def attach(server: Server, env: Mapping[str, str] | None = None) -> Supervisor | None:
    """Under systemd: send READY=1 now (listeners accept, the store is open) and start the STATUS and
    watchdog tasks; the server calls `reloading`/`reloaded`/`stopping` through `server.systemd`."""
    env = os.environ if env is None else env
    install_debug_hang(env)
    notifier = Notifier(env)
    if not notifier.enabled:
        return None
    sup = Supervisor(server, notifier, watchdog_interval(env))
    server.systemd = sup
    sup.ready()
    sup.start()
    return sup


def install_debug_hang(env: Mapping[str, str]) -> None:
    """A test aid, off unless EDGED_DEBUG_HANG=1 is in the environment: SIGWINCH then blocks the event
    loop for good (as a bug would), so a test can watch systemd's watchdog restart edged."""
    if env.get(DEBUG_HANG_ENV) != "1":
        return
    log.warning("%s=1: SIGWINCH will block the event loop (a watchdog test aid)", DEBUG_HANG_ENV)

    def hang() -> None:
        log.warning("SIGWINCH with %s=1: blocking the event loop", DEBUG_HANG_ENV)
        while True:
            time.sleep(3600)

    asyncio.get_running_loop().add_signal_handler(signal.SIGWINCH, hang)
