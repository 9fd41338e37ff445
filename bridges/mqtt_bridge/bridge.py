"""One `mqtt_bridge` entry: its upstream connection, its rules, and what /jsz shows of them."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bridges.mqtt_bridge.inbound import Inbound
from bridges.mqtt_bridge.jsapi import JSClient
from bridges.mqtt_bridge.outbound import StreamForward, SubjectForward
from bridges.mqtt_bridge.upstream import Upstream, UpstreamEvents
from edged.goformat import rfc3339
from edged.log import log
from edged.routing.accounts import InternalClient
from edged.settings.options import MQTTBridgeOpts

if TYPE_CHECKING:
    from edged.server import Server

TICK_S = 1.0
DRAIN_S = 2.0


def default_client_id(server_name: str, bridge: str) -> str:
    """Stable across restarts, so the broker keeps the bridge's session (and what it queued for it)."""
    return f"edged-{server_name or socket.gethostname()}-{bridge}"[:64]


class Bridge(UpstreamEvents):
    def __init__(self, server: Server, opts: MQTTBridgeOpts) -> None:
        self.server = server
        self.opts = opts
        account = server.lookup_account(opts.account)
        self.ic = InternalClient(account, f"mqtt_bridge:{opts.name}")
        self.ic.echo = False  # what an `in` rule publishes never comes back to an `out` rule of this bridge
        self.js = JSClient(self.ic)
        self.client_id = opts.client_id or default_client_id(server.opts.server_name, opts.name)
        self.subjects = [SubjectForward(self, r) for r in opts.out if r.subject]
        self.streams = [StreamForward(self, r, self.js, opts.max_inflight) for r in opts.out if r.stream]
        self.inbound = Inbound(self, opts.in_, self.js)
        # paho message id -> who waits for the broker's confirmation of it
        self.waiting: dict[int, Callable[[int, str], None]] = {}
        self.upstream: Upstream = None  # type: ignore[assignment]  # made at start, on the running loop
        self.connected = False
        self.since = time.time()
        self.connects = 0
        self.last_error = ""
        self._ticker: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.upstream = Upstream(self.opts, self.client_id, asyncio.get_running_loop(), self,
                                 self.inbound.subscriptions())
        for f in self.subjects:
            f.start()
        for s in self.streams:
            s.start()
        self.upstream.start()
        self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def stop(self) -> None:
        """Take no more from the streams, give what is with the broker up to DRAIN_S to be confirmed and
        acked (so a clean restart repeats nothing), then disconnect."""
        if self._ticker is not None:
            self._ticker.cancel()
        for f in self.subjects:
            f.stop()
        for s in self.streams:
            s.draining = True
        deadline = time.monotonic() + DRAIN_S
        while self.connected and any(s.fifo for s in self.streams) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for s in self.streams:
            s.stop()
        self.inbound.stop()
        await self.upstream.stop()
        self.ic.close()

    async def _tick(self) -> None:
        while True:
            now = time.monotonic()
            for s in self.streams:
                s.tick(now)
            await asyncio.sleep(TICK_S)

    # ------------------------------------------------------------------ UpstreamEvents (on the loop)

    def on_connected(self, session_present: bool) -> None:
        self.connected = True
        self.connects += 1
        self.since = time.time()
        self.last_error = ""
        log.info("mqtt_bridge %s: connected to %s (session present: %s)", self.opts.name, self.upstream.url,
                 session_present)
        for s in self.streams:
            s.resend_unsent()
            s.pump()

    def on_disconnected(self, reason: str) -> None:
        if self.connected or reason != self.last_error:
            log.warning("mqtt_bridge %s: %s", self.opts.name, reason)
        if self.connected:
            self.since = time.time()
        self.connected = False
        self.last_error = reason

    def on_published(self, mid: int, refused: str) -> None:
        cb = self.waiting.pop(mid, None)
        if cb is not None:
            cb(mid, refused)

    def on_message(self, gen: int, mid: int, topic: str, payload: bytes, qos: int,
                   props: list[tuple[str, str]]) -> None:
        self.inbound.on_message(gen, mid, topic, payload, qos, props)

    # ------------------------------------------------------------------ monitoring

    def status(self) -> dict[str, Any]:
        return {
            "name": self.opts.name, "urls": list(self.opts.urls), "client_id": self.client_id,
            "connected": self.connected, "since": rfc3339(self.since), "connects": self.connects,
            "last_error": self.last_error,
            "out": [s.status() for s in self.streams] + [f.status() for f in self.subjects],
            "in": self.inbound.status(),
        }
