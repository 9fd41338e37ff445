"""Imports, exports and mappings changed by a config reload (SIGHUP), differential: what the new config
imports works for connected clients (a subscription made before the reload included), what it no longer
imports stops, and a reload to an import the exporter does not export is refused and changes nothing, as
with nats-server."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from typing import Any

import nats
from nats.errors import NoRespondersError

from tests.support.aio import run
from tests.support.servers import KINDS, ServerProcess

BEFORE = """
accounts {
  A: { users: [{user: a, password: a}], exports: [{service: "svc.>"}, {stream: "pub.>"}] }
  B: { users: [{user: b, password: b}], imports: [{service: {account: A, subject: "svc.old"}}] }
}
"""
AFTER = """
accounts {
  A: { users: [{user: a, password: a}], exports: [{service: "svc.>"}, {stream: "pub.>"}] }
  B: {
    users: [{user: b, password: b}]
    imports: [ {service: {account: A, subject: "svc.a"}, to: "my.a"}, {stream: {account: A, subject: "pub.>"}} ]
    mappings: { "m.in": "my.a" }
  }
}
"""


async def _ask(nc: Any, subject: str) -> str:
    try:
        return (await nc.request(subject, b"", timeout=1)).data.decode()
    except NoRespondersError:
        return "no responders"


async def scenario(srv: ServerProcess) -> dict:
    out: dict[str, Any] = {}
    a = await nats.connect(f"nats://a:a@127.0.0.1:{srv.port}")
    b = await nats.connect(f"nats://b:b@127.0.0.1:{srv.port}")
    try:
        async def echo(m: Any) -> None:
            await m.respond(m.subject.encode())
        await a.subscribe("svc.>", cb=echo)
        got: list = []

        async def on_pub(m: Any) -> None:
            got.append(m.subject)
        await b.subscribe("pub.>", cb=on_pub)
        await a.flush()
        await b.flush()
        out["before"] = [await _ask(b, s) for s in ("svc.old", "my.a", "m.in")]
        with open(os.path.join(srv.workdir, "server.conf"), "w") as f:
            f.write(AFTER)
        srv.signal(signal.SIGHUP)
        await asyncio.sleep(1.0)
        out["after"] = [await _ask(b, s) for s in ("svc.old", "my.a", "m.in")]
        await a.publish("pub.x", b"")
        await a.flush()
        await asyncio.sleep(0.3)
        out["stream to an older subscription"] = got
        # a reload to a config that imports what A does not export is refused: nothing changes
        with open(os.path.join(srv.workdir, "server.conf"), "w") as f:
            f.write(AFTER.replace('subject: "svc.a"}, to: "my.a"', 'subject: "nope.a"}, to: "my.a"'))
        srv.signal(signal.SIGHUP)
        await asyncio.sleep(1.0)
        out["after a refused reload"] = [await _ask(b, s) for s in ("svc.old", "my.a", "m.in")]
    finally:
        await a.close()
        await b.close()
    return out


def test_reload_applies_new_imports_like_nats_server(start_server: Callable[..., ServerProcess]) -> None:
    res = {kind: run(scenario(start_server(kind, config=BEFORE)), timeout=60) for kind in KINDS}
    assert res["edged"] == res["nats-server"]
    assert res["edged"]["before"] == ["svc.old", "no responders", "no responders"]
    assert res["edged"]["after"] == ["no responders", "svc.a", "svc.a"]
    assert res["edged"]["stream to an older subscription"] == ["pub.x"]
    assert res["edged"]["after a refused reload"] == res["edged"]["after"]
