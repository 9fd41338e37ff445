"""A hub whose leafnode port does not advertise itself (`leafnodes { no_advertise: true }`): its first
INFO has no `leafnode_urls`, and a leaf links all the same, as a nats-server leaf does; a client port is
still told apart (the wrong-port check)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.support.aio import run
from tests.support.leaf import Hub, edge, hub_binary, leaf_remote

NO_ADVERTISE_HUB = """
server_name: hub1
leafnodes { port: $LEAF_PORT, no_advertise: true }
accounts {
  APP { users: [ {user: leaf, password: s3cret}, {user: app, password: app} ] }
}
"""


def test_leaf_links_to_a_hub_that_does_not_advertise(start_hub: Callable[..., Hub]) -> None:
    hub = start_hub(hub_binary("2.15"), NO_ADVERTISE_HUB)

    async def main() -> Any:
        async with edge([leaf_remote(hub, account="APP")]) as srv:
            ok = await srv.leafnodes.wait_connected(5)
            return ok, [lk.last_error for lk in srv.leafnodes.links]

    ok, errors = run(main())
    assert ok, errors


def test_a_client_port_is_still_the_wrong_port(start_hub: Callable[..., Hub]) -> None:
    hub = start_hub(hub_binary("2.15"), NO_ADVERTISE_HUB)

    async def main() -> Any:
        from edged.settings.options import RemoteLeafOpts

        remote = RemoteLeafOpts(urls=[f"nats://leaf:s3cret@127.0.0.1:{hub.port}"], account="APP")
        async with edge([remote]) as srv:
            ok = await srv.leafnodes.wait_connected(2)
            return ok, [lk.last_error for lk in srv.leafnodes.links]

    ok, errors = run(main())
    assert not ok and "wrong port" in errors[0], errors
