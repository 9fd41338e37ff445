"""Leafnodes over the WebSocket port, edged as the hub: a nats-server leaf and an edged leaf connect with a
`ws://` remote (plain, and with compression and Nats-No-Masking) to nats-server's WebSocket listener and to
edged's, and messages, headers and requests cross the link the same way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.hub.leafnode.test_leafnode_accept import core_scenario, leaf_count
from tests.support.aio import run
from tests.support.servers import ServerProcess, free_port

HUB = """
server_name: hub1
leafnodes { port: %(leaf_port)d }
websocket { port: %(ws_port)d, no_tls: true, compression: true }
accounts {
  APP { users: [ {user: leaf, password: s3cret}, {user: app, password: app} ] }
}
"""

LEAF = """
server_name: leaf1
leafnodes { remotes: [ { url: "ws://leaf:s3cret@127.0.0.1:%(ws_port)d", account: APP, %(ws)s } ] }
accounts { APP { users: [ {user: app, password: app} ] } }
"""


@pytest.mark.parametrize("variant", ["plain", "deflate+no_masking"])
@pytest.mark.parametrize("leaf_kind", ["nats-server", "edged"])
def test_leaf_over_ws_to_either_hub(start_server: Callable[..., ServerProcess], leaf_kind: str,
                                    variant: str) -> None:
    ws = "ws_compression: true, ws_no_masking: true" if variant != "plain" else ""
    results: dict[str, Any] = {}
    for hub_kind in ("nats-server", "edged"):
        ws_port = free_port()
        hub = start_server(hub_kind, config=HUB % {"leaf_port": free_port(), "ws_port": ws_port},
                           http_port=free_port())
        leaf = start_server(leaf_kind, config=LEAF % {"ws_port": ws_port, "ws": ws}, http_port=free_port())
        try:
            results[hub_kind] = run(core_scenario(hub, leaf))
            assert leaf_count(hub) == 1
        finally:
            leaf.stop()
            hub.stop()
    assert results["edged"] == results["nats-server"]
    assert len(results["edged"]["down"]) == 3
