"""The HTTP monitoring port: a deliberately small HTTP/1.1 responder on asyncio streams.

GET/HEAD only, one request per connection, bounded header size and read time. It owns no monitoring
rules: each path maps to a document builder (documents.py) or the /metrics page (metrics.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from email.utils import formatdate
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from edged import SERVER_VERSION, __version__
from edged.connections.listener import dual_stack_socket
from edged.log import log
from edged.monitor.backlog import tracker_of
from edged.monitor.documents import (
    ConnzOptions,
    HealthzOptions,
    JszOptions,
    SubszOptions,
    accountz,
    accstatz,
    connz,
    gatewayz,
    healthz,
    jsz,
    leafz,
    routez,
    subsz,
    varz,
)
from edged.monitor.encoding import to_json
from edged.monitor.metrics import metrics
from edged.monitor.process import state_of
from edged.monitor.request import MonitorError, parse_bool, query_values

if TYPE_CHECKING:
    from edged.server import Server

VARZ_PATH = "/varz"
CONNZ_PATH = "/connz"
ROUTEZ_PATH = "/routez"
GATEWAYZ_PATH = "/gatewayz"
LEAFZ_PATH = "/leafz"
SUBSZ_PATH = "/subsz"
SUBSCRIPTIONSZ_PATH = "/subscriptionsz"
ACCOUNTZ_PATH = "/accountz"
ACCSTATZ_PATH = "/accstatz"
JSZ_PATH = "/jsz"
HEALTHZ_PATH = "/healthz"
METRICS_PATH = "/metrics"
ROOT_PATH = "/"

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
            431: "Request Header Fields Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}
MAX_HEADER_BYTES = 16 * 1024
READ_TIMEOUT = 10.0

_ENDPOINTS = [
    (VARZ_PATH, "General"), (JSZ_PATH, "JetStream"), (CONNZ_PATH, "Connections"), (ACCOUNTZ_PATH, "Accounts"),
    (ACCSTATZ_PATH, "Account Stats"), (SUBSZ_PATH, "Subscriptions"), (ROUTEZ_PATH, "Routes"),
    (LEAFZ_PATH, "LeafNodes"), (GATEWAYZ_PATH, "Gateways"), (HEALTHZ_PATH, "Health Probe"),
    (METRICS_PATH, "Prometheus Metrics"),
]


class MonitorServer:
    """The HTTP monitoring port. Started and stopped by Server when `http_port` is set."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.state = state_of(server)
        self.port = 0
        self.host = server.opts.monitor_host()
        base = (server.opts.http_base_path or "").strip("/")
        self.base = "/" + base if base else ""
        self._srv: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._routes: dict[str, Callable[[dict[str, str]], tuple[int, str, bytes]]] = {
            ROOT_PATH: self._root,
            VARZ_PATH: lambda q: self._json(varz(self.server)),
            CONNZ_PATH: lambda q: self._json(connz(self.server, ConnzOptions.from_query(q))),
            SUBSZ_PATH: self._subsz,
            SUBSCRIPTIONSZ_PATH: self._subsz,
            ACCOUNTZ_PATH: lambda q: self._json(accountz(self.server, q.get("acc", ""))),
            ACCSTATZ_PATH: lambda q: self._json(accstatz(self.server, parse_bool("unused", q.get("unused")))),
            LEAFZ_PATH: lambda q: self._json(leafz(self.server, parse_bool("subs", q.get("subs")),
                                                   q.get("acc", ""))),
            JSZ_PATH: lambda q: self._json(jsz(self.server, JszOptions.from_query(q))),
            ROUTEZ_PATH: lambda q: self._json(routez(self.server)),
            GATEWAYZ_PATH: lambda q: self._json(gatewayz(self.server)),
            HEALTHZ_PATH: self._healthz,
            METRICS_PATH: lambda q: (200, "text/plain; version=0.0.4; charset=utf-8",
                                     metrics(self.server).encode()),
        }

    async def start(self) -> None:
        port = self.server.opts.http_port
        port = 0 if port == -1 else port
        sock = dual_stack_socket(self.host, port)  # a wildcard host: IPv4 and IPv6, as nats-server
        where: dict[str, Any] = {"sock": sock} if sock is not None else \
            {"host": self.host, "port": port, "reuse_address": True}
        self._srv = await asyncio.start_server(self._handle, limit=MAX_HEADER_BYTES, **where)
        self.port = self._srv.sockets[0].getsockname()[1]
        log.info("Starting http monitor on %s:%d", self.host, self.port)
        tracker_of(self.server).start()  # rates need history: sampled from now on, not on first request

    async def stop(self) -> None:
        tracker_of(self.server).stop()
        srv, self._srv = self._srv, None
        if srv is not None:
            srv.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if srv is not None:
            try:
                await asyncio.wait_for(srv.wait_closed(), 2.0)
            except TimeoutError:
                pass

    # ------------------------------------------------------------------ request handling

    def _json(self, doc: Any) -> tuple[int, str, bytes]:
        return 200, "application/json", to_json(doc, indent=True)

    def _subsz(self, q: dict[str, str]) -> tuple[int, str, bytes]:
        return self._json(subsz(self.server, SubszOptions.from_query(q)))

    def _healthz(self, q: dict[str, str]) -> tuple[int, str, bytes]:
        hs = healthz(self.server, HealthzOptions.from_query(q))
        code = hs.pop("status_code", 200)
        if code != 200:
            log.warning("Healthcheck failed: %r", hs.get("error") or hs.get("errors"))
        return code, "application/json", to_json(hs)

    def _root(self, q: dict[str, str]) -> tuple[int, str, bytes]:
        links = "\n".join(
            f'    <a href=".{p}">{title}<span class="endpoint"> {p}</span></a>' for p, title in _ENDPOINTS
        )
        page = f"""<html lang="en">
  <head>
    <title>edged monitoring</title>
    <style type="text/css">
      body {{ font-family: ui-sans-serif, system-ui, sans-serif; margin-left: 32px }}
      a {{ display: block; padding-bottom: 6px; color: rgb(72 72 92); text-decoration: none }}
      a:hover {{ font-weight: 600 }}
      .endpoint {{ font-size: 12px; color: #999; font-family: monospace }}
    </style>
  </head>
  <body>
    <h2>edged v{__version__}</h2>
    <p>nats-server {SERVER_VERSION} compatible &middot; {self.server.server_name}</p>
{links}
  </body>
</html>
"""
        return 200, "text/html; charset=utf-8", page.encode()

    def dispatch(self, method: str, target: str) -> tuple[int, str, bytes, dict[str, str]]:
        """Route one request; returns (status, content type, body, extra headers). No I/O."""
        if method not in ("GET", "HEAD"):
            return 405, "text/plain; charset=utf-8", b"Method Not Allowed\n", {"Allow": "GET, HEAD"}
        parts = urlsplit(target)
        path = unquote(parts.path or "/")
        if self.base:
            if path == self.base:
                path = "/"
            elif path.startswith(self.base + "/"):
                path = path[len(self.base):]
            else:
                return 404, "text/plain; charset=utf-8", b"404 page not found\n", {}
        handler = self._routes.get(path)
        if handler is None:
            return 404, "text/plain; charset=utf-8", b"404 page not found\n", {}
        stats = self.state.http_req_stats
        stats[path] = stats.get(path, 0) + 1
        try:
            status, ctype, body = handler(query_values(parts.query))
        except MonitorError as e:
            return e.code, "text/plain; charset=utf-8", str(e).encode(), {}
        except Exception as e:  # a monitoring bug must not take the daemon's port down
            log.error("Error handling monitoring request %s: %s", path, e, exc_info=True)
            return 500, "text/plain; charset=utf-8", f"internal error: {e}".encode(), {}
        return status, ctype, body, {}

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            try:
                method, target = await asyncio.wait_for(self._read_request(reader), READ_TIMEOUT)
            except TimeoutError:
                await self._respond(writer, "GET", 408, "text/plain; charset=utf-8", b"Request Timeout\n", {})
                return
            except (ValueError, asyncio.LimitOverrunError, asyncio.IncompleteReadError) as e:
                code = 431 if isinstance(e, ValueError | asyncio.LimitOverrunError) and "limit" in str(e) else 400
                await self._respond(writer, "GET", code, "text/plain; charset=utf-8",
                                    f"{code} {_REASONS[code]}\n".encode(), {})
                return
            status, ctype, body, extra = self.dispatch(method, target)
            await self._respond(writer, method, status, ctype, body, extra)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            try:
                writer.close()
            except Exception:
                pass

    @staticmethod
    async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str]:
        line = await reader.readline()
        if not line.endswith(b"\n"):
            raise asyncio.IncompleteReadError(line, None)
        fields = line.decode("latin-1").strip().split(" ")
        if len(fields) != 3 or not fields[2].startswith("HTTP/1."):
            raise ValueError("malformed request line")
        total = len(line)
        while True:
            h = await reader.readline()
            total += len(h)
            if total > MAX_HEADER_BYTES:
                raise ValueError("header limit exceeded")
            if not h.endswith(b"\n"):
                raise asyncio.IncompleteReadError(h, None)
            if h in (b"\r\n", b"\n"):
                break
        return fields[0], fields[1]

    @staticmethod
    async def _respond(writer: asyncio.StreamWriter, method: str, status: int, ctype: str, body: bytes,
                       extra: dict[str, str]) -> None:
        headers = {
            "Content-Type": ctype,
            "Access-Control-Allow-Origin": "*",
            "Date": formatdate(usegmt=True),
            "Content-Length": str(len(body)),
            "Connection": "close",
        } | extra
        head = f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        writer.write(head.encode("latin-1") + (b"" if method == "HEAD" else body))
        await writer.drain()
