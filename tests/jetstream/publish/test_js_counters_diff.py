"""Counter streams (`allow_msg_counter`, nats-server 2.12), differential: the config rules, increments
(`Nats-Incr`, big and negative ones), the PubAck's `val`, the stored `{"val":"..."}`, every refusal
(no increment, a bad one, a payload, incompatible headers, a stream without counters), a counter
sourced from two streams (`Nats-Counter-Sources`), and a total that survives kill -9."""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
from typing import Any

import nats

from tests.support.aio import run
from tests.support.jsutil import replies_of_both
from tests.support.servers import KINDS, ServerProcess


async def _req(nc: Any, subject: str, hdrs: dict[str, str] | None = None, payload: bytes = b"") -> Any:
    m = await nc.request(subject, payload, timeout=5, headers=hdrs)
    return json.loads(m.data)


async def _create(nc: Any, cfg: dict[str, Any], update: bool = False) -> Any:
    op = "UPDATE" if update else "CREATE"
    r = await _req(nc, f"$JS.API.STREAM.{op}.{cfg['name']}", payload=json.dumps(cfg).encode())
    if "error" in r:
        return r["error"]
    shown = {"allow_msg_counter", "allow_atomic", "allow_msg_schedules", "allow_rollup_hdrs", "deny_purge",
             "persist_mode", *cfg}
    return {k: v for k, v in r["config"].items() if k in shown}


async def _last(nc: Any, stream: str, subject: str) -> Any:
    r = await _req(nc, f"$JS.API.STREAM.MSG.GET.{stream}", payload=json.dumps({"last_by_subj": subject}).encode())
    if "error" in r:
        return r["error"]
    m = r["message"]
    return {"seq": m["seq"], "data": base64.b64decode(m.get("data", "")).decode(),
            "hdrs": base64.b64decode(m.get("hdrs", "")).decode()}


async def _summed(nc: Any) -> Any:
    """SUM's last `cnt.a`: its total and per-source state. Which source's increment lands last is a race
    between the two sources (on both servers), so not the last message's own Nats-Incr."""
    last = await _last(nc, "SUM", "cnt.a")
    last["hdrs"] = sorted(ln for ln in last["hdrs"].split("\r\n") if ln.startswith("Nats-Counter"))
    return last


async def _scenario(url: str) -> list[Any]:
    nc = await nats.connect(url)
    out: list[Any] = []
    try:
        base = {"subjects": ["bad.>"], "allow_msg_counter": True}
        for extra in ({"discard": "new"}, {"allow_msg_ttl": True}, {"allow_msg_schedules": True},
                      {"retention": "workqueue"}, {"retention": "interest"}):
            out.append(await _create(nc, {"name": "BAD", **base, **extra}))
        out.append(await _create(nc, {"name": "CNT", "subjects": ["cnt.>"], "allow_msg_counter": True}))
        out.append(await _create(nc, {"name": "PLAIN", "subjects": ["plain.>"]}))
        out.append(await _create(nc, {"name": "SMALL", "subjects": ["small.>"], "allow_msg_counter": True,
                                      "max_msg_size": 40}))
        out.append(await _req(nc, "small.a", {"Nats-Incr": "5"}))
        out.append(await _req(nc, "small.a", {"Nats-Incr": "100000000000000000000000000000000000000"}))
        out.append(await _create(nc, {"name": "CNT", "subjects": ["cnt.>"]}, update=True))
        out.append(await _create(nc, {"name": "PLAIN", "subjects": ["plain.>"], "allow_msg_counter": True},
                                 update=True))
        out.append(await _create(nc, {"name": "MIR", "mirror": {"name": "CNT"}, "allow_msg_counter": True}))
        for subject, hdrs, payload in [
            ("cnt.a", {"Nats-Incr": "5"}, b""),
            ("cnt.a", {"Nats-Incr": "-2"}, b""),
            ("cnt.a", {"Nats-Incr": "+100000000000000000000000000000"}, b""),
            ("cnt.b", {"Nats-Incr": "0"}, b""),
            ("cnt.b", None, b""),
            ("cnt.b", {"Nats-Msg-Id": "x"}, b""),
            ("cnt.b", {"Nats-Incr": "abc"}, b""),
            ("cnt.b", {"Nats-Incr": "1.5"}, b""),
            ("cnt.b", {"Nats-Incr": "1"}, b"payload"),
            ("cnt.b", {"Nats-Incr": "1", "Nats-Expected-Last-Sequence": "4"}, b""),
            ("cnt.b", {"Nats-Incr": "1", "Nats-Expected-Stream": "CNT"}, b""),
            ("cnt.b", {"Nats-Incr": "1", "Nats-Rollup": "sub"}, b""),
            ("cnt.b", {"Nats-Incr": "1", "Nats-Expected-Last-Subject-Sequence": "4"}, b""),
            ("cnt.b", {"Nats-Incr": "7", "Nats-Msg-Id": "m1"}, b""),
            ("cnt.b", {"Nats-Incr": "7", "Nats-Msg-Id": "m1"}, b""),
            ("cnt.b", {"Nats-Incr": "1", "Nats-TTL": "5s"}, b""),
            ("plain.a", {"Nats-Incr": "1"}, b""),
            ("plain.a", {"Nats-Incr": "x"}, b""),
        ]:
            out.append(await _req(nc, subject, hdrs, payload))
        out.append(await _last(nc, "CNT", "cnt.a"))
        out.append(await _last(nc, "CNT", "cnt.b"))
        # a counter summing two counters through sources: only what changed at each origin is added
        out.append(await _create(nc, {"name": "C2", "subjects": ["c2.>"], "allow_msg_counter": True,
                                      "subject_transform": {"src": "c2.>", "dest": "cnt.>"}}))
        out.append(await _create(nc, {"name": "SUM", "allow_msg_counter": True, "subjects": ["sum.>"],
                                      "sources": [{"name": "CNT"}, {"name": "C2"}]}))
        out.append(await _req(nc, "c2.a", {"Nats-Incr": "10"}))
        out.append(await _req(nc, "cnt.a", {"Nats-Incr": "1"}))
        out.append(await _req(nc, "c2.a", {"Nats-Incr": "10"}))
        for _ in range(50):
            last = await _last(nc, "SUM", "cnt.a")
            if isinstance(last, dict) and last.get("data") == '{"val":"100000000000000000000000000024"}':
                break
            await asyncio.sleep(0.1)
        info = await _req(nc, "$JS.API.STREAM.INFO.SUM")
        out.append(info["state"]["messages"])
        out.append(await _summed(nc))
    finally:
        await nc.close()
    return out


def test_counters_as_nats_server() -> None:
    res = replies_of_both(_scenario, "js-cnt-")
    for i, (a, b) in enumerate(zip(res["edged"], res["nats-server"], strict=True)):
        assert a == b, (i, a, b)
    got = res["edged"]
    assert got[5]["allow_msg_counter"] is True
    assert {"stream": "CNT", "seq": 1, "val": "5"} in got


def test_counter_total_survives_kill9() -> None:
    for kind in KINDS:
        p = ServerProcess(kind, ["-js", "-sd", tempfile.mkdtemp(prefix="js-cnt9-")]).start()
        try:
            async def before(url: str) -> list[Any]:
                nc = await nats.connect(url)
                await _create(nc, {"name": "K", "subjects": ["k.>"], "allow_msg_counter": True})
                acks = [await _req(nc, "k.x", {"Nats-Incr": str(i)}) for i in range(1, 21)]
                await nc.close()
                return acks

            acks = run(before(p.url))
            assert acks[-1] == {"stream": "K", "seq": 20, "val": "210"}, (kind, acks[-1])
            p.kill9()
            p.restart()

            async def after(url: str) -> Any:
                nc = await nats.connect(url)
                ack = await _req(nc, "k.x", {"Nats-Incr": "-10"})
                await nc.close()
                return ack

            assert run(after(p.url)) == {"stream": "K", "seq": 21, "val": "200"}, kind
        finally:
            p.stop()


async def _backlog_scenario(url: str) -> list[Any]:
    """Two counters with a backlog each before the stream summing them exists: the source catches up in
    runs of many deliveries, and each must still add only what changed at its origin."""
    nc = await nats.connect(url)
    out: list[Any] = []
    try:
        await _create(nc, {"name": "CNT", "subjects": ["cnt.>"], "allow_msg_counter": True})
        await _create(nc, {"name": "C2", "subjects": ["c2.>"], "allow_msg_counter": True,
                           "subject_transform": {"src": "c2.>", "dest": "cnt.>"}})
        for _ in range(40):
            await _req(nc, "cnt.a", {"Nats-Incr": "2"})
            await _req(nc, "c2.a", {"Nats-Incr": "3"})
        await _create(nc, {"name": "SUM", "allow_msg_counter": True, "subjects": ["sum.>"],
                           "sources": [{"name": "CNT"}, {"name": "C2"}]})
        for _ in range(50):
            if (await _req(nc, "$JS.API.STREAM.INFO.SUM"))["state"]["messages"] >= 80:
                break
            await asyncio.sleep(0.1)
        out.append(await _summed(nc))
    finally:
        await nc.close()
    return out


def test_sourced_counter_backlog_as_nats_server() -> None:
    res = replies_of_both(_backlog_scenario, "js-cnt-run-")
    assert res["edged"] == res["nats-server"]
    assert res["edged"][0]["data"] == '{"val":"200"}', res["edged"]
