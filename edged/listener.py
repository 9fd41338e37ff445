"""A front door of the server: where it listens and what it makes of each accepted socket. Its own module
so that front doors inside `edged/` (the leafnode port) can make one without importing the server."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Listener:
    """A front door: where it listens and what it makes of each accepted socket. The NATS client port is
    one, the leafnode port another (edged/leafnode/accept.py); front doors in bridges/ (MQTT, WebSocket)
    are registered from the composition root (edged/app.py) with `Server.add_listener`, so the server
    never imports them."""

    name: str  # what the log calls its connections: "client", "mqtt", "websocket"
    host: str
    port: int  # 0 or -1: any free port
    factory: Callable[[], asyncio.BaseProtocol]
    ssl: ssl.SSLContext | None = None
    ssl_handshake_timeout: float | None = None
    bound_port: int = 0  # the port it listens on, once started
    server: asyncio.base_events.Server | None = field(default=None, repr=False)
