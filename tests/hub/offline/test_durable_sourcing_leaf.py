"""User-named durable sourcing (`consumer: {name, deliver_subject}` in a source, nats-server 2.14) across a
leafnode link, both ways, with a 2.15 hub, edged and a nats-server leaf side by side: the hub sources an edge
workqueue stream through a durable made on the edge, and the edge sources a hub workqueue stream through a
durable made on the hub. Each origin empties as the sourcing side's flow control answers ack what it stored."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import nats
import pytest

from tests.hub.offline.test_origin import EDGE_API, Place, _places, edge_domain_up, on_both, start_leaf
from tests.support.leaf import Hub, hub_binary

__all__ = ["start_leaf"]


@pytest.fixture
def places(start_hub: Callable[..., Hub],
           start_leaf: Callable[[str, int], Any]) -> Iterator[dict[str, Place]]:
    yield from _places(("nats-server", "edged"), hub_binary("2.15"), start_hub, start_leaf)


async def _req(nc: Any, subject: str, body: Any) -> dict[str, Any]:
    return json.loads((await nc.request(subject, json.dumps(body).encode(), timeout=5)).data)  # type: ignore[no-any-return]


async def _durable(nc: Any, stream: str, name: str, deliver: str) -> None:
    r = await _req(nc, f"$JS.API.CONSUMER.CREATE.{stream}.{name}", {"stream_name": stream, "config": {
        "durable_name": name, "deliver_subject": deliver, "ack_policy": "flow_control"}})
    assert "error" not in r, r


async def _counts(nc: Any, *streams: str) -> list[int]:
    return [(await _req(nc, f"$JS.API.STREAM.INFO.{s}", {}))["state"]["messages"] for s in streams]


async def both_ways(place: Place) -> dict[str, Any]:
    hc = await nats.connect(f"nats://app:app@127.0.0.1:{place.hub.port}")
    ec = await nats.connect(place.leaf.url)
    try:
        await edge_domain_up(hc)
        ejs, hjs = ec.jetstream(), hc.jetstream()
        await ejs.add_stream(name="EW", subjects=["ew.>"], retention="workqueue")
        await hjs.add_stream(name="HW", subjects=["hw.>"], retention="workqueue")
        await _durable(ec, "EW", "TOHUB", "dlv.tohub")
        await _durable(hc, "HW", "TOEDGE", "dlv.toedge")
        r1 = await _req(hc, "$JS.API.STREAM.CREATE.HS", {"name": "HS", "sources": [
            {"name": "EW", "external": {"api": EDGE_API, "deliver": ""},
             "consumer": {"name": "TOHUB", "deliver_subject": "dlv.tohub"}}]})
        r2 = await _req(ec, "$JS.API.STREAM.CREATE.ES", {"name": "ES", "sources": [
            {"name": "HW", "external": {"api": "$JS.hub.API", "deliver": ""},
             "consumer": {"name": "TOEDGE", "deliver_subject": "dlv.toedge"}}]})
        out: dict[str, Any] = {"created": (r1.get("error"), r2.get("error"))}
        for i in range(5):
            await ejs.publish(f"ew.{i}", b"e%d" % i)
            await hjs.publish(f"hw.{i}", b"h%d" % i)
        got: list[int] = []
        for _ in range(300):  # bounded: the first reset waits for the link's interest, acks ride on heartbeats
            got = await _counts(hc, "HS", "HW") + await _counts(ec, "ES", "EW")
            if got == [5, 0, 5, 0]:
                break
            await asyncio.sleep(0.1)
        out["counts"] = got
        out["HS"] = [(await hjs.get_msg("HS", s)).data for s in range(1, 6)]
        out["ES"] = [(await ejs.get_msg("ES", s)).data for s in range(1, 6)]
        return out
    finally:
        await ec.close()
        await hc.close()


def test_durable_sourcing_across_the_link_both_ways(places: dict[str, Place]) -> None:
    res = on_both(places, both_ways)
    ref, ed = res["nats-server"], res["edged"]
    assert ref["counts"] == [5, 0, 5, 0], ref
    assert ed == ref
