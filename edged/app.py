"""The composition root: builds the server and plugs in what lives outside its core.

`edged.server.Server` knows its own parts (the NATS client port, JetStream, leafnode remotes). Front
doors that live in `bridges/` (MQTT, WebSocket: issue 20) are registered here, each by a function that
takes the server and calls `Server.add_listener` (and `Server.services.append` for anything with a
start/stop), so `edged.server` never imports `bridges`. The CLI runs `serve(opts, build)`.
"""

from __future__ import annotations

from collections.abc import Callable

from edged.options import Options
from edged.server import Server

# a front door: registers its listener(s) and services on a server that has not started yet
FrontDoor = Callable[[Server], None]


def front_doors(opts: Options) -> list[FrontDoor]:
    """The front doors the configuration asks for, beyond the NATS client port (`websocket {}` is still
    reported as not supported by the config layer)."""
    doors: list[FrontDoor] = []
    if opts.mqtt is not None and opts.mqtt.port:  # nats-server starts MQTT only with a port
        from bridges.mqtt.service import register_mqtt

        doors.append(register_mqtt)
    return doors


def build(opts: Options) -> Server:
    server = Server(opts)
    for register in front_doors(opts):
        register(server)
    return server
