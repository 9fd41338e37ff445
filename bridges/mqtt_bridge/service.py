"""The bridges as one service on the server (start/stop), registered from edged/app.py when the config
has `edged { mqtt_bridge [...] }`. Its `jsz_extra` is the `mqtt_bridges` block of /jsz and /metrics."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bridges.mqtt_bridge.bridge import Bridge

if TYPE_CHECKING:
    from edged.server import Server


class MQTTBridges:
    def __init__(self, server: Server) -> None:
        self.bridges = [Bridge(server, o) for o in server.opts.mqtt_bridges]

    async def start(self) -> None:
        for b in self.bridges:
            await b.start()

    async def stop(self) -> None:
        for b in self.bridges:
            await b.stop()

    def jsz_extra(self) -> dict[str, Any]:
        return {"mqtt_bridges": [b.status() for b in self.bridges]}


def register(server: Server) -> None:
    server.services.append(MQTTBridges(server))
