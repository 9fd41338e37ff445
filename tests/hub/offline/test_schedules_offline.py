"""A gateway's scheduled command fires while its hub is unreachable: an edge stream with message schedules
(`allow_msg_schedules`) on an edged whose leafnode link is down delivers the command at its time to a
local consumer, as it would with the link up."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import Callable

import nats

from edged.goformat import format_time
from tests.support.aio import run
from tests.support.leaf import Hub, edge, hub_binary, leaf_remote

HUB_JS = """
server_name: hub1
jetstream { store_dir: "./js", domain: hub }
leafnodes { port: $LEAF_PORT }
accounts { APP { jetstream: enabled, users: [ {user: leaf, password: s3cret}, {user: app, password: app} ] } }
"""


def test_schedule_fires_with_the_hub_down(start_hub: Callable[..., Hub]) -> None:
    from edged.settings.options import JetStreamConfig

    hub = start_hub(hub_binary("2.15"), HUB_JS)
    store = tempfile.mkdtemp(prefix="edge-sched-")

    async def main() -> None:
        async with edge([leaf_remote(hub)], jetstream=JetStreamConfig(enabled=True, store_dir=store,
                                                                      domain="edge")) as srv:
            link = srv.leafnodes.links[0]
            assert await link.wait_connected(5)
            ec = await nats.connect(f"nats://127.0.0.1:{srv.client_port}")
            try:
                cfg = {"name": "CMD", "subjects": ["sched.>", "cmd.>"], "allow_msg_schedules": True}
                r = json.loads((await ec.request("$JS.API.STREAM.CREATE.CMD", json.dumps(cfg).encode(),
                                                 timeout=5)).data)
                assert "error" not in r, r
                sub = await ec.jetstream().subscribe("cmd.>", ordered_consumer=True)  # the device's consumer
                hub.stop()
                for _ in range(100):
                    if not link.is_connected:
                        break
                    await asyncio.sleep(0.1)
                assert not link.is_connected
                at = "@at " + format_time(int(time.time() + 2) * 1_000_000_000)
                ack = json.loads((await ec.request("sched.valve", b"open", timeout=5, headers={
                    "Nats-Schedule": at, "Nats-Schedule-Target": "cmd.valve"})).data)
                assert ack == {"stream": "CMD", "seq": 1, "domain": "edge"}, ack
                m = await sub.next_msg(timeout=15)
                assert (m.subject, m.data) == ("cmd.valve", b"open")
                assert m.headers == {"Nats-Scheduler": "sched.valve", "Nats-Schedule-Next": "purge"}
                assert not link.is_connected  # fired with the hub still away
                state = (await ec.jetstream().stream_info("CMD")).state
                assert (state.messages, state.last_seq) == (1, 2)  # the command; the schedule purged
            finally:
                await ec.close()

    run(main(), timeout=60)
