"""A leafnode link that goes silent is closed as stale, and /varz counts it under stale_connection_stats.leafs
(nats-server counts stale connections per kind; a stale leaf is not a stale client)."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

from edged.options import RemoteLeafOpts
from tests.support.leaf import Hub, hub_binary, run, start_edge, until
from tests.support.tcpproxy import TCPProxy

HUB_CONF = """
server_name: hub1
leafnodes { port: $LEAF_PORT }
accounts {
  APP { users: [ {user: leaf, password: s3cret} ] }
}
"""


def _varz(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/varz", timeout=5) as r:
        return json.loads(r.read())


def test_stale_leaf_link_counted_as_leaf() -> None:
    hub = Hub(hub_binary("2.15"), HUB_CONF).start()
    proxy = TCPProxy("127.0.0.1", hub.leaf_port).start()

    async def main() -> None:
        remote = RemoteLeafOpts(urls=[f"nats://leaf:s3cret@127.0.0.1:{proxy.port}"], ignore_discovered_urls=True)
        srv = await start_edge([remote], ping_interval=0.3, http_host="127.0.0.1", http_port=-1)
        try:
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
        finally:
            await srv.shutdown()

    try:
        run(main())
    finally:
        proxy.stop()
        hub.stop()
