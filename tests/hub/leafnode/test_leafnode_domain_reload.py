"""A JetStream domain changed by SIGHUP on an edged that is both a leaf (of a nats-server hub) and a hub (of a
nats-server leaf): both neighbours reach its JetStream through the new domain once the links are made again,
the old domain answers nowhere, and its stream keeps its messages. nats-server refuses such a reload
(tests/jetstream/api/test_js_domain_reload.py), so there is no nats-server run of this scenario to compare with."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from typing import Any

from nats.errors import NoRespondersError

from tests.hub.leafnode.test_leafnode_accept import JS_BOTTOM, JS_MID, JS_TOP, client, connected, leaf_count
from tests.support.aio import eventually, run, until
from tests.support.servers import ServerProcess, free_port


async def answer(nc: Any, domain: str) -> int | str:
    try:
        return json.loads((await nc.request(f"$JS.{domain}.API.STREAM.INFO.EDGE", b"", timeout=2)).data)[
            "state"]["messages"]
    except NoRespondersError:
        return "no responders"


def test_edged_between_two_nats_servers_moves_to_a_new_domain(start_server: Callable[..., ServerProcess]) -> None:
    ports = {"top_leaf_port": free_port(), "mid_leaf_port": free_port()}
    top = start_server("nats-server", config=JS_TOP % ports, http_port=free_port())
    mid = start_server("edged", config=JS_MID % ports, http_port=free_port())
    bottom = start_server("nats-server", config=JS_BOTTOM % ports)

    async def main() -> None:
        await connected(top)
        await until(lambda: leaf_count(mid) >= 2, 10, 0.05)
        mc = await client(mid)
        tc, bc = await client(top), await client(bottom)
        try:
            js = mc.jetstream()
            await js.add_stream(name="EDGE", subjects=["edge.>"])
            for i in range(4):
                await js.publish(f"edge.{i}", b"m")
            for nc in (tc, bc):
                async def old_domain(nc: Any = nc) -> bool:
                    return await answer(nc, "edge") == 4
                await eventually(old_domain, 10, "the stream through the first domain")
            with open(os.path.join(mid.workdir, "server.conf"), "w") as f:
                f.write((JS_MID % ports).replace("domain: edge", "domain: edge2"))
            mid.signal(signal.SIGHUP)
            for nc in (tc, bc):
                async def new_domain(nc: Any = nc) -> bool:
                    return await answer(nc, "edge2") == 4
                await eventually(new_domain, 15, "the stream through the new domain")
                assert await answer(nc, "edge") == "no responders"
                assert (await nc.jetstream(domain="edge2").account_info()).domain == "edge2"
            # the neighbours' own domains are still where they were, seen from the other end
            for nc, domain in ((tc, "leaf"), (bc, "hub")):
                async def far(nc: Any = nc, domain: str = domain) -> bool:
                    return (await nc.jetstream(domain=domain).account_info()).domain == domain
                await eventually(far, 10, f"domain {domain!r} across edged")
        finally:
            for nc in (mc, tc, bc):
                await nc.close()

    run(main())
