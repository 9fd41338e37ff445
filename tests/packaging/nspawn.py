"""Debian roots for the package tests: made once by packaging/mkroot.sh under build/roots/, then booted
with `systemd-nspawn --boot` (systemd as PID 1 of the container) on an overlay, so every run starts from
the pristine root. Commands run inside with nsenter (no machined or system bus is needed on the host).

The container shares the host's network: edged's ports are chosen free on the host and given to it by a
drop-in (EDGED_OPTS), and the test's clients connect to 127.0.0.1.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

from tests.support.servers import ROOT

ROOTS = ROOT / "build" / "roots"
NSPAWN = ["systemd-nspawn", "--register=no", "--keep-unit", "--volatile=overlay", "-q"]


def load_build_deb() -> ModuleType:
    """packaging/build_deb.py as a module (the directory is not a package: `packaging` is PyPI's name)."""
    spec = importlib.util.spec_from_file_location("edged_build_deb", ROOT / "packaging" / "build_deb.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


def missing_tools(arch_tools: bool = False) -> list[str]:
    tools = ["systemd-nspawn", "debootstrap", "dpkg-deb", "lintian", "nsenter"]
    if arch_tools:
        tools.append("qemu-aarch64-static")
    return [t for t in tools if shutil.which(t) is None]


def ensure_root(arch: str, suite: str = "bookworm") -> Path:
    """The cached root for `arch` (made by packaging/mkroot.sh the first time: minutes)."""
    d = ROOTS / f"{suite}-{arch}"
    if not (d / ".complete").exists():
        r = subprocess.run(["sh", str(ROOT / "packaging" / "mkroot.sh"), str(d), arch, suite],
                           capture_output=True, text=True, timeout=3600)
        if r.returncode != 0:
            raise RuntimeError(f"mkroot.sh {arch} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return d


QEMU = {"arm64": "qemu-aarch64", "armhf": "qemu-arm"}


def ensure_binfmt(arch: str) -> None:
    """qemu-user registered for `arch` (binfmt_misc is not always mounted, nor the format enabled)."""
    name = QEMU[arch]
    if os.path.exists(f"/proc/sys/fs/binfmt_misc/{name}"):
        return
    if not os.path.exists("/proc/sys/fs/binfmt_misc/register"):
        subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", "/proc/sys/fs/binfmt_misc"], check=True)
    subprocess.run(["update-binfmts", "--enable", name], check=True, capture_output=True)


class Booted:
    """A root booted by systemd-nspawn; `run` executes a command inside (as root)."""

    def __init__(self, root: Path, binds: dict[str, str], log_path: str) -> None:
        self.root = root
        self.binds = binds
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.leader = 0

    def __enter__(self) -> Booted:
        args = [*NSPAWN, "-D", str(self.root), "--boot"]
        args += [f"--bind-ro={src}:{dst}" for src, dst in self.binds.items()]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"systemd-nspawn exited {self.proc.returncode}: {self.log_tail()}")
            self.leader = self._leader()
            if self.leader:
                r = self.run(["systemctl", "is-system-running"], check=False)
                if r.stdout.strip() in ("running", "degraded"):
                    return self
            time.sleep(0.5)
        raise RuntimeError(f"the container did not boot in 120s: {self.log_tail()}")

    def _leader(self) -> int:
        """The container's PID 1 as seen from the host: the child of systemd-nspawn."""
        assert self.proc is not None
        try:
            kids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        except OSError:
            return 0
        return int(kids[0]) if kids else 0

    def run(self, cmd: list[str], check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive", "LANG": "C.UTF-8"}
        r = subprocess.run(["nsenter", "-t", str(self.leader), "-a", "--", "env", "-i",
                            *(f"{k}={v}" for k, v in env.items()), *cmd],
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        return r

    def sh(self, script: str, check: bool = True, timeout: float = 300) -> str:
        return self.run(["sh", "-c", script], check=check, timeout=timeout).stdout

    def write(self, path: str, text: str) -> None:
        r = subprocess.run(["nsenter", "-t", str(self.leader), "-a", "--", "sh", "-c",
                            f"mkdir -p \"$(dirname '{path}')\" && cat > '{path}'"], input=text, text=True,
                           capture_output=True, timeout=60)
        if r.returncode != 0:
            raise AssertionError(f"writing {path}: {r.stderr}")

    def log_tail(self, n: int = 3000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")[-n:]
        except OSError:
            return ""

    def __exit__(self, *exc: object) -> None:
        p = self.proc
        if p is None:
            return
        if self.leader and p.poll() is None:
            subprocess.run(["nsenter", "-t", str(self.leader), "-a", "--", "systemctl", "poweroff"],
                           capture_output=True, timeout=60)
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)
        self._log.close()


def run_in_root(root: Path, binds: dict[str, str], script: str, log_path: str) -> subprocess.Popen[bytes]:
    """`script` run by sh in the root without booting it (a foreign architecture under qemu-user):
    a process the caller waits for or ends."""
    args = [*NSPAWN, "-D", str(root), *(f"--bind-ro={s}:{d}" for s, d in binds.items()), "/bin/sh", "-c", script]
    log = open(log_path, "wb")  # noqa: SIM115 (the process owns it until it ends)
    return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, SYSTEMD_NSPAWN_TMPFS_TMP="0"))
