"""The `edged` command as a user runs it: version, check, flags over a config file, --signal."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import nats

from edged import __version__
from tests.servers import ROOT, ServerProcess, free_port, wait_port


def edged(*args: str, cwd: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "edged", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout)


def test_version() -> None:
    r = edged("--version")
    assert r.returncode == 0 and r.stdout.strip().startswith(f"edged {__version__}")


def test_check_good_and_bad(tmp_path: Path) -> None:
    good = tmp_path / "good.conf"
    good.write_text("port: 4999\ncluster { port: 6222 }\n")
    r = edged("check", "-c", str(good))
    assert r.returncode == 0, r.stderr
    assert "is valid" in r.stdout and "cluster" in r.stderr  # the unsupported block is named, not dropped
    bad = tmp_path / "bad.conf"
    bad.write_text("port: 4999\nauthorization {\n  users: [ {user: a, password: b} ]\n  token: x\n}\n")
    r = edged("check", "-c", str(bad))
    assert r.returncode == 1
    assert f"{bad}:2:1" in r.stderr and "token" in r.stderr
    r = edged("check", "-c", str(tmp_path / "missing.conf"))
    assert r.returncode == 1 and "missing.conf" in r.stderr
    r = edged("-t", "-c", str(good))
    assert r.returncode == 0


def test_default_conf_is_valid() -> None:
    r = edged("check", "-c", str(ROOT / "edged" / "default.conf"))
    assert r.returncode == 0, r.stderr


def test_flags_override_the_config(tmp_path: Path) -> None:
    conf = tmp_path / "e.conf"
    port_in_file = free_port()
    conf.write_text(f"port: {port_in_file}\nserver_name: from-file\nauthorization {{ user: a, password: b }}\n")
    p = ServerProcess("edged", ["-n", "from-flag", "--user", "u", "--pass", "p"])
    p.config = conf.read_text()
    with p:
        async def main() -> str:
            nc = await nats.connect(f"nats://u:p@127.0.0.1:{p.port}")
            name = nc._server_info["server_name"]
            await nc.close()
            return name

        assert asyncio.run(main()) == "from-flag"


def test_signal_reload_and_stop_with_pid_file(tmp_path: Path) -> None:
    pid_file = tmp_path / "edged.pid"
    conf = tmp_path / "e.conf"
    conf.write_text("debug: false\n")
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "edged", "run", "-a", "127.0.0.1", "-p", str(port), "-c",
                             str(conf), "-P", str(pid_file)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        wait_port(port, proc, 15)
        assert int(pid_file.read_text()) == proc.pid
        r = edged("--signal", f"reload={pid_file}")
        assert r.returncode == 0, r.stderr
        time.sleep(0.5)
        r = edged("--signal", "term", "-P", str(pid_file))
        assert r.returncode == 0, r.stderr
        out, _ = proc.communicate(timeout=15)
        assert proc.returncode == 0
        assert "Reloaded server configuration" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    r = edged("--signal", "bogus=1")
    assert r.returncode == 1 and "unknown signal" in r.stderr
