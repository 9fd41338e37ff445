"""The bridges as one service on the server (start/stop), registered from edged/app.py when the config
has `edged { mqtt_bridge [...] }`. Its `jsz_extra` is the `mqtt_bridges` block of /jsz; `metrics` gives
the `edged_mqtt_bridge_*` families of /metrics (through `Server.metric_blocks`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bridges.mqtt_bridge.bridge import Bridge

if TYPE_CHECKING:
    from edged.server import Server

Family = tuple[str, str, str, list[tuple[dict[str, str], float | int]]]


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

    def metrics(self) -> list[Family]:
        """The link, and each rule's backlog and counts, from the same figures as /jsz."""
        bridges = self.jsz_extra()["mqtt_bridges"]
        out: list[Family] = [("edged_mqtt_bridge_connected", "gauge",
                              "1 while the bridge is connected to its upstream broker.",
                              [({"bridge": b["name"]}, 1 if b["connected"] else 0) for b in bridges])]
        outs = [({"bridge": b["name"], "source": o.get("stream") or o.get("subject", ""),
                  "durable": o.get("durable", "")}, o) for b in bridges for o in b["out"]]
        out += [
            ("edged_mqtt_bridge_out_pending_messages", "gauge",
             "Messages the out rule's durable consumer still has to take from its stream.",
             [(lab, o["pending"]) for lab, o in outs if "pending" in o]),
            ("edged_mqtt_bridge_out_in_flight_messages", "gauge",
             "Messages handed to the broker and not yet confirmed (PUBACK/PUBCOMP).",
             [(lab, o["in_flight"]) for lab, o in outs]),
            ("edged_mqtt_bridge_out_forwarded_total", "counter", "Messages the broker confirmed.",
             [(lab, o["forwarded"]) for lab, o in outs]),
            ("edged_mqtt_bridge_out_dropped_total", "counter",
             "Messages of a subject rule dropped (no connection at QoS 0, queue full, refused).",
             [(lab, o["dropped"]) for lab, o in outs if "dropped" in o]),
        ]
        ins = [({"bridge": b["name"], "topic": i["topic"]}, i) for b in bridges for i in b["in"]]
        for name, key, help_ in (
            ("edged_mqtt_bridge_in_received_total", "received", "Messages received from the broker."),
            ("edged_mqtt_bridge_in_delivered_total", "delivered", "Messages published locally (stored, for a stream)."),
            ("edged_mqtt_bridge_in_dropped_total", "dropped", "Messages whose topic cannot be a subject."),
        ):
            out.append((name, "counter", help_, [(lab, i[key]) for lab, i in ins]))
        return out


def register(server: Server) -> None:
    svc = MQTTBridges(server)
    server.services.append(svc)
    server.metric_blocks.append(svc.metrics)
