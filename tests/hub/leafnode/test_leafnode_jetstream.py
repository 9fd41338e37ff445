"""JetStream domains across the leafnode link: the seed walkthrough (hub.conf on nats-server, leaf.conf on
edged with only ports and directories changed), and the domain rules edged enforces itself."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import tempfile
from collections.abc import Callable
from typing import Any

import nats
import pytest

from edged.settings.options import RemoteLeafOpts
from tests.support.aio import run, until
from tests.support.inprocess import running
from tests.support.leaf import Hub, edge, hub_binary
from tests.support.servers import free_port

needs_js = pytest.mark.skipif(importlib.util.find_spec("edged.jetstream") is None,
                              reason="edged.jetstream (JetStream engine) not available yet")

ACCOUNTS_CONF = """
accounts {
    SYS: {
        users: [{user: admin, password: admin}]
    },
    ACC: {
        users: [{user: acc, password: acc}],
        jetstream: enabled
    }
}
system_account: SYS
"""

HUB_CONF = """
port: {port}
server_name: hub-server
jetstream {{
    store_dir="./store_server"
    domain=hub
}}
leafnodes {{
    port: {leaf_port}
}}
include ./accounts.conf
"""

LEAF_CONF = """
port: {port}
server_name: leaf-server
jetstream {{
    store_dir="{store}"
    domain=leaf
}}
leafnodes {{
    remotes = [
        {{
            urls: ["nats://admin:admin@0.0.0.0:{leaf_port}"]
            account: "SYS"
        }},
        {{
            urls: ["nats://acc:acc@0.0.0.0:{leaf_port}"]
            account: "ACC"
        }}
    ]
}}
include ./accounts.conf
"""


def _load_options(path: str) -> Any:
    try:
        from edged.settings.config import load_options
    except ImportError:
        pytest.skip("edged.settings.config (config loader) not available yet")
    return load_options(path)


@needs_js
def test_seed_walkthrough(hub_bin: str, start_hub: Callable[..., Hub]) -> None:
    workdir = tempfile.mkdtemp(prefix="seed-")
    hub_port, leaf_port, edge_port = free_port(), free_port(), free_port()
    hubdir = os.path.join(workdir, "hub")
    os.makedirs(hubdir)
    with open(os.path.join(workdir, "accounts.conf"), "w") as f:
        f.write(ACCOUNTS_CONF)
    leaf_path = os.path.join(workdir, "leaf.conf")
    with open(leaf_path, "w") as f:
        f.write(LEAF_CONF.format(port=edge_port, leaf_port=leaf_port, store=os.path.join(workdir, "store_leaf")))
    with open(os.path.join(hubdir, "accounts.conf"), "w") as f:
        f.write(ACCOUNTS_CONF)
    start_hub(hub_bin, HUB_CONF.format(port=hub_port, leaf_port=leaf_port), leaf_port=leaf_port, port=hub_port,
              workdir=hubdir)

    async def main() -> None:
        async with running(_load_options(leaf_path)) as srv:
            assert await srv.leafnodes.wait_connected(10), [lk.last_error for lk in srv.leafnodes.links]
            nc = await nats.connect(f"nats://acc:acc@127.0.0.1:{hub_port}")
            await until(lambda: srv.accounts["ACC"].sublist.has_interest("$JS.hub.API.INFO"), 5)
            js_hub = nc.jetstream()
            js_leaf = nc.jetstream(domain="leaf")
            si = await js_hub.add_stream(name="test", subjects=["test"])
            assert si.config.name == "test"
            si = await js_leaf.add_stream(name="test", subjects=["test"])
            assert si.config.name == "test"
            # the edge stream's subject interest has to reach the hub before the publish
            await until(lambda: any(
                "test" == s.subject for s in srv.accounts["ACC"].sublist.all_subs()), 5)
            await asyncio.sleep(0.5)
            await nc.publish("test", b"hello")
            await nc.flush()

            async def count(js: Any) -> int:
                return (await js.stream_info("test")).state.messages

            for _ in range(100):
                if await count(js_hub) == 1 and await count(js_leaf) == 1:
                    break
                await asyncio.sleep(0.05)
            assert await count(js_hub) == 1
            assert await count(js_leaf) == 1
            # an edge client reaches the hub's JetStream through `$JS.hub.API`, its own unprefixed
            ec = await nats.connect(f"nats://acc:acc@127.0.0.1:{edge_port}")
            assert (await ec.jetstream(domain="hub").stream_info("test")).state.messages == 1
            assert (await ec.jetstream().account_info()).domain == "leaf"
            await ec.close()
            await nc.close()

    run(main())


@needs_js
@pytest.mark.parametrize("domain", ["", "hub"])
def test_missing_or_same_domain_rejected(domain: str, start_hub: Callable[..., Hub]) -> None:
    conf = """
server_name: hub1
jetstream { store_dir: "./js", domain: hub }
leafnodes { port: $LEAF_PORT }
accounts { APP { jetstream: enabled, users: [ {user: leaf, password: s3cret} ] } }
"""
    hub = start_hub(hub_binary("2.15"), conf)

    async def main() -> None:
        from edged.settings.options import JetStreamConfig

        store = tempfile.mkdtemp(prefix="edgejs-")
        async with edge([RemoteLeafOpts(urls=[f"nats://leaf:s3cret@127.0.0.1:{hub.leaf_port}"])],
                        jetstream=JetStreamConfig(enabled=True, store_dir=store, domain=domain)) as srv:
            link = srv.leafnodes.links[0]
            want = "domain missing" if not domain else "domain conflict"
            await until(lambda: want in link.last_error, 5)
            assert not link.is_connected

    run(main())
