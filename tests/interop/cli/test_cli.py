"""The `edged` command as a user runs it: version, check, nats-server's flags over a config file, --signal."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nats
import pytest

from edged import API_LEVEL, SERVER_VERSION, __version__
from tests.support.servers import ROOT, ServerProcess, free_port, nats_server_path, wait_port

ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def edged(*args: str, cwd: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edged", *args], capture_output=True, text=True, cwd=cwd,
                          env=ENV, timeout=timeout)


@contextmanager
def running(args: list[str], port: int, cwd: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`python -m edged ARGS` in `cwd`, logging to cwd/edged.log, stopped (SIGTERM, then SIGKILL) on exit."""
    with open(cwd / "edged.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "edged", *args], cwd=cwd, env=ENV, stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        wait_port(port, proc, 15)
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def wait_for_log(path: Path, text: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in path.read_text(errors="replace"):
            return
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not logged in {timeout}s:\n{path.read_text(errors='replace')[-2000:]}")


async def server_info(url: str, **kw: Any) -> dict[str, Any]:
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=3, **kw)
    try:
        return dict(nc._server_info)
    finally:
        await nc.close()


async def connect_error(url: str, **kw: Any) -> str:
    try:
        await server_info(url, **kw)
    except Exception as e:  # nats-py raises several error types for a refused connect
        return str(e) or type(e).__name__
    return ""


# ------------------------------------------------------------------------------------ version and check


@pytest.mark.parametrize("arg", ["--version", "-v", "-version", "version"])
def test_version(arg: str) -> None:
    """nats-server's own `--version` line first (what tools that launch a nats-server parse), then edged's."""
    r = edged(arg)
    assert (r.returncode, r.stdout) == (0, f"nats-server: v{SERVER_VERSION}\nedged: v{__version__} "
                                           f"(JetStream API level {API_LEVEL})\n")
    ref = subprocess.run([nats_server_path(), "--version"], capture_output=True, text=True, timeout=10)
    assert re.fullmatch(r"nats-server: v\d+\.\d+\.\d+\n", ref.stdout)  # the form the first line copies
    assert re.fullmatch(r"nats-server: v\d+\.\d+\.\d+", r.stdout.splitlines()[0])


def test_check_good_and_bad(tmp_path: Path) -> None:
    good = tmp_path / "good.conf"
    good.write_text("port: 4999\ncluster { port: 6222 }\n")
    r = edged("check", "-c", str(good))
    assert r.returncode == 0, r.stderr
    assert "is valid" in r.stdout
    assert f"warning: {good}:2:1: cluster is not supported" in r.stderr  # named, not dropped
    bad = tmp_path / "bad.conf"
    bad.write_text("port: 4999\nauthorization {\n  users: [ {user: a, password: b} ]\n  token: x\n}\n")
    r = edged("check", "-c", str(bad))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and f"{bad}:2:1: " in r.stderr and "token" in r.stderr
    r = edged("run", "-c", str(bad))  # run refuses the same file the same way, before listening
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and f"{bad}:2:1: " in r.stderr
    r = edged("check", "-c", str(tmp_path / "missing.conf"))
    assert r.returncode == 1 and "missing.conf" in r.stderr
    assert edged("-t", "-c", str(good)).returncode == 0
    assert edged("-t", "-c", str(bad)).returncode == 1
    r = edged("check")
    assert r.returncode == 1 and "must specify [-c, --config]" in r.stderr


def test_check_applies_flags_and_reports_unsupported_ones(tmp_path: Path) -> None:
    good = tmp_path / "good.conf"
    good.write_text("port: 4999\n")
    r = edged("check", "-c", str(good), "--cluster", "nats://0.0.0.0:6222", "-ms", "8443", "--routes=nats://h:1")
    assert r.returncode == 0, r.stderr
    assert "--cluster is not supported" in r.stderr and "--https_port" in r.stderr and "--routes" in r.stderr
    r = edged("check", "-c", str(good), "--tlsverify")
    assert r.returncode == 1 and "TLS Server certificate must be present and valid" in r.stderr
    r = edged("check", "-c", str(good), "-n", "two words")
    assert r.returncode == 1 and "server name can not contain spaces" in r.stderr


@pytest.mark.parametrize("args,message", [
    (["--port", "abc"], "invalid int value: 'abc'"),
    (["-js=maybe"], "invalid boolean value 'maybe'"),
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
])
def test_bad_flags_exit_1_with_one_line(args: list[str], message: str) -> None:
    r = edged(*args)
    assert r.returncode == 1 and message in r.stderr and r.stderr.count("\n") == 1


def test_help_lists_nats_server_flags() -> None:
    r = edged("-h")
    assert r.returncode == 0
    for f in ("--config", "--port", "--addr", "--http_port", "--user", "--pass", "--auth", "-js, --jetstream",
              "--store_dir", "--tlscert", "-DV", "--signal", "--pid", "--log"):
        assert f in r.stdout, f


# ------------------------------------------------------------------------------------------ run


def test_default_conf_runs_jetstream_in_var_of_the_working_directory(tmp_path: Path) -> None:
    """`make run` uses edged/default.conf from the repo root: JetStream must land in ./var of the cwd."""
    default = ROOT / "edged" / "default.conf"
    r = edged("check", "-c", str(default))
    assert (r.returncode, r.stderr) == (0, "")  # valid, and nothing in it is ignored
    ref = subprocess.run([nats_server_path(), "-t", "-c", str(default)], capture_output=True, timeout=30)
    assert ref.returncode == 0  # nats-server reads the same file
    port, http = free_port(), free_port()
    with running(["run", "-c", str(ROOT / "edged" / "default.conf"), "-a", "127.0.0.1", "-p", str(port),
                  "-m", str(http)], port, tmp_path):
        async def main() -> dict[str, Any]:
            nc = await nats.connect(f"nats://127.0.0.1:{port}")
            try:
                return (await nc.jetstream().account_info()).as_dict()  # type: ignore[no-any-return]
            finally:
                await nc.close()

        assert "limits" in asyncio.run(main())
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/varz", timeout=5) as r:
            assert json.load(r)["port"] == port
        assert (tmp_path / "var" / "jetstream").is_dir()


def test_flags_override_the_config(tmp_path: Path) -> None:
    conf = tmp_path / "e.conf"
    conf.write_text(f"port: {free_port()}\nserver_name: from-file\nauthorization {{ user: a, password: b }}\n")
    p = ServerProcess("edged", ["-c", str(conf), "-n", "from-flag", "--user", "u", "--pass", "p"])
    with p:
        assert asyncio.run(server_info(f"nats://u:p@127.0.0.1:{p.port}"))["server_name"] == "from-flag"
        assert "Authorization" in asyncio.run(connect_error(f"nats://a:b@127.0.0.1:{p.port}"))


def test_go_style_flags(tmp_path: Path) -> None:
    """nats-server's Go flags: single-dash long names, `-name=value`, `-js`, `-sd`, `-DV`."""
    port = free_port()
    args = [f"-port={port}", "-addr", "127.0.0.1", "-js", "-sd", str(tmp_path / "store"), "-DV", "-name=go-style",
            "-auth", "s3cret"]
    with running(args, port, tmp_path):
        info = asyncio.run(server_info(f"nats://127.0.0.1:{port}", token="s3cret"))
        assert (info["server_name"], info.get("jetstream")) == ("go-style", True)
        wait_for_log(tmp_path / "edged.log", "[TRC]")
    assert (tmp_path / "store" / "jetstream").is_dir()


def test_tls_false_flag_removes_the_config_tls_block(tmp_path: Path) -> None:
    conf = tmp_path / "tls.conf"
    conf.write_text("tls { cert_file: /nonexistent/cert.pem, key_file: /nonexistent/key.pem }\n")
    assert edged("check", "-c", str(conf)).returncode == 1  # the block alone is refused (no such files)
    p = ServerProcess("edged", ["-c", str(conf), "-tls=false"])
    with p:
        assert "tls_required" not in asyncio.run(server_info(p.url))


# ------------------------------------------------------------------------------------------- signals


def test_signal_reload_keeps_flags_and_stop_kills(tmp_path: Path) -> None:
    pid_file = tmp_path / "edged.pid"
    conf = tmp_path / "e.conf"
    conf.write_text("max_payload: 1MB\nauthorization { user: a, password: b }\n")
    port = free_port()
    with running(["run", "-a", "127.0.0.1", "-p", str(port), "-c", str(conf), "-P", str(pid_file),
                  "--user", "u", "--pass", "p"], port, tmp_path) as proc:
        assert int(pid_file.read_text()) == proc.pid
        url = f"nats://u:p@127.0.0.1:{port}"
        assert asyncio.run(server_info(url))["max_payload"] == 1024 * 1024
        conf.write_text("max_payload: 512KB\nauthorization { user: a2, password: b2 }\n")
        r = edged("--signal", f"reload={pid_file}")
        assert (r.returncode, r.stderr) == (0, "")
        wait_for_log(tmp_path / "edged.log", "Reloaded server configuration")
        # the file's new settings apply; the command-line user still wins over the file's, as in nats-server
        assert asyncio.run(server_info(url))["max_payload"] == 512 * 1024
        assert "Authorization" in asyncio.run(connect_error(f"nats://a2:b2@127.0.0.1:{port}"))
        r = edged("--signal", "stop", "-P", str(pid_file))  # nats-server's stop is SIGKILL
        assert r.returncode == 0, r.stderr
        assert proc.wait(10) == -signal.SIGKILL


def test_signal_term_with_pid_and_with_the_config_pid_file(tmp_path: Path) -> None:
    pid_file = tmp_path / "edged.pid"
    conf = tmp_path / "e.conf"
    conf.write_text(f"pid_file: {pid_file}\n")
    port = free_port()
    with running(["-a", "127.0.0.1", "-p", str(port), "-c", str(conf)], port, tmp_path) as proc:
        r = edged("--signal", "ldm", "-c", str(conf))  # no pid given: the config's pid_file
        assert r.returncode == 0, r.stderr
        wait_for_log(tmp_path / "edged.log", "lame duck")
        r = edged("-sl", f"term={proc.pid}")
        assert r.returncode == 0, r.stderr
        assert proc.wait(15) == 0
    assert not pid_file.exists()  # removed at a clean shutdown


@pytest.mark.parametrize("args,message", [
    (["--signal", "bogus=1"], 'unknown signal "bogus"'),
    (["--signal", "reload"], "--signal needs a pid"),
    (["--signal", "reload=1=2"], "invalid signal parameters"),
    (["--signal", "reload=/nonexistent/edged.pid"], "invalid pid: /nonexistent/edged.pid"),
])
def test_signal_errors(args: list[str], message: str) -> None:
    r = edged(*args)
    assert r.returncode == 1 and message in r.stderr
