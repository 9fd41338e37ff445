"""The flow_control ack policy (nats-server 2.14, server/consumer.go), differential: its config defaults and
checks, and its acks: a push consumer whose flow control answers, carrying `Nats-Last-Consumer` and
`Nats-Last-Stream`, ack everything up to them (as an ack all), so a workqueue stream lets go of what the
receiver said it has. A flow control request goes out after a heartbeat while anything is pending."""

from __future__ import annotations

import asyncio
import json
import tempfile
from typing import Any

import pytest

from tests.support.aio import run
from tests.support.jsutil import session
from tests.support.servers import KINDS, ServerProcess

_VOLATILE = ("created", "ts")


async def _create(nc: Any, stream: str, name: str, **cfg: Any) -> dict[str, Any]:
    body = {"stream_name": stream, "config": {"durable_name": name, "ack_policy": "flow_control", **cfg}}
    r = await nc.request(f"$JS.API.CONSUMER.CREATE.{stream}.{name}", json.dumps(body).encode(), timeout=5)
    return json.loads(r.data)


def _view(r: dict[str, Any]) -> dict[str, Any]:
    """A create or info reply without times and the server's own version and level."""
    if "error" in r:
        return r
    cfg = dict(r["config"])
    cfg["metadata"] = {k: v for k, v in cfg.get("metadata", {}).items() if k not in ("_nats.ver", "_nats.level")}
    return {**{k: v for k, v in r.items() if k not in _VOLATILE}, "config": cfg}


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    """The scenario below against a fresh JetStream server of each kind."""
    out = {}
    for kind in KINDS:
        p = ServerProcess(kind, ["-js", "-sd", tempfile.mkdtemp(prefix="ackfc-")]).start()
        try:
            out[kind] = run(session(p, scenario), timeout=60)
        finally:
            p.stop()
    return out


async def scenario(nc: Any, js: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    await js.add_stream(name="WQ", subjects=["wq.>"], retention="workqueue")
    # the checks, each on its own
    out["pull"] = await _create(nc, "WQ", "E1")
    out["ack wait"] = await _create(nc, "WQ", "E2", deliver_subject="d.e2", ack_wait=5_000_000_000)
    out["max deliver"] = await _create(nc, "WQ", "E3", deliver_subject="d.e3", max_deliver=3)
    out["no max ack pending"] = await _create(nc, "WQ", "E4", deliver_subject="d.e4", max_ack_pending=-1)
    body = {"stream_name": "WQ", "pedantic": True,
            "config": {"durable_name": "E5", "ack_policy": "flow_control", "deliver_subject": "d.e5"}}
    out["pedantic"] = json.loads((await nc.request("$JS.API.CONSUMER.CREATE.WQ.E5", json.dumps(body).encode(),
                                                   timeout=5)).data)  # no defaults: flow control missing
        # defaults: flow control and a 1 s heartbeat come with the policy
    sub = await nc.subscribe("d.fc")
    r = await _create(nc, "WQ", "FC", deliver_subject="d.fc", max_ack_pending=100)
    out["create"] = _view(r)
    for i in range(3):
        await js.publish(f"wq.{i}", b"m%d" % i)
    got: list[Any] = []
    fc_reply = ""
    for _ in range(40):  # 3 messages, heartbeats, then the flow control request (bounded: ~4 s)
        try:
            m = await sub.next_msg(timeout=0.2)
        except Exception:
            continue
        if m.headers and m.headers.get("Status") == "100" and m.reply:
            fc_reply = m.reply
            break
        if not m.headers or "Status" not in m.headers:
            got.append(m.data)
    out["delivered"] = got
    out["fc request"] = fc_reply.startswith("$JS.FC.WQ.FC.")
    # the receiver says it has the first two: they are acked, the third stays pending
    await nc.publish(fc_reply, b"", headers={"Nats-Last-Consumer": "2", "Nats-Last-Stream": "2"})
    await nc.flush()
    for _ in range(50):
        ci = json.loads((await nc.request("$JS.API.CONSUMER.INFO.WQ.FC", b"", timeout=5)).data)
        if ci["ack_floor"]["stream_seq"] == 2:
            break
        await asyncio.sleep(0.1)
    floor = {k: ci["ack_floor"][k] for k in ("consumer_seq", "stream_seq")}  # (2.11 adds last_active)
    out["after"] = (floor, ci["num_ack_pending"], (await js.stream_info("WQ")).state.messages)
    await sub.unsubscribe()
    return out


@pytest.mark.parametrize("case", ["pull", "ack wait", "max deliver", "no max ack pending", "pedantic"])
def test_flow_control_ack_policy_checks_like_nats_server(results: dict[str, Any], case: str) -> None:
    assert results["edged"][case] == results["nats-server"][case]
    assert "error" in results["nats-server"][case]


def test_flow_control_ack_policy_consumer_like_nats_server(results: dict[str, Any]) -> None:
    """The same consumer config (flow control, 1 s heartbeat, no ack wait, `_nats.req.level` 4)."""
    ref = results["nats-server"]["create"]
    assert ref["config"]["flow_control"] is True and ref["config"]["idle_heartbeat"] == 1_000_000_000
    assert ref["config"]["metadata"]["_nats.req.level"] == "4"
    assert results["edged"]["create"] == ref


def test_flow_control_answers_are_acks_like_nats_server(results: dict[str, Any]) -> None:
    """An answer carrying Nats-Last-Stream 2 acks 1 and 2: the workqueue stream keeps only the third."""
    ref = results["nats-server"]
    assert ref["delivered"] == [b"m0", b"m1", b"m2"] and ref["fc request"]
    assert ref["after"] == ({"consumer_seq": 2, "stream_seq": 2}, 1, 1)
    for key in ("delivered", "fc request", "after"):
        assert results["edged"][key] == ref[key], key
