"""A bare NATS client on the raw protocol, for tests that need several requests in one socket write
(pipelined publishes, acks next to requests): frames go out exactly as given, what comes back is read by
subject."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.support.servers import ServerProcess


class Raw:
    """A bare NATS connection: writes go out exactly as given, replies are read by inbox."""

    def __init__(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.r, self.w = r, w
        self.buf = b""
        self.msgs: list[tuple[bytes, bytes, bytes, bytes]] = []  # (subject, reply, headers, payload)

    @classmethod
    async def connect(cls, srv: ServerProcess) -> Raw:
        r, w = await asyncio.open_connection("127.0.0.1", srv.port)
        await r.readline()
        c = cls(r, w)
        w.write(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"protocol":1}\r\nSUB _I.* 1\r\n')
        await c.ping()
        return c

    async def _fill(self) -> None:
        d = await asyncio.wait_for(self.r.read(1 << 16), 5)
        if not d:
            raise EOFError
        self.buf += d
        while True:
            if not self.buf.startswith((b"MSG ", b"HMSG ")):
                # PONG, and lines to skip (nats-server's second INFO, PING)
                end = self.buf.find(b"\r\n")
                if end < 0:
                    return
                if self.buf.startswith(b"PONG"):
                    self.msgs.append((b"PONG", b"", b"", b""))
                self.buf = self.buf[end + 2:]
                continue
            end = self.buf.find(b"\r\n")
            if end < 0:
                return
            args = self.buf[:end].split()
            hmsg = args[0] == b"HMSG"
            total = int(args[-1])
            hlen = int(args[-2]) if hmsg else 0
            reply = args[3] if len(args) == (6 if hmsg else 5) else b""
            start = end + 2
            if len(self.buf) < start + total + 2:
                return
            body = self.buf[start:start + total]
            m = args
            self.msgs.append((m[1], reply, body[:hlen], body[hlen:]))
            self.buf = self.buf[start + total + 2:]

    async def ping(self) -> None:
        self.w.write(b"PING\r\n")
        while not any(m[0] == b"PONG" for m in self.msgs):
            await self._fill()
        self.msgs = [m for m in self.msgs if m[0] != b"PONG"]

    async def take(self, subject: bytes, n: int) -> list[tuple[bytes, bytes, bytes, bytes]]:
        """The first n messages delivered to inbox `subject`; b"" for the messages a consumer delivers
        (under their own subject, with an ack reply)."""
        def ours(m: tuple[bytes, bytes, bytes, bytes]) -> bool:
            return m[1].startswith(b"$JS.ACK.") if not subject else m[0] == subject
        while sum(1 for m in self.msgs if ours(m)) < n:
            await self._fill()
        got = [m for m in self.msgs if ours(m)][:n]
        for m in got:
            self.msgs.remove(m)
        return got

    async def take_prefix(self, prefix: bytes, n: int) -> list[tuple[bytes, bytes, bytes, bytes]]:
        """The first n messages delivered to subjects starting with `prefix`, in the order they came."""
        while sum(1 for m in self.msgs if m[0].startswith(prefix)) < n:
            await self._fill()
        got = [m for m in self.msgs if m[0].startswith(prefix)][:n]
        ids = {id(m) for m in got}
        self.msgs = [m for m in self.msgs if id(m) not in ids]
        return got

    async def request(self, subject: str, body: Any, inbox: bytes) -> Any:
        data = json.dumps(body).encode() if not isinstance(body, bytes) else body
        self.w.write(b"PUB %s %s %d\r\n%s\r\n" % (subject.encode(), inbox, len(data), data))
        return json.loads((await self.take(inbox, 1))[0][3])


def pub(subject: bytes, reply: bytes = b"", data: bytes = b"") -> bytes:
    """A PUB frame, to be written with others in one go."""
    if reply:
        return b"PUB %s %s %d\r\n%s\r\n" % (subject, reply, len(data), data)
    return b"PUB %s %d\r\n%s\r\n" % (subject, len(data), data)


def hpub(subject: bytes, reply: bytes, hdr: bytes, data: bytes) -> bytes:
    """An HPUB frame; `hdr` is the whole header block (NATS/1.0 line to blank line)."""
    return b"HPUB %s %s %d %d\r\n%s%s\r\n" % (subject, reply, len(hdr), len(hdr) + len(data), hdr, data)


async def connect_url(url: str) -> Raw:
    """A Raw connection to `url` with no_responders on, subscribed to `_I.>` (replies to publishes) and
    `_C.*` (replies to API requests)."""
    host, port = url.rsplit("//", 1)[1].rsplit(":", 1)
    r, w = await asyncio.open_connection(host, int(port))
    await r.readline()
    c = Raw(r, w)
    w.write(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true,"protocol":1}\r\n'
            b"SUB _I.> 1\r\nSUB _C.* 2\r\n")
    await c.ping()
    return c


def reply_of(m: tuple[bytes, bytes, bytes, bytes]) -> tuple[str, Any]:
    """(reply subject, what came back): the JSON of a PubAck or error, or the status line."""
    if m[2]:
        return m[0].decode(), m[2].split(b"\r\n")[0].decode()
    return m[0].decode(), json.loads(m[3])
