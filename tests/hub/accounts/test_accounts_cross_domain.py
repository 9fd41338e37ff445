"""The seed's "Cross account & domain import" (tests/seed_configs/accounts_cross_domain.conf) with edged as
the *leaf* and a real nats-server hub, against nats-server in the same place: a client of IMPORT_CLIENT on
the leaf pulls from the hub's durable `dur` through `JS.acc@hub.API` (NEXT) and acks through the imported
`$JS.ACK` service, both crossing ACC's leafnode; the hub's consumer state shows the acks."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
from nats.errors import TimeoutError as NatsTimeout

from tests.support.aio import run
from tests.support.leaf import Hub
from tests.support.servers import ServerProcess

SEED = (Path(__file__).parents[2] / "seed_configs" / "accounts_cross_domain.conf").read_text()
HUB = "server_name: hub-server\njetstream { store_dir: './store_server', domain: hub }\n" \
      "leafnodes { port: $LEAF_PORT }\n" + SEED
LEAF = """server_name: leaf-server
jetstream { store_dir: '%s', domain: leaf }
leafnodes {
  reconnect: 1
  remotes = [
    { urls: ["nats://admin:admin@127.0.0.1:%d"], account: "SYS" }
    { urls: ["nats://acc:acc@127.0.0.1:%d"], account: "ACC" }
  ]
}
""" + SEED
NEXT = "JS.acc@hub.API.CONSUMER.MSG.NEXT.aggregate-test-leaf.dur"


async def _by_password(port: int, user: str) -> Any:
    return await nats.connect(f"nats://{user}:{user}@127.0.0.1:{port}")


async def _hub_js(hub: Hub, fill: bool, connect: Callable[[int, str], Awaitable[Any]] = _by_password) -> None:
    nc = await connect(hub.port, "acc")
    try:
        js = nc.jetstream(domain="hub")
        if not fill:
            await js.add_stream(name="aggregate-test-leaf", subjects=["agg.>"])
            await js.add_consumer("aggregate-test-leaf", durable_name="dur", ack_policy="explicit")
            return
        for i in range(3):
            await js.publish(f"agg.{i}", f"m{i}".encode())
    finally:
        await nc.close()


async def _pull(nc: Any, inbox: Any, expires: float = 2.0) -> Any:
    """One NEXT on the inbox subscription: nats-server hands the message over under its original subject
    (on the inbox's sid), which nats-py's request muxer would drop; the nats CLI reads it this way too."""
    await nc.publish(NEXT, json.dumps({"batch": 1, "expires": int(expires * 1e9)}).encode(), reply=inbox.subject)
    return await inbox.next_msg(timeout=expires + 1)


def _status(m: Any) -> str:
    return (m.headers or {}).get("Status", "")


async def _scenario(hub: Hub, leaf: ServerProcess,
                    connect: Callable[[int, str], Awaitable[Any]] = _by_password) -> dict:
    """`connect(port, user)`: the seed's users (import_client on the leaf, acc on the hub)."""
    out: dict[str, Any] = {}
    nc = await connect(leaf.port, "import_client")
    try:
        inbox = await nc.subscribe(nc.new_inbox())
        warm = None
        for _ in range(100):  # until the link carries the hub's interest, and the hub the leaf's _R_ replies
            try:
                warm = await _pull(nc, inbox, 0.3)
                if _status(warm) != "503":
                    break
            except NatsTimeout:
                pass
            await asyncio.sleep(0.1)
        assert warm is not None, leaf.log_tail()
        out["empty pull"] = _status(warm)
        await _hub_js(hub, True, connect)
        got = []
        for _ in range(2):
            got.append(await _pull(nc, inbox))
            await got[-1].ack()
        await nc.flush()
        out["pulled"] = [(m.subject, m.data.decode(), _status(m)) for m in got]
        out["ack subjects"] = [m.reply.split(".")[2:4] if m.reply.count(".") == 8 else m.reply.split(".")[4:6]
                               for m in got]
        # the import covers NEXT and ACK only: consumer info is no service of IMPORT_CLIENT's
        await nc.publish("JS.acc@hub.API.CONSUMER.INFO.aggregate-test-leaf.dur", b"", reply=inbox.subject)
        out["info"] = _status(await inbox.next_msg(timeout=2))
    finally:
        await nc.close()
    hc = await connect(hub.port, "acc")
    try:
        js = hc.jetstream(domain="hub")
        for _ in range(50):  # the acks cross the link after the pulls' replies
            ci = await js.consumer_info("aggregate-test-leaf", "dur")
            if ci.ack_floor.stream_seq == 2:
                break
            await asyncio.sleep(0.1)
        out["consumer"] = (ci.delivered.stream_seq, ci.ack_floor.stream_seq, ci.num_ack_pending, ci.num_pending)
    finally:
        await hc.close()
    return out


def test_import_client_pulls_and_acks_through_the_leaf_like_nats_server(
        hub_bin: str, start_hub: Callable[..., Hub], start_server: Callable[..., ServerProcess]) -> None:
    res = {}
    for kind in ("edged", "nats-server"):
        hub = start_hub(hub_bin, HUB)
        run(_hub_js(hub, fill=False), timeout=30)
        leaf = start_server(kind, config=LEAF % (tempfile.mkdtemp(prefix="leafjs-"), hub.leaf_port, hub.leaf_port))
        res[kind] = run(_scenario(hub, leaf), timeout=60)
        leaf.stop()
        hub.stop()
    assert res["edged"] == res["nats-server"]
    assert res["edged"]["pulled"] == [("agg.0", "m0", ""), ("agg.1", "m1", "")]
    assert res["edged"]["consumer"] == (2, 2, 0, 1) and res["edged"]["info"] == "503"
    assert res["edged"]["empty pull"] == "408"
