"""WebSocket under a byte-stream connection: edged's one WebSocket implementation, used by the WebSocket
listener (bridges/websocket: NATS and MQTT over WS) and by the leafnode ws/wss remote.

The handshake, frame parsing, masking, control frames and permessage-deflate are the `websockets`
library's sans-I/O protocol objects (`ServerProtocol`, `ClientProtocol`). What is here is only the asyncio
glue nats-server's WebSocket code implies and the library does not do:

- `WSLink` is the socket's asyncio Protocol: it feeds the bytes to the protocol object and hands the data of
  every data frame to an inner connection as a byte stream (NATS does not care where frames end);
- `FramedTransport` is what the inner connection writes to: each write (one `Connection.flush`, a whole
  batch of messages) goes out as one binary frame, compressed when deflate was negotiated and the write is
  larger than nats-server's 64-byte threshold, unmasked when the peer granted `Nats-No-Masking`;
- closing the inner connection sends a close frame whose status nats-server would give for the reason.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Generator
from typing import Any

from websockets.client import ClientProtocol
from websockets.extensions import Extension
from websockets.frames import Close, Frame, Opcode
from websockets.protocol import CLIENT, SEND_EOF, Protocol, State
from websockets.server import ServerProtocol
from websockets.streams import StreamReader
from websockets.typing import ExtensionName

from edged.connections.listener import peer_address
from edged.log import log

# nats-server sends nothing smaller compressed (wsCompressThreshold)
COMPRESS_THRESHOLD = 64
# nats-server's frame size for browsers, which "behave better with limited frame size" (wsFrameSizeForBrowsers)
BROWSER_FRAME_SIZE = 4096

# nats-server's close status per close reason (websocket.go wsEnqueueCloseMessage); anything else is 1011
_POLICY = ("Authentication Timeout", "Authentication Failure", "Slow Consumer (Pending Bytes)",
           "Slow Consumer (Write Deadline)", "Maximum Account Connections Exceeded",
           "Maximum Connections Exceeded", "Maximum Control Line Exceeded", "Maximum Subscriptions Exceeded",
           "Missing Account", "Authentication Expired", "Credentials Revoked")
CLOSE_STATUS: dict[str, int] = {
    "Client Closed": 1000,
    **dict.fromkeys(_POLICY, 1008),
    **dict.fromkeys(("Parse Error", "Protocol Violation", "Bad Client Protocol Version"), 1002),
    "Maximum Payload Exceeded": 1009,
    **dict.fromkeys(("Write Error", "Read Error", "Stale Connection", "Server Shutdown"), 1001),
}


def close_status(reason: str) -> int:
    return CLOSE_STATUS.get(reason, 1011)


class _Compressed(Extension):
    """Marks the first frame of a message deflated beforehand (RSV1): the fragments of one compressed message
    sent in frames a browser takes, as nats-server cuts them."""

    name = ExtensionName("permessage-deflate")

    def encode(self, frame: Frame) -> Frame:
        return dataclasses.replace(frame, rsv1=True)

    def decode(self, frame: Frame, *, max_size: int | None = None) -> Frame:
        return frame


_COMPRESSED = _Compressed()


class FramedTransport:
    """The transport the inner connection sees: writes become frames, the rest is the socket's."""

    __slots__ = ("_p",)

    def __init__(self, link: WSLink) -> None:
        self._p = link

    def write(self, data: bytes) -> None:
        self._p.send_data(data)

    def writelines(self, chunks: list[bytes]) -> None:
        self._p.send_data(b"".join(chunks))

    def is_closing(self) -> bool:
        t = self._p.transport
        return t is None or t.is_closing() or self._p.ws.state is not State.OPEN

    def close(self) -> None:
        self._p.close_from_inner()

    def abort(self) -> None:
        t = self._p.transport
        if t is not None:
            t.abort()

    def get_write_buffer_size(self) -> int:
        t = self._p.transport
        return t.get_write_buffer_size() if t is not None else 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._p.extra_info(name, default)

    def pause_reading(self) -> None:
        t = self._p.transport
        if t is not None:
            t.pause_reading()

    def resume_reading(self) -> None:
        t = self._p.transport
        if t is not None:
            t.resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        t = self._p.transport
        if t is not None:
            t.set_write_buffer_limits(high, low)


class WSLink(asyncio.Protocol):
    """One WebSocket connection: the socket's Protocol around a `websockets` protocol object `ws` and an
    inner asyncio Protocol that sees a byte stream. Subclasses decide what the handshake event means
    (`_handshake`), then call `_open(inner)`."""

    def __init__(self, ws: Protocol) -> None:
        self.ws = ws
        self.inner: Any = None
        self.transport: Any = None
        self.shim = FramedTransport(self)
        # frames this side writes: masked as a client unless the server granted Nats-No-Masking
        self.mask = ws.side is CLIENT
        self.deflate = False
        # a browser peer: frames of at most this many bytes (0: one frame per write)
        self.frame_limit = 0
        self.no_compressed_fragments = False
        self.peer = ""
        self._closing = False

    # ------------------------------------------------------------------ the socket

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if peer:
            host, port = peer_address(peer)
            self.peer = f"{host}:{port}"
        self._started()

    def _started(self) -> None:
        """The socket is up: a client sends its upgrade request here."""

    def data_received(self, data: bytes) -> None:
        ws = self.ws
        ws.receive_data(data)
        events = ws.events_received()
        self._events(events)
        self._pump()

    def eof_received(self) -> bool | None:
        self.ws.receive_eof()
        self._events(self.ws.events_received())
        self._pump()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        inner = self.inner
        if inner is not None:
            inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def extra_info(self, name: str, default: Any = None) -> Any:
        t = self.transport
        return t.get_extra_info(name, default) if t is not None else default

    # ------------------------------------------------------------------ events from the peer

    def _events(self, events: list[Any]) -> None:
        for ev in events:
            if not isinstance(ev, Frame):
                self._handshake(ev)
                continue
            op = ev.opcode
            if op is Opcode.BINARY or op is Opcode.TEXT or op is Opcode.CONT:
                inner = self.inner
                if ev.data and inner is not None and not self._closing:
                    inner.data_received(bytes(ev.data))
            elif op is Opcode.CLOSE:
                # the close frame is echoed by `websockets`; then the socket goes, whichever side this is
                self._closing = True
        exc = self.ws.parser_exc
        if exc is not None and not self._closing:
            self._closing = True
            self._protocol_error(exc)

    def _handshake(self, event: Any) -> None:
        raise NotImplementedError

    def _protocol_error(self, exc: Exception) -> None:
        """The peer broke the WebSocket protocol: `websockets` has queued the close frame with its status."""
        log.error("%s - websocket protocol error: %s", self.peer, exc)

    def _open(self, inner: Any) -> None:
        self.inner = inner
        inner.connection_made(self.shim)

    # ------------------------------------------------------------------ output

    def _pump(self) -> None:
        """Write what the protocol object has queued (handshake, pongs, close frames); its end-of-stream
        mark closes the socket (a server closes at once, as nats-server does)."""
        t = self.transport
        if t is None:
            return
        for data in self.ws.data_to_send():
            if data == SEND_EOF:
                break
            t.write(data)
        else:
            if not self._closing:
                return
        t.close()

    def send_data(self, data: bytes) -> None:
        """One write of the inner connection: one binary frame, or for a browser frames of at most
        `frame_limit` bytes (nats-server's wsFrameSizeForBrowsers): whole messages when uncompressed, the
        fragments of one compressed message otherwise (unless `no_compressed_fragments`: Safari)."""
        t = self.transport
        if t is None or t.is_closing() or self.ws.state is not State.OPEN or not data:
            return
        compress = self.deflate and len(data) > COMPRESS_THRESHOLD
        limit = self.frame_limit
        if not limit or (len(data) <= limit and not compress):
            t.write(Frame(Opcode.BINARY, data).serialize(mask=self.mask,
                                                         extensions=self.ws.extensions if compress else []))
            return
        if not compress:
            for i in range(0, len(data), limit):
                t.write(Frame(Opcode.BINARY, data[i:i + limit]).serialize(mask=self.mask, extensions=[]))
            return
        whole = Frame(Opcode.BINARY, data)
        for ext in self.ws.extensions:
            whole = ext.encode(whole)
        body = bytes(whole.data)
        if self.no_compressed_fragments or len(body) <= limit:
            t.write(Frame(Opcode.BINARY, body).serialize(mask=self.mask, extensions=[_COMPRESSED]))
            return
        parts = [body[i:i + limit] for i in range(0, len(body), limit)]
        last = len(parts) - 1
        for n, part in enumerate(parts):
            f = Frame(Opcode.CONT if n else Opcode.BINARY, part, fin=n == last)
            t.write(f.serialize(mask=self.mask, extensions=[] if n else [_COMPRESSED]))

    def close_from_inner(self) -> None:
        """The inner connection closed: a close frame with nats-server's status for its reason, then the
        socket."""
        t = self.transport
        if t is None:
            return
        reason = getattr(self.inner, "close_reason", "") or "Client Closed"
        if self.ws.state is State.OPEN and not t.is_closing():
            payload = Close(close_status(reason), _truncate(reason)).serialize()
            t.write(Frame(Opcode.CLOSE, payload).serialize(mask=self.mask, extensions=[]))
        self._closing = True
        t.close()


def _truncate(reason: str) -> str:
    """A close frame's text fits 123 bytes: nats-server cuts it and adds '...'."""
    b = reason.encode()
    return reason if len(b) <= 123 else b[:120].decode("utf-8", "ignore") + "..."


# ---------------------------------------------------------------------------------------------------------
# the two sides


class _UnmaskedReads(StreamReader):
    """The reader of a server whose client was granted `Nats-No-Masking`: that client's frames come unmasked,
    while websockets' server parser requires the mask bit. Each frame header is handed over with the bit set
    and, in place of the key, four zero bytes (XOR with zeros: the payload as sent). This follows the order
    in which `Frame.parse` reads a frame: header, extended length, key, payload."""

    step: int
    fake_key: bool

    def read_exact(self, n: int) -> Generator[None, None, bytearray]:
        step = self.step
        if step == 3 and self.fake_key:  # the key of an unmasked frame: not on the wire
            self.step = 4
            return bytearray(4)
        data = yield from super().read_exact(n)
        if step == 0:
            ln = data[1] & 0x7F
            self.fake_key = not data[1] & 0x80
            if self.fake_key:
                data[1] |= 0x80
            self.step = 2 if ln >= 126 else 3
        elif step == 2:
            self.step = 3
        elif step == 3:
            self.step = 4
        else:
            self.step = 0
        return data


def grant_no_masking(ws: ServerProtocol) -> None:
    """From now on `ws` reads unmasked frames (call before any frame arrived: right after the upgrade)."""
    reader = ws.reader
    reader.__class__ = _UnmaskedReads
    assert isinstance(reader, _UnmaskedReads)
    reader.step, reader.fake_key = 0, False


class MaskingClientProtocol(ClientProtocol):
    """websockets' client, whose frames (control frames too) go out unmasked once the server granted
    `Nats-No-Masking` (`mask` False): nats-server reads every frame of such a client as unmasked."""

    mask = True

    def send_frame(self, frame: Frame) -> None:
        self.writes.append(frame.serialize(mask=self.mask, extensions=self.extensions))
