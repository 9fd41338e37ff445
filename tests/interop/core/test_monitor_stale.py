"""A client that stops answering PINGs is closed as stale and counted in /varz, by edged as by nats-server.

Both servers run as subprocesses with the same config; the client is a raw socket that connects and then
stays silent, so the server's PINGs go unanswered.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from collections.abc import Callable

import pytest

from tests.support.servers import ServerProcess, free_port, wait_port

CONFIG = 'ping_interval: "200ms"\nping_max: 1\n'


def _varz(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/varz", timeout=5) as r:
        return json.loads(r.read())


def _silent_client(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    assert s.recv(4096).startswith(b"INFO ")
    s.sendall(b'CONNECT {"verbose":false,"pedantic":false,"name":"silent"}\r\n')
    return s


def _read_until_closed(s: socket.socket, timeout: float) -> bytes:
    """Everything the server sends (its PINGs, then the -ERR) until it closes the connection."""
    got = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = s.recv(4096)
        except TimeoutError:
            break
        if not chunk:
            return got
        got += chunk
    raise AssertionError(f"connection not closed as stale within {timeout}s: {got!r}")


@pytest.mark.parametrize("kind", ["edged", "nats-server"])
def test_stale_connection_is_counted(kind: str, start_server: Callable[..., ServerProcess]) -> None:
    mon = free_port()
    srv = start_server(kind, config=CONFIG, http_port=mon)
    wait_port(mon)
    before = _varz(mon)
    assert before["stale_connections"] == 0
    s = _silent_client(srv.port)
    try:
        got = _read_until_closed(s, 10.0)
    finally:
        s.close()
    assert b"PING\r\n" in got and b"-ERR 'Stale Connection'\r\n" in got
    v = _varz(mon)
    for _ in range(50):  # the close is accounted right after the -ERR is written
        if v["stale_connections"]:
            break
        time.sleep(0.05)
        v = _varz(mon)
    assert v["stale_connections"] == 1
    assert v["stale_connection_stats"] == {"clients": 1, "routes": 0, "gateways": 0, "leafs": 0}
    with urllib.request.urlopen(f"http://127.0.0.1:{mon}/connz?state=closed", timeout=5) as r:
        closed = json.loads(r.read())["connections"]
    assert [c["reason"] for c in closed if c.get("name") == "silent"] == ["Stale Connection"]
