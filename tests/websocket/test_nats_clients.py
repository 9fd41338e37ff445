"""NATS over WebSocket with a real client (nats-py's WebSocket transport, aiohttp), against nats-server's
WebSocket listener and edged's with the same configuration: core messaging, JetStream and KV through the
listener, crossing to plain TCP clients; wss://; the block's own authorization, no_auth_user and cookies."""

from __future__ import annotations

import ssl
from typing import Any

import nats
import pytest
from nats.js.api import StreamConfig

from tests.support.aio import run
from tests.support.servers import KINDS
from tests.websocket.wsraw import ws_server


async def _messaging(ws_url: str, tcp_url: str, **kw: Any) -> list[Any]:
    """What a WebSocket client and a TCP client see of each other's messages and requests."""
    ws = await nats.connect(ws_url, allow_reconnect=False, **kw)
    tcp = await nats.connect(tcp_url, allow_reconnect=False)
    try:
        ws_sub = await ws.subscribe("to.ws.>")
        tcp_sub = await tcp.subscribe("to.tcp.>")

        async def answer(m: Any) -> None:
            await m.respond(b"ws answers " + m.data)

        await ws.subscribe("svc.ws", cb=answer)
        await ws.flush()
        await tcp.flush()
        big = bytes(range(256)) * 400  # ~100 KB: several frames' worth, compressed when deflate is on
        await tcp.publish("to.ws.a", b"from tcp", headers={"X-K": "v"})
        await tcp.publish("to.ws.big", big)
        await ws.publish("to.tcp.b", b"from ws")
        got: list[Any] = []
        m1 = await ws_sub.next_msg(3)
        m2 = await ws_sub.next_msg(3)
        m3 = await tcp_sub.next_msg(3)
        got += [(m1.subject, m1.data, dict(m1.headers or {})), (m2.subject, m2.data == big), (m3.subject, m3.data)]
        r1 = await tcp.request("svc.ws", b"tcp?", timeout=3)
        r2 = await ws.request("svc.ws", b"self?", timeout=3)
        got += [r1.data, r2.data]
        # many small publishes in one flush: the listener turns the batch into one frame and back
        for i in range(500):
            await ws.publish("to.tcp.n", str(i).encode())
        await ws.flush()
        seen = [(await tcp_sub.next_msg(3)).data for _ in range(500)]
        got.append(seen == [str(i).encode() for i in range(500)])
        return got
    finally:
        await ws.close()
        await tcp.close()


EXPECTED = [("to.ws.a", b"from tcp", {"X-K": "v"}), ("to.ws.big", True), ("to.tcp.b", b"from ws"),
            b"ws answers tcp?", b"ws answers self?", True]


@pytest.mark.parametrize("compression", [False, True], ids=["plain", "deflate"])
@pytest.mark.parametrize("kind", KINDS)
def test_core_messaging_over_ws(kind: str, compression: bool) -> None:
    srv, port = ws_server(kind, f"no_tls: true, compression: {str(compression).lower()}")
    try:
        assert run(_messaging(f"ws://127.0.0.1:{port}", srv.url)) == EXPECTED
    finally:
        srv.stop()


@pytest.mark.parametrize("kind", KINDS)
def test_core_messaging_over_wss(kind: str, pki: dict[str, str]) -> None:
    block = f'tls {{ cert_file: "{pki["server_cert"]}", key_file: "{pki["server_key"]}" }}'
    srv, port = ws_server(kind, block)
    ctx = ssl.create_default_context(cafile=pki["ca"])
    try:
        assert run(_messaging(f"wss://127.0.0.1:{port}", srv.url, tls=ctx)) == EXPECTED

        async def info() -> dict[str, Any]:
            nc = await nats.connect(f"wss://127.0.0.1:{port}", tls=ctx, allow_reconnect=False)
            try:
                return dict(nc._server_info)
            finally:
                await nc.close()

        i = run(info())
        assert (i.get("tls_required"), i.get("tls_available"), i["port"]) == (True, True, port)
    finally:
        srv.stop()


@pytest.mark.parametrize("kind", KINDS)
def test_jetstream_and_kv_over_ws(kind: str) -> None:
    srv, port = ws_server(kind, "no_tls: true, compression: true", extra="jetstream { store_dir: js }\n")

    async def main() -> list[Any]:
        ws = await nats.connect(f"ws://127.0.0.1:{port}", allow_reconnect=False)
        tcp = await nats.connect(srv.url, allow_reconnect=False)
        try:
            js = ws.jetstream()
            await js.add_stream(StreamConfig(name="S", subjects=["s.>"]))
            acks = [await js.publish(f"s.{i % 3}", f"m{i}".encode()) for i in range(60)]
            await tcp.jetstream().publish("s.tcp", b"from tcp")
            psub = await js.pull_subscribe("s.>", durable="D")
            got: list[bytes] = []
            for _ in range(10):
                if len(got) >= 61:
                    break
                for m in await psub.fetch(61 - len(got), timeout=3):
                    got.append(m.data)
                    await m.ack_sync()  # confirmed: consumer_info below sees it
            info = await js.consumer_info("S", "D")
            kv = await js.create_key_value(bucket="cfg")
            await kv.put("a", b"1")
            await tcp.jetstream().key_value("cfg")
            await (await tcp.jetstream().key_value("cfg")).put("b", b"2")
            entry = await kv.get("b")
            keys = sorted(await kv.keys())
            return [acks[-1].seq, got[:2], got[-1], len(got), info.num_ack_pending, info.num_pending, entry.value,
                    keys]
        finally:
            await ws.close()
            await tcp.close()

    try:
        assert run(main()) == [60, [b"m0", b"m1"], b"from tcp", 61, 0, 0, b"2", ["a", "b"]]
    finally:
        srv.stop()


async def _attempt(url: str, **kw: Any) -> str:
    try:
        nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=3, **kw)
    except Exception as e:
        return f"error: {type(e).__name__}"
    try:
        sub = await nc.subscribe("t")
        await nc.publish("t", b"ok")
        return (await sub.next_msg(2)).data.decode()
    except Exception as e:
        return f"error: {type(e).__name__}"
    finally:
        await nc.close()


@pytest.mark.parametrize("kind", KINDS)
def test_block_authorization_overrides_for_ws_only(kind: str) -> None:
    """websocket { authorization { user, password } }: WebSocket clients need those; TCP clients none."""
    srv, port = ws_server(kind, "no_tls: true, authorization { user: w, password: pw }")
    ws = f"ws://127.0.0.1:{port}"

    async def main() -> list[str]:
        return [await _attempt(ws), await _attempt(ws, user="w", password="bad"),
                await _attempt(ws, user="w", password="pw"), await _attempt(srv.url),
                await _attempt(ws, ws_connection_headers={"Cookie": ["u=w; p=pw"]})]

    try:
        got = run(main())
    finally:
        srv.stop()
    assert got[2:4] == ["ok", "ok"] and got[0].startswith("error") and got[1].startswith("error"), got
    assert got[4].startswith("error"), got  # no user_cookie/pass_cookie configured: cookies are not read


@pytest.mark.parametrize("kind", KINDS)
def test_cookies_and_no_auth_user(kind: str) -> None:
    users = "authorization { users: [ {user: a, password: pa}, {user: b, password: pb, permissions: " \
            "{ publish: \"nothing\" }} ] }\n"
    srv, port = ws_server(kind, "no_tls: true, no_auth_user: b, user_cookie: u, pass_cookie: p", extra=users)
    ws = f"ws://127.0.0.1:{port}"

    async def main() -> list[str]:
        return [await _attempt(ws),  # no_auth_user b: may not publish, the message never comes
                await _attempt(ws, ws_connection_headers={"Cookie": ["u=a; p=pa"]}),
                await _attempt(ws, ws_connection_headers={"Cookie": ["u=a; p=nope"]}),
                await _attempt(srv.url)]  # the server-wide rules for TCP: credentials needed

    try:
        got = run(main())
    finally:
        srv.stop()
    assert got[1] == "ok" and all(g.startswith("error") for g in (got[0], got[2], got[3])), got


def _jwt_of(creds_path: str) -> str:
    lines = open(creds_path).read().splitlines()
    return lines[lines.index("-----BEGIN NATS USER JWT-----") + 1].strip()


@pytest.mark.parametrize("kind", KINDS)
def test_jwt_cookie(kind: str, tmp_path: Any) -> None:
    """Operator mode with `jwt_cookie`: a bearer user JWT in the cookie logs a WebSocket client in without
    credentials in its CONNECT; a JWT that needs a signature, or no cookie, does not."""
    from tests.interop.accounts.test_auth import Operator

    op = Operator()
    bearer = _jwt_of(op.user(str(tmp_path / "bearer.creds"), bearer_token=True))
    signed = _jwt_of(op.user(str(tmp_path / "signed.creds")))
    srv, port = ws_server(kind, "no_tls: true, jwt_cookie: jwt", extra=op.config())
    ws = f"ws://127.0.0.1:{port}"

    async def main() -> list[str]:
        return [await _attempt(ws, ws_connection_headers={"Cookie": [f"jwt={bearer}"]}),
                await _attempt(ws, ws_connection_headers={"Cookie": [f"jwt={signed}"]}),
                await _attempt(ws)]

    try:
        got = run(main())
    finally:
        srv.stop()
    assert got[0] == "ok" and got[1].startswith("error") and got[2].startswith("error"), got
