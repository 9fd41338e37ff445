"""`$JS.API.CONSUMER.RESET.<stream>.<consumer>` (nats-server 2.14, API level 4), differential against
nats-server: the reply (consumer info with `reset_seq`, or `reset_seq: 0` beside an error), what each deliver
policy allows, the lenient body, the level gate, silence for a consumer that does not exist, what is
delivered after a reset, interest retention dropping what a reset moved past, and the reset position after
a kill -9."""

from __future__ import annotations

import json
from typing import Any

from tests.support.jsutil import across_kill9
from tests.support.servers import KINDS

_FUTURE = "2200-01-01T00:00:00Z"


def _shown(r: dict[str, Any]) -> Any:
    """A reply without what differs between any two servers (times, version metadata)."""
    out = {k: v for k, v in r.items() if k not in ("created", "ts")}
    if "config" in out:
        out["config"] = {k: v for k, v in out["config"].items() if k != "metadata"}
    for k in ("delivered", "ack_floor"):
        if k in out:
            out[k] = {x: y for x, y in out[k].items() if x != "last_active"}
    return out


async def _reset(nc: Any, stream: str, consumer: str, body: bytes = b"",
                 hdrs: dict[str, str] | None = None) -> Any:
    try:
        m = await nc.request(f"$JS.API.CONSUMER.RESET.{stream}.{consumer}", body, timeout=1, headers=hdrs)
    except Exception as e:  # no reply at all (a consumer that is not there)
        return type(e).__name__
    return _shown(json.loads(m.data))


async def _first(nc: Any) -> list[Any]:
    js = nc.jetstream()
    out: list[Any] = []
    await js.add_stream(name="S", subjects=["s.>"])
    for i in range(10):
        await js.publish(f"s.{i}", b"%d" % i)
    await js.add_consumer("S", durable_name="C", ack_policy="explicit")
    await js.add_consumer("S", durable_name="L", ack_policy="explicit", deliver_policy="last")
    await js.add_consumer("S", durable_name="B", ack_policy="explicit", deliver_policy="by_start_sequence",
                          opt_start_seq=5)
    await js.add_consumer("S", durable_name="T", ack_policy="explicit", deliver_policy="by_start_time",
                          opt_start_time=_FUTURE)
    await js.add_consumer("S", durable_name="A", ack_policy="all")
    psub = await js.pull_subscribe_bind("C", "S")
    ms = await psub.fetch(5, timeout=5)
    for i in (0, 1, 3):
        await ms[i].ack_sync()
    out.append(_shown(json.loads((await nc.request("$JS.API.CONSUMER.INFO.S.C", b"", timeout=5)).data)))
    out.append(await _reset(nc, "S", "C"))  # back to just above the ack floor
    # what comes after: the unacked ones again, as first deliveries
    ms = await psub.fetch(3, timeout=5)
    out.append([(m.metadata.sequence.stream, m.metadata.sequence.consumer, m.metadata.num_delivered) for m in ms])
    for body in (b'{"seq":7}', b'{"seq":3, "other": 1}', b"null", b'{"seq":-1}', b'{"seq":"1"}', b"garbage",
                 b"[1]", b" ", b'{"seq":100}', b'{"seq":1}'):
        out.append(await _reset(nc, "S", "C", body))
    ms = await psub.fetch(2, timeout=5)
    out.append([(m.metadata.sequence.stream, m.metadata.sequence.consumer) for m in ms])
    for name, body in (("L", b'{"seq":3}'), ("L", b""), ("B", b'{"seq":4}'), ("B", b'{"seq":5}'), ("B", b""),
                       ("T", b'{"seq":4}'), ("T", b'{"seq":11}'), ("A", b'{"seq":2}'), ("X", b""),
                       ("C", b'{"seq":2}')):
        out.append(await _reset(nc, "S", name, body))
    out.append(await _reset(nc, "S", "C", b"", {"Nats-Required-Api-Level": "99"}))
    out.append(await _reset(nc, "S", "C", b"", {"Nats-Required-Api-Level": "x"}))
    # interest retention: a reset past messages acks them for that consumer
    await js.add_stream(name="I", subjects=["i.>"], retention="interest")
    await js.add_consumer("I", durable_name="P", ack_policy="explicit")
    await js.add_consumer("I", durable_name="Q", ack_policy="explicit", filter_subject="i.q")
    for i in range(6):
        await js.publish("i.q" if i % 2 else "i.p", b"x")
    out.append(await _reset(nc, "I", "P", b'{"seq":5}'))
    out.append((await js.stream_info("I")).state.messages)
    out.append(await _reset(nc, "I", "Q", b'{"seq":5}'))
    out.append((await js.stream_info("I")).state.messages)
    return out


async def _after_restart(nc: Any) -> list[Any]:
    out = []
    for name in ("C", "B"):
        out.append(_shown(json.loads((await nc.request(f"$JS.API.CONSUMER.INFO.S.{name}", b"", timeout=5)).data)))
    psub = await nc.jetstream().pull_subscribe_bind("C", "S")
    ms = await psub.fetch(1, timeout=5)
    out.append([(m.metadata.sequence.stream, m.metadata.sequence.consumer) for m in ms])
    return out


def _of(kind: str) -> list[Any]:
    return across_kill9(kind, _first, _after_restart, "js-reset-", settle=0.2, after_timeout=60)


def test_consumer_reset_as_nats_server() -> None:
    res = {kind: _of(kind) for kind in KINDS}
    for i, (a, b) in enumerate(zip(res["edged"], res["nats-server"], strict=True)):
        assert a == b, (i, a, b)
    got = res["edged"]
    assert got[1]["reset_seq"] == 3 and got[2] == [(3, 1, 1), (4, 2, 1), (5, 3, 1)]
