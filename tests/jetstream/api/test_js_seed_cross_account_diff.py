"""The seed's "Cross account & domain import" section in the hub role, on one server (nats-server, then
edged): its accounts_cross_domain.conf unchanged, domain `hub`. IMPORT_MIRROR mirrors ACC's stream
through the imported API prefix `JS.acc@hub.API` with the extended delivery prefix; IMPORT_CLIENT pulls
from ACC's durable `dur` through its imports (NEXT + ACK). Both servers must end the same."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats

from tests.support.aio import run
from tests.support.jsutil import api as _req
from tests.support.servers import KINDS, ServerProcess

SEEDS = Path(__file__).resolve().parents[2] / "seed_configs"
CONF = """server_name: hub-server
jetstream { store_dir: "./store_server", domain: hub }
include ./accounts_cross_domain.conf
"""
DELIVER = "deliver.acc.hub.import_mirror.hub.aggregate-test-leaf-from-acc"



async def scenario(srv: ServerProcess, connect: Callable[[str], Awaitable[Any]] | None = None) -> dict[str, Any]:
    """`connect(user)` (acc, import_mirror, import_client): by default the seed's users and passwords."""
    async def by_password(user: str) -> Any:
        return await nats.connect(f"nats://{user}:{user}@127.0.0.1:{srv.port}")
    connect = connect or by_password
    acc, im, ic = await connect("acc"), await connect("import_mirror"), await connect("import_client")
    out: dict[str, Any] = {}
    try:
        made = await _req(acc, "$JS.API.STREAM.CREATE.aggregate-test-leaf",
                          {"name": "aggregate-test-leaf", "subjects": ["agg.>"]})
        assert "error" not in made, made
        for i in range(3):
            await acc.request("agg.t", b"m%d" % i, timeout=3)
        # IMPORT_MIRROR: a mirror of ACC's stream through the renamed API prefix
        mir = await _req(im, "$JS.API.STREAM.CREATE.aggregate-test-leaf-from-acc", {
            "name": "aggregate-test-leaf-from-acc",
            "mirror": {"name": "aggregate-test-leaf", "external": {"api": "JS.acc@hub.API", "deliver": DELIVER}}})
        out["mirror created"] = "error" not in mir, mir.get("error")
        state: dict[str, Any] = {}
        for _ in range(100):
            info = await _req(im, "$JS.API.STREAM.INFO.aggregate-test-leaf-from-acc", {})
            state = info.get("state", {})
            if state.get("messages") == 3:
                break
            await asyncio.sleep(0.1)
        out["mirror"] = (state.get("messages"), state.get("first_seq"), state.get("last_seq"))
        got = await _req(im, "$JS.API.STREAM.MSG.GET.aggregate-test-leaf-from-acc", {"seq": 3})
        out["mirror msg 3"] = got.get("message", {}).get("subject")
        # IMPORT_CLIENT: ACC's durable `dur`, pulled and acked through the imports
        dur = await _req(acc, "$JS.API.CONSUMER.DURABLE.CREATE.aggregate-test-leaf.dur", {
            "stream_name": "aggregate-test-leaf", "config": {"durable_name": "dur", "ack_policy": "explicit"}})
        assert "error" not in dur, dur
        inbox = ic.new_inbox()
        msgs: asyncio.Queue = asyncio.Queue()

        async def on_msg(m: Any) -> None:
            await msgs.put(m)

        await ic.subscribe(inbox, cb=on_msg)
        await ic.publish("JS.acc@hub.API.CONSUMER.MSG.NEXT.aggregate-test-leaf.dur",
                         json.dumps({"batch": 2, "expires": 2_000_000_000}).encode(), reply=inbox)
        pulled = []
        for _ in range(2):
            m = await asyncio.wait_for(msgs.get(), 5)
            pulled.append((m.subject, m.data))
            await ic.request(m.reply, b"", timeout=3)  # ack (through the ACK import), confirmed
        out["pulled"] = pulled
        info = await _req(acc, "$JS.API.CONSUMER.INFO.aggregate-test-leaf.dur", {})
        out["dur"] = (info["delivered"]["consumer_seq"], info["ack_floor"]["consumer_seq"], info["num_pending"])
        return out
    finally:
        for nc in (acc, im, ic):
            await nc.close()


def test_seed_cross_account_imports_in_the_hub_role(start_server: Callable[..., ServerProcess]) -> None:
    res = {}
    for kind in KINDS:
        wd = tempfile.mkdtemp(prefix=f"seedx-{kind}-")
        shutil.copy(SEEDS / "accounts_cross_domain.conf", wd)
        srv = start_server(kind, config=CONF, workdir=wd)
        res[kind] = run(scenario(srv))
    ref = res["nats-server"]
    assert ref["mirror"] == (3, 1, 3) and ref["pulled"] == [("agg.t", b"m0"), ("agg.t", b"m1")], ref
    assert ref["mirror created"] == (True, None) and ref["dur"] == (2, 2, 1), ref
    assert res["edged"] == ref
