"""The websocket {} block, differential: what nats-server refuses to start with (no TLS without no_tls, bad
allowed origins, no_auth_user without that user, a block user beside users, jwt_cookie without operators,
reserved headers), edged refuses with the same text; what it reads, edged reads (every key of the block)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from edged.settings.config import options_from_text
from tests.support.servers import ROOT, nats_server_path

ENV = dict(os.environ, PYTHONPATH=str(ROOT))
USERS = "authorization { users: [ {user: a, password: b} ] }\n"

REFUSED = [
    ("websocket { port: 8080 }", "websocket requires TLS configuration"),
    ('websocket { port: 8080, no_tls: true, allowed_origins: ["ftp://x"] }',
     'unable to parse allowed origin "ftp://x": allowed origins must be absolute URLs with http or https scheme'),
    ('websocket { port: 8080, no_tls: true, allowed_origins: ["http://"] }',
     'unable to parse allowed origin "http://": host is required'),
    ('websocket { port: 8080, no_tls: true, allowed_origins: ["nope"] }',
     'unable to parse allowed origin: parse "nope": invalid URI for request'),
    ("websocket { port: 8080, no_tls: true, no_auth_user: x }",
     'no_auth_user: "x" present, but users/nkeys are not defined'),
    (USERS + "websocket { port: 8080, no_tls: true, no_auth_user: x }",
     'no_auth_user: "x" not present as user or nkey in authorization block or account configuration'),
    (USERS + "websocket { port: 8080, no_tls: true, authorization { user: w, password: p } }",
     "websocket authentication username not compatible with presence of users/nkeys"),
    (USERS + "websocket { port: 8080, no_tls: true, authorization { token: t } }",
     "websocket authentication token not compatible with presence of users/nkeys"),
    ("accounts { A { users: [ {user: a, password: b} ] } }\n"
     "websocket { port: 8080, no_tls: true, authorization { user: w, password: p } }",
     "websocket authentication username not compatible with presence of users/nkeys"),
    ("websocket { port: 8080, no_tls: true, jwt_cookie: jwt }",
     'trusted operators or trusted keys configuration is required for JWT authentication via cookie "jwt"'),
    ("websocket { port: 8080, no_tls: true, headers { Upgrade: x } }",
     'websocket: invalid header "Upgrade" not allowed'),
    ("websocket { port: 8080, no_tls: true, headers { Sec-WebSocket-X: x } }",
     'websocket: invalid header "Sec-WebSocket-X", "Sec-WebSocket-" prefix not allowed'),
]


def start(kind: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    cmd = [nats_server_path()] if kind == "nats-server" else [sys.executable, "-m", "edged", "run"]
    return subprocess.run([*cmd, "-a", "127.0.0.1", "-p", "-1", "-c", "x.conf"], capture_output=True, text=True,
                          cwd=tmp, env=ENV, timeout=30)


@pytest.mark.parametrize(("text", "message"), REFUSED, ids=[r[1][:60] for r in REFUSED])
def test_both_refuse_to_start(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "x.conf").write_text(text + "\n")
    ref, ours = start("nats-server", tmp_path), start("edged", tmp_path)
    assert ref.returncode != 0 and f"nats-server: {message}" in ref.stderr, ref.stderr
    assert ours.returncode != 0 and f"edged: configuration error: x.conf: {message}" in ours.stderr, ours.stderr


def test_header_value_must_be_a_string(tmp_path: Path) -> None:
    (tmp_path / "x.conf").write_text("websocket { port: 8080, no_tls: true, headers { X: 1 } }\n")
    ref, ours = start("nats-server", tmp_path), start("edged", tmp_path)
    want = "error parsing header key X: unsupported type int64"
    assert ref.returncode != 0 and want in ref.stderr and ours.returncode != 0 and want in ours.stderr


def test_every_key_is_read() -> None:
    o = options_from_text("""
websocket {
  listen: "127.0.0.1:8443"
  advertise: "ws.example:443"
  tls { cert_file: c, key_file: k }
  compression: true
  same_origin: true
  allowed_origins: [ "https://a.example", "http://b.example:8080" ]
  handshake_timeout: "3s"
  jwt_cookie: j
  user_cookie: u
  pass_cookie: p
  token_cookie: t
  no_auth_user: n
  authorization { user: w, password: pw, timeout: 1.5 }
  headers { X-A: "1" }
  ping_interval: "30s"
}
""")
    w = o.websocket
    assert w is not None and o.warnings == []
    assert (w.host, w.port, w.advertise, w.no_tls, w.compression, w.same_origin) == (
        "127.0.0.1", 8443, "ws.example:443", False, True, True)
    assert w.tls is not None and w.allowed_origins == ["https://a.example", "http://b.example:8080"]
    assert (w.handshake_timeout, w.jwt_cookie, w.user_cookie, w.pass_cookie, w.token_cookie) == (3, "j", "u", "p", "t")
    assert (w.no_auth_user, w.username, w.password, w.auth_timeout, w.headers, w.ping_interval) == (
        "n", "w", "pw", 1.5, {"X-A": "1"}, 30)
