"""A large backlog draining over a slow link must not starve the link: a hub stream sourcing a big edge
backlog through a throttled TCPProxy, while a core request/reply across the link (hub client -> edge
responder -> hub) keeps answering within a bound, and the link is never dropped (no slow consumer, no
reconnect) while the drain runs."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import Callable
from typing import Any

import nats
import pytest

from tests.hub.offline.test_status_backlog import EDGE_CONF, HUB_CONF, SOURCE, count, req, until
from tests.support.aio import run
from tests.support.leaf import Hub, hub_binary
from tests.support.servers import ServerProcess, free_port
from tests.support.tcpproxy import TCPProxy

BACKLOG = 3000
SIZE = 1000
RATE = 400_000  # bytes/s: the drain takes ~8 s
BOUND_S = 1.5  # a request/reply across the link answers within this while the drain runs


@pytest.fixture(scope="module")
def hub_bin() -> str:
    return hub_binary("2.15")


def _get(port: int, path: str) -> dict[str, Any]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def test_backlog_drain_does_not_starve_the_link(hub_bin: str, start_hub: Callable[..., Hub],
                                               start_server: Callable[..., ServerProcess]) -> None:
    hub_mon = free_port()
    hub = start_hub(hub_bin, HUB_CONF + f"\nhttp_port: {hub_mon}\n")
    with TCPProxy("127.0.0.1", hub.leaf_port) as proxy:
        mport = free_port()
        edge = start_server("edged", config=EDGE_CONF.format(store=tempfile.mkdtemp(prefix="slowlink-"),
                                                             port=proxy.port), http_port=mport)

        async def go() -> None:
            hc = await nats.connect(f"nats://app:app@127.0.0.1:{hub.port}", max_reconnect_attempts=-1)
            ec = await nats.connect(f"nats://app:app@127.0.0.1:{edge.port}", max_reconnect_attempts=-1)
            loop = asyncio.get_running_loop()

            async def echo(m: Any) -> None:
                await m.respond(m.data)

            await ec.subscribe("svc.echo", cb=echo)
            try:
                await req(ec, "$JS.API.STREAM.CREATE.telemetry", {"name": "telemetry", "subjects": ["tm.>"]})
                payload = b"t" * SIZE
                js = ec.jetstream()
                for i in range(BACKLOG):
                    await js.publish(f"tm.d{i % 4}", payload)
                proxy.rate = RATE  # a slow link from now on (the connection made through it, too)
                proxy.cut()
                await until(lambda: req(hc, "$JS.leaf.API.INFO", {}, timeout=1), 15, "hub reaches the edge")
                await until(lambda: hc.request("svc.echo", b"up", timeout=1), 15, "request/reply across")
                links_before = await loop.run_in_executor(None, _get, mport, "/jsz")
                # the hub starts sourcing the whole backlog over the slow link
                assert "error" not in await req(hc, "$JS.API.STREAM.CREATE.fleet", SOURCE)

                worst, answered, during = 0.0, 0, 0
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    n = await count(hc, "fleet")
                    t0 = time.monotonic()
                    r = await hc.request("svc.echo", b"ping %d" % answered, timeout=5)
                    took = time.monotonic() - t0
                    assert r.data == b"ping %d" % answered
                    answered += 1
                    if n >= BACKLOG:
                        break
                    if n > 0:
                        during += 1
                        worst = max(worst, took)
                    await asyncio.sleep(0.2)
                assert await count(hc, "fleet") == BACKLOG, "the hub's source drained the backlog"
                assert during >= 5, f"only {during} requests while the backlog drained"
                assert worst < BOUND_S, f"a request/reply across the link took {worst:.2f}s during the drain"

                # the link stayed up: the same connection the whole drain, no slow consumer either side
                after = await loop.run_in_executor(None, _get, mport, "/jsz")
                before_r, after_r = links_before["edged_backlog"]["leaf_remotes"][0], after["edged_backlog"][
                    "leaf_remotes"][0]
                assert after_r["connected"] and after_r["connects"] == before_r["connects"]
                assert after_r["since"] == before_r["since"]
                assert (await loop.run_in_executor(None, _get, mport, "/varz"))["slow_consumers"] == 0
                assert (await loop.run_in_executor(None, _get, hub_mon, "/varz"))["slow_consumers"] == 0
            finally:
                await hc.close()
                await ec.close()

        run(go(), timeout=110)
