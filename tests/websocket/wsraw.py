"""A bare WebSocket peer on a blocking socket, for tests that need what a library client never sends
(refused upgrades, unmasked or malformed frames): requests and frames go out exactly as given, and what
comes back is read as HTTP and frames. Also the servers with a WebSocket listener."""

from __future__ import annotations

import base64
import os
import socket
import ssl
import struct
import zlib
from dataclasses import dataclass, field

from tests.support.servers import ServerProcess, free_port, wait_port

KEY = base64.b64encode(b"0123456789abcdef").decode()


def ws_server(kind: str, block: str = "no_tls: true", extra: str = "", args: list[str] | None = None,
              http: bool = False) -> tuple[ServerProcess, int]:
    """`kind` with `websocket { port: <free>, <block> }` (started; the caller stops it) and that port."""
    wsp = free_port()
    srv = ServerProcess(kind, args=args, config=f"websocket {{ port: {wsp}, {block} }}\n{extra}",
                        http_port=free_port() if http else None)
    srv.start()
    try:
        wait_port(wsp)
    except Exception:
        srv.stop()
        raise
    return srv, wsp


@dataclass
class Reply:
    status: int
    headers: dict[str, str] = field(default_factory=dict)  # lower-cased names, last value
    body: bytes = b""


def request(port: int, lines: list[str], tls: ssl.SSLContext | None = None,
            extra: bytes = b"") -> tuple[Reply, socket.socket, bytes]:
    """Send a raw HTTP request (its lines, without the empty line), return the answer's head, the socket
    (still open after a 101) and the bytes that followed the head."""
    sock: socket.socket = socket.create_connection(("127.0.0.1", port), timeout=5)
    if tls is not None:
        sock = tls.wrap_socket(sock, server_hostname="127.0.0.1")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + extra)
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = sock.recv(65536)
        if not d:
            break
        buf += d
    head, _, rest = buf.partition(b"\r\n\r\n")
    status_line, *hl = head.decode("latin-1").split("\r\n")
    parts = status_line.split(" ")
    rep = Reply(int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0)
    for ln in hl:
        k, _, v = ln.partition(":")
        rep.headers[k.strip().lower()] = v.strip()
    if rep.status != 101:
        n = int(rep.headers.get("content-length", "0") or 0)
        while len(rest) < n:
            d = sock.recv(65536)
            if not d:
                break
            rest += d
        rep.body = rest
    return rep, sock, rest


def upgrade_lines(port: int, path: str = "/", **headers: str) -> list[str]:
    """A valid upgrade request; a header given as "" is left out, `_` in names stands for `-`."""
    base = {"Host": f"127.0.0.1:{port}", "Upgrade": "websocket", "Connection": "Upgrade",
            "Sec-WebSocket-Key": KEY, "Sec-WebSocket-Version": "13"}
    for k, v in headers.items():
        base[k.replace("_", "-")] = v
    return [f"GET {path} HTTP/1.1"] + [f"{k}: {v}" for k, v in base.items() if v != ""]


def frame(opcode: int, payload: bytes, mask: bool = True, fin: bool = True, rsv: int = 0,
          length: int | None = None) -> bytes:
    """One client frame, built by hand (`length` overrides the length field)."""
    b0 = (0x80 if fin else 0) | rsv | opcode
    n = len(payload) if length is None else length
    mbit = 0x80 if mask else 0
    if n < 126:
        head = bytes((b0, mbit | n))
    elif n < 65536:
        head = struct.pack("!BBH", b0, mbit | 126, n)
    else:
        head = struct.pack("!BBQ", b0, mbit | 127, n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(c ^ key[i % 4] for i, c in enumerate(payload))


def deflate(data: bytes) -> bytes:
    c = zlib.compressobj(1, zlib.DEFLATED, -15)
    out = c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)
    return out[:-4]


class Frames:
    """Server frames read off the socket: (opcode, rsv1, payload), decompressed when rsv1 is set."""

    def __init__(self, sock: socket.socket, rest: bytes = b"") -> None:
        self.sock = sock
        self.buf = rest

    def _need(self, n: int) -> bool:
        while len(self.buf) < n:
            try:
                d = self.sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                return False
            if not d:
                return False
            self.buf += d
        return True

    def next(self, raw: bool = False) -> tuple[int, bool, bytes] | None:
        if not self._need(2):
            return None
        b0, b1 = self.buf[0], self.buf[1]
        n, pos = b1 & 0x7F, 2
        if n == 126:
            if not self._need(4):
                return None
            n, pos = struct.unpack("!H", self.buf[2:4])[0], 4
        elif n == 127:
            if not self._need(10):
                return None
            n, pos = struct.unpack("!Q", self.buf[2:10])[0], 10
        assert not b1 & 0x80, "a server frame is never masked"
        if not self._need(pos + n):
            return None
        payload, self.buf = self.buf[pos:pos + n], self.buf[pos + n:]
        rsv1 = bool(b0 & 0x40)
        if rsv1 and not raw:
            payload = zlib.decompressobj(-15).decompress(payload + b"\x00\x00\xff\xff")
        return b0 & 0x0F, rsv1, payload

    def data_until(self, needle: bytes, limit: int = 50) -> bytes:
        """The data frames' bytes up to and including `needle` (bounded by `limit` frames)."""
        out = b""
        for _ in range(limit):
            if needle in out:
                return out
            f = self.next()
            if f is None:
                break
            if f[0] in (1, 2):
                out += f[2]
        return out

    def close_status(self, limit: int = 50) -> int | None:
        """The status of the server's close frame (0 for an empty one), None if the socket just ended."""
        for _ in range(limit):
            f = self.next()
            if f is None:
                return None
            if f[0] == 8:
                return struct.unpack("!H", f[2][:2])[0] if len(f[2]) >= 2 else 0
        return None
