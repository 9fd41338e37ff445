"""Where a remote points and how edged reaches it: leafnode URLs, the nonce signature, the TCP dial."""

from __future__ import annotations

import asyncio
import base64
import socket
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import nkeys

DEFAULT_LEAF_PORT = 7422


@dataclass
class LeafURL:
    scheme: str  # nats, nats-leaf, tls, ws, wss
    host: str
    port: int
    user: str = ""
    password: str | None = None
    path: str = ""

    @property
    def websocket(self) -> bool:
        return self.scheme in ("ws", "wss")

    @property
    def hostport(self) -> str:
        h = f"[{self.host}]" if ":" in self.host else self.host
        return f"{h}:{self.port}"

    def redacted(self) -> str:
        cred = f"{self.user}:xxxxx@" if self.user else ""
        return f"{self.scheme}://{cred}{self.hostport}{self.path}"


def parse_leaf_url(url: str) -> LeafURL:
    if "://" not in url:
        url = "nats-leaf://" + url
    u = urlsplit(url)
    scheme = u.scheme.lower()
    if scheme not in ("nats", "nats-leaf", "tls", "ws", "wss"):
        raise ValueError(f"leafnode remote URL scheme {scheme!r} not supported (nats, nats-leaf, tls, ws, wss)")
    host = u.hostname or ""
    if not host:
        raise ValueError(f"leafnode remote URL {url!r} has no host")
    port = u.port
    if port is None:
        port = {"ws": 80, "wss": 443}.get(scheme, DEFAULT_LEAF_PORT)
    user = unquote(u.username) if u.username else ""
    password = unquote(u.password) if u.password is not None else None
    return LeafURL(scheme, host, port, user, password, u.path.rstrip("/"))


def sign_nonce(seed: bytes, nonce: str) -> tuple[str, str]:
    """(public key, signature) — the signature is over the nonce's ASCII bytes, base64 RawURL (§9.3)."""

    kp = nkeys.from_seed(bytearray(seed))
    try:
        sig = kp.sign(nonce.encode())
        pub = kp.public_key.decode()
    finally:
        kp.wipe()
    return pub, base64.urlsafe_b64encode(sig).rstrip(b"=").decode()


def is_ip(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
        return True
    except OSError:
        return False


async def tcp_connect(host: str, port: int, timeout: float) -> socket.socket:
    loop = asyncio.get_running_loop()
    infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout)
    last: Exception | None = None
    for family, stype, proto, _, addr in infos:
        sock = socket.socket(family, stype, proto)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, addr), timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except (TimeoutError, OSError) as e:
            sock.close()
            last = e if isinstance(e, OSError) else TimeoutError(f"dial timeout after {timeout}s")
    raise last or OSError(f"cannot resolve {host}")
