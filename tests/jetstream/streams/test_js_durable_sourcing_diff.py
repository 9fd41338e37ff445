"""A mirror or source that uses a durable the user named on the origin (`consumer: {name, deliver_subject}`,
nats-server 2.14), differential against nats-server: the config checks and their error codes, the stream
reset onto the durable (not a consumer of its own), flow-control acks that empty a workqueue origin, the
refusal of a durable without `ack_policy: flow_control`, and catching up after a kill -9."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.support.jsutil import across_kill9
from tests.support.servers import KINDS


async def _req(nc: Any, subject: str, body: Any) -> Any:
    return json.loads((await nc.request(subject, json.dumps(body).encode(), timeout=5)).data)


def _err(r: dict[str, Any]) -> Any:
    return (r.get("error") or {}).get("err_code"), r.get("config", {}).get("mirror") or r.get("config", {}).get("sources")


async def _info(nc: Any, name: str) -> dict[str, Any]:
    return await _req(nc, f"$JS.API.STREAM.INFO.{name}", {})


async def _until(nc: Any, cond: Any, what: str) -> None:
    for _ in range(200):
        if await cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(what)


async def _durable(nc: Any, stream: str, name: str, ack: str = "flow_control") -> None:
    cfg = {"durable_name": name, "deliver_subject": f"dlv.{name}", "ack_policy": ack}
    if ack == "flow_control":
        cfg.update({"flow_control": True, "idle_heartbeat": 1_000_000_000})
    r = await _req(nc, f"$JS.API.CONSUMER.CREATE.{stream}.{name}", {"stream_name": stream, "config": cfg})
    assert "error" not in r, r


def _state(info: dict[str, Any]) -> Any:
    return {k: info["state"][k] for k in ("messages", "first_seq", "last_seq")}


async def _first(nc: Any) -> list[Any]:
    out: list[Any] = []
    js = nc.jetstream()
    await js.add_stream(name="O1", subjects=["o1.>"], retention="workqueue")
    await js.add_stream(name="O2", subjects=["o2.>"], retention="interest")
    await js.add_stream(name="O3", subjects=["o3.>"])
    for d, s, ack in (("D1", "O1", "flow_control"), ("D2", "O2", "flow_control"), ("D3", "O3", "explicit")):
        await _durable(nc, s, d, ack)
    for i in range(5):
        await js.publish(f"o1.{i}", b"%d" % i)
        await js.publish(f"o2.{i}", b"%d" % i)
        await js.publish(f"o3.{i}", b"%d" % i)
    # the config checks
    good = {"name": "D1", "deliver_subject": "dlv.D1"}
    for i, (kind, src) in enumerate((
            ("mirror", {"name": "O1", "consumer": {"name": "a.b", "deliver_subject": "x"}}),
            ("mirror", {"name": "O1", "consumer": {"name": "D1", "deliver_subject": "x.*"}}),
            ("mirror", {"name": "O1", "consumer": {"name": "D1"}}),
            ("mirror", {"name": "O1", "consumer": good, "opt_start_seq": 2}),
            ("mirror", {"name": "O1", "consumer": good, "filter_subject": "o1.1"}),
            ("sources", [{"name": "O1", "consumer": {"name": "", "deliver_subject": "x"}}]),
            ("sources", [{"name": "O1", "consumer": good, "opt_start_time": "2020-01-01T00:00:00Z"}]),
            ("sources", [{"name": "O1", "consumer": good},
                         {"name": "O1", "consumer": good, "subject_transforms": [{"src": "o1.1", "dest": "z"}]}]),
            ("sources", [{"name": "O1", "consumer": good}, {"name": "O1", "consumer": good}]),
    )):
        out.append(_err(await _req(nc, f"$JS.API.STREAM.CREATE.BAD{i}", {"name": f"BAD{i}", kind: src})))
    # a mirror on the workqueue origin's durable, a source on the interest origin's
    r = await _req(nc, "$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "O1", "consumer": good}})
    out.append(r["config"]["mirror"])
    r = await _req(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "sources": [
        {"name": "O2", "consumer": {"name": "D2", "deliver_subject": "dlv.D2"}}]})
    out.append(r["config"]["sources"])

    async def synced(n: int) -> bool:
        m, s, o1, o2 = [await _info(nc, x) for x in ("M", "S", "O1", "O2")]
        return (m["state"]["messages"] == n and s["state"]["messages"] == n
                and o1["state"]["messages"] == 0 and o2["state"]["messages"] == 0)
    await _until(nc, lambda: synced(5), "the durables did not deliver and get their acks")
    # the stream took the user's durables: no consumer of its own on the origins
    for o in ("O1", "O2"):
        out.append((await _req(nc, f"$JS.API.CONSUMER.NAMES.{o}", {}))["consumers"])
    # a durable without flow-control acks is refused
    await _req(nc, "$JS.API.STREAM.CREATE.M3", {"name": "M3", "mirror": {
        "name": "O3", "consumer": {"name": "D3", "deliver_subject": "dlv.D3"}}})

    async def refused() -> bool:
        return bool(((await _info(nc, "M3")).get("mirror") or {}).get("error"))
    await _until(nc, refused, "no mirror error for a durable without flow_control acks")
    out.append((await _info(nc, "M3"))["mirror"]["error"])
    out.append(_state(await _info(nc, "M3")))
    for i in range(5, 8):
        await js.publish(f"o1.{i}", b"%d" % i)
        await js.publish(f"o2.{i}", b"%d" % i)
    await _until(nc, lambda: synced(8), "later messages did not arrive")
    return out


async def _after_restart(nc: Any) -> list[Any]:
    js = nc.jetstream()
    for i in range(8, 12):
        await js.publish(f"o1.{i}", b"%d" % i)
        await js.publish(f"o2.{i}", b"%d" % i)

    async def synced() -> bool:
        m, s, o1, o2 = [await _info(nc, x) for x in ("M", "S", "O1", "O2")]
        return (m["state"]["messages"] == 12 and s["state"]["messages"] == 12
                and o1["state"]["messages"] == 0 and o2["state"]["messages"] == 0)
    await _until(nc, synced, "the durable-sourced streams did not catch up (and ack) after the restart")
    out: list[Any] = []
    for name in ("M", "S"):
        sub = await js.subscribe(">", stream=name, ordered_consumer=True)
        got = [(await sub.next_msg(timeout=5)) for _ in range(12)]
        out.append([(m.subject, m.data) for m in got])
        await sub.unsubscribe()
    for name in ("M", "S", "O1", "O2"):
        out.append(_state(await _info(nc, name)))
    return out


def _of(kind: str) -> list[Any]:
    return across_kill9(kind, _first, _after_restart, "js-dursrc-", settle=0.3, after_timeout=120)


def test_durable_sourcing_as_nats_server() -> None:
    res = {kind: _of(kind) for kind in KINDS}
    for i, (a, b) in enumerate(zip(res["edged"], res["nats-server"], strict=True)):
        assert a == b, (i, a, b)
    got = res["edged"]
    assert got[0][0] == 10213 and got[5][0] == 10215 and got[7][0] == 10216
