"""A leaf's account JWT imports and mappings seen across its leafnode links (operator mode on both sides),
edged as the leaf against nats-server as the leaf: the same operator and accounts, the hub (nats-server)
preloading its own JWTs of them (A exports `hsvc.>`, B imports it as `hq`), the leaf its own (A exports
`svc.>` and `pub.>`; B imports them and maps `orders.*`); the leaf binds each account to the hub with a
user's `.creds`. The scenario is the config-path one (tests/hub/accounts/test_accounts_imports_leaf.py)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from typing import Any

import nats

from tests.hub.accounts.test_accounts_cross_domain import _hub_js
from tests.hub.accounts.test_accounts_cross_domain import _scenario as js_scenario
from tests.hub.accounts.test_accounts_imports_leaf import scenario
from tests.interop.accounts.test_account_jwt_update_diff import _accounts as update_accounts
from tests.interop.accounts.test_account_jwt_update_diff import _ask
from tests.jetstream.api.test_js_jwt_cross_account_diff import seed_accounts
from tests.support.aio import eventually, run
from tests.support.identity.jwtaccounts import JwtAccounts
from tests.support.leaf import Hub
from tests.support.servers import ServerProcess


def accounts() -> tuple[JwtAccounts, JwtAccounts]:
    """(the hub's view, the leaf's view) of accounts A and B."""
    hub = JwtAccounts(tempfile.mkdtemp(prefix="jwtleaf-"))
    a = hub.pk("A")
    hub.add("A", exports=[{"subject": "hsvc.>", "type": "service"}])
    hub.add("B", imports=[{"account": a, "subject": "hsvc.q", "local_subject": "hq", "type": "service"}])
    leaf = hub.variant()
    leaf.add("A", exports=[{"subject": "svc.>", "type": "service"}, {"subject": "pub.>", "type": "stream"}])
    leaf.add("B", imports=[
        {"account": a, "subject": "svc.a", "local_subject": "my.a", "type": "service"},
        {"account": a, "subject": "svc.hub", "local_subject": "my.hub", "type": "service"},
        {"account": a, "subject": "pub.>", "to": "from_a", "type": "stream"},
    ], mappings={"orders.*": [{"subject": "orders.central.$1"}]})
    return hub, leaf


def test_jwt_imports_and_mappings_across_the_link_like_nats_server(
        hub_bin: str, start_hub: Callable[..., Hub], start_server: Callable[..., ServerProcess]) -> None:
    hj, lj = accounts()
    creds = {"a": lj.creds("A"), "b": lj.creds("B"), "ca": hj.creds("A"), "cb": hj.creds("B"),
             "la": hj.creds("A", "leafa"), "lb": hj.creds("B", "leafb")}

    async def connect(port: int, user: str) -> Any:
        return await nats.connect(f"nats://127.0.0.1:{port}", user_credentials=creds[user])

    res = {}
    for kind in ("nats-server", "edged"):
        hub = start_hub(hub_bin, "server_name: hub1\nleafnodes { port: $LEAF_PORT }\n" + hj.config())
        remotes = "\n".join(f'    {{ urls: ["nats://127.0.0.1:{hub.leaf_port}"], credentials: "{creds[u]}", '
                            f'account: {lj.pk(acc)} }}' for u, acc in (("la", "A"), ("lb", "B")))
        conf = f"server_name: leaf1\nleafnodes {{\n  reconnect: 1\n  remotes: [\n{remotes}\n  ]\n}}\n" + lj.config()
        leaf = start_server(kind, config=conf, workdir=tempfile.mkdtemp(prefix="leaf-"))
        res[kind] = run(scenario(hub, leaf, connect), timeout=60)
        leaf.stop()
        hub.stop()
    assert res["edged"] == res["nats-server"]
    assert res["edged"]["hub asks leaf import"] == "leaf:svc.a"
    assert res["edged"]["leaf import to hub"] == "hub:svc.hub:_R_"
    assert res["edged"]["leaf uses hub import"] == "hub:hsvc.q:_R_"
    assert res["edged"]["stream on hub"] == [("from_a.pub.x", "1")]
    assert res["edged"]["mapped on leaf"] == [("orders.central.new", "2")]


def test_seed_jwt_accounts_pull_and_ack_through_the_leaf_like_nats_server(
        hub_bin: str, start_hub: Callable[..., Hub], start_server: Callable[..., ServerProcess]) -> None:
    """The seed's cross-account section with its accounts as JWTs on both sides: IMPORT_CLIENT on the leaf
    pulls from the hub's durable through `JS.acc@hub.API` and acks through the imported `$JS.ACK`, both
    crossing ACC's leafnode link (the config-path test: tests/hub/accounts/test_accounts_cross_domain.py)."""
    j = seed_accounts()
    creds = {"acc": j.creds("ACC"), "import_client": j.creds("IMPORT_CLIENT"), "sys": j.creds("SYS")}

    async def connect(port: int, user: str) -> Any:
        return await nats.connect(f"nats://127.0.0.1:{port}", user_credentials=creds[user])

    res = {}
    for kind in ("edged", "nats-server"):
        hub = start_hub(hub_bin, "server_name: hub-server\njetstream { store_dir: './store_server', domain: hub }\n"
                                 "leafnodes { port: $LEAF_PORT }\n" + j.config())
        run(_hub_js(hub, False, connect), timeout=30)
        remotes = "\n".join(f'    {{ urls: ["nats://127.0.0.1:{hub.leaf_port}"], credentials: "{creds[u]}", '
                            f'account: {j.pk(acc)} }}' for u, acc in (("sys", "SYS"), ("acc", "ACC")))
        conf = (f"server_name: leaf-server\njetstream {{ store_dir: '{tempfile.mkdtemp(prefix='leafjs-')}', "
                f"domain: leaf }}\nleafnodes {{\n  reconnect: 1\n  remotes: [\n{remotes}\n  ]\n}}\n" + j.config())
        leaf = start_server(kind, config=conf, workdir=tempfile.mkdtemp(prefix="leaf-"))
        res[kind] = run(js_scenario(hub, leaf, connect), timeout=60)
        leaf.stop()
        hub.stop()
    assert res["edged"] == res["nats-server"]
    assert res["edged"]["pulled"] == [("agg.0", "m0", ""), ("agg.1", "m1", "")]
    assert res["edged"]["consumer"] == (2, 2, 0, 1) and res["edged"]["info"] == "503"


def test_an_account_jwt_pushed_on_the_hub_reaches_the_leaf_like_nats_server(
        hub_bin: str, start_hub: Callable[..., Hub], start_server: Callable[..., ServerProcess]) -> None:
    """A system account user on the hub pushes a new JWT of B on `$SYS.REQ.ACCOUNT.<B>.CLAIMS.UPDATE`; the
    leaf's system account is linked, so the leaf gets the push too, answers it, and applies B's new import."""
    before, after = update_accounts()
    creds = {"A": before.creds("A"), "B": before.creds("B"), "SYS": before.creds("SYS")}
    res = {}
    for kind in ("nats-server", "edged"):
        hub = start_hub(hub_bin, "server_name: hub1\nleafnodes { port: $LEAF_PORT }\n" + before.config("A", "B"))
        remotes = "\n".join(f'    {{ urls: ["nats://127.0.0.1:{hub.leaf_port}"], credentials: "{creds[u]}", '
                            f'account: {before.pk(u)} }}' for u in ("SYS", "A", "B"))
        conf = f"server_name: leaf1\nleafnodes {{\n  reconnect: 1\n  remotes: [\n{remotes}\n  ]\n}}\n" + \
            before.config("A", "B")
        leaf = start_server(kind, config=conf, workdir=tempfile.mkdtemp(prefix="leaf-"))
        res[kind] = run(_push_through_hub(hub, leaf, before, after, creds), timeout=60)
        leaf.stop()
        hub.stop()
    assert res["edged"] == res["nats-server"]
    assert res["edged"]["answered by"] == [("hub1", 200, "jwt updated"), ("leaf1", 200, "jwt updated")]
    assert res["edged"]["before"] == "no responders" and res["edged"]["after"] == "svc.a"


async def _push_through_hub(hub: Hub, leaf: ServerProcess, before: JwtAccounts, after: JwtAccounts,
                            creds: dict[str, str]) -> dict:
    out: dict[str, Any] = {}
    la = await nats.connect(leaf.url, user_credentials=creds["A"])
    lb = await nats.connect(leaf.url, user_credentials=creds["B"])
    hs = await nats.connect(hub.url, user_credentials=creds["SYS"])
    try:
        async def echo(m: Any) -> None:
            await m.respond(m.subject.encode())
        await la.subscribe("svc.>", cb=echo)
        await la.flush()

        async def old_import() -> bool:  # B's import of svc.old, on the leaf
            return await _ask(lb, "svc.old") == "svc.old"
        await eventually(old_import, 10, "the leaf's links")
        out["before"] = await _ask(lb, "my.a")
        inbox = hs.new_inbox()
        sub = await hs.subscribe(inbox)
        await hs.flush()

        async def leaf_listens() -> bool:  # the leaf's CLAIMS.UPDATE subscription reached the hub
            await hs.publish(f"$SYS.REQ.ACCOUNT.{before.pk('B')}.CLAIMS.UPDATE", before.jwt("B").encode(),
                             reply=inbox)
            names = set()
            try:
                while True:
                    names.add(json.loads((await sub.next_msg(timeout=0.5)).data)["server"]["name"])
            except nats.errors.TimeoutError:
                return "leaf1" in names
        await eventually(leaf_listens, 10, "the leaf's system account subscriptions on the hub")
        await hs.publish(f"$SYS.REQ.ACCOUNT.{before.pk('B')}.CLAIMS.UPDATE", after.jwt("B").encode(), reply=inbox)
        answers = []
        for _ in range(2):
            r = json.loads((await sub.next_msg(timeout=5)).data)
            answers.append((r["server"]["name"], r["data"]["code"], r["data"]["message"]))
        out["answered by"] = sorted(answers)

        async def new_import() -> bool:
            return await _ask(lb, "my.a") == "svc.a"
        await eventually(new_import, 10, "B's new import on the leaf")
        out["after"] = await _ask(lb, "my.a")
    finally:
        for nc in (la, lb, hs):
            await nc.close()
    return out
