"""WebSocket client transport for leafnode remotes (`ws://`, `wss://`), as nats-server's
leafNodeSolicitWSConnection does it: GET <path>/leafnode, binary frames as a byte stream, masking unless
the hub echoed `Nats-No-Masking: true`, optional permessage-deflate without context takeover.

`WSFrameDecoder` and `encode_frame` are pure; `WSClientProtocol` wraps an inner asyncio Protocol (the
LeafConnection) and hands it a transport shim that frames every write.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import struct
import zlib
from typing import Any

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10
MAX_FRAME = 64 * 1024 * 1024
DEFLATE_EXT = "permessage-deflate; server_no_context_takeover; client_no_context_takeover"


class WSError(Exception):
    pass


def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1(key.encode() + WS_GUID).digest()).decode()


def upgrade_request(host: str, port: int, path: str, key: str, no_masking: bool, compression: bool) -> bytes:
    lines = [
        f"GET {path.rstrip('/')}/leafnode HTTP/1.1",
        f"Host: {host}:{port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
    ]
    if compression:
        lines.append(f"Sec-WebSocket-Extensions: {DEFLATE_EXT}")
    if no_masking:
        lines.append("Nats-No-Masking: true")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def parse_upgrade_response(head: bytes, key: str) -> tuple[bool, bool]:
    """Validate the 101 answer; returns (no_masking accepted, deflate negotiated)."""
    lines = head.decode("latin-1").split("\r\n")
    status = lines[0].split(" ", 2)
    if len(status) < 2 or status[1] != "101":
        raise WSError(f"websocket upgrade refused: {lines[0]!r}")
    hdrs: dict[str, str] = {}
    for ln in lines[1:]:
        if ":" in ln:
            k, v = ln.split(":", 1)
            hdrs[k.strip().lower()] = v.strip()
    if hdrs.get("upgrade", "").lower() != "websocket" or "upgrade" not in hdrs.get("connection", "").lower():
        raise WSError("websocket upgrade response lacks Upgrade/Connection headers")
    if hdrs.get("sec-websocket-accept") != accept_key(key):
        raise WSError("websocket upgrade response has a wrong Sec-WebSocket-Accept")
    no_mask = hdrs.get("nats-no-masking", "").lower() == "true"
    ext = hdrs.get("sec-websocket-extensions", "").lower()
    deflate = False
    if "permessage-deflate" in ext:
        if "server_no_context_takeover" not in ext or "client_no_context_takeover" not in ext:
            raise WSError("websocket compression negotiated without no_context_takeover")
        deflate = True
    return no_mask, deflate


def _mask(data: bytes, key: bytes) -> bytes:
    n = len(data)
    if not n:
        return data
    k = int.from_bytes((key * ((n + 3) // 4))[:n], "little")
    return (int.from_bytes(data, "little") ^ k).to_bytes(n, "little")


def encode_frame(opcode: int, payload: bytes, mask: bool, rsv1: bool = False, mask_key: bytes | None = None) -> bytes:
    b0 = 0x80 | opcode | (0x40 if rsv1 else 0)
    n = len(payload)
    mbit = 0x80 if mask else 0
    if n < 126:
        head = bytes((b0, mbit | n))
    elif n < 65536:
        head = struct.pack("!BBH", b0, mbit | 126, n)
    else:
        head = struct.pack("!BBQ", b0, mbit | 127, n)
    if mask:
        key = mask_key if mask_key is not None else os.urandom(4)
        return head + key + _mask(payload, key)
    return head + payload


class WSFrameDecoder:
    """Frames from the hub -> (opcode, payload) with fragments of data messages already passed through
    (frames are a byte stream for NATS, message boundaries do not matter), decompressed if needed."""

    def __init__(self, deflate: bool = False) -> None:
        self.deflate = deflate
        self._buf = b""
        self._compressed_msg = False
        self._zparts: list[bytes] = []

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        buf = self._buf + data if self._buf else data
        out: list[tuple[int, bytes]] = []
        pos = 0
        n = len(buf)
        while n - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            fin = bool(b0 & 0x80)
            rsv1 = bool(b0 & 0x40)
            if b0 & 0x30:
                raise WSError("RSV2/RSV3 set")
            op = b0 & 0x0F
            masked = bool(b1 & 0x80)
            ln = b1 & 0x7F
            hp = pos + 2
            if ln == 126:
                if n - hp < 2:
                    break
                ln = struct.unpack_from("!H", buf, hp)[0]
                hp += 2
            elif ln == 127:
                if n - hp < 8:
                    break
                ln = struct.unpack_from("!Q", buf, hp)[0]
                if ln >> 63:
                    raise WSError("invalid frame length")
                hp += 8
            if ln > MAX_FRAME:
                raise WSError("frame too large")
            key = b""
            if masked:
                if n - hp < 4:
                    break
                key = buf[hp:hp + 4]
                hp += 4
            if n - hp < ln:
                break
            payload = buf[hp:hp + ln]
            if masked:
                payload = _mask(payload, key)
            pos = hp + ln
            if op >= 8:
                if not fin or ln > 125:
                    raise WSError("invalid control frame")
                out.append((op, payload))
                continue
            if op not in (OP_CONT, OP_TEXT, OP_BINARY):
                raise WSError(f"unknown opcode {op}")
            if op != OP_CONT:
                self._compressed_msg = rsv1 and self.deflate
                if rsv1 and not self.deflate:
                    raise WSError("compressed frame without negotiated compression")
            if self._compressed_msg:
                self._zparts.append(payload)
                if fin:
                    d = zlib.decompressobj(-zlib.MAX_WBITS)
                    data_out = d.decompress(b"".join(self._zparts) + b"\x00\x00\xff\xff")
                    self._zparts.clear()
                    self._compressed_msg = False
                    if data_out:
                        out.append((OP_BINARY, data_out))
            elif payload:
                out.append((OP_BINARY, payload))
        self._buf = buf[pos:]
        return out


def compress(data: bytes) -> bytes:
    c = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -zlib.MAX_WBITS)
    out = c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)
    return out[:-4] if out.endswith(b"\x00\x00\xff\xff") else out


class _WSTransport:
    """What the LeafConnection writes to: frames each write."""

    def __init__(self, proto: WSClientProtocol) -> None:
        self._p = proto

    def write(self, data: bytes) -> None:
        p = self._p
        if p.transport is None or p.transport.is_closing():
            return
        if p.deflate and len(data) > 64:
            frame = encode_frame(OP_BINARY, compress(data), p.mask, rsv1=True)
        else:
            frame = encode_frame(OP_BINARY, data, p.mask)
        p.transport.write(frame)

    def is_closing(self) -> bool:
        t = self._p.transport
        return t is None or t.is_closing()

    def close(self) -> None:
        t = self._p.transport
        if t is not None and not t.is_closing():
            t.write(encode_frame(OP_CLOSE, struct.pack("!H", 1000), self._p.mask))
            t.close()

    def abort(self) -> None:
        if self._p.transport is not None:
            self._p.transport.abort()

    def get_write_buffer_size(self) -> int:
        t = self._p.transport
        return t.get_write_buffer_size() if t is not None else 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        t = self._p.transport
        return t.get_extra_info(name, default) if t is not None else default


class WSClientProtocol(asyncio.Protocol):
    def __init__(self, inner: Any, url: Any, no_masking: bool = False, compression: bool = False) -> None:
        self.inner = inner
        self.url = url
        self.want_no_masking = no_masking
        self.want_compression = compression
        self.key = base64.b64encode(os.urandom(16)).decode()
        self.transport: Any = None
        self.upgraded = False
        self.mask = True
        self.deflate = False
        self._head = b""
        self._dec: WSFrameDecoder | None = None
        self._shim = _WSTransport(self)

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.write(upgrade_request(self.url.host, self.url.port, self.url.path, self.key,
                                        self.want_no_masking, self.want_compression))

    def data_received(self, data: bytes) -> None:
        if not self.upgraded:
            self._head += data
            i = self._head.find(b"\r\n\r\n")
            if i < 0:
                if len(self._head) > 16384:
                    self._fail("websocket upgrade response too large")
                return
            head, rest = self._head[:i], self._head[i + 4:]
            self._head = b""
            try:
                no_mask, deflate = parse_upgrade_response(head, self.key)
            except WSError as e:
                self._fail(str(e))
                return
            self.mask = not (no_mask and self.want_no_masking)
            self.deflate = deflate and self.want_compression
            self._dec = WSFrameDecoder(self.deflate)
            self.upgraded = True
            self.inner.connection_made(self._shim)
            data = rest
            if not data:
                return
        assert self._dec is not None
        try:
            frames = self._dec.feed(data)
        except (WSError, zlib.error) as e:
            self._fail(f"websocket protocol error: {e}")
            return
        for op, payload in frames:
            if op == OP_BINARY:
                self.inner.data_received(payload)
            elif op == OP_PING:
                self.transport.write(encode_frame(OP_PONG, payload, self.mask))
            elif op == OP_CLOSE:
                if not self.transport.is_closing():
                    self.transport.write(encode_frame(OP_CLOSE, payload[:2], self.mask))
                    self.transport.close()
                return

    def _fail(self, text: str) -> None:
        inner = self.inner
        if hasattr(inner, "error"):
            inner.error = text
        from edged.log import log

        log.error("%s - websocket leafnode: %s", self.url.hostport, text)
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        pass

    def resume_writing(self) -> None:
        pass
