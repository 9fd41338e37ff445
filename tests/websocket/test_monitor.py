"""Monitoring of the WebSocket listener, differential: /varz's `websocket` block and a WebSocket client's
/connz entry (kind Client, type websocket) as nats-server shows them."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import nats
import pytest

from tests.support.aio import run
from tests.support.servers import KINDS, ServerProcess
from tests.websocket.wsraw import ws_server

BLOCK = ('no_tls: true, compression: true, same_origin: true, allowed_origins: ["http://a.example"], '
         'handshake_timeout: "3s", authorization { timeout: 1.5 }')


def get(port: int, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return json.loads(r.read())


async def _observe(srv: ServerProcess, port: int) -> dict[str, Any]:
    ws = await nats.connect(f"ws://127.0.0.1:{port}", name="browser", allow_reconnect=False)
    tcp = await nats.connect(srv.url, name="tcp", allow_reconnect=False)
    try:
        await ws.subscribe("a.b")
        await ws.publish("x", b"12345")
        await ws.flush()
        assert srv.http_port
        return {"port": port, "varz": get(srv.http_port, "/varz"), "connz": get(srv.http_port, "/connz?subs=1")}
    finally:
        await ws.close()
        await tcp.close()


@pytest.fixture(scope="module")
def seen() -> dict[str, dict[str, Any]]:
    out = {}
    for kind in KINDS:
        srv, port = ws_server(kind, BLOCK, http=True)
        try:
            out[kind] = run(_observe(srv, port))
        finally:
            srv.stop()
    return out


def test_varz_websocket_block(seen: dict[str, dict[str, Any]]) -> None:
    ref, ours = seen["nats-server"]["varz"]["websocket"], seen["edged"]["varz"]["websocket"]
    assert ref["port"] == seen["nats-server"]["port"] and ours["port"] == seen["edged"]["port"]
    assert {k: v for k, v in ours.items() if k != "port"} == {k: v for k, v in ref.items() if k != "port"}
    assert ours["handshake_timeout"] == 3_000_000_000 and ours["compression"] is True


def test_connz_shows_websocket_clients(seen: dict[str, dict[str, Any]]) -> None:
    def by_name(kind: str) -> dict[str, dict[str, Any]]:
        return {c.get("name", ""): c for c in seen[kind]["connz"]["connections"]}

    ref, ours = by_name("nats-server"), by_name("edged")
    for name in ("browser", "tcp"):
        r, o = ref[name], ours[name]
        for k in ("kind", "type", "ip", "subscriptions", "in_msgs", "in_bytes", "lang", "subscriptions_list"):
            assert o.get(k) == r.get(k), (name, k, o.get(k), r.get(k))
    assert (ours["browser"]["type"], ours["tcp"]["type"]) == ("websocket", "nats")
