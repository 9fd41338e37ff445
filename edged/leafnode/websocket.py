"""The WebSocket transport of leafnode remotes (`ws://`, `wss://`), as nats-server's
leafNodeSolicitWSConnection does it: GET <path>/leafnode, binary frames as a byte stream, masking unless the
hub echoed `Nats-No-Masking: true`, permessage-deflate without context takeover when asked for.

The WebSocket itself is `edged.connections.wslink` (the `websockets` library's ClientProtocol); this module only says
what a leafnode asks of the hub and what it makes of the answer.
"""

from __future__ import annotations

from typing import Any

from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory
from websockets.http11 import Response
from websockets.uri import parse_uri

from edged.connections.wslink import MaskingClientProtocol, WSLink
from edged.log import log

LEAF_PATH = "/leafnode"
NO_MASKING_HEADER = "Nats-No-Masking"
MAX_MESSAGE = 64 * 1024 * 1024  # nats-server's cap on a WebSocket message (wsMaxMsgPayloadLimit)


class WSClientProtocol(WSLink):
    """The socket's Protocol of a ws/wss remote; the LeafConnection gets the framed transport once the hub
    answered the upgrade."""

    ws: MaskingClientProtocol

    def __init__(self, inner: Any, url: Any, no_masking: bool = False, compression: bool = False) -> None:
        scheme = "wss" if url.scheme == "wss" else "ws"
        uri = parse_uri(f"{scheme}://{url.hostport}{url.path.rstrip('/')}{LEAF_PATH}")
        # nats-server offers (and a hub answers) deflate without context takeover in both directions
        exts = [ClientPerMessageDeflateFactory(server_no_context_takeover=True, client_no_context_takeover=True,
                                               client_max_window_bits=None)] if compression else None
        super().__init__(MaskingClientProtocol(uri, extensions=exts, max_size=MAX_MESSAGE))
        self.url = url
        self.want_no_masking = no_masking
        self.want_compression = compression
        self.upgraded = False
        self._pending_inner = inner

    def _started(self) -> None:
        request = self.ws.connect()
        if self.want_no_masking:
            request.headers[NO_MASKING_HEADER] = "true"
        self.ws.send_request(request)
        self._pump()

    def _handshake(self, event: Any) -> None:
        assert isinstance(event, Response)
        exc = self.ws.handshake_exc
        if exc is not None:
            if event.status_code != 101:
                self._fail(f"websocket upgrade refused: {event.status_code} {event.reason_phrase}")
            else:
                self._fail(f"websocket upgrade failed: {exc}")
            return
        granted = (event.headers.get_all(NO_MASKING_HEADER) or [""])[0] == "true"
        self.mask = self.ws.mask = not (granted and self.want_no_masking)
        self.deflate = bool(self.ws.extensions)
        self.upgraded = True
        self._open(self._pending_inner)

    def _protocol_error(self, exc: Exception) -> None:
        self._note(f"websocket protocol error: {exc}")

    def _fail(self, text: str) -> None:
        self._note(text)
        self._closing = True
        if self.transport is not None:
            self.transport.close()

    def _note(self, text: str) -> None:
        inner = self._pending_inner
        if hasattr(inner, "error"):
            inner.error = text
        log.error("%s - websocket leafnode: %s", self.url.hostport, text)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        # the LeafConnection learns of a failed upgrade too (its link reconnects)
        self._pending_inner.connection_lost(exc)
