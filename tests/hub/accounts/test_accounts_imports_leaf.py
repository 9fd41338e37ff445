"""A leaf's imports and mappings seen across its leafnode links, edged as the leaf against nats-server as
the leaf (same config, same nats-server hub): the hub's clients request a service the leaf imports, get a
stream the leaf imports, publish to a subject the leaf maps; the leaf's clients reach a service on the hub
through an import (the response crossing the link on the exporter's `_R_` reply), and the hub's own import."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

import nats
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from tests.support.aio import run
from tests.support.leaf import Hub
from tests.support.servers import ServerProcess

HUB = """
server_name: hub1
leafnodes { port: $LEAF_PORT }
accounts {
  A { users: [ {user: la, password: la}, {user: ca, password: ca} ], exports: [ {service: "hsvc.>"} ] }
  B {
    users: [ {user: lb, password: lb}, {user: cb, password: cb} ]
    imports: [ {service: {account: A, subject: "hsvc.q"}, to: "hq"} ]
  }
}
"""
LEAF = """
server_name: leaf1
leafnodes {
  reconnect: 1
  remotes: [
    { urls: ["nats://la:la@127.0.0.1:%(lp)d"], account: A }
    { urls: ["nats://lb:lb@127.0.0.1:%(lp)d"], account: B }
  ]
}
accounts {
  A {
    users: [ {user: a, password: a} ]
    exports: [ {service: "svc.>"}, {stream: "pub.>"} ]
  }
  B {
    users: [ {user: b, password: b} ]
    imports: [
      {service: {account: A, subject: "svc.a"}, to: "my.a"}
      {service: {account: A, subject: "svc.hub"}, to: "my.hub"}
      {stream: {account: A, subject: "pub.>"}, prefix: "from_a"}
    ]
    mappings: { "orders.*": "orders.central.$1" }
  }
}
"""


async def _until(fn: Callable[[], Any], tries: int = 100) -> Any:
    for _ in range(tries):
        try:
            return await fn()
        except (NoRespondersError, NatsTimeout):
            await asyncio.sleep(0.1)
    raise AssertionError("never answered")


async def scenario(hub: Hub, leaf: ServerProcess,
                   connect: Callable[[int, str], Awaitable[Any]] | None = None) -> dict:
    """`connect(port, user)` for the leaf's users a, b and the hub's ca, cb: by default with passwords."""
    async def by_password(port: int, user: str) -> Any:
        return await nats.connect(f"nats://{user}:{user}@127.0.0.1:{port}")
    connect = connect or by_password
    out: dict[str, Any] = {}
    la, lb = await connect(leaf.port, "a"), await connect(leaf.port, "b")
    ha, hb = await connect(hub.port, "ca"), await connect(hub.port, "cb")
    try:
        async def on_leaf_svc(m: Any) -> None:
            await m.respond(b"leaf:" + m.subject.encode())

        async def on_hub_svc(m: Any) -> None:
            await m.respond(b"hub:" + m.subject.encode() + b":" + m.reply.split(".")[0].encode())

        await la.subscribe("svc.a", cb=on_leaf_svc)
        await ha.subscribe("svc.hub", cb=on_hub_svc)
        await ha.subscribe("hsvc.q", cb=on_hub_svc)
        await la.flush()
        await ha.flush()
        # the hub's client asks the leaf's import (leaf B advertises my.a)
        out["hub asks leaf import"] = (await _until(lambda: hb.request("my.a", b"", timeout=0.5))).data.decode()
        # the leaf's client asks through the import a service that only the hub serves (in A)
        out["leaf import to hub"] = (await _until(lambda: lb.request("my.hub", b"", timeout=0.5))).data.decode()
        # the hub's own import, used by a leaf client (the hub advertises hq to the leaf)
        out["leaf uses hub import"] = (await _until(lambda: lb.request("hq", b"", timeout=0.5))).data.decode()
        # a stream the leaf imports, subscribed on the hub
        got: list = []

        async def on_stream(m: Any) -> None:
            got.append((m.subject, m.data.decode()))
        await hb.subscribe("from_a.>", cb=on_stream)
        await hb.flush()
        for _ in range(50):  # until the hub's interest reached the leaf and was shadowed into A
            await la.publish("pub.probe", b"")
            await la.flush()
            await asyncio.sleep(0.1)
            if got:
                break
        got.clear()
        await la.publish("pub.x", b"1")
        # a subject the leaf maps: published on the hub, received on the leaf under the mapped subject
        mapped: list = []

        async def on_mapped(m: Any) -> None:
            mapped.append((m.subject, m.data.decode()))
        await lb.subscribe("orders.>", cb=on_mapped)
        await lb.flush()
        for _ in range(50):
            await hb.publish("orders.probe", b"")
            await hb.flush()
            await asyncio.sleep(0.1)
            if mapped:
                break
        mapped.clear()
        await hb.publish("orders.new", b"2")
        await hb.flush()
        await asyncio.sleep(0.3)
        out["stream on hub"] = got
        out["mapped on leaf"] = mapped
    finally:
        for nc in (la, lb, ha, hb):
            await nc.close()
    return out


def test_imports_and_mappings_across_the_link_like_nats_server(
        hub_bin: str, start_hub: Callable[..., Hub], start_server: Callable[..., ServerProcess]) -> None:
    res = {}
    for kind in ("nats-server", "edged"):
        hub = start_hub(hub_bin, HUB)
        leaf = start_server(kind, config=LEAF % {"lp": hub.leaf_port}, workdir=tempfile.mkdtemp(prefix="leaf-"))
        res[kind] = run(scenario(hub, leaf), timeout=60)
        leaf.stop()
        hub.stop()
    assert res["edged"] == res["nats-server"]
    assert res["edged"]["hub asks leaf import"] == "leaf:svc.a"
    assert res["edged"]["leaf import to hub"] == "hub:svc.hub:_R_"
    assert res["edged"]["leaf uses hub import"] == "hub:hsvc.q:_R_"
    assert res["edged"]["stream on hub"] == [("from_a.pub.x", "1")]
    assert res["edged"]["mapped on leaf"] == [("orders.central.new", "2")]
