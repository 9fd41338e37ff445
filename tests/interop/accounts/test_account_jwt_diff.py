"""Account JWT exports, imports and mappings in operator mode, differential: the same operator, account and
user JWTs (MEMORY resolver, resolver_preload) on nats-server and on edged, the same observable result.
A exports services and streams, some public, some private (an activation token, `token_req`), one naming
the importer in a subject token (`account_token_position`); B imports them (`local_subject` renames with
`$n` references, the deprecated `to`, valid tokens signed by A and by A's signing key); C tries without a
token, with an expired, a revoked and an untrusted one; D's JWT carries B's token and E has more imports than
its limit allows, so both accounts are unusable. Also the account's default permissions and mappings
(wildcard, weighted, cluster-scoped)."""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
import time
from collections.abc import Callable
from typing import Any

import nats
import nkeys
import pytest
from nats.errors import NoRespondersError

from edged.security import jwt as jwtmod
from tests.support.aio import run
from tests.support.identity.jwtaccounts import UNLIMITED, JwtAccounts
from tests.support.servers import KINDS, ServerProcess


def make_accounts() -> JwtAccounts:
    j = JwtAccounts(tempfile.mkdtemp(prefix="jwtacc-"))
    a_signer = jwtmod.new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    rogue = jwtmod.new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    now = int(time.time())
    b, c = j.pk("B"), j.pk("C")
    j.add("A", signing_keys=[a_signer.public_key.decode()], exports=[
        {"subject": "svc.>", "type": "service"},
        {"subject": "st.req", "type": "service", "response_type": "Stream"},
        {"subject": "priv.svc", "type": "service", "token_req": True, "revocations": {c: now - 50}},
        {"subject": "in.>", "type": "service"},
        {"subject": "late.svc", "type": "service", "token_req": True},
        {"subject": "pub.>", "type": "stream"},
        {"subject": "ev.*.*", "type": "stream"},
        {"subject": "priv.>", "type": "stream", "token_req": True},
        {"subject": "secret.>", "type": "stream", "token_req": True},
        {"subject": "acct.*.>", "type": "stream", "account_token_position": 2},
    ], mappings={
        "in.*": [{"subject": "svc.mapped.$1"}],
        "split.a": [{"subject": "split.one", "weight": 50}, {"subject": "split.two", "weight": 50}],
        "some.a": [{"subject": "some.moved", "weight": 40}],
        "cl.a": [{"subject": "cl.elsewhere", "cluster": "other"}],
        "orders.*": [{"subject": "orders.central.{{wildcard(1)}}"}],
    })
    j.add("B", imports=[
        {"account": j.pk("A"), "subject": "svc.a", "local_subject": "my.a", "type": "service"},
        {"account": j.pk("A"), "subject": "svc.*.*", "local_subject": "sw.$2.$1", "type": "service"},
        {"account": j.pk("A"), "subject": "old.a", "to": "svc.old", "type": "service"},
        {"account": j.pk("A"), "subject": "st.req", "type": "service"},
        {"account": j.pk("A"), "subject": "in.x", "local_subject": "via.map", "type": "service"},
        {"account": j.pk("A"), "subject": "priv.svc", "type": "service",
         "token": j.activation("A", "B", "priv.svc", "service", signer=a_signer, issuer_account=j.pk("A"))},
        {"account": j.pk("A"), "subject": "pub.>", "to": "from_a", "type": "stream"},
        {"account": j.pk("A"), "subject": "ev.*.*", "local_subject": "evt.$2.$1", "type": "stream"},
        {"account": j.pk("A"), "subject": "priv.>", "type": "stream",
         "token": j.activation("A", "B", "priv.>", "stream")},
        {"account": j.pk("A"), "subject": f"acct.{b}.>", "local_subject": "mine.>", "type": "stream"},
    ], default_permissions={"pub": {"deny": ["forbidden.>"]}})
    j.add("C", imports=[
        {"account": j.pk("A"), "subject": "pub.>", "type": "stream"},
        {"account": j.pk("A"), "subject": "priv.>", "type": "stream"},
        {"account": j.pk("A"), "subject": "secret.>", "type": "stream",
         "token": j.activation("A", "C", "secret.>", "stream", signer=rogue, issuer_account=j.pk("A"))},
        {"account": j.pk("A"), "subject": f"acct.{b}.>", "type": "stream"},
        {"account": j.pk("A"), "subject": "priv.svc", "type": "service",
         "token": j.activation("A", "C", "priv.svc", "service", iat=now - 100)},
        {"account": j.pk("A"), "subject": "late.svc", "type": "service",
         "token": j.activation("A", "C", "late.svc", "service", exp=now - 10)},
        {"account": j.pk("A"), "subject": "svc.c", "local_subject": "c.svc", "type": "service"},
    ])
    j.add("D", imports=[{"account": j.pk("A"), "subject": "priv.>", "type": "stream",
                         "token": j.activation("A", "B", "priv.>", "stream")}])
    j.add("E", limits={**UNLIMITED, "imports": 1}, imports=[
        {"account": j.pk("A"), "subject": "pub.>", "type": "stream"},
        {"account": j.pk("A"), "subject": "ev.*.*", "type": "stream"}])
    return j


async def _connect(srv: ServerProcess, creds: str, **kw: Any) -> Any:
    return await nats.connect(srv.url, user_credentials=creds, **kw)


async def _collect(nc: Any, subject: str, got: list, queue: str = "") -> Any:
    async def cb(m: Any) -> None:
        got.append((m.subject, m.data.decode()))
    return await nc.subscribe(subject, queue=queue, cb=cb)


async def _settle(*ncs: Any) -> None:
    for nc in ncs:
        await nc.flush()
    await asyncio.sleep(0.2)


async def _ask(nc: Any, subject: str) -> str:
    try:
        return (await nc.request(subject, subject.encode(), timeout=1)).data.decode()
    except NoRespondersError:
        return "no responders"
    except nats.errors.TimeoutError:
        return "timeout"


async def services(srv: ServerProcess, j: JwtAccounts, creds: dict[str, str]) -> dict:
    a, b, c = [await _connect(srv, creds[n]) for n in "ABC"]
    out: dict[str, Any] = {}
    try:
        async def echo(m: Any) -> None:
            await m.respond(f"{m.subject}|{m.reply[:4]}|{m.data.decode()}".encode())

        async def stream3(m: Any) -> None:
            for i in range(3):
                await a.publish(m.reply, f"part{i}".encode())

        await a.subscribe("svc.>", cb=echo)
        await a.subscribe("priv.svc", cb=echo)
        await a.subscribe("late.svc", cb=echo)
        await a.subscribe("st.req", cb=stream3)
        await _settle(a, b, c)
        for subject in ("my.a", "sw.k1.k2", "old.a", "via.map", "priv.svc", "svc.a", "svc.old", "nothing"):
            out[f"B {subject}"] = await _ask(b, subject)
        for subject in ("priv.svc", "late.svc", "c.svc"):
            out[f"C {subject}"] = await _ask(c, subject)
        got: list = []
        inbox = b.new_inbox()
        await _collect(b, inbox, got)
        await b.flush()
        await b.publish("st.req", b"", reply=inbox)
        await _settle(b, a)
        out["stream response"] = [d for _, d in got]
    finally:
        for nc in (a, b, c):
            await nc.close()
    return out


async def streams(srv: ServerProcess, j: JwtAccounts, creds: dict[str, str]) -> dict:
    a, b, c = [await _connect(srv, creds[n]) for n in "ABC"]
    out: dict[str, Any] = {}
    bk, ck = j.pk("B"), j.pk("C")
    try:
        subs: dict[str, list] = {k: [] for k in ("b_all", "b_prefix_x", "b_evt", "b_q1", "b_q2", "c_all")}
        await _collect(b, ">", subs["b_all"])
        await _collect(b, "from_a.pub.x.*", subs["b_prefix_x"])
        await _collect(b, "evt.*.one", subs["b_evt"])
        await _collect(b, "from_a.pub.q", subs["b_q1"], queue="grp")
        await _collect(b, "from_a.pub.q", subs["b_q2"], queue="grp")
        await _collect(c, ">", subs["c_all"])
        await _settle(a, b, c)
        for subject in ("pub.x.1", "pub.y", "ev.one.two", "priv.a", "secret.s", f"acct.{bk}.k", f"acct.{ck}.k",
                        "other", "pub.q", "pub.q"):
            await a.publish(subject, subject.replace(bk, "<B>").replace(ck, "<C>").encode())
        await _settle(a, b, c)
        for k, v in subs.items():
            out[k] = sorted((s.replace(bk, "<B>").replace(ck, "<C>"), d) for s, d in v)
        out["queue total"] = len(out.pop("b_q1")) + len(out.pop("b_q2"))
    finally:
        for nc in (a, b, c):
            await nc.close()
    return out


async def mappings(srv: ServerProcess, j: JwtAccounts, creds: dict[str, str]) -> dict:
    a = await _connect(srv, creds["A"])
    out: dict[str, Any] = {}
    try:
        got: list = []
        await _collect(a, ">", got)
        await _settle(a)
        for subject in ("orders.new", "in.q", "cl.a", "orders.central.x"):
            await a.publish(subject, subject.encode())
        for _ in range(200):
            await a.publish("split.a", b"")
            await a.publish("some.a", b"")
        await _settle(a)
        out["plain"] = sorted(x for x in got if not x[0].startswith(("split.", "some.")))
        counts: dict[str, int] = {}
        for s, _ in got:
            if s.startswith(("split.", "some.")):
                counts[s] = counts.get(s, 0) + 1
        out["weighted subjects"] = sorted(counts)
        out["weighted total"] = sum(counts.values())
        # statistical bounds only: 50/50 and 40/60 of 200, far from the edges
        out["weighted spread"] = all(40 <= n <= 160 for n in counts.values())
    finally:
        await a.close()
    return out


async def permissions_and_invalid(srv: ServerProcess, j: JwtAccounts, creds: dict[str, str]) -> dict:
    out: dict[str, Any] = {}
    errs: list = []

    async def on_err(e: Exception) -> None:
        errs.append(str(e).lower())

    # B's user JWT sets no permissions: B's default_permissions apply
    b = await _connect(srv, creds["B"], error_cb=on_err)
    own = await _connect(srv, creds["B-own"], error_cb=on_err)
    try:
        got: list = []
        await _collect(b, ">", got)
        await _settle(b)
        await b.publish("forbidden.x", b"1")
        await own.publish("forbidden.y", b"2")  # a user with permissions of its own: the defaults do not apply
        await b.publish("allowed.x", b"3")
        await _settle(b, own)
        out["default permissions"] = sorted(got), sorted(errs)
    finally:
        await b.close()
        await own.close()
    for name in ("D", "E"):
        try:
            nc = await _connect(srv, creds[name], max_reconnect_attempts=0, allow_reconnect=False,
                                connect_timeout=2)
            await nc.close()
            out[name] = "connected"
        except Exception as e:  # nats-py raises the server's -ERR
            out[name] = "authorization violation" if "authorization violation" in str(e).lower() else repr(e)
    return out


def _observe(start_server: Callable[..., ServerProcess], scenario: Callable, debug: bool = False) -> dict:
    j = make_accounts()
    creds = {n: j.creds(n) for n in "ABCDE"}
    creds["B-own"] = j.creds("B", "bown", pub={"allow": [">"]})
    res = {}
    for kind in KINDS:
        srv = start_server(kind, ["-D"] if debug else [], config=j.config())
        res[kind] = run(scenario(srv, j, creds), timeout=60)
        res[kind + " log"] = srv.log_tail(200_000)
    return res


@pytest.mark.parametrize("scenario", [services, streams, mappings, permissions_and_invalid],
                         ids=lambda f: f.__name__)
def test_same_as_nats_server(start_server: Callable[..., ServerProcess], scenario: Callable) -> None:
    res = _observe(start_server, scenario)
    assert res["edged"] == res["nats-server"]


def test_the_expected_flows_happen(start_server: Callable[..., ServerProcess]) -> None:
    """Not only the same: the flows the JWTs ask for (two servers that both drop everything would agree)."""
    srv = start_server("edged", config=(j := make_accounts()).config())
    creds = {n: j.creds(n) for n in "ABC"}
    creds["B-own"] = j.creds("B", "bown", pub={"allow": [">"]})
    s = run(services(srv, j, creds), timeout=60)
    assert s["B my.a"] == "svc.a|_R_.|my.a" and s["B sw.k1.k2"] == "svc.k2.k1|_R_.|sw.k1.k2"
    assert s["B old.a"] == "svc.old|_R_.|old.a" and s["B via.map"] == "svc.mapped.x|_R_.|via.map"
    assert s["B priv.svc"] == "priv.svc|_R_.|priv.svc"  # token signed by A's signing key
    assert s["B svc.a"] == "no responders" and s["B svc.old"] == "no responders"
    # C: revoked token, expired token; its public import works
    assert (s["C priv.svc"], s["C late.svc"], s["C c.svc"]) == ("no responders", "no responders", "svc.c|_R_.|c.svc")
    assert s["stream response"] == ["part0", "part1", "part2"]
    st = run(streams(srv, j, creds), timeout=60)
    assert st["b_all"] == [("evt.two.one", "ev.one.two"), ("from_a.pub.q", "pub.q"), ("from_a.pub.q", "pub.q"),
                           ("from_a.pub.x.1", "pub.x.1"), ("from_a.pub.y", "pub.y"), ("mine.k", "acct.<B>.k"),
                           ("priv.a", "priv.a")]
    assert st["c_all"] == [("pub.q", "pub.q"), ("pub.q", "pub.q"), ("pub.x.1", "pub.x.1"), ("pub.y", "pub.y")]
    assert st["queue total"] == 2
    m = run(mappings(srv, j, creds), timeout=60)
    assert m["plain"] == [("cl.a", "cl.a"), ("orders.central.new", "orders.new"),
                          ("orders.central.x", "orders.central.x"), ("svc.mapped.q", "in.q")]
    assert m["weighted subjects"] == ["some.a", "some.moved", "split.one", "split.two"] and m["weighted spread"]


def test_refused_imports_are_logged_as_nats_server_logs_them(start_server: Callable[..., ServerProcess]) -> None:
    res = _observe(start_server, services, debug=True)  # connects A, B and C, which loads them
    j_lines = {}
    for kind in KINDS:
        found = (re.search(r"\[(DBG|INF|WRN|ERR)\] (.*)", ln) for ln in res[kind + " log"].splitlines())
        j_lines[kind] = sorted([f"[{m[1]}] {m[2]}" for m in found if m and (
            "import not authorized" in m[2] or "has validation issues" in m[2]
            or "activation token doesn't match" in m[2] or "more imports than allowed" in m[2])])
    assert j_lines["edged"] == j_lines["nats-server"]
    # C's five refused imports (no token, untrusted signer, wrong account token, revoked, expired); D and E
    assert len([ln for ln in j_lines["edged"] if "import not authorized" in ln]) == 5, j_lines
    assert len([ln for ln in j_lines["edged"] if "has validation issues" in ln]) == 2, j_lines


def test_accountz_lists_jwt_imports_exports_and_mappings_alike(start_server: Callable[..., ServerProcess]) -> None:
    import urllib.request

    from tests.support.servers import free_port

    def key(x: Any) -> str:
        return json.dumps(x, sort_keys=True)

    j = make_accounts()
    creds = {n: j.creds(n) for n in "AB"}
    docs: dict[str, list] = {}
    for kind in KINDS:
        srv = start_server(kind, config=j.config(), http_port=free_port())

        async def load(srv: ServerProcess = srv) -> None:  # nats-server loads an account when it is first used
            for n in "AB":
                await (await _connect(srv, creds[n])).close()
        run(load(), timeout=30)
        docs[kind] = []
        for acc in ("A", "B"):
            with urllib.request.urlopen(f"http://127.0.0.1:{srv.http_port}/accountz?acc={j.pk(acc)}",
                                        timeout=5) as r:
                d = json.load(r)["account_detail"]
            # nats-server also lists the system account's imports it adds to every account (edged has none);
            # it lists exports and imports in Go's map order
            docs[kind].append((sorted(d.get("exports") or [], key=key),
                               sorted((i for i in d.get("imports") or [] if i["account"] != j.pk("SYS")), key=key),
                               d.get("mappings"), d.get("name_tag"), d.get("issuer_key")))
    for ours, ref in zip(docs["edged"], docs["nats-server"], strict=True):
        for a, b in zip(ours, ref, strict=True):
            assert a == b, (a, b)
    exports, _, mappings, name, _ = docs["edged"][0]
    assert {"subject": "priv.>", "type": "stream", "token_req": True} in exports and name == "A"
    assert mappings["cl.a"] == [{"subject": "cl.a", "weight": 100},
                                {"subject": "cl.elsewhere", "weight": 100, "cluster": "other"}]
    assert any(i.get("local_subject") == "sw.*.*" for i in docs["edged"][1][1])


async def cycle(srv: ServerProcess, creds: dict[str, str]) -> dict:
    na = await _connect(srv, creds["A"])  # first: nats-server loads A, and through its imports B
    nb = await _connect(srv, creds["B"])
    out: dict[str, Any] = {}
    try:
        got: dict[str, list] = {"A": [], "B": []}
        await _collect(na, "pub.>", got["A"])
        await _collect(nb, "pub.>", got["B"])

        async def respond(m: Any) -> None:
            await m.respond(m.subject.encode())
        await na.subscribe("svc.a", cb=respond)
        await nb.subscribe("svc.b", cb=respond)
        await _settle(na, nb)
        await na.publish("pub.x", b"")
        await nb.publish("pub.y", b"")
        out["A asks svc.b"], out["B asks svc.a"] = await _ask(na, "svc.b"), await _ask(nb, "svc.a")
        await _settle(na, nb)
        out["streams"] = {k: sorted(v) for k, v in got.items()}
    finally:
        await na.close()
        await nb.close()
    return out


def test_an_import_cycle_is_cut_where_nats_server_cuts_it(start_server: Callable[..., ServerProcess]) -> None:
    """A and B import each other's services and streams: the import that closes the cycle is refused (A's,
    whose exporter B is loaded first), logged as nats-server logs it, and the rest works the same."""
    j = JwtAccounts(tempfile.mkdtemp(prefix="jwtcyc-"))
    both = [{"subject": "svc.>", "type": "service"}, {"subject": "pub.>", "type": "stream"}]
    j.add("A", exports=both, imports=[{"account": j.pk("B"), "subject": "svc.>", "type": "service"},
                                      {"account": j.pk("B"), "subject": "pub.>", "type": "stream"}])
    j.add("B", exports=both, imports=[{"account": j.pk("A"), "subject": "svc.>", "type": "service"},
                                      {"account": j.pk("A"), "subject": "pub.>", "type": "stream"}])
    creds = {n: j.creds(n) for n in "AB"}
    res, logs = {}, {}
    for kind in KINDS:
        srv = start_server(kind, ["-D"], config=j.config())
        res[kind] = run(cycle(srv, creds), timeout=30)
        logs[kind] = {ln.split("] ", 2)[-1] for ln in srv.log_tail(200_000).splitlines() if "forms a cycle" in ln}
    assert res["edged"] == res["nats-server"]
    assert res["edged"] == {"A asks svc.b": "no responders", "B asks svc.a": "svc.a",
                            "streams": {"A": [("pub.x", "")], "B": [("pub.x", ""), ("pub.y", "")]}}
    assert logs["edged"] == logs["nats-server"] and len(logs["edged"]) == 2, logs
