"""edged as the hub, how leafs get in: TLS on the leafnode port (plaintext INFO then TLS, and
handshake_first), logins bound to accounts (leafnode users, nkeys, operator-mode `.creds`), a client on
the leafnode port, a loop; each against a nats-server hub with the same config, same outcome."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from typing import Any

import nats
import nkeys
import pytest

from edged.security import jwt as jwtmod
from edged.settings.options import RemoteLeafOpts
from tests.hub.leafnode.test_leafnode_accept import HUBS, client, connected, monitor
from tests.support.aio import run, until
from tests.support.leaf import OperatorSetup, edge
from tests.support.servers import ServerProcess, free_port


async def both_ways(hub_nc: Any, leaf_nc: Any) -> list[bytes]:
    """One message each way once interest has crossed: what arrived, in order [at leaf, at hub]."""
    at_leaf: list[bytes] = []
    at_hub: list[bytes] = []

    async def on_leaf(m: Any) -> None:
        at_leaf.append(m.data)

    async def on_hub(m: Any) -> None:
        at_hub.append(m.data)

    await leaf_nc.subscribe("to.leaf", cb=on_leaf)
    await hub_nc.subscribe("to.hub", cb=on_hub)
    for _ in range(100):
        if at_leaf and at_hub:
            break
        await hub_nc.publish("to.leaf", b"probe")
        await leaf_nc.publish("to.hub", b"probe")
        await hub_nc.flush()
        await leaf_nc.flush()
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.1)
    at_leaf.clear()
    at_hub.clear()
    await hub_nc.publish("to.leaf", b"down")
    await leaf_nc.publish("to.hub", b"up")
    await until(lambda: at_leaf and at_hub, 5)
    return [*at_leaf, *at_hub]


@pytest.mark.parametrize("handshake_first", [False, True])
@pytest.mark.parametrize("hub_kind", HUBS)
def test_tls_leafnode_port(hub_kind: str, handshake_first: bool, pki: dict[str, str],
                           start_server: Callable[..., ServerProcess]) -> None:
    leaf_port = free_port()
    hf = "handshake_first: true" if handshake_first else ""
    hub = start_server(hub_kind, http_port=free_port(), config=f"""
leafnodes {{
  port: {leaf_port}
  tls {{ cert_file: "{pki['server_cert']}", key_file: "{pki['server_key']}", ca_file: "{pki['ca']}", verify: true, {hf} }}
}}
""")
    leaf = start_server("nats-server", config=f"""
leafnodes {{ remotes: [ {{ url: "tls://127.0.0.1:{leaf_port}",
  tls {{ ca_file: "{pki['ca']}", cert_file: "{pki['client_cert']}", key_file: "{pki['client_key']}", {hf} }} }} ] }}
""")

    async def main() -> list[bytes]:
        await connected(hub)
        hc = await nats.connect(hub.url)
        lc = await nats.connect(leaf.url)
        try:
            return await both_ways(hc, lc)
        finally:
            await hc.close()
            await lc.close()

    assert run(main()) == [b"down", b"up"]


@pytest.mark.parametrize("hub_kind", HUBS)
def test_client_on_the_leafnode_port_is_turned_away(hub_kind: str,
                                                    start_server: Callable[..., ServerProcess]) -> None:
    leaf_port = free_port()
    start_server(hub_kind, config=f"leafnodes {{ port: {leaf_port} }}")

    async def main() -> str:
        errors: list[str] = []

        async def on_error(e: Exception) -> None:
            errors.append(str(e))

        try:
            nc = await nats.connect(f"nats://127.0.0.1:{leaf_port}", allow_reconnect=False,
                                    error_cb=on_error, connect_timeout=2)
            await nc.close()
        except Exception as e:
            errors.append(str(e))
        return " ".join(errors).lower()

    assert "attempted to connect to leaf node port" in run(main())


@pytest.mark.parametrize("hub_kind", HUBS)
def test_operator_mode_creds_bind_the_leaf_to_its_account(hub_kind: str,
                                                          start_server: Callable[..., ServerProcess]) -> None:
    """A nats-server leaf logs in with a user `.creds` (JWT + nonce signature): bound to APP's public key."""
    op = OperatorSetup(tempfile.mkdtemp(prefix="op-"))
    leaf_creds, app_creds = op.user_creds("leaf"), op.user_creds("app")
    leaf_port = free_port()
    hub = start_server(hub_kind, http_port=free_port(),
                       config=op.hub_config() + f"leafnodes {{ port: {leaf_port} }}\n")
    leaf = start_server("nats-server", config=f"""
leafnodes {{ remotes: [ {{ url: "nats://127.0.0.1:{leaf_port}", credentials: "{leaf_creds}" }} ] }}
""")

    async def main() -> tuple[Any, ...]:
        await connected(hub)
        hc = await nats.connect(hub.url, user_credentials=app_creds)
        lc = await nats.connect(leaf.url)
        try:
            got = await both_ways(hc, lc)
        finally:
            await hc.close()
            await lc.close()
        (lf,) = monitor(hub, "/leafz")["leafs"]
        return got, lf["account"]

    assert run(main()) == ([b"down", b"up"], op.app.public_key.decode())


@pytest.mark.parametrize("hub_kind", HUBS)
def test_nkey_logins(hub_kind: str, start_server: Callable[..., ServerProcess]) -> None:
    """An edged leaf signs the nonce with its nkey seed: a user nkey in APP binds it there; an unknown key
    is refused."""
    kp = jwtmod.new_keypair(nkeys.PREFIX_BYTE_USER)
    stranger = jwtmod.new_keypair(nkeys.PREFIX_BYTE_USER)
    leaf_port = free_port()
    hub = start_server(hub_kind, http_port=free_port(), config=f"""
leafnodes {{ port: {leaf_port} }}
accounts {{ APP {{ users: [ {{nkey: {kp.public_key.decode()}}}, {{user: app, password: app}} ] }} }}
""")

    async def main() -> tuple[Any, ...]:
        good = RemoteLeafOpts(urls=[f"nats://127.0.0.1:{leaf_port}"], seed=kp.seed.decode())
        bad = RemoteLeafOpts(urls=[f"nats://127.0.0.1:{leaf_port}"], seed=stranger.seed.decode())
        async with edge([bad], server_name="stranger") as srv:
            link = srv.leafnodes.links[0]
            await until(lambda: "Authorization Violation" in link.last_error, 5)
            refused = link.is_connected
        async with edge([good]) as srv:
            assert await srv.leafnodes.wait_connected(5), srv.leafnodes.links[0].last_error
            remote_account = srv.leafnodes.connections[0].remote_account
            hc = await client(hub)
            ec = await nats.connect(f"nats://127.0.0.1:{srv.client_port}")
            try:
                got = await both_ways(hc, ec)
            finally:
                await hc.close()
                await ec.close()
        return refused, remote_account, got

    assert run(main()) == (False, "APP", [b"down", b"up"])


@pytest.mark.parametrize("hub_kind", HUBS)
def test_loop_detected(hub_kind: str, start_server: Callable[..., ServerProcess]) -> None:
    """A leaf whose link comes back to the same hub (hub -> A -> hub) is caught by `$LDS.` and refused."""
    leaf_port = free_port()
    hub = start_server(hub_kind, http_port=free_port(), config=f"leafnodes {{ port: {leaf_port} }}")
    # a nats-server that is a hub for the loop's second link and a leaf of `hub` on its first
    mid_port = free_port()
    mid = start_server("nats-server", config=f"""
leafnodes {{ port: {mid_port}, remotes: [ {{ url: "nats://127.0.0.1:{leaf_port}" }} ] }}
""")
    await_loop = f"""
leafnodes {{ remotes: [ {{ url: "nats://127.0.0.1:{mid_port}" }}, {{ url: "nats://127.0.0.1:{leaf_port}" }} ] }}
"""
    third = start_server("nats-server", config=await_loop)

    async def main() -> None:
        await until(lambda: "loop detected" in (third.log_tail(20000) + mid.log_tail(20000)).lower(), 10, 0.1)
        hc = await nats.connect(hub.url)  # the hub itself is undisturbed
        sub = await hc.subscribe("still.here")
        await hc.publish("still.here", b"ok")
        assert (await sub.next_msg(timeout=1)).data == b"ok"
        await hc.close()

    run(main())


PERMS_HUB = """
leafnodes {{ port: {leaf_port} }}
accounts {{ APP {{ users: [
  {{user: leaf, password: s3cret, permissions: {{ publish: {{ allow: ["up.>"] }}, subscribe: {{ allow: ["down.>"] }} }} }},
  {{user: app, password: app}}
] }} }}
"""


@pytest.mark.parametrize("hub_kind", HUBS)
def test_leaf_user_permissions_become_import_and_export(hub_kind: str,
                                                        start_server: Callable[..., ServerProcess]) -> None:
    """The leaf user's subscribe permission is what the leaf gets, its publish permission what the hub
    takes from it; the nats-server leaf enforces its side from the `connect_info` INFO, the hub its own."""
    leaf_port = free_port()
    hub = start_server(hub_kind, http_port=free_port(), config=PERMS_HUB.format(leaf_port=leaf_port))
    leaf = start_server("nats-server", config=f"""
leafnodes {{ remotes: [ {{ url: "nats://leaf:s3cret@127.0.0.1:{leaf_port}" }} ] }}
""")

    async def main() -> tuple[list[str], list[str]]:
        await connected(hub)
        hc = await client(hub)
        lc = await nats.connect(leaf.url)
        try:
            at_leaf: list[str] = []
            at_hub: list[str] = []

            async def on_leaf(m: Any) -> None:
                at_leaf.append(m.subject)

            async def on_hub(m: Any) -> None:
                at_hub.append(m.subject)

            await lc.subscribe("down.>", cb=on_leaf)
            await lc.subscribe("other.>", cb=on_leaf)
            await hc.subscribe("up.>", cb=on_hub)
            await hc.subscribe("side.>", cb=on_hub)
            for _ in range(100):  # the allowed interest crosses
                if at_leaf and at_hub:
                    break
                await hc.publish("down.probe", b"")
                await lc.publish("up.probe", b"")
                await hc.flush()
                await lc.flush()
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
            at_leaf.clear()
            at_hub.clear()
            for s in ("down.1", "other.1"):
                await hc.publish(s, b"")
            for s in ("up.1", "side.1"):
                await lc.publish(s, b"")
            await hc.flush()
            await lc.flush()
            await asyncio.sleep(0.5)
            return at_leaf, at_hub
        finally:
            await hc.close()
            await lc.close()

    assert run(main()) == (["down.1"], ["up.1"])


@pytest.mark.parametrize("hub_kind", HUBS)
def test_expiring_user_jwt_closes_the_link(hub_kind: str, start_server: Callable[..., ServerProcess]) -> None:
    import time

    from tests.support.leaf import creds_text, encode_jwt, new_kp

    op = OperatorSetup(tempfile.mkdtemp(prefix="op-"))
    u = new_kp(nkeys.PREFIX_BYTE_USER)
    jwt = encode_jwt({"sub": u.public_key.decode(), "name": "short", "exp": int(time.time()) + 3,
                      "nats": {"type": "user", "version": 2, "pub": {}, "sub": {}, "subs": -1, "data": -1,
                               "payload": -1}}, op.app)
    path = f"{op.workdir}/short.creds"
    with open(path, "w") as f:
        f.write(creds_text(jwt, u.seed))
    leaf_port = free_port()
    hub = start_server(hub_kind, http_port=free_port(),
                       config=op.hub_config() + f"leafnodes {{ port: {leaf_port} }}\n")
    leaf = start_server("nats-server", config=f"""
leafnodes {{ remotes: [ {{ url: "nats://127.0.0.1:{leaf_port}", credentials: "{path}" }} ] }}
""")

    async def main() -> None:
        await connected(hub)
        await until(lambda: "User Authentication Expired" in leaf.log_tail(20000), 10, 0.1)

    run(main())


@pytest.mark.parametrize("hub_kind", HUBS)
def test_leafs_without_credentials_bound_to_the_configured_account(hub_kind: str,
                                                                   start_server: Callable[..., ServerProcess]) -> None:
    """No logins anywhere: `leafnodes { authorization { account } }` binds every leaf to that account."""
    leaf_port = free_port()
    hub = start_server(hub_kind, http_port=free_port(), config=f"""
leafnodes {{ port: {leaf_port}, authorization {{ account: APP }} }}
accounts {{ APP {{ }} }}
""")
    start_server("nats-server", config=f'leafnodes {{ remotes: [ {{ url: "nats://127.0.0.1:{leaf_port}" }} ] }}')

    async def main() -> str:
        await connected(hub)
        return str(monitor(hub, "/leafz")["leafs"][0]["account"])

    assert run(main()) == "APP"
