"""Consumer reset (`$JS.API.CONSUMER.RESET.<stream>.<consumer>`, nats-server 2.14, ADR-60), differential:
nats.py's own suite (nats-jetstream's test_consumer_reset_*) resets consumers to their ack floor and to
a chosen sequence. The replies (timestamps masked), what is delivered next, and the refusals per deliver
policy must be nats-server's."""

from __future__ import annotations

import json
from typing import Any

import nats
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from tests.support.jsutil import api, replies_of_both

_TIMES = ("created", "ts", "last_active", "opt_start_time", "deliver_subject")


def _masked(d: Any) -> Any:
    """A reply without its times, the push consumer's inbox and the server's own metadata (version, level)."""
    if isinstance(d, dict):
        return {k: ("<t>" if k in _TIMES else _masked(v)) for k, v in d.items() if k != "metadata"}
    if isinstance(d, list):
        return [_masked(v) for v in d]
    return d


async def _durable(nc: Any, cfg: dict[str, Any]) -> None:
    d = await api(nc, f"$JS.API.CONSUMER.DURABLE.CREATE.S.{cfg['durable_name']}", {"stream_name": "S", "config": cfg})
    assert "error" not in d, d


async def _reset(nc: Any, consumer: str, body: bytes = b"") -> Any:
    try:
        r = await nc.request(f"$JS.API.CONSUMER.RESET.S.{consumer}", body, timeout=2)
    except NoRespondersError:
        return "no responders"
    except NatsTimeout:
        return "timeout"
    return _masked(json.loads(r.data))


async def _pull(nc: Any, consumer: str) -> Any:
    """One message of a pull consumer, or the status that ends the request."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.S.{consumer}", b'{"batch": 1, "expires": 500000000}', reply=inbox)
    try:
        return await sub.next_msg(2)
    finally:
        await sub.unsubscribe()


async def _next(nc: Any, consumer: str) -> Any:
    """One message of a pull consumer: its subject and reply (stream and consumer sequences), acked."""
    m = await _pull(nc, consumer)
    if m.headers and m.headers.get("Status"):
        return m.headers.get("Status")
    await nc.request(m.reply, b"", timeout=2)
    return m.subject, m.reply.split(".")[4:7]


async def _scenario(url: str) -> list[Any]:
    nc = await nats.connect(url)
    await nc.jetstream().add_stream(name="S", subjects=["s.*"])
    for i in range(5):
        await nc.request(f"s.{i}", b"m%d" % i, timeout=2)
    out: list[Any] = []
    await _durable(nc, {"durable_name": "A", "ack_policy": "explicit"})
    out.append(await _next(nc, "A"))  # seq 1, acked: the floor is 1
    out.append((await _pull(nc, "A")).subject)  # seq 2, left pending
    out.append(await _reset(nc, "A"))  # back to the floor: 2 again, pending cleared
    out.append(await _next(nc, "A"))
    for body in (b'{"seq": 4}', b'{"seq": 100}', b'{"seq": 0}', b"{}", b"null", b'{"seq": 2, "other": 1}'):
        out.append(await _reset(nc, "A", body))
        out.append(await _next(nc, "A"))
    for body in (b"{", b'{"seq": -1}', b'{"seq": "x"}', b"[1]"):
        out.append(await _reset(nc, "A", body))
    out.append(await _reset(nc, "NOPE"))
    await _durable(nc, {"durable_name": "B", "ack_policy": "explicit", "deliver_policy": "by_start_sequence",
                           "opt_start_seq": 3})
    for body in (b'{"seq": 2}', b'{"seq": 3}', b""):
        out.append(await _reset(nc, "B", body))
    for dp in ("new", "last", "last_per_subject"):
        await _durable(nc, {"durable_name": dp.upper(), "ack_policy": "explicit", "deliver_policy": dp,
                            "filter_subject": "s.*"})
        out.append(await _reset(nc, dp.upper(), b'{"seq": 2}'))
        out.append(await _reset(nc, dp.upper()))
    # a push consumer, ack none: resets the same way and delivers from there
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await _durable(nc, {"durable_name": "P", "ack_policy": "none", "deliver_subject": inbox})
    got = [(await sub.next_msg(2)).subject for _ in range(5)]
    out.append(got)
    out.append(await _reset(nc, "P", b'{"seq": 4}'))
    out.append([(await sub.next_msg(2)).subject for _ in range(2)])
    await nc.close()
    return out


def test_consumer_reset() -> None:
    got = replies_of_both(_scenario, "js-creset-")
    ref = got["nats-server"]
    assert ref[2]["reset_seq"] == 2 and ref[3][0] == "s.1", ref
    assert got["edged"] == ref
