"""edged under a real notify socket, as systemd runs it: READY=1 once it accepts clients (with a STATUS
line), WATCHDOG=1 at half WATCHDOG_USEC, RELOADING=1 (with MONOTONIC_USEC) and READY=1 around a
SIGHUP reload, STOPPING=1 on SIGTERM. Both senders: the notify protocol written by edged itself (the
venv has no python3-systemd) and Debian's python3-systemd under Debian's /usr/bin/python3."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request

import nats
import nats.errors
import nkeys
import pytest
from nats.js.api import StreamSource

from edged.security.creds import write_creds_file
from edged.security.jwt import encode, new_keypair
from tests.packaging.notifysock import NotifySocket
from tests.support.aio import run
from tests.support.servers import ROOT, ServerProcess, free_port, wait_port

CONF = """
jetstream { store_dir: "./js" }
"""


def _life_cycle(ns: NotifySocket, port: int, send: callable) -> None:  # type: ignore[valid-type]
    """The sequence systemd sees from start to stop."""
    ready = ns.wait_for("READY", "1")
    assert ready["STATUS"].startswith("ready: 0 clients"), ready
    assert int(ready["MAINPID"]) > 0
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:  # READY=1 came after listening
        assert s.recv(4096).startswith(b"INFO ")
    ns.wait_for("WATCHDOG", "1")
    ns.wait_for("WATCHDOG", "1")  # again: a ping every half WATCHDOG_USEC, not one
    send(signal.SIGHUP)
    reloading = ns.wait_for("RELOADING", "1")
    usec = int(reloading["MONOTONIC_USEC"])
    assert abs(usec - time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000) < 60_000_000
    assert "READY" not in reloading
    again = ns.wait_for("READY", "1")
    assert again["STATUS"].startswith("ready:")
    send(signal.SIGTERM)
    stopping = ns.wait_for("STOPPING", "1")
    assert stopping["STATUS"].startswith("stopping")


@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_edged_speaks_the_notify_protocol(start_server, abstract: bool) -> None:  # type: ignore[no-untyped-def]
    ns = NotifySocket(tempfile.mkdtemp(prefix="notify-"), abstract=abstract)
    try:
        env = {"NOTIFY_SOCKET": ns.env_value, "WATCHDOG_USEC": "600000", "WATCHDOG_PID": ""}
        srv = start_server("edged", config=CONF, env=env)
        _life_cycle(ns, srv.port, srv.signal)
        assert srv.proc is not None and srv.proc.wait(30) == 0
        assert "through socket" in srv.log_tail()
    finally:
        ns.close()


def test_watchdog_meant_for_another_pid_is_not_fed(start_server) -> None:  # type: ignore[no-untyped-def]
    ns = NotifySocket(tempfile.mkdtemp(prefix="notify-"))
    try:
        env = {"NOTIFY_SOCKET": ns.env_value, "WATCHDOG_USEC": "200000", "WATCHDOG_PID": "1"}
        srv = start_server("edged", config=CONF, env=env)
        ns.wait_for("READY", "1")
        srv.signal(signal.SIGHUP)  # a round trip through the loop: pings would have come meanwhile
        ns.wait_for("READY", "1")
        srv.signal(signal.SIGTERM)
        ns.wait_for("STOPPING", "1")
        assert not [m for m in ns.messages if "WATCHDOG" in m]
    finally:
        ns.close()


def test_status_and_healthz_report_the_link_doctor(start_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A remote that is down shows in STATUS. Creds that expire in two days, once a real hub (nats-server)
    took them, show in STATUS and in /healthz's `warnings`, while /healthz stays 200 (a warning is no
    reason to restart)."""
    ns = NotifySocket(str(tmp_path))
    dead, leaf_port = free_port(), free_port()
    start_server("nats-server", config=f"leafnodes {{ port: {leaf_port} }}")
    creds = str(tmp_path / "edge.creds")
    account = new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    user = new_keypair(nkeys.PREFIX_BYTE_USER)
    claims = {"sub": user.public_key.decode(), "exp": int(time.time()) + 2 * 86400 + 600, "nats": {"type": "user"}}
    write_creds_file(creds, encode(claims, account), user.seed)
    conf = 'jetstream { store_dir: "./js", domain: "edge" }\n' + (f'leafnodes {{ remotes: [ {{ url: "nats://127.0.0.1:{dead}" }}, '
                   f'{{ url: "nats://127.0.0.1:{leaf_port}", credentials: "{creds}" }} ] }}\n')
    http = free_port()
    try:
        srv = start_server("edged", config=conf, http_port=http, env={"NOTIFY_SOCKET": ns.env_value})
        ns.wait_for("READY", "1")
        status = ns.wait_status(lambda s: "WARNING" in s)
        assert f"leaf 127.0.0.1:{dead} down" in status, status
        assert f"leaf 127.0.0.1:{leaf_port} up" in status, status
        assert re.search(rf"WARNING: leafnode credentials {re.escape(creds)} .*expire in 2\.0 days", status), status
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/healthz", timeout=5) as r:
            assert r.status == 200
            doc = json.loads(r.read())
        assert doc["status"] == "ok" and len(doc["warnings"]) == 1, doc
        assert creds in doc["warnings"][0] and "expire in 2.0 days" in doc["warnings"][0], doc
        srv.signal(signal.SIGTERM)
        ns.wait_for("STOPPING", "1")
    finally:
        ns.close()


def test_link_doctor_reports_a_silent_link(start_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A leafnode link to a real hub that carries no message for `silent_after` is named in STATUS and
    /healthz (200); a message over it clears the finding."""
    ns = NotifySocket(str(tmp_path))
    leaf_port, http = free_port(), free_port()
    hub = start_server("nats-server", config=f"leafnodes {{ port: {leaf_port} }}")
    conf = (f'leafnodes {{ remotes: [ {{ url: "nats://127.0.0.1:{leaf_port}" }} ] }}\n'
            'edged { doctor { silent_after: 1s } }\n')
    try:
        srv = start_server("edged", config=conf, http_port=http, env={"NOTIFY_SOCKET": ns.env_value})
        ns.wait_for("READY", "1")
        silent = f"leaf 127.0.0.1:{leaf_port} connected but silent for"
        status = ns.wait_status(lambda s: silent in s)
        assert f"leaf 127.0.0.1:{leaf_port} up" in status, status
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/healthz", timeout=5) as r:
            assert r.status == 200 and any(silent in w for w in json.loads(r.read())["warnings"])

        async def traffic() -> None:  # a subscriber on the hub, a publisher on edged: LMSGs cross the link
            hub_nc = await nats.connect(hub.url)
            edge_nc = await nats.connect(srv.url)
            try:
                sub = await hub_nc.subscribe("doctor.>")
                await hub_nc.flush()
                for _ in range(100):
                    await edge_nc.publish("doctor.x", b"hi")
                    await edge_nc.flush()
                    try:
                        await sub.next_msg(timeout=0.2)
                        return
                    except nats.errors.TimeoutError:
                        continue
                raise AssertionError("no message crossed the link")
            finally:
                await edge_nc.close()
                await hub_nc.close()

        run(traffic())
        ns.wait_status(lambda s: silent not in s and "up" in s)  # the link carried something: no finding
        srv.signal(signal.SIGTERM)
        ns.wait_for("STOPPING", "1")
    finally:
        ns.close()


def test_status_line_shows_mirror_lag(start_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A mirror's lag appears in STATUS (from the same figures as /jsz's edged_backlog)."""
    ns = NotifySocket(str(tmp_path))
    try:
        srv = start_server("edged", config=CONF, env={"NOTIFY_SOCKET": ns.env_value})
        ns.wait_for("READY", "1")

        async def streams() -> None:
            nc = await nats.connect(srv.url)
            try:
                js = nc.jetstream()
                await js.add_stream(name="ORIG", subjects=["orig.>"])
                await js.add_stream(name="COPY", mirror=StreamSource(name="ORIG"))
                for i in range(3):
                    await js.publish(f"orig.{i}", b"x")
            finally:
                await nc.close()

        run(streams())
        status = ns.wait_status(lambda s: "mirrors 0 msgs behind" in s)
        assert status.startswith("ready: "), status
        srv.signal(signal.SIGTERM)
        ns.wait_for("STOPPING", "1")
    finally:
        ns.close()


def _debian_python_fits() -> bool:
    """Debian's python3 has python3-systemd and is this venv's CPython minor version (the venv's compiled
    dependencies must load in it)."""
    if not os.path.exists("/usr/bin/python3"):
        return False
    probe = f"import sys, systemd.daemon; sys.exit(sys.version_info[:2] != {tuple(sys.version_info[:2])})"
    return subprocess.run(["/usr/bin/python3", "-c", probe], capture_output=True).returncode == 0


@pytest.mark.skipif(not _debian_python_fits(),
                    reason="needs Debian's /usr/bin/python3 with python3-systemd (apt install python3-systemd), "
                           "of this venv's Python version")
def test_python3_systemd_sender_under_debian_python(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The daemon on Debian's interpreter, edged's dependencies from this venv (same CPython ABI), and
    python3-systemd from Debian: the sender `systemd.daemon.notify` is the one used."""
    ns = NotifySocket(str(tmp_path))
    port = free_port()
    srv = ServerProcess("edged", config=CONF, port=port)
    conf = os.path.join(srv.workdir, "server.conf")
    with open(conf, "w") as f:
        f.write(CONF)
    env = dict(os.environ, NOTIFY_SOCKET=ns.env_value, WATCHDOG_USEC="600000",
               PYTHONPATH=os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]]))
    log_path = os.path.join(srv.workdir, "server.log")
    with open(log_path, "wb") as log:
        p = subprocess.Popen(["/usr/bin/python3", "-m", "edged", "run", "-a", "127.0.0.1", "-p", str(port),
                              "-c", conf], cwd=srv.workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_port(port, p)
        _life_cycle(ns, port, p.send_signal)
        assert p.wait(30) == 0
        with open(log_path) as f:
            assert "through python3-systemd" in f.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
        ns.close()
