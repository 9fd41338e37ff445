"""`edged check` / `edged run` against `nats-server -t` / `nats-server` on the same files and flags:
what nats-server refuses (an unknown key in any block it checks), edged refuses with the same line;
what it accepts, edged accepts; a start failure is one [FTL] line in nats-server's words, never a
Python traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.config_cases import KNOWN_KEYS, UNKNOWN_KEYS, nats_line
from tests.support.servers import ROOT, nats_server_path

ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def run(kind: str, *args: str, cwd: Path, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    cmd = [nats_server_path()] if kind == "nats-server" else [sys.executable, "-m", "edged"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, cwd=cwd, env=ENV, timeout=timeout)


def fatal_lines(stderr: str) -> list[str]:
    """The [FTL] lines, without the `[pid] date time` prefix."""
    return [line.split("[FTL] ", 1)[1] for line in stderr.splitlines() if "[FTL] " in line]


@pytest.mark.parametrize(("text", "line"), UNKNOWN_KEYS, ids=[c[1].split(": ", 1)[1] for c in UNKNOWN_KEYS])
def test_both_refuse_an_unknown_key(tmp_path: Path, text: str, line: str) -> None:
    (tmp_path / "x.conf").write_text(text)
    ref = run("nats-server", "-t", "-c", "x.conf", cwd=tmp_path)
    ours = run("edged", "check", "-c", "x.conf", cwd=tmp_path)
    assert ref.returncode != 0 and nats_line(line) in ref.stderr.splitlines()[0], ref.stderr
    assert ours.returncode != 0 and f"edged: configuration error: {line}" in ours.stderr.splitlines(), ours.stderr
    assert "is valid" not in ours.stdout


def test_both_list_every_unknown_key(tmp_path: Path) -> None:
    (tmp_path / "x.conf").write_text("port: 4222\nhtpp_port: 8222\njetstream {\n  store_dri: /tmp/x\n}\n"
                                     "leafnodes {\n  remotes: [ { url: 'nats://127.0.0.1:7422', credz: x } ]\n}\n")
    ref = run("nats-server", "-t", "-c", "x.conf", cwd=tmp_path)
    ours = run("edged", "check", "-c", "x.conf", cwd=tmp_path)
    want = ['x.conf:2:1: unknown field "htpp_port"', 'x.conf:4:3: unknown field "store_dri"',
            'x.conf:7:46: unknown field "credz"']
    # nats-server walks a block in Go's random map order; edged in file order
    assert sorted(ln.removeprefix("nats-server: ") for ln in ref.stderr.splitlines() if ln) == sorted(want)
    assert [ln.removeprefix("edged: configuration error: ") for ln in ours.stderr.splitlines()] == want
    assert (ref.returncode, ours.returncode) == (1, 1)


def test_both_accept_known_keys_of_every_block(tmp_path: Path) -> None:
    (tmp_path / "x.conf").write_text(KNOWN_KEYS)
    ref = run("nats-server", "-t", "-c", "x.conf", cwd=tmp_path)
    ours = run("edged", "check", "-c", "x.conf", cwd=tmp_path)
    assert ref.returncode == 0, ref.stderr
    assert ours.returncode == 0 and "configuration file x.conf is valid" in ours.stdout, ours.stderr


def test_shipped_and_seed_configs_still_pass_check(tmp_path: Path) -> None:
    files = [ROOT / "edged" / "default.conf", *sorted((ROOT / "tests" / "seed_configs").glob("*.conf"))]
    for f in files:
        r = run("edged", "check", "-c", str(f), cwd=tmp_path)
        assert r.returncode == 0, f"{f}: {r.stderr}"


@pytest.mark.parametrize(("conf", "flags"), [
    ("port: 99999\n", []), ("http_port: 70000\n", []), ("listen: '127.0.0.1:65536'\n", []),
    ("", ["-p", "99999"]), ("", ["-m", "70000"]),
])
def test_a_port_out_of_range_is_refused_by_check_and_run(tmp_path: Path, conf: str, flags: list[str]) -> None:
    """nats-server -t passes these and its start fails ("invalid port"); edged refuses them when it reads
    them, so check and run agree, and run says so in one line."""
    (tmp_path / "x.conf").write_text(conf or "server_name: s\n")
    ref = run("nats-server", "-c", "x.conf", *flags, cwd=tmp_path, timeout=15)
    assert ref.returncode == 1 and "invalid port" in fatal_lines(ref.stderr)[0], ref.stderr
    for cmd in (["check"], ["run"]):
        ours = run("edged", *cmd, "-c", "x.conf", *flags, cwd=tmp_path, timeout=15)
        assert ours.returncode == 1, ours.stderr
        assert ours.stderr.count("\n") == 1 and "invalid port" in ours.stderr, ours.stderr
        assert "Traceback" not in ours.stderr and "uvloop" not in ours.stderr


@pytest.mark.parametrize("case", ["missing parent", "file in the way", "file as store"])
def test_an_unusable_store_dir_is_one_fatal_line_as_nats_server(tmp_path: Path, case: str) -> None:
    (tmp_path / "afile").write_text("")
    if case == "file as store":
        (tmp_path / "store").mkdir()
        (tmp_path / "store" / "jetstream").write_text("")
    store = {"missing parent": "/proc/no-such-dir/js", "file in the way": str(tmp_path / "afile" / "sub"),
             "file as store": str(tmp_path / "store")}[case]
    (tmp_path / "x.conf").write_text(f"port: -1\njetstream {{ store_dir: {store!r} }}\n")
    ref = run("nats-server", "-c", "x.conf", cwd=tmp_path, timeout=15)
    ours = run("edged", "run", "-c", "x.conf", cwd=tmp_path, timeout=15)
    assert (ref.returncode, ours.returncode) == (1, 1), ours.stderr
    assert fatal_lines(ours.stderr) == fatal_lines(ref.stderr) and len(fatal_lines(ref.stderr)) == 1, ours.stderr
    assert fatal_lines(ours.stderr)[0].startswith("Can't start JetStream: ")
    assert "Traceback" not in ours.stderr and "Errno" not in ours.stderr


@pytest.mark.parametrize("which", ["client", "monitor"])
def test_a_port_in_use_is_one_fatal_line_as_nats_server(tmp_path: Path, which: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        flags = ["-p", str(port)] if which == "client" else ["-p", "-1", "-m", str(port)]
        (tmp_path / "x.conf").write_text("host: 127.0.0.1\nhttp: '127.0.0.1:0'\n" if which == "monitor"
                                         else "host: 127.0.0.1\n")
        ref = run("nats-server", "-c", "x.conf", *flags, cwd=tmp_path, timeout=15)
        ours = run("edged", "run", "-c", "x.conf", *flags, cwd=tmp_path, timeout=15)
    assert (ref.returncode, ours.returncode) == (1, 1), ours.stderr
    assert fatal_lines(ours.stderr) == fatal_lines(ref.stderr) and len(fatal_lines(ref.stderr)) == 1, ours.stderr
    assert "Traceback" not in ours.stderr


def test_an_unwritable_pid_file_is_one_fatal_line_as_nats_server(tmp_path: Path) -> None:
    (tmp_path / "x.conf").write_text("port: -1\npid_file: /proc/no-such-dir/edged.pid\n")
    ref = run("nats-server", "-c", "x.conf", cwd=tmp_path, timeout=15)
    ours = run("edged", "run", "-c", "x.conf", cwd=tmp_path, timeout=15)
    assert (ref.returncode, ours.returncode) == (1, 1), ours.stderr
    assert fatal_lines(ours.stderr) == fatal_lines(ref.stderr) == [
        "Could not write pidfile: open /proc/no-such-dir/edged.pid: no such file or directory"], ours.stderr


def test_a_log_file_that_cannot_be_opened_is_one_line_as_nats_server(tmp_path: Path) -> None:
    ref = run("nats-server", "-p", "-1", "-l", "/proc/no-such-dir/x.log", cwd=tmp_path, timeout=15)
    ours = run("edged", "run", "-p", "-1", "-l", "/proc/no-such-dir/x.log", cwd=tmp_path, timeout=15)
    assert (ref.returncode, ours.returncode) == (1, 1), ours.stderr
    want = "error opening file: open /proc/no-such-dir/x.log: no such file or directory"
    for r in (ref, ours):  # `YYYY/MM/DD hh:mm:ss message`, Go's log.Fatalf
        assert r.stderr.count("\n") == 1 and r.stderr.strip().split(" ", 2)[2] == want, r.stderr
