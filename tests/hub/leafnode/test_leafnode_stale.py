"""A leafnode link that goes silent is closed as stale, and /varz counts it under stale_connection_stats.leafs
(nats-server counts stale connections per kind; a stale leaf is not a stale client)."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Callable
from typing import Any

from edged.settings.options import RemoteLeafOpts
from tests.support.aio import run, until
from tests.support.leaf import edge as running_edge
from tests.support.leaf import hub_binary
from tests.support.tcpproxy import TCPProxy


def _varz(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/varz", timeout=5) as r:
        return json.loads(r.read())


def test_stale_leaf_link_counted_as_leaf(start_hub: Callable[..., Any]) -> None:
    hub = start_hub(hub_binary("2.15"))

    async def main() -> None:
        remote = RemoteLeafOpts(urls=[f"nats://leaf:s3cret@127.0.0.1:{proxy.port}"], ignore_discovered_urls=True)
        async with running_edge([remote], ping_interval=0.3, http_host="127.0.0.1", http_port=-1) as srv:
            link = srv.leafnodes.links[0]
            assert await link.wait_connected(5)
            v = await asyncio.to_thread(_varz, srv.monitor.port)
            assert v["stale_connections"] == 0
            first = link.conn
            proxy.freeze()  # bytes swallowed, sockets open: only PING/PONG can tell
            await until(lambda: link.conn is not first, 5)
            assert link.last_error == "Stale Connection"
            v = await asyncio.to_thread(_varz, srv.monitor.port)
            assert v["stale_connections"] >= 1
            assert v["stale_connection_stats"]["leafs"] == v["stale_connections"]
            assert v["stale_connection_stats"]["clients"] == 0

    with TCPProxy("127.0.0.1", hub.leaf_port) as proxy:
        run(main())
