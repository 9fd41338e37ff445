"""The WebSocket front door (`websocket {}` as nats-server reads it): NATS over WebSocket on any path, and
the endpoints other front doors register (MQTT over WebSocket at `/mqtt`), on one listener.

- `handshake`: nats-server's rules for the upgrade request (sans-I/O);
- `settings`: the block's checks nats-server makes at start-up, and what the listener needs of it;
- `endpoints`: the registry "path -> connection factory" other front doors add to;
- `listener`: the listener and the accepted socket's glue (on `edged.connections.wslink`, the `websockets` library);
- `nats`: the NATS client over WebSocket (INFO, auth override, cookies).
"""

from __future__ import annotations

from bridges.websocket.endpoints import Endpoint, endpoints
from bridges.websocket.listener import register
from bridges.websocket.settings import validate

__all__ = ["Endpoint", "endpoints", "register", "validate"]
