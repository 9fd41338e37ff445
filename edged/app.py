"""The composition root: builds the server and plugs in what lives outside its core.

`edged.server.Server` knows its own parts (the NATS client port, JetStream, leafnode remotes). Front
doors that live in `bridges/` (MQTT, WebSocket, the upstream MQTT bridge) are registered here, each by a function that
takes the server and calls `Server.add_listener` (and `Server.services.append` for anything with a
start/stop), so `edged.server` never imports `bridges`. The CLI runs `serve(opts, build)`.
"""

from __future__ import annotations

from collections.abc import Callable

from edged.server import Server
from edged.settings.options import Options

# a front door: registers its listener(s) and services on a server that has not started yet
FrontDoor = Callable[[Server], None]


def front_doors(opts: Options) -> list[FrontDoor]:
    """The front doors the configuration asks for, beyond the NATS client port."""
    doors: list[FrontDoor] = []
    if opts.mqtt is not None and opts.mqtt.port:  # nats-server starts MQTT only with a port
        from bridges.mqtt.service import register_mqtt

        doors.append(register_mqtt)
    if opts.websocket is not None and opts.websocket.port:
        from bridges import websocket

        doors.append(websocket.register)
    if opts.mqtt_bridges:
        from bridges.mqtt_bridge.service import register as mqtt_bridges

        doors.append(mqtt_bridges)
    if opts.mqtt is not None and opts.mqtt.port and opts.websocket is not None and opts.websocket.port:
        doors.append(mqtt_over_websocket)
    return doors


def mqtt_over_websocket(server: Server) -> None:
    """MQTT over the WebSocket listener (subprotocol `mqtt`, a path ending in `/mqtt`), as nats-server
    serves it: the MQTT service makes the connection, the WebSocket glue frames it."""
    from bridges.mqtt.service import find_service
    from bridges.websocket.endpoints import Endpoint, endpoints

    svc = find_service(server)
    if svc is not None:
        endpoints(server)["mqtt"] = Endpoint(lambda verdict: svc.connection(websocket=True), "mqtt")


def validate(opts: Options) -> None:
    """The front doors' start-up checks (ValueError with nats-server's text)."""
    if opts.websocket is not None:
        from bridges import websocket

        websocket.validate(opts)


def services(opts: Options) -> list[FrontDoor]:
    """Services from outside edged/ that the configuration asks for: board health (hw/), with an
    `edged { hw { } }` block."""
    if "hw" not in opts.edged:
        return []
    from hw.health import register

    return [register]


def build(opts: Options) -> Server:
    server = Server(opts)
    for register in front_doors(opts) + services(opts):
        register(server)
    return server
