"""Each command describes itself (`edged COMMAND -h`, `edged help COMMAND`), while nats-server's
flag forms without a command keep working."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.servers import ROOT

ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def edged(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edged", *args], capture_output=True, text=True, env=ENV,
                          cwd=cwd, timeout=30)


@pytest.mark.parametrize(("args", "usage", "says"), [
    (["run", "--help"], "usage: edged run [flags]", "Run the server"),
    (["run", "-h"], "usage: edged run [flags]", "Run the server"),
    (["help", "run"], "usage: edged run [flags]", "Run the server"),
    (["check", "--help"], "usage: edged check -c FILE [flags]", "Check a configuration file"),
    (["help", "check"], "usage: edged check -c FILE [flags]", "Check a configuration file"),
    (["version", "-h"], "usage: edged version", "Print the nats-server version edged answers as"),
    (["help", "help"], "usage: edged help [command]", "Show edged's help"),
    (["-h"], "usage: edged [command] [flags]", "check      check a configuration file"),
    (["help"], "usage: edged [command] [flags]", "run        run the server"),
])
def test_each_command_describes_itself(args: list[str], usage: str, says: str) -> None:
    r = edged(*args)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(usage) and says in r.stdout, r.stdout
    if args[0] in ("run", "check") or args == ["help", "run"]:
        assert "--config" in r.stdout and "-js, --jetstream" in r.stdout  # the flags they take
    if args[0] != "-h" and args != ["help"]:
        assert "commands:" not in r.stdout  # not the global help


def test_a_command_without_flags_refuses_them() -> None:
    r = edged("version", "-p", "4222")
    assert r.returncode == 1 and "unrecognized arguments: -p 4222" in r.stderr and "edged version -h" in r.stderr
    r = edged("help", "nosuch")
    assert r.returncode == 1 and "invalid choice: 'nosuch'" in r.stderr


def test_nats_server_style_flags_without_a_command(tmp_path: Path) -> None:
    (tmp_path / "x.conf").write_text("port: 4999\n")
    assert edged("-c", "x.conf", "-p", "4222", "-js", "-t", cwd=tmp_path).returncode == 0
    r = edged("--signal", "reload=999999999", cwd=tmp_path)
    assert r.returncode == 1 and 'signal "reload" 999999999' in r.stderr
    r = edged("-p", "99999", "-js")  # runs (no command), refused before listening
    assert r.returncode == 1 and "invalid port" in r.stderr and "Traceback" not in r.stderr
