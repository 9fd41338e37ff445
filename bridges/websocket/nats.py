"""NATS over WebSocket: the NATS client connection, with what nats-server changes for a WebSocket client
(server/websocket.go createWSClient, client.go generateClientInfoJSON and processConnect): the INFO names
the WebSocket listener (its host, port and TLS), the block's auth settings apply, and credentials may come
from cookies the CONNECT does not carry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edged.connections.client import ClientConnection

if TYPE_CHECKING:
    from bridges.websocket.listener import WebSocketDoor
    from edged.server import Server


class WSClientConnection(ClientConnection):
    def __init__(self, server: Server, door: WebSocketDoor, cookies: dict[str, str]) -> None:
        super().__init__(server, websocket=True)
        self.door = door
        self.cookies = cookies
        self.auth_pending = door.auth_required

    def client_info(self, own: bool = True) -> dict[str, Any]:
        info = super().client_info(own)
        d = self.door
        info["host"], info["port"] = d.host, d.port
        if d.tls:
            info["tls_required"] = info["tls_available"] = True
        else:
            info.pop("tls_required", None)
            info.pop("tls_available", None)
        if d.auth_required:
            info["auth_required"] = True
        return info

    def auth_timeout(self) -> float:
        return self.door.opts.auth_timeout or super().auth_timeout()

    def ping_interval(self) -> float:
        return self.door.opts.ping_interval or super().ping_interval()

    def authenticate(self, connect: dict) -> Any:
        wo = self.door.opts
        if self.cookies:
            connect = dict(connect)
            for key, cookie in (("jwt", wo.jwt_cookie), ("user", wo.user_cookie), ("pass", wo.pass_cookie),
                                ("auth_token", wo.token_cookie)):
                if cookie and not connect.get(key) and cookie in self.cookies:
                    connect[key] = self.cookies[cookie]
        return self.server.authenticate(self, connect, self.door.authenticator())
