"""Consumer priority groups (nats-server 2.11, `priority_groups` / `priority_policy`), differential over the
raw API: the config rules, the pull request checks, the pinned client flow (the `Nats-Pin-Id` header, 423 for
another pin, the pin's TTL, the unpin API, consumer info's `priority_groups`, the pinned / unpinned
advisories), overflow thresholds and prioritized requests."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Callable
from typing import Any

import nats
import pytest

from tests.support.aio import run
from tests.support.jsutil import api, differing, replies_of_both
from tests.support.jsutil import drain as drain_sub
from tests.support.servers import KINDS, ServerProcess

S = 1_000_000_000


class Pins:
    """Pin ids are random: each is named by the order it was first seen in (P1, P2, ...)."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def __call__(self, pin: str | None) -> str | None:
        if not pin:
            return pin
        return self.names.setdefault(pin, f"P{len(self.names) + 1}")


async def _pull(nc: Any, stream: str, consumer: str, req: dict[str, Any] | bytes, pins: Pins,
                wait: float = 0.5, ack: bool = True) -> list[Any]:
    """One pull request; what came back to it: (subject, data, pin) per message (acked with `ack`),
    (status, description, pending messages) per status."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    body = req if isinstance(req, bytes) else json.dumps(req).encode()
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", body, reply=inbox)
    out: list[Any] = []
    for m in await drain_sub(sub, wait, 20):
        h = m.headers or {}
        if h.get("Status"):
            out.append((h["Status"], h.get("Description", ""), h.get("Nats-Pending-Messages")))
        else:
            out.append((m.subject, m.data.decode(), pins(h.get("Nats-Pin-Id"))))
            if ack:
                await m.ack_sync()
    await sub.unsubscribe()
    return out


def _err(r: dict[str, Any]) -> Any:
    return (r["error"]["err_code"], r["error"]["description"]) if "error" in r else None


CONFIGS = [
    {"priority_policy": "overflow", "priority_groups": ["A"]},
    {"priority_policy": "pinned_client", "priority_groups": ["A", "B"]},
    {"priority_policy": "pinned_client", "priority_groups": ["A"], "priority_timeout": 5 * S},
    {"priority_policy": "prioritized", "priority_groups": ["jobs"]},
    {"priority_policy": "overflow", "priority_groups": ["A"], "deliver_subject": "push.x"},
    {"priority_policy": "overflow"},
    {"priority_policy": "overflow", "priority_groups": [""]},
    {"priority_policy": "overflow", "priority_groups": ["bad name!"]},
    {"priority_policy": "overflow", "priority_groups": ["seventeen_chars_x"]},
    {"priority_groups": ["A"]},
    {"priority_timeout": S},
    {"priority_policy": "none", "priority_groups": []},
]


async def _config_scenario(url: str) -> list[Any]:
    nc = await nats.connect(url)
    await api(nc, "$JS.API.STREAM.CREATE.PG", {"name": "PG", "subjects": ["pg.>"]})
    out: list[Any] = []
    for i, extra in enumerate(CONFIGS):
        cfg = {"durable_name": f"C{i}", "ack_policy": "explicit", **extra}
        r = await api(nc, f"$JS.API.CONSUMER.CREATE.PG.C{i}", {"stream_name": "PG", "config": cfg})
        if "error" in r:
            out.append(_err(r))
        else:
            c = r["config"]
            out.append({k: c.get(k) for k in ("priority_policy", "priority_groups", "priority_timeout")})
            out.append(r.get("priority_groups"))
    await nc.close()
    return out


def test_priority_group_config_rules() -> None:
    res = replies_of_both(_config_scenario, "pgcfg-")
    assert not differing(res), differing(res)
    got = res["edged"]
    assert got[0] == {"priority_policy": "overflow", "priority_groups": ["A"], "priority_timeout": None}
    assert got[2] == {"priority_policy": "pinned_client", "priority_groups": ["A", "B"], "priority_timeout": 120 * S}
    assert got[3] == [{"group": "A", "pinned_ts": "0001-01-01T00:00:00Z"}]
    assert (10178, "priority groups can not be used with push consumers") in got


async def _requests_scenario(url: str) -> list[Any]:
    nc = await nats.connect(url)
    pins = Pins()
    await api(nc, "$JS.API.STREAM.CREATE.PR", {"name": "PR", "subjects": ["pr.>"]})
    for name, extra in (("PIN", {"priority_policy": "pinned_client", "priority_groups": ["G"]}),
                        ("OVF", {"priority_policy": "overflow", "priority_groups": ["G"]}),
                        ("PLAIN", {})):
        await api(nc, f"$JS.API.CONSUMER.CREATE.PR.{name}",
                  {"stream_name": "PR", "config": {"durable_name": name, "ack_policy": "explicit", **extra}})
    out = []
    for consumer, req in (("PIN", {"batch": 1, "no_wait": True}), ("PIN", {"batch": 1, "group": "X"}),
                          ("PIN", {"batch": 1, "group": "G", "min_pending": 3}),
                          ("PIN", {"batch": 1, "group": "G", "priority": 10}),
                          ("OVF", {"batch": 1, "group": "G", "id": "abc"}),
                          ("PLAIN", {"batch": 1, "group": "G", "min_ack_pending": 1}),
                          ("PLAIN", {"batch": 1, "group": "G", "id": "abc"}),
                          ("PLAIN", {"batch": 1, "no_wait": True, "group": "G"}),
                          ("PIN", {"batch": 1, "no_wait": True, "group": "G"})):
        out.append((consumer, req, await _pull(nc, "PR", consumer, req, pins, 0.3)))
    await nc.close()
    return out


def test_pull_request_checks() -> None:
    res = replies_of_both(_requests_scenario, "pgreq-")
    assert not differing(res), differing(res)
    got = [r[2] for r in res["edged"]]
    assert got[0] == [("400", "Bad Request - Priority Group missing", None)]
    assert got[1] == [("400", "Bad Request - Invalid Priority Group", None)]
    assert got[2] == [("400", "Bad Request - Not a Overflow Priority consumer", None)]
    assert got[4] == [("400", "Bad Request - Not a Pinned Client Priority consumer", None)]
    assert got[8] == [("404", "No Messages", None)]


async def _pinned_scenario(url: str) -> list[Any]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    pins = Pins()
    adv = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.>")
    await api(nc, "$JS.API.STREAM.CREATE.PN", {"name": "PN", "subjects": ["pn.>"]})
    await api(nc, "$JS.API.CONSUMER.CREATE.PN.W", {"stream_name": "PN", "config": {
        "durable_name": "W", "ack_policy": "explicit", "priority_policy": "pinned_client",
        "priority_groups": ["G"], "priority_timeout": 60 * S}})
    await api(nc, "$JS.API.CONSUMER.CREATE.PN.T", {"stream_name": "PN", "config": {
        "durable_name": "T", "ack_policy": "explicit", "priority_policy": "pinned_client",
        "priority_groups": ["G"], "priority_timeout": S}})
    for i in range(6):
        await js.publish(f"pn.{i}", str(i).encode())
    out: list[Any] = []

    async def info(consumer: str = "W") -> Any:
        r = await api(nc, f"$JS.API.CONSUMER.INFO.PN.{consumer}", {})
        return [(g["group"], pins(g.get("pinned_client_id")), g["pinned_ts"] != "0001-01-01T00:00:00Z")
                for g in r["priority_groups"]]

    out.append(await info())
    first = await _pull(nc, "PN", "W", {"batch": 1, "expires": S, "group": "G"}, pins)
    out.append(first)
    out.append(await info())
    # another client without the pin waits (and times out); with another pin it is refused at once
    out.append(await _pull(nc, "PN", "W", {"batch": 1, "expires": S // 2, "group": "G"}, pins, 1.0))
    out.append(await _pull(nc, "PN", "W", {"batch": 1, "expires": S, "group": "G", "id": "nope"}, pins))
    pin = next(k for k, v in pins.names.items() if v == "P1")
    out.append(await _pull(nc, "PN", "W", {"batch": 2, "expires": S, "group": "G", "id": pin}, pins))
    # the unpin API: its checks, then the pin goes
    for body in ({}, {"group": "bad name!"}, {"group": "X"}):
        out.append(_err(await api(nc, "$JS.API.CONSUMER.UNPIN.PN.W", body)))
    out.append(_err(await api(nc, "$JS.API.CONSUMER.UNPIN.PN.NONE", {"group": "G"})))
    r = await api(nc, "$JS.API.CONSUMER.UNPIN.PN.W", {"group": "G"})
    out.append({k: v for k, v in r.items()})
    out.append(await info())
    # the old pin is refused when a message is there for it; a client without one is pinned anew
    out.append(await _pull(nc, "PN", "W", {"batch": 1, "expires": S, "group": "G", "id": pin}, pins))
    out.append(await _pull(nc, "PN", "W", {"batch": 1, "expires": S, "group": "G"}, pins))
    # the pin's TTL (1 s on T) runs out with no request from its client
    out.append(await _pull(nc, "PN", "T", {"batch": 1, "expires": S, "group": "G"}, pins))
    out.append(await info("T"))
    await asyncio.sleep(1.5)
    out.append(await info("T"))
    events = []
    for m in await drain_sub(adv, 0.3, 20):
        e = json.loads(m.data)
        if m.subject.split(".")[4] not in ("PINNED", "UNPINNED"):
            continue
        events.append((m.subject, e["type"], e["stream"], e["consumer"], e["group"], pins(e.get("pinned_id")),
                       e.get("reason"), e.get("account")))
    out.append(events)
    await nc.close()
    return out


def test_pinned_client_flow() -> None:
    res = replies_of_both(_pinned_scenario, "pgpin-")
    assert not differing(res), differing(res)
    got = res["edged"]
    assert got[0] == [("G", None, False)]
    assert got[1] == [("pn.0", "0", "P1")]
    assert got[2] == [("G", "P1", True)]
    assert got[3] == [("408", "Request Timeout", "1")]
    assert got[4] == [("423", "Nats-Pin-Id mismatch", None)]
    assert got[5] == [("pn.1", "1", "P1"), ("pn.2", "2", "P1")]
    assert got[6:10] == [(10025, "invalid JSON: consumer group not specified"),
                         (10162, "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not "
                                 "exceed 16 characters"),
                         (10160, "Provided priority group does not exist for this consumer"),
                         (10014, "consumer not found")]
    assert got[11] == [("G", None, False)]
    assert got[12] == [("423", "Nats-Wrong-Pin-Id", "1")]
    assert got[13] == [("pn.3", "3", "P2")]
    assert got[14] == [("pn.0", "0", "P3")]
    assert got[15] == [("G", "P3", True)]
    assert got[16] == [("G", None, False)]
    kinds = [(e[0].split(".")[4], e[3], e[5], e[6]) for e in got[17]]
    assert kinds == [("PINNED", "W", "P1", None), ("UNPINNED", "W", None, "admin"), ("PINNED", "W", "P2", None),
                     ("PINNED", "T", "P3", None), ("UNPINNED", "T", None, "timeout")]


async def _overflow_scenario(url: str) -> list[Any]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    pins = Pins()
    await api(nc, "$JS.API.STREAM.CREATE.OV", {"name": "OV", "subjects": ["ov.>"]})
    await api(nc, "$JS.API.CONSUMER.CREATE.OV.W", {"stream_name": "OV", "config": {
        "durable_name": "W", "ack_policy": "explicit", "priority_policy": "overflow", "priority_groups": ["G"]}})
    for i in range(4):
        await js.publish(f"ov.{i}", str(i).encode())
    out: list[Any] = []
    # 4 pending: a threshold of 10 is not reached, one of 4 is
    out.append(await _pull(nc, "OV", "W", {"batch": 1, "expires": S // 2, "group": "G", "min_pending": 10}, pins,
                           1.0))
    out.append(await _pull(nc, "OV", "W", {"batch": 1, "expires": S, "group": "G", "min_pending": 4}, pins,
                           ack=False))
    # one message waits for its ack: a min_ack_pending of 2 waits, one of 1 is served
    out.append(await _pull(nc, "OV", "W", {"batch": 1, "expires": S // 2, "group": "G", "min_ack_pending": 2},
                           pins, 1.0))
    out.append(await _pull(nc, "OV", "W", {"batch": 1, "expires": S, "group": "G", "min_ack_pending": 1}, pins))
    out.append(await _pull(nc, "OV", "W", {"batch": 2, "expires": S, "group": "G"}, pins))
    await nc.close()
    return out


def test_overflow_thresholds() -> None:
    res = replies_of_both(_overflow_scenario, "pgovf-")
    assert not differing(res), differing(res)
    got = res["edged"]
    assert got[0] == [("408", "Request Timeout", "1")]
    assert got[1] == [("ov.0", "0", None)]
    assert got[2] == [("408", "Request Timeout", "1")]
    assert got[3] == [("ov.1", "1", None)]
    assert got[4] == [("ov.2", "2", None), ("ov.3", "3", None)]


async def _prioritized_scenario(url: str) -> list[Any]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await api(nc, "$JS.API.STREAM.CREATE.PZ", {"name": "PZ", "subjects": ["pz.>"]})
    await api(nc, "$JS.API.CONSUMER.CREATE.PZ.W", {"stream_name": "PZ", "config": {
        "durable_name": "W", "ack_policy": "none", "priority_policy": "prioritized", "priority_groups": ["G"]}})
    subs = {}
    for name, prio in (("low", 5), ("high", 0), ("mid", 2)):
        inbox = nc.new_inbox()
        subs[name] = await nc.subscribe(inbox)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.PZ.W",
                         json.dumps({"batch": 1, "expires": 3 * S, "group": "G", "priority": prio}).encode(),
                         reply=inbox)
    await nc.flush()
    got = []
    for i in range(3):
        await js.publish(f"pz.{i}", str(i).encode())
        await asyncio.sleep(0.2)
    for name, sub in subs.items():
        got.append((name, [m.data.decode() for m in await drain_sub(sub, 0.3, 5) if not (m.headers or {})
                           .get("Status")]))
    await nc.close()
    return got


def test_prioritized_requests() -> None:
    res = replies_of_both(_prioritized_scenario, "pgprio-")
    assert not differing(res), differing(res)
    assert res["edged"] == [("low", ["2"]), ("high", ["0"]), ("mid", ["1"])]


async def _pin_max_bytes_scenario(url: str) -> list[Any]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    pins = Pins()
    await api(nc, "$JS.API.STREAM.CREATE.PB", {"name": "PB", "subjects": ["pb.>"]})
    await api(nc, "$JS.API.CONSUMER.CREATE.PB.W", {"stream_name": "PB", "config": {
        "durable_name": "W", "ack_policy": "explicit", "priority_policy": "pinned_client",
        "priority_groups": ["G"]}})
    await js.publish("pb.1", b"x" * 200)
    out: list[Any] = []
    # the message does not fit the first request: no pin is kept for it; the next request is pinned
    out.append(await _pull(nc, "PB", "W", {"batch": 1, "expires": S, "group": "G", "max_bytes": 50}, pins))
    r = await api(nc, "$JS.API.CONSUMER.INFO.PB.W", {})
    out.append([pins(g.get("pinned_client_id")) for g in r["priority_groups"]])
    got = await _pull(nc, "PB", "W", {"batch": 1, "expires": S, "group": "G"}, pins)
    out.append([(m[0], m[2]) for m in got])
    await nc.close()
    return out


def test_pin_not_kept_for_a_request_the_message_does_not_fit() -> None:
    res = replies_of_both(_pin_max_bytes_scenario, "pgpmb-")
    assert not differing(res), differing(res)
    assert res["edged"][0] == [("409", "Message Size Exceeds MaxBytes", "1")]
    assert res["edged"][1] == [None]
    assert res["edged"][2] == [("pb.1", "P1")]  # the first pin was never seen


@pytest.mark.parametrize("kind", KINDS)
def test_priority_config_survives_kill9(kind: str, start_server: Callable[..., ServerProcess]) -> None:
    """The priority config is stored with the consumer: after kill -9 it is still a pinned_client consumer,
    and its first request is pinned anew (a pin itself is not kept, by either server)."""
    p = start_server(kind, ["-js", "-sd", tempfile.mkdtemp(prefix="pgk9-")])
    pins = Pins()

    async def first() -> Any:
        nc = await nats.connect(p.url)
        await api(nc, "$JS.API.STREAM.CREATE.PK", {"name": "PK", "subjects": ["pk.>"]})
        await api(nc, "$JS.API.CONSUMER.CREATE.PK.W", {"stream_name": "PK", "config": {
            "durable_name": "W", "ack_policy": "explicit", "priority_policy": "pinned_client",
            "priority_groups": ["G"], "priority_timeout": 30 * S}})
        for i in range(2):
            await nc.jetstream().publish(f"pk.{i}", b"x")
        got = await _pull(nc, "PK", "W", {"batch": 1, "expires": S, "group": "G"}, pins)
        await nc.close()
        return got

    async def second() -> Any:
        nc = await nats.connect(p.url)
        r = await api(nc, "$JS.API.CONSUMER.INFO.PK.W", {})
        c = r["config"]
        out = [{k: c.get(k) for k in ("priority_policy", "priority_groups", "priority_timeout")},
               [pins(g.get("pinned_client_id")) for g in r["priority_groups"]]]
        out.append(await _pull(nc, "PK", "W", {"batch": 1, "expires": S, "group": "G"}, pins))
        await nc.close()
        return out

    assert run(first()) == [("pk.0", "x", "P1")]
    p.kill9()
    p.start()
    assert run(second()) == [{"priority_policy": "pinned_client", "priority_groups": ["G"],
                              "priority_timeout": 30 * S}, [None], [("pk.1", "x", "P2")]]


async def _turns_scenario(url: str) -> list[Any]:
    """Waiting requests of a priority consumer take turns, one message each, as in nats-server's waiting
    queue (prioritized: in turn among those of the most urgent priority)."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    await api(nc, "$JS.API.STREAM.CREATE.TN", {"name": "TN", "subjects": ["tn.>"]})
    out: list[Any] = []
    for name, policy, prios in (("O", "overflow", (0, 0, 0)), ("Z", "prioritized", (3, 1, 1))):
        await api(nc, f"$JS.API.CONSUMER.CREATE.TN.{name}", {"stream_name": "TN", "config": {
            "durable_name": name, "ack_policy": "none", "priority_policy": policy, "priority_groups": ["G"],
            "deliver_policy": "new"}})
        subs = []
        for prio in prios:
            inbox = nc.new_inbox()
            subs.append(await nc.subscribe(inbox))
            body = {"batch": 3, "expires": 3 * S, "group": "G", "priority": prio}
            await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.TN.{name}", json.dumps(body).encode(), reply=inbox)
        await nc.flush()
        await asyncio.sleep(0.2)
        for i in range(5):
            await js.publish(f"tn.{name}.{i}", b"x")
            await asyncio.sleep(0.05)
        out.append([[m.subject for m in await drain_sub(s, 0.3, 10) if not (m.headers or {}).get("Status")]
                    for s in subs])
        for s in subs:
            await s.unsubscribe()
    await nc.close()
    return out


def test_waiting_requests_take_turns() -> None:
    res = replies_of_both(_turns_scenario, "pgturn-")
    assert not differing(res), differing(res)
    assert res["edged"] == [
        [["tn.O.0", "tn.O.3"], ["tn.O.1", "tn.O.4"], ["tn.O.2"]],
        [[], ["tn.Z.0", "tn.Z.2", "tn.Z.4"], ["tn.Z.1", "tn.Z.3"]],  # priority 3 waits behind the 1s
    ]


async def _passed_over_scenario(url: str) -> list[Any]:
    """Requests the policy passes over while messages are there: a no_wait one without an expiry ends with
    404 at once, with an expiry it waits for it (408), as when the stream has nothing for it."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    pins = Pins()
    await api(nc, "$JS.API.STREAM.CREATE.PO", {"name": "PO", "subjects": ["po.>"]})
    for name, policy in (("W", "pinned_client"), ("O", "overflow")):
        await api(nc, f"$JS.API.CONSUMER.CREATE.PO.{name}", {"stream_name": "PO", "config": {
            "durable_name": name, "ack_policy": "none", "priority_policy": policy, "priority_groups": ["G"]}})
    for i in range(3):
        await js.publish(f"po.{i}", b"x")
    out = [await _pull(nc, "PO", "W", {"batch": 1, "group": "G"}, pins, ack=False)]
    for consumer, body in (("W", {"no_wait": True}), ("W", {"no_wait": True, "expires": S // 2}),
                           ("W", {"expires": S // 2}), ("O", {"no_wait": True, "min_pending": 10}),
                           ("O", {"no_wait": True, "min_pending": 3})):
        out.append(await _pull(nc, "PO", consumer, {"batch": 1, "group": "G", **body}, pins, 1.0, ack=False))
    await nc.close()
    return out


def test_no_wait_requests_passed_over() -> None:
    res = replies_of_both(_passed_over_scenario, "pgnw-")
    assert not differing(res), differing(res)
    assert res["edged"] == [[("po.0", "x", "P1")], [("404", "No Messages", None)],
                            [("408", "Request Timeout", "1")], [("408", "Request Timeout", "1")],
                            [("404", "No Messages", None)], [("po.0", "x", None)]]
