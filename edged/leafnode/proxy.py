"""HTTP CONNECT tunnels for leafnode remotes (`remotes [ { proxy { url, username, password, timeout } } ]`).

nats-server uses the proxy for ws/wss remotes only; edged also tunnels plain TCP/TLS remotes, since edge
gateways often sit behind a corporate proxy that only lets CONNECT out.
"""

from __future__ import annotations

import asyncio
import base64
import socket
from typing import Any
from urllib.parse import unquote, urlsplit

from edged.leafnode.dialing import tcp_connect

MAX_RESPONSE_HEAD = 16 * 1024


def connect_request(target_host: str, target_port: int, username: str = "", password: str = "") -> bytes:
    """The CONNECT request bytes (pure, for tests)."""
    h = f"[{target_host}]" if ":" in target_host else target_host
    hp = f"{h}:{target_port}"
    lines = [f"CONNECT {hp} HTTP/1.1", f"Host: {hp}"]
    if username or password:
        tok = base64.b64encode(f"{username}:{password}".encode()).decode()
        lines.append(f"Proxy-Authorization: Basic {tok}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def parse_response_head(head: bytes) -> tuple[int, str]:
    """(status code, reason) of the proxy's answer; raises ValueError on garbage."""
    first = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = first.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ValueError(f"malformed proxy response {first!r}")
    return int(parts[1]), parts[2] if len(parts) > 2 else ""


async def open_tunnel(proxy: dict[str, Any], host: str, port: int, dial_timeout: float) -> socket.socket:
    """A connected non-blocking socket whose bytes reach host:port through the proxy."""
    url = str(proxy.get("url") or "")
    u = urlsplit(url if "://" in url else "http://" + url)
    if u.scheme not in ("http", ""):
        raise ValueError(f"proxy URL scheme {u.scheme!r} not supported (http only)")
    if not u.hostname:
        raise ValueError("proxy URL must specify a host")
    username = str(proxy.get("username") or (unquote(u.username) if u.username else ""))
    password = str(proxy.get("password") or (unquote(u.password) if u.password else ""))
    timeout = float(proxy.get("timeout") or 0) or max(dial_timeout, 5.0)
    loop = asyncio.get_running_loop()
    sock = await tcp_connect(u.hostname, u.port or 80, timeout)
    try:
        await asyncio.wait_for(loop.sock_sendall(sock, connect_request(host, port, username, password)), timeout)
        buf = b""
        async with asyncio.timeout(timeout):
            # read byte-wise past the header end only: anything after it already belongs to the tunnel
            while b"\r\n\r\n" not in buf:
                chunk = await loop.sock_recv(sock, 1)
                if not chunk:
                    raise ConnectionError("proxy closed the connection during CONNECT")
                buf += chunk
                if len(buf) > MAX_RESPONSE_HEAD:
                    raise ValueError("proxy response header too large")
        code, reason = parse_response_head(buf)
        if code != 200:
            raise ConnectionError(f"proxy CONNECT failed: {code} {reason}".rstrip())
        return sock
    except BaseException:
        sock.close()
        raise
