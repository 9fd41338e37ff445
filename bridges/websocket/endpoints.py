"""What the WebSocket listener serves besides NATS: a registry "kind (the path it ends with) -> connection
factory", one per server, that other front doors add to before the server starts (the MQTT front door adds
`mqtt`, served at a path ending in `/mqtt` with the `mqtt` subprotocol, as nats-server does).

A kind nobody registered is refused as nats-server refuses it (MQTT: HTTP 404). The MQTT front door
registers itself, from its register function in edged/app.py's front_doors, with e.g.

    endpoints(server)["mqtt"] = Endpoint(lambda verdict: MQTTConnection(server, websocket=True), "mqtt")

Its connection then gets, in `connection_made`, a transport whose every write is one binary frame and
`data_received` with the bytes of the client's data frames (frame boundaries are not kept: MQTT packets
may span frames, as the spec allows); closing it sends a close frame. The leafnode port registers `leaf`
the same way (listener.register).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bridges.websocket.handshake import Verdict


@dataclass(frozen=True)
class Endpoint:
    """`factory(verdict)` makes the inner connection (an asyncio Protocol that takes the framed transport
    in `connection_made`); `subprotocol` is echoed in the 101 answer."""

    factory: Callable[[Verdict], Any]
    subprotocol: str = ""


_REGISTRIES: weakref.WeakKeyDictionary[Any, dict[str, Endpoint]] = weakref.WeakKeyDictionary()


def endpoints(server: Any) -> dict[str, Endpoint]:
    """The server's registry (kind -> Endpoint); front doors add to it from edged/app.py."""
    reg = _REGISTRIES.get(server)
    if reg is None:
        reg = _REGISTRIES[server] = {}
    return reg
