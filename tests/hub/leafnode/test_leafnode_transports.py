"""Leafnode auth and transports against a real nats-server hub: nkey, operator/JWT `.creds`, TLS with a
test CA and client certs (also handshake_first), WebSocket ws/wss (masking, compression), HTTP CONNECT
proxy for ws and TCP remotes."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from typing import Any

import nats
import nkeys
import pytest

from edged.settings.options import RemoteLeafOpts, TLSConfig
from tests.support.aio import run, until
from tests.support.identity.certs import make_pki
from tests.support.inbox import Inbox, propagated
from tests.support.leaf import Hub, OperatorSetup, edge, hub_binary, new_kp
from tests.support.tcpproxy import TCPProxy

APP_USERS = "{user: leaf, password: s3cret}, {user: app, password: app}"


@pytest.fixture(scope="module")
def hub_bin() -> str:
    return hub_binary("2.15")


async def roundtrip(srv: Any, hub_url: str, **connect: Any) -> None:
    """Messages both ways across the link."""
    hc = await nats.connect(hub_url, **connect)
    ec = await nats.connect(f"nats://127.0.0.1:{srv.client_port}")
    at_hub, at_edge = Inbox(), Inbox()
    await hc.subscribe("to.hub", cb=at_hub.cb)
    await ec.subscribe("to.edge", cb=at_edge.cb)
    await hc.flush()
    await ec.flush()
    await propagated(ec, "to.hub", at_hub)
    await propagated(hc, "to.edge", at_edge)
    big = b"compressible " * 20000
    await ec.publish("to.hub", big)
    await ec.flush()
    for _ in range(200):
        if any(m.data == big for m in at_hub.msgs):
            break
        await asyncio.sleep(0.02)
    assert any(m.data == big for m in at_hub.msgs)
    await hc.close()
    await ec.close()


def test_nkey_auth(hub_bin: str, start_hub: Callable[..., Hub]) -> None:
    kp = new_kp(nkeys.PREFIX_BYTE_USER)
    conf = f"""
leafnodes {{ port: $LEAF_PORT }}
accounts {{ APP {{ users: [ {APP_USERS}, {{nkey: {kp.public_key.decode()}}} ] }} }}
"""

    async def body(hub: Hub) -> None:
        remote = RemoteLeafOpts(urls=[f"nats://127.0.0.1:{hub.leaf_port}"], seed=kp.seed.decode())
        async with edge([remote]) as srv:
            assert await srv.leafnodes.wait_connected(5), srv.leafnodes.links[0].last_error
            assert srv.leafnodes.connections[0].remote_account == "APP"
            await roundtrip(srv, f"nats://app:app@127.0.0.1:{hub.port}")

    run(body(start_hub(hub_bin, conf)))


def test_operator_mode_creds(hub_bin: str, start_hub: Callable[..., Hub]) -> None:
    workdir = tempfile.mkdtemp(prefix="leafjwt-")
    op = OperatorSetup(workdir)
    leaf_creds = op.user_creds("leaf")
    app_creds = op.user_creds("app")
    conf = op.hub_config() + "leafnodes { port: $LEAF_PORT }\n"

    async def body(hub: Hub) -> None:
        remote = RemoteLeafOpts(urls=[f"nats://127.0.0.1:{hub.leaf_port}"], credentials=leaf_creds)
        async with edge([remote]) as srv:
            assert await srv.leafnodes.wait_connected(5), srv.leafnodes.links[0].last_error
            assert srv.leafnodes.connections[0].remote_account == op.app.public_key.decode()
            await roundtrip(srv, f"nats://127.0.0.1:{hub.port}", user_credentials=app_creds)

    run(body(start_hub(hub_bin, conf)))


def test_operator_mode_bad_creds_retried(hub_bin: str, start_hub: Callable[..., Hub]) -> None:
    workdir = tempfile.mkdtemp(prefix="leafjwt-")
    op = OperatorSetup(workdir)
    other = OperatorSetup(workdir)  # a user of an account the hub does not trust
    bad = other.user_creds("intruder")
    conf = op.hub_config() + "leafnodes { port: $LEAF_PORT }\n"

    async def body(hub: Hub) -> None:
        async with edge([RemoteLeafOpts(urls=[f"nats://127.0.0.1:{hub.leaf_port}"], credentials=bad)],
                        reconnect=0.2) as srv:
            link = srv.leafnodes.links[0]
            await until(lambda: link.attempts >= 2 and "Authorization Violation" in link.last_error, 8)
            assert not link.is_connected

    run(body(start_hub(hub_bin, conf)))


@pytest.mark.parametrize("handshake_first", [False, True])
def test_tls_with_ca_and_client_cert(hub_bin: str, pki: dict[str, str], handshake_first: bool,
                                     start_hub: Callable[..., Hub]) -> None:
    hf = "handshake_first: true" if handshake_first else ""
    conf = f"""
leafnodes {{
  port: $LEAF_PORT
  tls {{ cert_file: "{pki['server_cert']}", key_file: "{pki['server_key']}", ca_file: "{pki['ca']}", verify: true, {hf} }}
}}
accounts {{ APP {{ users: [ {APP_USERS} ] }} }}
"""

    async def body(hub: Hub) -> None:
        tls = TLSConfig(ca_file=pki["ca"], cert_file=pki["client_cert"], key_file=pki["client_key"],
                        handshake_first=handshake_first)
        remote = RemoteLeafOpts(urls=[f"tls://leaf:s3cret@127.0.0.1:{hub.leaf_port}"], tls=tls)
        async with edge([remote]) as srv:
            assert await srv.leafnodes.wait_connected(5), srv.leafnodes.links[0].last_error
            conn = srv.leafnodes.connections[0]
            assert conn.transport.get_extra_info("ssl_object") is not None
            await roundtrip(srv, f"nats://app:app@127.0.0.1:{hub.port}")

    run(body(start_hub(hub_bin, conf)))


def test_tls_untrusted_hub_rejected(hub_bin: str, pki: dict[str, str], start_hub: Callable[..., Hub]) -> None:
    other = make_pki(tempfile.mkdtemp(prefix="leafpki2-"))
    conf = f"""
leafnodes {{ port: $LEAF_PORT, tls {{ cert_file: "{pki['server_cert']}", key_file: "{pki['server_key']}" }} }}
accounts {{ APP {{ users: [ {APP_USERS} ] }} }}
"""

    async def body(hub: Hub) -> None:
        async with edge([RemoteLeafOpts(urls=[f"tls://leaf:s3cret@127.0.0.1:{hub.leaf_port}"],
                                        tls=TLSConfig(ca_file=other["ca"]))], reconnect=0.2) as srv:
            link = srv.leafnodes.links[0]
            await until(lambda: "TLS handshake error" in link.last_error, 5)
            assert not link.is_connected

    run(body(start_hub(hub_bin, conf)))


@pytest.mark.parametrize("variant", ["plain", "no_masking", "compression", "prefix"])
def test_websocket(hub_bin: str, variant: str, start_hub: Callable[..., Hub]) -> None:
    comp = "compression: true" if variant == "compression" else ""
    conf = f"""
leafnodes {{ port: $LEAF_PORT }}
websocket {{ port: $WS_PORT, no_tls: true, {comp} }}
accounts {{ APP {{ users: [ {APP_USERS} ] }} }}
"""

    async def body(hub: Hub) -> None:
        path = "/some/prefix" if variant == "prefix" else ""
        remote = RemoteLeafOpts(urls=[f"ws://leaf:s3cret@127.0.0.1:{hub.ws_port}{path}"],
                                ws_no_masking=variant == "no_masking", ws_compression=variant == "compression")
        async with edge([remote]) as srv:
            assert await srv.leafnodes.wait_connected(5), srv.leafnodes.links[0].last_error
            ws = srv.leafnodes.connections[0].transport._p
            assert ws.mask is (variant != "no_masking")
            assert ws.deflate is (variant == "compression")
            await roundtrip(srv, f"nats://app:app@127.0.0.1:{hub.port}")

    run(body(start_hub(hub_bin, conf)))


def test_wss(hub_bin: str, pki: dict[str, str], start_hub: Callable[..., Hub]) -> None:
    conf = f"""
leafnodes {{ port: $LEAF_PORT }}
websocket {{ port: $WS_PORT, tls {{ cert_file: "{pki['server_cert']}", key_file: "{pki['server_key']}" }} }}
accounts {{ APP {{ users: [ {APP_USERS} ] }} }}
"""

    async def body(hub: Hub) -> None:
        remote = RemoteLeafOpts(urls=[f"wss://leaf:s3cret@127.0.0.1:{hub.ws_port}"], tls=TLSConfig(ca_file=pki["ca"]))
        async with edge([remote]) as srv:
            assert await srv.leafnodes.wait_connected(5), srv.leafnodes.links[0].last_error
            assert srv.leafnodes.connections[0].transport.get_extra_info("ssl_object") is not None
            await roundtrip(srv, f"nats://app:app@127.0.0.1:{hub.port}")

    run(body(start_hub(hub_bin, conf)))


@pytest.mark.parametrize("scheme", ["ws", "nats"])
def test_http_connect_proxy(hub_bin: str, scheme: str, start_hub: Callable[..., Hub]) -> None:
    conf = f"""
leafnodes {{ port: $LEAF_PORT }}
websocket {{ port: $WS_PORT, no_tls: true }}
accounts {{ APP {{ users: [ {APP_USERS} ] }} }}
"""

    async def body(hub: Hub) -> None:
        port = hub.ws_port if scheme == "ws" else hub.leaf_port
        with TCPProxy(http_connect=True, auth=("pu", "pp")) as proxy:
            remote = RemoteLeafOpts(urls=[f"{scheme}://leaf:s3cret@127.0.0.1:{port}"], ignore_discovered_urls=True,
                                    proxy={"url": f"http://127.0.0.1:{proxy.port}", "username": "pu",
                                           "password": "pp", "timeout": 2.0})
            async with edge([remote]) as srv:
                assert await srv.leafnodes.wait_connected(5), srv.leafnodes.links[0].last_error
                assert proxy.requests and proxy.requests[0].startswith(f"CONNECT 127.0.0.1:{port} HTTP/1.1")
                await roundtrip(srv, f"nats://app:app@127.0.0.1:{hub.port}")

    run(body(start_hub(hub_bin, conf)))


def test_proxy_auth_failure_reported(hub_bin: str, start_hub: Callable[..., Hub]) -> None:
    conf = f"leafnodes {{ port: $LEAF_PORT }}\naccounts {{ APP {{ users: [ {APP_USERS} ] }} }}\n"

    async def body(hub: Hub) -> None:
        with TCPProxy(http_connect=True, auth=("pu", "pp")) as proxy:
            remote = RemoteLeafOpts(urls=[f"nats://leaf:s3cret@127.0.0.1:{hub.leaf_port}"],
                                    proxy={"url": f"http://127.0.0.1:{proxy.port}", "username": "pu",
                                           "password": "bad"})
            async with edge([remote], reconnect=0.2) as srv:
                link = srv.leafnodes.links[0]
                await until(lambda: "407" in link.last_error, 5)

    run(body(start_hub(hub_bin, conf)))


def test_token_in_url(hub_bin: str, start_hub: Callable[..., Hub]) -> None:
    conf = 'authorization { token: "t0k3n" }\nleafnodes { port: $LEAF_PORT }\n'

    async def body(hub: Hub) -> None:
        async with edge([RemoteLeafOpts(urls=[f"nats://t0k3n@127.0.0.1:{hub.leaf_port}"])]) as srv:
            assert await srv.leafnodes.wait_connected(5), srv.leafnodes.links[0].last_error
            await roundtrip(srv, f"nats://t0k3n@127.0.0.1:{hub.port}")

    run(body(start_hub(hub_bin, conf)))


def test_unsupported_remote_options_rejected() -> None:
    from edged.server import Server
    from edged.settings.options import LeafNodeOpts, Options

    for bad, msg in ((RemoteLeafOpts(urls=["nats://h:1"], compression="s2_auto"), "not supported"),
                     (RemoteLeafOpts(urls=["nats://h:1"], hub=True), "not supported"),
                     (RemoteLeafOpts(urls=["nats://h:1", "ws://h:2"]), "mixes websocket"),
                     (RemoteLeafOpts(urls=["http://h:1"]), "not supported"),
                     (RemoteLeafOpts(urls=[]), "no url")):
        o = Options(host="127.0.0.1", port=0)
        o.leafnodes = LeafNodeOpts(remotes=[bad])
        with pytest.raises(ValueError, match=msg):
            Server(o)
