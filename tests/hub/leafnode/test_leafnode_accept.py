"""edged as the hub: a real nats-server leaf (and an edged leaf) connecting to edged's `leafnodes { port }`,
side by side with the same leaf connecting to a nats-server hub. Each scenario runs against both hubs and
must give the same observable result: messages both ways, queue groups, request/reply, JetStream domains
(the seed's hub.conf / leaf.conf), refused credentials, /leafz, and a leaf that comes back after its hub
restarts."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import urllib.request
from collections.abc import Callable
from typing import Any

import nats
import pytest

from tests.hub.leafnode.test_leafnode_jetstream import ACCOUNTS_CONF, HUB_CONF, LEAF_CONF
from tests.support.aio import run, until
from tests.support.servers import ServerProcess, free_port

HUBS = ["nats-server", "edged"]

CORE_HUB = """
server_name: hub1
leafnodes { port: %(leaf_port)d }
accounts {
  APP { users: [ {user: leaf, password: s3cret}, {user: app, password: app} ] }
}
"""

CORE_LEAF = """
server_name: leaf1
leafnodes { remotes: [ { url: "nats://%(user)s:%(password)s@127.0.0.1:%(leaf_port)d", account: APP } ] }
accounts { APP { users: [ {user: app, password: app} ] } }
"""


def monitor(proc: ServerProcess, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{proc.http_port}{path}", timeout=2) as r:
        return json.loads(r.read())


def leaf_count(proc: ServerProcess) -> int:
    try:
        return int(monitor(proc, "/leafz")["leafnodes"])
    except OSError:
        return -1


def core_pair(start_server: Callable[..., ServerProcess], hub_kind: str, leaf_kind: str = "nats-server",
              password: str = "s3cret") -> tuple[ServerProcess, ServerProcess]:
    """A hub of `hub_kind` with CORE_HUB and a leaf of `leaf_kind` with CORE_LEAF linked to it."""
    leaf_port = free_port()
    hub = start_server(hub_kind, config=CORE_HUB % {"leaf_port": leaf_port}, http_port=free_port())
    hub.leaf_port = leaf_port  # type: ignore[attr-defined]
    leaf = start_server(leaf_kind, config=CORE_LEAF % {"leaf_port": leaf_port, "user": "leaf",
                                                       "password": password}, http_port=free_port())
    return hub, leaf


async def connected(hub: ServerProcess, n: int = 1, timeout: float = 10.0) -> None:
    await until(lambda: leaf_count(hub) >= n, timeout, 0.05)


async def client(proc: ServerProcess, user: str = "app", password: str = "app") -> Any:
    return await nats.connect(f"nats://{user}:{password}@127.0.0.1:{proc.port}", max_reconnect_attempts=-1,
                              reconnect_time_wait=0.2)


async def reaches(pub: Any, subject: str, inbox: list[Any], timeout: float = 5.0) -> None:
    """Publish probes to `subject` until one lands in `inbox` (interest has crossed the link), then clear it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not inbox:
        if loop.time() > deadline:
            raise TimeoutError(f"no interest in {subject} across the link")
        await pub.publish(subject, b"probe")
        await pub.flush()
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.1)
    inbox.clear()


async def core_scenario(hub: ServerProcess, leaf: ServerProcess) -> dict[str, Any]:
    await connected(hub)
    hc, lc = await client(hub), await client(leaf)
    try:
        out: dict[str, Any] = {}
        down: list[Any] = []
        up: list[Any] = []

        async def on_down(m: Any) -> None:
            down.append((m.subject, m.data, dict(m.headers or {})))

        async def on_up(m: Any) -> None:
            up.append((m.subject, m.data, dict(m.headers or {})))

        await lc.subscribe("down.>", cb=on_down)
        await hc.subscribe("up.>", cb=on_up)
        await reaches(hc, "down.probe", down)
        await reaches(lc, "up.probe", up)
        for i in range(3):
            await hc.publish(f"down.{i}", b"d%d" % i, headers={"K": str(i)} if i == 1 else None)
            await lc.publish(f"up.{i}", b"u%d" % i, headers={"K": str(i)} if i == 2 else None)
        await hc.flush()
        await lc.flush()
        await until(lambda: len(down) == 3 and len(up) == 3, 5)
        out["down"], out["up"] = list(down), list(up)

        # request/reply both ways
        async def answer(side: str) -> Callable[[Any], Any]:
            async def cb(m: Any) -> None:
                await m.respond(side.encode() + b":" + m.data)
            return cb

        await lc.subscribe("svc.leaf", cb=await answer("leaf"))
        await hc.subscribe("svc.hub", cb=await answer("hub"))
        await lc.flush()
        await hc.flush()

        async def request(nc: Any, subject: str) -> bytes:
            for _ in range(50):
                try:
                    return (await nc.request(subject, b"q", timeout=0.5)).data
                except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                    await asyncio.sleep(0.1)
            raise TimeoutError(subject)

        out["req"] = [await request(hc, "svc.leaf"), await request(lc, "svc.hub")]

        # queue groups: a member on each side; each side's requests stay local while a local member
        # exists, and cross the link once it is gone
        hub_q = await hc.subscribe("work", queue="q", cb=await answer("hubq"))
        await lc.subscribe("work", queue="q", cb=await answer("leafq"))
        await hc.flush()
        await lc.flush()
        await asyncio.sleep(0.3)
        out["q_from_hub"] = sorted({await request(hc, "work") for _ in range(10)})
        out["q_from_leaf"] = sorted({await request(lc, "work") for _ in range(10)})
        await hub_q.unsubscribe()
        await hc.flush()
        await asyncio.sleep(0.3)
        out["q_from_hub_after"] = sorted({await request(hc, "work") for _ in range(10)})
        return out
    finally:
        await hc.close()
        await lc.close()


CORE_EXPECTED = {
    "down": [("down.0", b"d0", {}), ("down.1", b"d1", {"K": "1"}), ("down.2", b"d2", {})],
    "up": [("up.0", b"u0", {}), ("up.1", b"u1", {}), ("up.2", b"u2", {"K": "2"})],
    "req": [b"leaf:q", b"hub:q"],
    "q_from_hub": [b"hubq:q"],
    "q_from_leaf": [b"leafq:q"],
    "q_from_hub_after": [b"leafq:q"],
}


@pytest.mark.parametrize("hub_kind", HUBS)
def test_core_traffic_through_the_hub(hub_kind: str, start_server: Callable[..., ServerProcess]) -> None:
    hub, leaf = core_pair(start_server, hub_kind)
    assert run(core_scenario(hub, leaf)) == CORE_EXPECTED


def test_core_traffic_edged_as_both(start_server: Callable[..., ServerProcess]) -> None:
    hub, leaf = core_pair(start_server, "edged", "edged")
    assert run(core_scenario(hub, leaf)) == CORE_EXPECTED


@pytest.mark.parametrize("hub_kind", HUBS)
def test_leafz_and_varz_show_the_accepted_leaf(hub_kind: str, start_server: Callable[..., ServerProcess]) -> None:
    hub, _leaf = core_pair(start_server, hub_kind)

    async def main() -> tuple[Any, ...]:
        await connected(hub)
        lz = monitor(hub, "/leafz")
        vz = monitor(hub, "/varz")
        (lf,) = lz["leafs"]
        return (lz["leafnodes"], lf["name"], lf["account"], lf["is_spoke"], vz["leafnodes"], vz["leaf"]["port"],
                sorted(lf), sorted(vz["leaf"]))

    fields = ["account", "compression", "id", "in_bytes", "in_msgs", "ip", "is_spoke", "name", "out_bytes",
              "out_msgs", "port", "rtt", "subscriptions"]
    assert run(main()) == (1, "leaf1", "APP", False, 1, hub.leaf_port,  # type: ignore[attr-defined]
                           fields, ["auth_timeout", "host", "port", "tls_timeout"])


@pytest.mark.parametrize("hub_kind", HUBS)
def test_bad_credentials_refused(hub_kind: str, start_server: Callable[..., ServerProcess]) -> None:
    """A wrong password gets `-ERR 'Authorization Violation'` and no link; the hub keeps serving."""
    hub, leaf = core_pair(start_server, hub_kind, password="wrong")

    async def main() -> None:
        await until(lambda: leaf.log_tail().count("Authorization Violation") >= 2, 10, 0.1)
        assert leaf_count(hub) == 0
        hc = await client(hub)  # nothing else disturbed
        sub = await hc.subscribe("still.here")
        await hc.publish("still.here", b"ok")
        assert (await sub.next_msg(timeout=1)).data == b"ok"
        await hc.close()

    run(main())


@pytest.mark.parametrize("how", ["stop", "kill -9"])
@pytest.mark.parametrize("hub_kind", HUBS)
def test_leaf_comes_back_after_the_hub_restarts(hub_kind: str, how: str,
                                                start_server: Callable[..., ServerProcess]) -> None:
    hub, leaf = core_pair(start_server, hub_kind)

    async def main() -> dict[str, Any]:
        await connected(hub)
        if how == "stop":
            hub.stop()
        else:
            hub.kill9()
        hub.start()
        await connected(hub, timeout=15)
        return await core_scenario(hub, leaf)

    assert run(main()) == CORE_EXPECTED


# ------------------------------------------------------------------------------------ the seed pair


def seed_pair(start_server: Callable[..., ServerProcess], hub_kind: str,
              leaf_kind: str) -> tuple[ServerProcess, ServerProcess]:
    """The seed's hub.conf and leaf.conf (SYS and ACC linked, domains hub and leaf), only ports and
    directories changed, on `hub_kind` and `leaf_kind`."""
    hubdir, leafdir = tempfile.mkdtemp(prefix="seedhub-"), tempfile.mkdtemp(prefix="seedleaf-")
    for d in (hubdir, leafdir):
        with open(os.path.join(d, "accounts.conf"), "w") as f:
            f.write(ACCOUNTS_CONF)
    hub_port, leaf_port, edge_port = free_port(), free_port(), free_port()
    hub = start_server(hub_kind, config=HUB_CONF.format(port=hub_port, leaf_port=leaf_port), port=hub_port,
                       http_port=free_port(), workdir=hubdir)
    leaf = start_server(leaf_kind, config=LEAF_CONF.format(port=edge_port, leaf_port=leaf_port,
                                                           store=os.path.join(leafdir, "store_leaf")),
                        port=edge_port, workdir=leafdir)
    return hub, leaf


async def seed_scenario(hub: ServerProcess, leaf: ServerProcess) -> tuple[Any, ...]:
    await connected(hub, 2, 15)
    nc = await client(hub, "acc", "acc")
    ec = await client(leaf, "acc", "acc")
    try:
        js_hub, js_leaf = nc.jetstream(), nc.jetstream(domain="leaf")

        async def attempt(aw: Callable[[], Any]) -> Any:
            for _ in range(50):
                try:
                    return await aw()
                except (nats.errors.NoRespondersError, nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError):
                    await asyncio.sleep(0.1)
            return await aw()

        await attempt(lambda: js_hub.add_stream(name="test", subjects=["test"]))
        await attempt(lambda: js_leaf.add_stream(name="test", subjects=["test"]))

        async def counts() -> tuple[int, int]:
            return ((await js_hub.stream_info("test")).state.messages,
                    (await js_leaf.stream_info("test")).state.messages)

        # the leaf stream's interest has to cross before the publish counts for both
        await asyncio.sleep(0.5)
        await nc.publish("test", b"hello")
        await nc.flush()
        for _ in range(100):
            if await counts() == (1, 1):
                break
            await asyncio.sleep(0.05)
        hub_n, leaf_n = await counts()
        # the leaf side reaches the hub's JetStream through its domain, its own unprefixed
        from_leaf = (await attempt(lambda: ec.jetstream(domain="hub").stream_info("test"))).state.messages
        own = (await ec.jetstream().account_info()).domain
        hub_own = (await js_hub.account_info()).domain
        via_domain = (await js_leaf.account_info()).domain
        # the local API never crosses the link: one answer, from the server the client is on
        answers = [await api_info_answers(nc), await api_info_answers(ec)]
        return hub_n, leaf_n, from_leaf, own, hub_own, via_domain, answers
    finally:
        await nc.close()
        await ec.close()


async def api_info_answers(nc: Any) -> list[str]:
    """Every answer to one `$JS.API.INFO` request within half a second: the answering domains."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish("$JS.API.INFO", b"", reply=inbox)
    got: list[str] = []
    try:
        while True:
            m = await sub.next_msg(timeout=0.5)
            got.append(json.loads(m.data).get("domain", ""))
    except nats.errors.TimeoutError:
        pass
    await sub.unsubscribe()
    return got


SEED_EXPECTED = (1, 1, 1, "leaf", "hub", "leaf", [["hub"], ["leaf"]])


@pytest.mark.parametrize("hub_kind,leaf_kind", [("nats-server", "nats-server"), ("edged", "nats-server"),
                                                ("edged", "edged")])
def test_seed_configs_with_edged_as_hub(hub_kind: str, leaf_kind: str,
                                        start_server: Callable[..., ServerProcess]) -> None:
    hub, leaf = seed_pair(start_server, hub_kind, leaf_kind)
    assert run(seed_scenario(hub, leaf)) == SEED_EXPECTED


# ------------------------------------------------------------------------------------ a chain

MID = """
server_name: mid
leafnodes {
  port: %(mid_leaf_port)d
  remotes: [ { url: "nats://leaf:s3cret@127.0.0.1:%(top_leaf_port)d", account: APP } ]
}
accounts { APP { users: [ {user: leaf, password: s3cret}, {user: app, password: app} ] } }
"""


@pytest.mark.parametrize("mid_kind", HUBS)
def test_chain_top_hub_mid_leaf(mid_kind: str, start_server: Callable[..., ServerProcess]) -> None:
    """nats-server hub <- `mid` <- nats-server leaf: `mid` is a leaf of the top and the hub of the bottom;
    traffic, requests and queue groups cross both links, with edged or nats-server in the middle."""
    top_leaf_port, mid_leaf_port = free_port(), free_port()
    top = start_server("nats-server", config=CORE_HUB % {"leaf_port": top_leaf_port}, http_port=free_port())
    mid = start_server(mid_kind, config=MID % {"mid_leaf_port": mid_leaf_port, "top_leaf_port": top_leaf_port},
                       http_port=free_port())
    bottom = start_server("nats-server", config=CORE_LEAF % {"leaf_port": mid_leaf_port, "user": "leaf",
                                                             "password": "s3cret"})

    async def main() -> dict[str, Any]:
        await connected(top)
        await until(lambda: leaf_count(mid) >= 2, 10, 0.05)  # its link up and the bottom's
        return await core_scenario(top, bottom)

    assert run(main()) == CORE_EXPECTED


JS_TOP = """
server_name: top
jetstream { store_dir: "./js", domain: hub }
leafnodes { port: %(top_leaf_port)d }
accounts { APP { jetstream: enabled, users: [ {user: leaf, password: s3cret}, {user: app, password: app} ] } }
"""

JS_MID = """
server_name: mid
jetstream { store_dir: "./js", domain: edge }
leafnodes {
  port: %(mid_leaf_port)d
  remotes: [ { url: "nats://leaf:s3cret@127.0.0.1:%(top_leaf_port)d", account: APP } ]
}
accounts { APP { jetstream: enabled, users: [ {user: leaf, password: s3cret}, {user: app, password: app} ] } }
"""

JS_BOTTOM = """
server_name: bottom
jetstream { store_dir: "./js", domain: leaf }
leafnodes { remotes: [ { url: "nats://leaf:s3cret@127.0.0.1:%(mid_leaf_port)d", account: APP } ] }
accounts { APP { jetstream: enabled, users: [ {user: app, password: app} ] } }
"""


@pytest.mark.parametrize("mid_kind", HUBS)
def test_chain_jetstream_domains(mid_kind: str, start_server: Callable[..., ServerProcess]) -> None:
    """Every domain of hub <- mid <- leaf is reachable from both ends through `$JS.<domain>.API`."""
    ports = {"top_leaf_port": free_port(), "mid_leaf_port": free_port()}
    top = start_server("nats-server", config=JS_TOP % ports, http_port=free_port())
    mid = start_server(mid_kind, config=JS_MID % ports, http_port=free_port())
    bottom = start_server("nats-server", config=JS_BOTTOM % ports)

    async def main() -> list[str | None]:
        await connected(top)
        await until(lambda: leaf_count(mid) >= 2, 10, 0.05)
        tc, bc = await client(top), await client(bottom)
        out: list[str | None] = []
        try:
            for nc in (tc, bc):
                for domain in ("hub", "edge", "leaf"):
                    for _ in range(50):
                        try:
                            out.append((await nc.jetstream(domain=domain).account_info()).domain)
                            break
                        except Exception:
                            await asyncio.sleep(0.1)
                    else:
                        out.append(None)
            return out
        finally:
            await tc.close()
            await bc.close()

    assert run(main()) == ["hub", "edge", "leaf"] * 2


def test_each_nats_server_version_as_a_leaf_of_edged(hub_bin: str, start_hub: Callable[..., Any],
                                                     start_server: Callable[..., ServerProcess]) -> None:
    """nats-server 2.15 and 2.10 leafs on edged's leafnode port (the Hub fixture runs the leaf: it opens a
    leafnode port of its own, unused, and solicits edged)."""
    leaf_port = free_port()
    edged_hub = start_server("edged", config=CORE_HUB % {"leaf_port": leaf_port}, http_port=free_port())
    remote = f'remotes: [ {{ url: "nats://leaf:s3cret@127.0.0.1:{leaf_port}", account: APP }} ]'
    leaf = start_hub(hub_bin, f"leafnodes {{ port: $LEAF_PORT, {remote} }}\n"
                              "accounts { APP { users: [ {user: app, password: app} ] } }\n")

    async def main() -> dict[str, Any]:
        await connected(edged_hub)
        return await core_scenario(edged_hub, leaf)

    assert run(main()) == CORE_EXPECTED


async def jsz_report(proc: ServerProcess) -> list[tuple[str, str]]:
    """The seed's `nats server report jetstream` as the system account user: every server's JSZ answer."""
    nc = await client(proc, "admin", "admin")
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$SYS.REQ.SERVER.PING.JSZ", b"", reply=inbox)
        got: list[tuple[str, str]] = []
        try:
            while True:
                d = json.loads((await sub.next_msg(timeout=1)).data)
                got.append((d["server"]["name"], d["data"]["config"]["domain"]))
        except nats.errors.TimeoutError:
            pass
        return sorted(got)
    finally:
        await nc.close()


@pytest.mark.parametrize("hub_kind,leaf_kind", [("nats-server", "nats-server"), ("edged", "nats-server"),
                                                ("edged", "edged")])
def test_seed_server_report_over_the_system_account_link(hub_kind: str, leaf_kind: str,
                                                         start_server: Callable[..., ServerProcess]) -> None:
    hub, leaf = seed_pair(start_server, hub_kind, leaf_kind)

    async def main() -> list[list[tuple[str, str]]]:
        await connected(hub, 2, 15)
        return [await jsz_report(hub), await jsz_report(leaf)]

    assert run(main()) == [[("hub-server", "hub"), ("leaf-server", "leaf")]] * 2


@pytest.mark.parametrize("hub_kind", HUBS)
def test_remote_that_declares_itself_the_hub(hub_kind: str, start_server: Callable[..., ServerProcess]) -> None:
    """A remote with `hub: true` takes the hub role on the link it solicits; the accepting side is then
    its spoke (`is_spoke: true` in /leafz); traffic still flows both ways."""
    leaf_port = free_port()
    acceptor = start_server(hub_kind, config=CORE_HUB % {"leaf_port": leaf_port}, http_port=free_port())
    solicitor = start_server("nats-server", config=f"""
server_name: leaf1
leafnodes {{ remotes: [ {{ url: "nats://leaf:s3cret@127.0.0.1:{leaf_port}", account: APP, hub: true }} ] }}
accounts {{ APP {{ users: [ {{user: app, password: app}} ] }} }}
""")

    async def main() -> tuple[Any, ...]:
        await connected(acceptor)
        out = await core_scenario(acceptor, solicitor)
        return out["down"], out["up"], out["req"], monitor(acceptor, "/leafz")["leafs"][0]["is_spoke"]

    assert run(main()) == (CORE_EXPECTED["down"], CORE_EXPECTED["up"], CORE_EXPECTED["req"], True)
