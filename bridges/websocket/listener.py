"""The WebSocket listener: one accepted socket is a `WSAccept` (an `edged.connections.wslink.WSLink` around the
`websockets` library's ServerProtocol) that judges the upgrade by nats-server's rules (`handshake`), answers
it, and hands the framed byte stream to the connection the request's path asks for: NATS (any path), or an
endpoint another front door registered (`endpoints`: MQTT at `/mqtt`)."""

from __future__ import annotations

import asyncio
import http
from typing import TYPE_CHECKING, Any

from websockets.extensions.permessage_deflate import ServerPerMessageDeflateFactory
from websockets.http11 import Request
from websockets.server import ServerProtocol

from bridges.websocket.endpoints import Endpoint, endpoints
from bridges.websocket.handshake import (
    KIND_CLIENT,
    KIND_LEAF,
    NO_MASKING_HEADER,
    Policy,
    Verdict,
    judge,
    parse_allowed_origins,
)
from bridges.websocket.nats import WSClientConnection
from bridges.websocket.settings import auth_override, authenticator
from edged.connections.listener import Listener
from edged.connections.wslink import BROWSER_FRAME_SIZE, WSLink, grant_no_masking
from edged.log import log
from edged.security.auth import Authenticator
from edged.settings.options import WebsocketOpts

if TYPE_CHECKING:
    from edged.server import Server

DEFAULT_HANDSHAKE_TIMEOUT = 2.0
MAX_MESSAGE_CAP = 64 * 1024 * 1024  # nats-server's wsMaxMsgPayloadLimit
# nats-server compresses with flate.BestSpeed
_DEFLATE = {"level": 1}


class WebSocketDoor:
    """The `websocket {}` front door of one server: its settings, its listener, what it serves."""

    def __init__(self, server: Server, opts: WebsocketOpts) -> None:
        self.server = server
        self.opts = opts
        self.tls = opts.tls is not None
        self.allowed = parse_allowed_origins(opts.allowed_origins)
        self.host = opts.host or "0.0.0.0"
        self.handshake_timeout = opts.handshake_timeout or DEFAULT_HANDSHAKE_TIMEOUT
        self.max_message = min(server.opts.max_payload * 8, MAX_MESSAGE_CAP)
        self._auth: Authenticator | None = None
        self._auth_of: Any = None
        ssl = None
        if opts.tls is not None:
            from edged.security.tlsconf import server_ssl_context

            ssl = server_ssl_context(opts.tls)
        self.listener = Listener("websocket", self.host, opts.port, lambda: WSAccept(self), ssl=ssl,
                                 ssl_handshake_timeout=(opts.tls.timeout or 2.0) if opts.tls is not None else None)

    @property
    def port(self) -> int:
        return self.listener.bound_port or self.opts.port

    @property
    def auth_required(self) -> bool:
        return self.server.auth_required or auth_override(self.opts)

    def authenticator(self) -> Authenticator:
        """Built again when the server's is (a reload)."""
        if self._auth is None or self._auth_of is not self.server.authenticator:
            self._auth_of = self.server.authenticator
            self._auth = authenticator(self.server.opts, self.opts)
        return self._auth

    def policy(self) -> Policy:
        return Policy(tls=self.tls, compression=self.opts.compression, same_origin=self.opts.same_origin,
                      allowed=self.allowed, kinds=frozenset({KIND_CLIENT, *endpoints(self.server)}))


class WSAccept(WSLink):
    """One accepted WebSocket socket."""

    ws: ServerProtocol

    def __init__(self, door: WebSocketDoor) -> None:
        super().__init__(ServerProtocol(max_size=door.max_message))
        self.door = door
        self._timer: asyncio.TimerHandle | None = None

    def _started(self) -> None:
        self._timer = self.door.server.loop.call_later(self.door.handshake_timeout, self._handshake_timeout)

    def _handshake_timeout(self) -> None:
        if self.inner is None and self.transport is not None:
            log.error("%s - websocket handshake error: timeout", self.peer)
            self.transport.abort()

    def _events(self, events: list[Any]) -> None:
        if self.inner is None and events and isinstance(events[0], Request) and \
                (len(events) > 1 or self.ws.reader.buffer):
            self._refuse(Verdict(status=400, reason="client sent data before handshake is complete"))
            return
        super()._events(events)

    def _handshake(self, request: Any) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if not isinstance(request, Request):  # websockets could not read an HTTP request
            if self.transport is not None:
                self.transport.close()
            return
        door = self.door
        verdict = judge(request.method, request.path, request.headers, door.policy())
        if verdict.status:
            self._refuse(verdict)
            return
        ws = self.ws
        ep = endpoints(door.server).get(verdict.kind)
        if verdict.compress:
            ws.available_extensions = [ServerPerMessageDeflateFactory(
                server_no_context_takeover=True, client_no_context_takeover=True, compress_settings=_DEFLATE)]
        response = ws.accept(request)
        if response.status_code != 101:
            log.error("%s - websocket handshake error: %s", self.peer, ws.handshake_exc)
            ws.send_response(response)
            return
        if verdict.no_masking:
            response.headers[NO_MASKING_HEADER] = "true"
        if ep is not None and ep.subprotocol and "Sec-WebSocket-Protocol" not in response.headers:
            response.headers["Sec-WebSocket-Protocol"] = ep.subprotocol
        for k, v in door.opts.headers.items():
            response.headers[k] = v
        ws.send_response(response)
        if verdict.no_masking:
            grant_no_masking(ws)
        self.deflate = bool(ws.extensions)
        if verdict.browser:
            self.frame_limit = BROWSER_FRAME_SIZE
            self.no_compressed_fragments = verdict.no_compressed_fragments
        self._pump()  # the 101 goes before anything the connection writes
        if verdict.kind == KIND_CLIENT:
            inner: Any = WSClientConnection(door.server, door, verdict.cookies)
        elif ep is not None:
            inner = ep.factory(verdict)
        else:
            # nats-server upgrades, then closes: a leafnode over WebSocket needs its leafnode port
            log.error("%s - Not configured to accept %s connections over websocket", self.peer,
                      "leaf node" if verdict.kind == KIND_LEAF else verdict.kind)
            self._closing = True
            if self.transport is not None:
                self.transport.close()
            return
        self._open(inner)

    def _refuse(self, verdict: Verdict) -> None:
        """nats-server's answer to a refused upgrade: the status, its text, Sec-Websocket-Version: 13."""
        log.error("%s - websocket handshake error: %s", self.peer, verdict.reason)
        status = http.HTTPStatus(verdict.status)
        response = self.ws.reject(status, f"{status.phrase}\n")
        response.headers["Sec-WebSocket-Version"] = "13"
        response.headers["X-Content-Type-Options"] = "nosniff"
        self.ws.send_response(response)
        self._closing = True

    def _protocol_error(self, exc: Exception) -> None:
        inner = self.inner
        log.error("%s - cid:%d - websocket protocol error: %s", self.peer, getattr(inner, "cid", 0), exc)
        self._pump()  # the close frame `websockets` queued, with its status, then the socket
        if inner is not None and not getattr(inner, "closed", True):
            inner.close("Protocol Violation", flush=False)


def register(server: Server) -> None:
    """The front door of `websocket {}` (from edged/app.py). With a leafnode port, leafs may also connect
    over WebSocket (`<path>/leafnode`), as to nats-server."""
    opts = server.opts.websocket
    assert opts is not None
    door = WebSocketDoor(server, opts)
    if not door.tls:
        log.warning("Websocket not configured with TLS. DO NOT USE IN PRODUCTION!")
    acceptor = getattr(server.leafnodes, "acceptor", None)
    if acceptor is not None:
        from edged.leafnode.accept import AcceptedLeafConnection

        endpoints(server)[KIND_LEAF] = Endpoint(lambda verdict: AcceptedLeafConnection(acceptor, tls_upgrade=False))
    server.add_listener(door.listener)
