"""Authentication and permissions, differential: every scenario runs against nats-server and edged
with the same config file and the same nats-py client code, and must give the same observable result."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from typing import Any

import bcrypt
import nats
import nkeys
import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from edged.security import jwt as jwtmod
from edged.security.creds import write_creds_file
from tests.support.aio import run
from tests.support.servers import KINDS, ServerProcess


async def try_connect(url: str, **kw: Any) -> str:
    """"ok", or the error text the server sent, as a nats-py user sees it."""
    try:
        nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=3, **kw)
    except Exception as e:
        return str(e)
    await nc.close()
    return "ok"


async def errors_of(url: str, action: Any, **kw: Any) -> list[str]:
    """Run `action(nc)` and collect the async errors the server reported."""
    errs: list[str] = []

    async def on_err(e: Exception) -> None:
        errs.append(str(e))

    nc = await nats.connect(url, allow_reconnect=False, error_cb=on_err, **kw)
    try:
        await action(nc)
        await nc.flush()
        await asyncio.sleep(0.1)
    finally:
        await nc.close()
    return errs


async def request_when_ready(nc: Any, subject: str) -> Any:
    """A request, retried while the responder's interest is still propagating (nats-server under load
    can answer 503 for a moment after the responder's flush)."""
    for _ in range(20):
        try:
            return await nc.request(subject, b"", timeout=2)
        except NoRespondersError:
            await asyncio.sleep(0.05)
    raise AssertionError(f"no responders for {subject}")


async def gather(*coros: Any) -> list[Any]:
    return [await c for c in coros]


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


def server(kind: str, config: str, args: list[str] | None = None) -> ServerProcess:
    return ServerProcess(kind, args, config=config)


# ------------------------------------------------------------------------------------ users, tokens


def test_user_password_plain_and_bcrypt(kind: str) -> None:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    conf = f"""authorization {{
  users: [
    {{user: alice, password: wonderland}}
    {{user: bob, password: "{hashed}"}}
  ]
}}"""
    with server(kind, conf) as s:
        host = f"127.0.0.1:{s.port}"

        async def main() -> list[str]:
            return [await try_connect(f"nats://alice:wonderland@{host}"),
                    await try_connect(f"nats://bob:s3cret@{host}"),
                    await try_connect(f"nats://alice:nope@{host}"),
                    await try_connect(f"nats://carol:wonderland@{host}"),
                    await try_connect(f"nats://{host}")]

        got = run(main())
    assert got[:2] == ["ok", "ok"]
    assert all("Authorization Violation" in g for g in got[2:]), got


def test_token(kind: str) -> None:
    with server(kind, "authorization { token: t0k3n }") as s:
        async def main() -> list[str]:
            return [await try_connect(s.url, token="t0k3n"), await try_connect(s.url, token="wrong"),
                    await try_connect(s.url)]

        got = run(main())
    assert got[0] == "ok"
    assert all("Authorization Violation" in g for g in got[1:]), got


def test_cli_user_and_pass(kind: str) -> None:
    with ServerProcess(kind, ["--user", "u1", "--pass", "p1"]) as s:
        host = f"127.0.0.1:{s.port}"
        got = run(gather(try_connect(f"nats://u1:p1@{host}"), try_connect(f"nats://u1:p2@{host}")))
    assert got[0] == "ok" and "Authorization Violation" in got[1]


def test_nkey_user(kind: str, tmp_path: Any) -> None:
    kp = jwtmod.new_keypair(nkeys.PREFIX_BYTE_USER)
    other = jwtmod.new_keypair(nkeys.PREFIX_BYTE_USER)
    seed_file, other_file = tmp_path / "u.nk", tmp_path / "o.nk"
    seed_file.write_bytes(kp.seed)
    other_file.write_bytes(other.seed)
    conf = f"authorization {{ users: [ {{ nkey: {kp.public_key.decode()} }} ] }}"
    with server(kind, conf) as s:
        got = run(gather(try_connect(s.url, nkeys_seed=str(seed_file)),
                                 try_connect(s.url, nkeys_seed=str(other_file)), try_connect(s.url)))
    assert got[0] == "ok"
    assert "Authorization Violation" in got[1] and "Authorization Violation" in got[2], got


def test_no_auth_user(kind: str) -> None:
    conf = """accounts { A: { users: [ {user: a, password: a} ] } }
no_auth_user: a
"""
    with server(kind, conf) as s:
        async def main() -> list[Any]:
            plain = await nats.connect(s.url)
            authed = await nats.connect(f"nats://a:a@127.0.0.1:{s.port}")
            sub = await authed.subscribe("greet")
            await authed.flush()
            await plain.publish("greet", b"hello")
            await plain.flush()
            msg = await sub.next_msg(2)
            await plain.close()
            await authed.close()
            return [msg.data, await try_connect(f"nats://a:wrong@127.0.0.1:{s.port}")]

        got = run(main())
    assert got[0] == b"hello"
    assert "Authorization Violation" in got[1]


# ------------------------------------------------------------------------------------ accounts


def test_accounts_isolate_subjects(kind: str) -> None:
    conf = """accounts {
  A: { users: [ {user: a, password: a} ] }
  B: { users: [ {user: b, password: b} ] }
}"""
    with server(kind, conf) as s:
        host = f"127.0.0.1:{s.port}"

        async def main() -> list[Any]:
            a1 = await nats.connect(f"nats://a:a@{host}")
            a2 = await nats.connect(f"nats://a:a@{host}")
            b = await nats.connect(f"nats://b:b@{host}")
            sa = await a2.subscribe("x")
            sb = await b.subscribe("x")
            await a2.flush()
            await b.flush()
            await a1.publish("x", b"for A")
            await a1.flush()
            got_a = (await sa.next_msg(2)).data
            try:
                await sb.next_msg(0.3)
                got_b: Any = "leaked"
            except NatsTimeout:
                got_b = None
            for c in (a1, a2, b):
                await c.close()
            return [got_a, got_b]

        got = run(main())
    assert got == [b"for A", None]


# ------------------------------------------------------------------------------------ permissions

PERMS = """authorization {
  users: [
    { user: limited, password: p, permissions: {
        publish: { allow: ["ok.>", "_INBOX.>"], deny: ["ok.secret"] }
        subscribe: { allow: ["ok.>", "_INBOX.>", "wide.>"], deny: ["wide.hidden"] }
    } }
    { user: service, password: p, permissions: {
        subscribe: "svc.>"
        allow_responses: true
    } }
    { user: admin, password: p }
  ]
}"""


def test_publish_and_subscribe_violations(kind: str) -> None:
    with server(kind, PERMS) as s:
        url = f"nats://limited:p@127.0.0.1:{s.port}"

        async def act(nc: Any) -> None:
            await nc.publish("ok.fine", b"1")
            await nc.publish("not.allowed", b"2")
            await nc.publish("ok.secret", b"3")
            await nc.subscribe("forbidden")
            await nc.subscribe("wide.hidden")
            await nc.subscribe("nope.*", queue="q")

        errs = run(errors_of(url, act))
    joined = "\n".join(errs).lower()
    assert 'permissions violation for publish to "not.allowed"' in joined
    assert 'permissions violation for publish to "ok.secret"' in joined
    assert 'permissions violation for subscription to "forbidden"' in joined
    assert 'permissions violation for subscription to "wide.hidden"' in joined
    assert 'permissions violation for subscription to "nope.*" using queue "q"' in joined
    assert "ok.fine" not in joined
    assert len(errs) == 5, errs


def test_wildcard_subscription_does_not_receive_denied_subjects(kind: str) -> None:
    with server(kind, PERMS) as s:
        async def main() -> list[bytes]:
            lim = await nats.connect(f"nats://limited:p@127.0.0.1:{s.port}")
            adm = await nats.connect(f"nats://admin:p@127.0.0.1:{s.port}")
            sub = await lim.subscribe("wide.>")
            await lim.flush()
            for subj in ("wide.a", "wide.hidden", "wide.b"):
                await adm.publish(subj, subj.encode())
            await adm.flush()
            out = []
            try:
                while True:
                    out.append((await sub.next_msg(0.5)).data)
            except NatsTimeout:
                pass
            await lim.close()
            await adm.close()
            return out

        got = run(main())
    assert got == [b"wide.a", b"wide.b"]


def test_allow_responses(kind: str) -> None:
    with server(kind, PERMS) as s:
        async def main() -> list[Any]:
            svc = await nats.connect(f"nats://service:p@127.0.0.1:{s.port}")
            adm = await nats.connect(f"nats://admin:p@127.0.0.1:{s.port}")
            errs: list[str] = []

            async def handler(msg: Any) -> None:
                await msg.respond(b"pong")
                await msg.respond(b"second")  # only one response allowed (max 1)

            await svc.subscribe("svc.ping", cb=handler)
            await svc.flush()
            reply = (await request_when_ready(adm, "svc.ping")).data

            async def err_cb(e: Exception) -> None:
                errs.append(str(e))

            svc2 = await nats.connect(f"nats://service:p@127.0.0.1:{s.port}", error_cb=err_cb)
            await svc2.publish("elsewhere", b"x")
            await svc2.flush()
            await asyncio.sleep(0.2)
            for c in (svc, svc2, adm):
                await c.close()
            return [reply, errs]

        got = run(main())
    assert got[0] == b"pong"
    assert any('permissions violation for publish to "elsewhere"' in e.lower() for e in got[1]), got


# ------------------------------------------------------------------------------------ operator / JWT mode


class Operator:
    """An operator, a system account and an APP account with a signing key, as `nsc` would make them."""

    def __init__(self) -> None:
        self.op = jwtmod.new_keypair(nkeys.PREFIX_BYTE_OPERATOR)
        self.sys = jwtmod.new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
        self.app = jwtmod.new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
        self.app_signer = jwtmod.new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
        self.other = jwtmod.new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)  # not known to the server
        self.op_jwt = jwtmod.encode({"sub": pub(self.op), "name": "OP",
                                     "nats": {"type": "operator", "version": 2, "system_account": pub(self.sys)}},
                                    self.op)
        lim = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True, "conn": -1,
               "leaf": -1}
        self.sys_jwt = jwtmod.encode({"sub": pub(self.sys), "name": "SYS",
                                      "nats": {"type": "account", "version": 2, "limits": lim}}, self.op)
        self.app_jwt = jwtmod.encode({"sub": pub(self.app), "name": "APP",
                                      "nats": {"type": "account", "version": 2, "limits": lim,
                                               "signing_keys": [pub(self.app_signer)]}}, self.op)

    def config(self) -> str:
        return (f"operator: {self.op_jwt}\nsystem_account: {pub(self.sys)}\nresolver: MEMORY\n"
                f"resolver_preload: {{\n  {pub(self.sys)}: {self.sys_jwt}\n  {pub(self.app)}: {self.app_jwt}\n}}\n")

    def user(self, path: str, signer: Any = None, issuer_account: Any = None, **nats_claims: Any) -> str:
        u = jwtmod.new_keypair(nkeys.PREFIX_BYTE_USER)
        n: dict[str, Any] = {"type": "user", "version": 2, "subs": -1, "data": -1, "payload": -1}
        n.update(nats_claims)
        if issuer_account is not None:
            n["issuer_account"] = pub(issuer_account)
        claims: dict[str, Any] = {"sub": pub(u), "name": os.path.basename(path), "nats": n}
        if "exp" in nats_claims:
            claims["exp"] = n.pop("exp")
        write_creds_file(path, jwtmod.encode(claims, signer or self.app), u.seed)
        return path


def pub(kp: Any) -> str:
    return kp.public_key.decode()


def test_operator_mode_user_jwts(kind: str) -> None:
    op = Operator()
    d = tempfile.mkdtemp(prefix="jwt-")
    good = op.user(os.path.join(d, "good.creds"))
    via_signer = op.user(os.path.join(d, "signer.creds"), signer=op.app_signer, issuer_account=op.app)
    unknown_acc = op.user(os.path.join(d, "unknown.creds"), signer=op.other)
    expired = op.user(os.path.join(d, "expired.creds"), exp=int(time.time()) - 10)
    limited = op.user(os.path.join(d, "limited.creds"), pub={"allow": ["a.>"]}, sub={"deny": ["b.>"]})
    with server(kind, op.config()) as s:
        async def main() -> list[Any]:
            res = [await try_connect(s.url, user_credentials=p) for p in (good, via_signer, unknown_acc, expired)]
            res.append(await try_connect(s.url))

            async def act(nc: Any) -> None:
                await nc.publish("a.1", b"")
                await nc.publish("c.1", b"")
                await nc.subscribe("b.x")

            res.append(sorted(await errors_of(s.url, act, user_credentials=limited)))
            return res

        got = run(main())
    assert got[0:2] == ["ok", "ok"], got
    for g in got[2:5]:
        assert "Authorization Violation" in g, got
    assert len(got[5]) == 2, got
    assert 'permissions violation for publish to "c.1"' in got[5][0].lower()
    assert 'permissions violation for subscription to "b.x"' in got[5][1].lower()


def test_operator_mode_accounts_isolated(kind: str) -> None:
    op = Operator()
    d = tempfile.mkdtemp(prefix="jwt-")
    u1, u2 = op.user(os.path.join(d, "u1.creds")), op.user(os.path.join(d, "u2.creds"))
    with server(kind, op.config()) as s:
        async def main() -> Any:
            a = await nats.connect(s.url, user_credentials=u1)
            b = await nats.connect(s.url, user_credentials=u2)
            async def respond(m: Any) -> None:
                await m.respond(b"hi")

            await b.subscribe("svc", cb=respond)
            await b.flush()
            r = (await request_when_ready(a, "svc")).data
            try:
                await a.request("nobody", b"", timeout=1)
                nr = "answered"
            except NoRespondersError:
                nr = "no responders"
            await a.close()
            await b.close()
            return [r, nr]

        got = run(main())
    assert got == [b"hi", "no responders"]
