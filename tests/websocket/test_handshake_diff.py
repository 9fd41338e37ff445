"""The upgrade request, differential: the same raw requests to nats-server's WebSocket listener and to
edged's get the same HTTP status and the same WebSocket answer headers (refusals, origins, compression,
Nats-No-Masking), and the INFO that follows says the same about the WebSocket listener."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator

import pytest

from tests.support.servers import KINDS, ServerProcess
from tests.websocket.wsraw import KEY, Frames, Reply, frame, request, upgrade_lines, ws_server

GOOD = "http://good.example:8080"
ACCEPT = base64.b64encode(hashlib.sha1((KEY + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, tuple[ServerProcess, int]]]:
    """Each kind with compression and an allowed-origins list."""
    started = {k: ws_server(k, f'no_tls: true, compression: true, allowed_origins: ["{GOOD}", '
                               '"https://secure.example"]') for k in KINDS}
    yield started
    for srv, _ in started.values():
        srv.stop()


def both(servers: dict[str, tuple[ServerProcess, int]], build: object) -> dict[str, Reply]:
    out = {}
    for kind, (_, port) in servers.items():
        rep, sock, _ = request(port, build(port))  # type: ignore[operator]
        sock.close()
        out[kind] = rep
    return out


CASES: list[tuple[str, object, int]] = [
    ("plain", lambda p: upgrade_lines(p), 101),
    ("any path", lambda p: upgrade_lines(p, "/some/where?x=1"), 101),
    ("POST", lambda p: ["POST / HTTP/1.1"] + upgrade_lines(p)[1:], 405),
    ("no Upgrade", lambda p: upgrade_lines(p, Upgrade=""), 400),
    ("Upgrade not websocket", lambda p: upgrade_lines(p, Upgrade="h2c"), 400),
    ("no Connection", lambda p: upgrade_lines(p, Connection=""), 400),
    ("Connection keep-alive only", lambda p: upgrade_lines(p, Connection="keep-alive"), 400),
    ("Connection list", lambda p: upgrade_lines(p, Connection="keep-alive, Upgrade"), 101),
    ("no key", lambda p: upgrade_lines(p, Sec_WebSocket_Key=""), 400),
    ("short key", lambda p: upgrade_lines(p, Sec_WebSocket_Key="c2hvcnQ="), 400),
    ("version 8", lambda p: upgrade_lines(p, Sec_WebSocket_Version="8"), 400),
    ("mqtt without MQTT", lambda p: upgrade_lines(p, "/mqtt", Sec_WebSocket_Protocol="mqtt"), 404),
    ("allowed origin", lambda p: upgrade_lines(p, Origin=GOOD), 101),
    ("allowed origin, default port", lambda p: upgrade_lines(p, Origin="https://secure.example"), 101),
    ("origin other host", lambda p: upgrade_lines(p, Origin="http://evil.example:8080"), 403),
    ("origin other port", lambda p: upgrade_lines(p, Origin="http://good.example"), 403),
    ("origin other scheme", lambda p: upgrade_lines(p, Origin="https://good.example:8080"), 403),
    ("origin not a URL", lambda p: upgrade_lines(p, Origin="null"), 403),
    ("origin in Sec-WebSocket-Origin", lambda p: upgrade_lines(p, Sec_WebSocket_Origin="http://evil.example"), 403),
]


@pytest.mark.parametrize(("name", "build", "status"), CASES, ids=[c[0] for c in CASES])
def test_upgrade_status(servers: dict[str, tuple[ServerProcess, int]], name: str, build: object,
                        status: int) -> None:
    got = both(servers, build)
    assert {k: r.status for k, r in got.items()} == dict.fromkeys(KINDS, status)
    for r in got.values():
        if status == 101:
            assert r.headers["upgrade"].lower() == "websocket"
            assert r.headers["sec-websocket-accept"] == ACCEPT
        else:
            assert r.headers.get("sec-websocket-version") == "13"
            assert r.body.decode().strip() and "text/plain" in r.headers.get("content-type", "")


def test_compression_and_no_masking_answers(servers: dict[str, tuple[ServerProcess, int]]) -> None:
    got = both(servers, lambda p: upgrade_lines(p, Sec_WebSocket_Extensions="permessage-deflate; "
                                                   "client_max_window_bits", Nats_No_Masking="true"))
    ext = {k: r.headers.get("sec-websocket-extensions") for k, r in got.items()}
    assert ext == dict.fromkeys(KINDS, "permessage-deflate; server_no_context_takeover; client_no_context_takeover")
    assert {k: r.headers.get("nats-no-masking") for k, r in got.items()} == dict.fromkeys(KINDS, "true")
    plain = both(servers, lambda p: upgrade_lines(p))
    for r in plain.values():
        assert "sec-websocket-extensions" not in r.headers and "nats-no-masking" not in r.headers


def _info(port: int, **headers: str) -> dict:
    rep, sock, rest = request(port, upgrade_lines(port, **headers))
    try:
        assert rep.status == 101
        line = Frames(sock, rest).data_until(b"\r\n")
        assert line.startswith(b"INFO ")
        return json.loads(line[5:line.index(b"\r\n")])
    finally:
        sock.close()


def test_info_names_the_websocket_listener(servers: dict[str, tuple[ServerProcess, int]]) -> None:
    for kind, (_, port) in servers.items():
        info = _info(port)
        assert (info["port"], info["host"]) == (port, "0.0.0.0"), kind
        assert "tls_required" not in info and "auth_required" not in info, kind
        assert info["client_ip"] == "127.0.0.1" and info["headers"] is True, kind


def test_no_masking_granted_reads_unmasked_frames(servers: dict[str, tuple[ServerProcess, int]]) -> None:
    """A client granted Nats-No-Masking sends its frames unmasked (as a nats-server leaf does)."""
    for kind, (_, port) in servers.items():
        rep, sock, rest = request(port, upgrade_lines(port, Nats_No_Masking="true"))
        try:
            assert rep.status == 101 and rep.headers.get("nats-no-masking") == "true"
            fr = Frames(sock, rest)
            assert fr.data_until(b"\r\n").startswith(b"INFO ")
            sock.sendall(frame(2, b'CONNECT {"verbose":false}\r\nSUB x 1\r\n', mask=False))
            sock.sendall(frame(2, b"PUB x 2\r\nhi\r\nPING\r\n", mask=False))
            got = fr.data_until(b"PONG\r\n")
            assert b"MSG x 1 2\r\nhi\r\n" in got, (kind, got)
        finally:
            sock.close()


def test_same_origin() -> None:
    for kind in KINDS:
        srv, port = ws_server(kind, "no_tls: true, same_origin: true")
        try:
            ok, s1, _ = request(port, upgrade_lines(port, Origin=f"http://127.0.0.1:{port}"))
            bad, s2, _ = request(port, upgrade_lines(port, Origin="http://127.0.0.1:1"))
            https, s3, _ = request(port, upgrade_lines(port, Origin=f"https://127.0.0.1:{port}"))
            none, s4, _ = request(port, upgrade_lines(port))
            for s in (s1, s2, s3, s4):
                s.close()
        finally:
            srv.stop()
        assert (ok.status, bad.status, https.status, none.status) == (101, 403, 403, 101), kind
