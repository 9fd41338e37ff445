"""Connection limits and liveness, differential over raw sockets: the same config on nats-server and edged,
the same bytes back (server PINGs aside) and the same close."""

from __future__ import annotations

import socket
import time

import pytest

from tests.support.servers import KINDS, ServerProcess


def read_until_closed(s: socket.socket, limit: float) -> tuple[bytes, bool]:
    out = b""
    deadline = time.monotonic() + limit
    s.settimeout(0.2)
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return out, True
        if not chunk:
            return out, True
        out += chunk
    return out, False


def open_client(port: int, connect: bytes = b"CONNECT {\"verbose\":false}\r\n") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=2)
    buf = b""
    while b"\r\n" not in buf:
        buf += s.recv(4096)
    if connect:
        s.sendall(connect + b"PING\r\n")
        got = b""
        while b"PONG\r\n" not in got:
            got += s.recv(4096)
    return s


def server_errs(data: bytes) -> list[bytes]:
    return [line for line in data.split(b"\r\n") if line.startswith(b"-ERR")]


@pytest.mark.parametrize("kind", KINDS)
def test_max_connections(kind: str) -> None:
    with ServerProcess(kind, config="max_connections: 2\n") as srv:
        a, b = open_client(srv.port), open_client(srv.port)
        c = socket.create_connection(("127.0.0.1", srv.port), timeout=2)
        data, closed = read_until_closed(c, 3)
        assert closed
        assert server_errs(data) == [b"-ERR 'maximum connections exceeded'"], data
        a.sendall(b"PING\r\n")
        assert a.recv(100) == b"PONG\r\n"  # the others keep working
        for s in (a, b, c):
            s.close()


@pytest.mark.parametrize("kind", KINDS)
def test_max_subscriptions(kind: str) -> None:
    with ServerProcess(kind, config="max_subscriptions: 2\n") as srv:
        s = open_client(srv.port)
        s.sendall(b"SUB a 1\r\nSUB b 2\r\nSUB c 3\r\nPING\r\n")
        data, closed = read_until_closed(s, 1.0)
        assert server_errs(data) == [b"-ERR 'maximum subscriptions exceeded'"], data
        s.close()


@pytest.mark.parametrize("kind", KINDS)
def test_stale_connection_after_max_pings_out(kind: str) -> None:
    with ServerProcess(kind, config='ping_interval: "300ms"\nping_max: 2\n') as srv:
        s = open_client(srv.port)
        started = time.monotonic()
        data, closed = read_until_closed(s, 5)
        took = time.monotonic() - started
        assert closed, data
        assert data.count(b"PING\r\n") == 2, data
        assert server_errs(data) == [b"-ERR 'Stale Connection'"], data
        assert 0.6 < took < 3.0
        s.close()


@pytest.mark.parametrize("kind", KINDS)
def test_auth_timeout(kind: str) -> None:
    conf = "authorization { user: a, password: b, timeout: 0.5 }\n"
    with ServerProcess(kind, config=conf) as srv:
        s = open_client(srv.port, connect=b"")
        data, closed = read_until_closed(s, 4)
        assert closed
        assert server_errs(data) == [b"-ERR 'Authentication Timeout'"], data
        s.close()


@pytest.mark.parametrize("kind", KINDS)
def test_answered_pings_keep_the_connection(kind: str) -> None:
    with ServerProcess(kind, config='ping_interval: "200ms"\nping_max: 1\n') as srv:
        s = open_client(srv.port)
        s.settimeout(0.2)
        deadline = time.monotonic() + 1.5
        pings = 0
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(4096)
            except TimeoutError:
                continue
            assert chunk, "server closed a live connection"
            n = chunk.count(b"PING\r\n")
            pings += n
            s.sendall(b"PONG\r\n" * n)
        s.sendall(b"PING\r\n")
        s.settimeout(2)
        buf = b""
        while b"PONG" not in buf:  # the server's own PINGs may come first
            chunk = s.recv(4096)
            assert chunk, "server closed a live connection"
            buf += chunk
        assert pings >= 3
        s.close()
