"""A small cuttable TCP proxy (and HTTP CONNECT proxy) for fault tests, on its own thread and event loop.

`cut()` drops every live connection, `block()` makes new ones fail (accepted then closed at once),
`freeze()` keeps sockets open but stops forwarding (a silent dead link), `unblock()` restores.
`rate` (bytes per second, each direction of each connection; None = unlimited) makes a slow link.
"""

from __future__ import annotations

import asyncio
import base64
import threading
from typing import Any


class TCPProxy:
    def __init__(self, target_host: str = "127.0.0.1", target_port: int = 0, *, http_connect: bool = False,
                 auth: tuple[str, str] | None = None) -> None:
        self.target = (target_host, target_port)
        self.http_connect = http_connect
        self.auth = auth
        self.port = 0
        self.blocked = False
        self.frozen = False
        self.rate: float | None = None
        self.connections = 0
        self.requests: list[str] = []  # CONNECT request heads seen (http_connect mode)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Any = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    # ------------------------------------------------------------------ control (any thread)

    def start(self) -> TCPProxy:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(5):
            raise RuntimeError("proxy did not start")
        return self

    def _call(self, fn: Any) -> None:
        assert self._loop is not None
        done = threading.Event()

        def wrap() -> None:
            try:
                fn()
            finally:
                done.set()

        self._loop.call_soon_threadsafe(wrap)
        done.wait(5)

    def cut(self) -> None:
        """Abort every live connection (both sides see a reset/EOF)."""

        def go() -> None:
            for w in list(self._writers):
                w.transport.abort()
            self._writers.clear()

        self._call(go)

    def block(self) -> None:
        self.blocked = True
        self.cut()

    def unblock(self) -> None:
        self.blocked = False
        self.frozen = False

    def freeze(self) -> None:
        self.frozen = True

    def stop(self) -> None:
        if self._loop is None:
            return

        def go() -> None:
            if self._server is not None:
                self._server.close()
            for w in list(self._writers):
                w.transport.abort()
            assert self._loop is not None
            self._loop.stop()

        self._loop.call_soon_threadsafe(go)
        if self._thread is not None:
            self._thread.join(5)
        self._loop = None

    def __enter__(self) -> TCPProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ proxy thread

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)

        async def boot() -> None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            self.port = self._server.sockets[0].getsockname()[1]

        loop.run_until_complete(boot())
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        if self.blocked:
            w.transport.abort()
            return
        self.connections += 1
        target = self.target
        if self.http_connect:
            try:
                head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 5)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
                w.close()
                return
            text = head.decode("latin-1")
            self.requests.append(text)
            first = text.split("\r\n", 1)[0].split()
            if len(first) < 2 or first[0] != "CONNECT":
                w.write(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
                w.close()
                return
            if self.auth is not None:
                tok = base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
                if f"Proxy-Authorization: Basic {tok}" not in text:
                    w.write(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n")
                    w.close()
                    return
            host, _, port = first[1].rpartition(":")
            target = (host.strip("[]"), int(port))
        if self.rate:
            _small_buffers(w)  # a slow link's queue is at its sender, not in a big buffer of the proxy's
        try:
            ur, uw = await asyncio.open_connection(*target)
        except OSError:
            if self.http_connect:
                w.write(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
            w.close()
            return
        if self.rate:
            _small_buffers(uw)
        if self.http_connect:
            w.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        self._writers.add(w)
        self._writers.add(uw)
        await asyncio.gather(self._pipe(r, uw), self._pipe(ur, w), return_exceptions=True)
        self._writers.discard(w)
        self._writers.discard(uw)

    async def _pipe(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                rate = self.rate
                data = await r.read(max(int(rate / 20), 512) if rate else 65536)
                if not data:
                    break
                if self.frozen:
                    continue  # swallow: a link that is up but carries nothing
                w.write(data)
                await w.drain()
                if rate:
                    await asyncio.sleep(len(data) / rate)
        except (ConnectionError, OSError):
            pass
        finally:
            if not w.transport.is_closing():
                w.transport.close()


SLOW_LINK_BUFFER = 32 * 1024


def _small_buffers(w: asyncio.StreamWriter) -> None:
    """Fixed small socket buffers (no autotuning to megabytes) on a rate-limited connection."""
    sock = w.get_extra_info("socket")
    if sock is None:
        return
    import socket

    for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, SLOW_LINK_BUFFER)
        except OSError:
            pass
