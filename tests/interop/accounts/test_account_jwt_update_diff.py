"""Account JWTs replaced while clients stay connected, differential against nats-server: a config reload
(SIGHUP) with new `resolver_preload` JWTs applies the new imports, exports and mappings (a subscription made
before the reload included) and drops the old ones; an activation token that runs out drops its import
(nats-server's activationExpired), with no reload."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import tempfile
import time
from collections.abc import Callable
from typing import Any

import nats
from nats.errors import NoRespondersError

from tests.support.aio import eventually, run
from tests.support.identity.jwtaccounts import JwtAccounts
from tests.support.servers import KINDS, ServerProcess


async def _ask(nc: Any, subject: str) -> str:
    try:
        return (await nc.request(subject, b"", timeout=1)).data.decode()
    except NoRespondersError:
        return "no responders"
    except nats.errors.TimeoutError:
        return "timeout"


def _accounts() -> tuple[JwtAccounts, JwtAccounts]:
    """(before, after) views of A and B: after, B imports what it did not and no longer what it did."""
    before = JwtAccounts(tempfile.mkdtemp(prefix="jwtupd-"))
    a = before.pk("A")
    exports = [{"subject": "svc.>", "type": "service"}, {"subject": "pub.>", "type": "stream"}]
    before.add("A", exports=exports)
    before.add("B", imports=[{"account": a, "subject": "svc.old", "type": "service"}])
    after = before.variant()
    after.add("A", exports=exports, mappings={"a.in": [{"subject": "svc.from.map"}]})
    after.add("B", imports=[{"account": a, "subject": "svc.a", "local_subject": "my.a", "type": "service"},
                            {"account": a, "subject": "pub.>", "type": "stream"}],
              mappings={"m.in": [{"subject": "my.a"}]})
    return before, after


async def reload_scenario(srv: ServerProcess, after: str, creds: dict[str, str]) -> dict:
    out: dict[str, Any] = {}
    a = await nats.connect(srv.url, user_credentials=creds["A"])
    b = await nats.connect(srv.url, user_credentials=creds["B"])
    try:
        async def echo(m: Any) -> None:
            await m.respond(m.subject.encode())
        await a.subscribe("svc.>", cb=echo)
        got: list = []

        async def on_pub(m: Any) -> None:
            got.append(m.subject)
        await b.subscribe("pub.>", cb=on_pub)
        seen_by_a: list = []

        async def on_a(m: Any) -> None:
            seen_by_a.append(m.subject)
        await a.subscribe("svc.from.>", cb=on_a)
        await a.flush()
        await b.flush()
        out["before"] = [await _ask(b, s) for s in ("svc.old", "my.a", "m.in")]
        with open(os.path.join(srv.workdir, "server.conf"), "w") as f:
            f.write(after)
        srv.signal(signal.SIGHUP)

        async def applied() -> bool:
            return await _ask(b, "my.a") == "svc.a"
        await eventually(applied, 10, "the new import")
        out["after"] = [await _ask(b, s) for s in ("svc.old", "my.a", "m.in")]
        await a.publish("pub.x", b"")
        await a.publish("a.in", b"")
        await a.flush()
        await asyncio.sleep(0.3)
        out["stream to an older subscription"] = got
        out["exporter's new mapping"] = seen_by_a
        out["still connected"] = a.is_connected and b.is_connected
    finally:
        await a.close()
        await b.close()
    return out


def test_reload_with_new_account_jwts_like_nats_server(start_server: Callable[..., ServerProcess]) -> None:
    before, after = _accounts()
    creds = {"A": before.creds("A"), "B": before.creds("B")}
    res = {}
    for kind in KINDS:
        srv = start_server(kind, config=before.config())
        res[kind] = run(reload_scenario(srv, after.config(), creds), timeout=60)
    assert res["edged"] == res["nats-server"]
    assert res["edged"]["before"] == ["svc.old", "no responders", "no responders"]
    assert res["edged"]["after"] == ["no responders", "svc.a", "svc.a"]
    assert res["edged"]["stream to an older subscription"] == ["pub.x"]
    assert res["edged"]["exporter's new mapping"] == ["svc.from.map"]


async def expiry_scenario(srv: ServerProcess, creds: dict[str, str], expires_at: float) -> dict:
    a = await nats.connect(srv.url, user_credentials=creds["A"])
    b = await nats.connect(srv.url, user_credentials=creds["B"])
    out: dict[str, Any] = {}
    try:
        async def echo(m: Any) -> None:
            await m.respond(m.subject.encode())
        await a.subscribe("priv.>", cb=echo)
        got: list = []

        async def on_pub(m: Any) -> None:
            got.append(m.subject)
        await b.subscribe("sec.>", cb=on_pub)
        await a.flush()
        await b.flush()
        out["while valid"] = await _ask(b, "priv.svc")
        await a.publish("sec.1", b"")
        await a.flush()
        await asyncio.sleep(0.2)
        out["stream while valid"] = list(got)
        await asyncio.sleep(max(0.0, expires_at - time.time()) + 0.5)

        async def gone() -> bool:
            return await _ask(b, "priv.svc") != "priv.svc"
        await eventually(gone, 10, "the service import to be dropped")
        out["after expiry"] = await _ask(b, "priv.svc")
        got.clear()
        await a.publish("sec.2", b"")
        await a.flush()
        await asyncio.sleep(0.3)
        out["stream after expiry"] = got
    finally:
        await a.close()
        await b.close()
    return out


def test_an_activation_that_runs_out_drops_its_import_like_nats_server(
        start_server: Callable[..., ServerProcess]) -> None:
    res = {}
    for kind in KINDS:
        j = JwtAccounts(tempfile.mkdtemp(prefix="jwtexp-"))
        a = j.pk("A")
        j.add("A", exports=[{"subject": "priv.svc", "type": "service", "token_req": True},
                            {"subject": "sec.>", "type": "stream", "token_req": True}])
        exp = int(time.time()) + 4
        j.add("B", imports=[
            {"account": a, "subject": "priv.svc", "type": "service",
             "token": j.activation("A", "B", "priv.svc", "service", exp=exp)},
            {"account": a, "subject": "sec.>", "type": "stream",
             "token": j.activation("A", "B", "sec.>", "stream", exp=exp)}])
        srv = start_server(kind, config=j.config())
        res[kind] = run(expiry_scenario(srv, {"A": j.creds("A"), "B": j.creds("B")}, exp), timeout=60)
    assert res["edged"] == res["nats-server"]
    assert res["edged"]["while valid"] == "priv.svc" and res["edged"]["stream while valid"] == ["sec.1"]
    assert res["edged"]["after expiry"] == "no responders" and res["edged"]["stream after expiry"] == []


async def push_scenario(srv: ServerProcess, j: JwtAccounts, after: JwtAccounts, creds: dict[str, str]) -> dict:
    """Account JWTs pushed on the system account's CLAIMS.UPDATE subjects, good and bad."""
    out: dict[str, Any] = {}
    a = await nats.connect(srv.url, user_credentials=creds["A"])
    b = await nats.connect(srv.url, user_credentials=creds["B"])
    sys_ = await nats.connect(srv.url, user_credentials=creds["SYS"])
    try:
        async def echo(m: Any) -> None:
            await m.respond(m.subject.encode())
        await a.subscribe("svc.>", cb=echo)
        await a.flush()
        b_key = j.pk("B")
        out["before"] = [await _ask(b, s) for s in ("svc.old", "my.a")]

        async def push(subject: str, body: str) -> Any:
            r = json.loads((await sys_.request(subject, body.encode(), timeout=2)).data)
            return r.get("data"), r.get("error")

        other = JwtAccounts(j.workdir)  # another operator: its JWT of B is not trusted
        other.keys = dict(j.keys)
        other.add("B")
        out["untrusted"] = await push(f"$SYS.REQ.ACCOUNT.{b_key}.CLAIMS.UPDATE", other.jwt("B"))
        out["empty"] = await push(f"$SYS.REQ.ACCOUNT.{b_key}.CLAIMS.UPDATE", "")
        out["garbage"] = await push(f"$SYS.REQ.ACCOUNT.{b_key}.CLAIMS.UPDATE", "a.b")
        out["other subject"] = await push(f"$SYS.REQ.ACCOUNT.{j.pk('A')}.CLAIMS.UPDATE", after.jwt("B"))
        out["unknown account"] = await push(f"$SYS.REQ.ACCOUNT.{j.pk('Z')}.CLAIMS.UPDATE", after.jwt("Z"))
        out["still before"] = [await _ask(b, s) for s in ("svc.old", "my.a")]
        out["update"] = await push(f"$SYS.REQ.ACCOUNT.{b_key}.CLAIMS.UPDATE", after.jwt("B"))
        out["after"] = [await _ask(b, s) for s in ("svc.old", "my.a", "m.in")]
        out["back, older subject"] = await push(f"$SYS.ACCOUNT.{b_key}.CLAIMS.UPDATE", j.jwt("B"))
        out["back"] = [await _ask(b, s) for s in ("svc.old", "my.a", "m.in")]
        out["still connected"] = b.is_connected
    finally:
        for nc in (a, b, sys_):
            await nc.close()
    # the answers' server info differs between two servers; the key of the account is a fresh one each run
    return json.loads(json.dumps(out).replace(j.pk("A"), "<A>").replace(j.pk("B"), "<B>").replace(j.pk("Z"), "<Z>"))


def test_account_jwts_pushed_on_claims_update_like_nats_server(start_server: Callable[..., ServerProcess]) -> None:
    before, after = _accounts()
    after.add("Z")
    creds = {"A": before.creds("A"), "B": before.creds("B"), "SYS": before.creds("SYS")}
    res = {}
    for kind in KINDS:
        srv = start_server(kind, config=before.config("A", "B"))
        res[kind] = run(push_scenario(srv, before, after, creds), timeout=60)
    assert res["edged"] == res["nats-server"]
    r = res["edged"]
    assert r["update"] == [{"account": "<B>", "code": 200, "message": "jwt updated"}, None]
    assert r["after"] == ["no responders", "svc.a", "svc.a"] and r["back"] == ["svc.old", "no responders",
                                                                                "no responders"]
    assert r["untrusted"][1]["description"] == "jwt update resulted in error - account validation failed"
    assert r["unknown account"][0]["message"] == "jwt update skipped"


async def revoke_scenario(srv: ServerProcess, j: JwtAccounts, creds: dict[str, str], revoking: str) -> dict:
    closed = asyncio.Event()

    async def on_err(e: Exception) -> None:
        return None

    async def on_closed() -> None:
        closed.set()

    kept = await nats.connect(srv.url, user_credentials=creds["B2"])
    b = await nats.connect(srv.url, user_credentials=creds["B"], error_cb=on_err, closed_cb=on_closed,
                           allow_reconnect=False)
    sys_ = await nats.connect(srv.url, user_credentials=creds["SYS"])
    try:
        r = json.loads((await sys_.request(f"$SYS.REQ.ACCOUNT.{j.pk('B')}.CLAIMS.UPDATE", revoking.encode(),
                                           timeout=2)).data)
        await asyncio.wait_for(closed.wait(), 5)
        # nats-py keeps a server's -ERR as the connection's last error (its error callback is not called)
        return {"answer": r.get("data"), "error": str(b.last_error).lower(), "other user connected": kept.is_connected}
    finally:
        for nc in (kept, b, sys_):
            await nc.close()


def test_a_pushed_account_jwt_revoking_a_user_disconnects_it_like_nats_server(
        start_server: Callable[..., ServerProcess]) -> None:
    from edged.security import jwt as jwtmod
    from edged.security.creds import read_creds_file

    before, _ = _accounts()
    creds = {"B": before.creds("B"), "B2": before.creds("B", "b2"), "SYS": before.creds("SYS")}
    user = jwtmod.decode(read_creds_file(creds["B"])[0])["sub"]
    revoking = before.variant()
    revoking.claims["A"], revoking.claims["B"] = before.claims["A"], dict(before.claims["B"])
    revoking.claims["B"]["revocations"] = {user: int(time.time()) + 5}
    res = {}
    for kind in KINDS:
        srv = start_server(kind, config=before.config("A", "B"))
        res[kind] = run(revoke_scenario(srv, before, creds, revoking.jwt("B")), timeout=30)
    assert res["edged"] == res["nats-server"]
    assert res["edged"]["error"] == "nats: user authentication revoked", res
    assert res["edged"]["other user connected"]
