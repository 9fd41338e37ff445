"""The leaf as the origin of a hub's source when its stream has interest or workqueue retention, with a
2.14+ hub (the version that sources such a stream through a durable consumer with the flow_control ack
policy: server/stream.go setupSourceConsumer, jetstream_api.go jsConsumerCreateRequest). The hub asks with
`Nats-Required-Api-Level: 4`: an origin at level 4 makes the durable, whose flow control answers from the
hub are its acks, so the edge's stream lets go of what the hub stored; an origin below level 4 answers
10185 and the hub falls back to the plain sourcing consumer, which acks nothing. Either way the hub holds
every message once, in order, across a link cut; edged must do what a nats-server origin of its level does."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import nats
import pytest
from nats.js.api import ExternalStream, StreamConfig, StreamSource

from edged import API_LEVEL
from tests.hub.offline.test_origin import (
    EDGE_API,
    Place,
    _places,
    consumer_names,
    edge_domain_up,
    on_both,
    publish_all,
    publishes,
    start_leaf,
    stream_view,
    wait_count,
)
from tests.support.leaf import Hub, hub_binary

__all__ = ["start_leaf"]
_VOLATILE = ("created", "ts", "delivered", "ack_floor", "num_pending", "num_ack_pending")


@pytest.fixture
def places(start_hub: Callable[..., Hub],
           start_leaf: Callable[[str, int], Any]) -> Iterator[dict[str, Place]]:
    """A 2.15 hub for each leaf kind (nats-server, edged)."""
    yield from _places(("nats-server", "edged"), hub_binary("2.15"), start_hub, start_leaf)


def _consumer_view(r: dict[str, Any]) -> dict[str, Any]:
    """A consumer info without what differs by nature: times, the random deliver subject, the server's own
    version and level (test_js_versioning_diff checks those)."""
    cfg = {k: v for k, v in r["config"].items() if k != "deliver_subject"}
    cfg["metadata"] = {k: v for k, v in (cfg.get("metadata") or {}).items() if k not in ("_nats.ver", "_nats.level")}
    return {**{k: v for k, v in r.items() if k not in _VOLATILE and k != "config"}, "config": cfg}


async def wait_last(js: Any, stream: str, data: bytes, timeout: float = 40.0) -> bool:
    """Until the stream's last message is `data` (False at the timeout)."""
    for _ in range(int(timeout / 0.1)):
        try:
            si = await js.stream_info(stream)
            if si.state.messages and (await js.get_msg(stream, si.state.last_seq)).data == data:
                return True
        except Exception:
            pass
        await asyncio.sleep(0.1)
    return False


async def retention_source(place: Place, retention: str) -> dict[str, Any]:
    """The hub sources the edge stream (warm-up messages until one arrives: an interest stream keeps nothing
    while the hub's consumer is not there yet); 5 messages go across, the link is cut while 20 more are
    stored at the edge, the link comes back: what the hub holds, and what the edge still holds then."""
    hc = await nats.connect(f"nats://app:app@127.0.0.1:{place.hub.port}")
    ec = await nats.connect(place.leaf.url)
    try:
        await edge_domain_up(hc)
        ejs, hjs = ec.jetstream(), hc.jetstream()
        await ejs.add_stream(name="ESTREAM", subjects=["e.>"], retention=retention)
        ext = ExternalStream(api=EDGE_API)
        await hjs.add_stream(StreamConfig(name="SRC", sources=[StreamSource(name="ESTREAM", external=ext)]))
        out: dict[str, Any] = {}
        for _ in range(60):
            await ejs.publish("e.warm", b"w")
            if await wait_count(hjs, "SRC", 1, timeout=0.5) >= 1:
                break
        await publish_all(ejs, publishes(1, 5))
        out["first"] = await wait_last(hjs, "SRC", b"m5")
        names = await consumer_names(ec, "ESTREAM")
        out["names"] = names
        if names:
            r = json.loads((await ec.request(f"$JS.API.CONSUMER.INFO.ESTREAM.{names[0]}", b"", timeout=5)).data)
            out["consumer"] = _consumer_view(r)
        await asyncio.to_thread(place.proxy.block)
        await publish_all(ejs, publishes(6, 20))
        before = (await ejs.stream_info("ESTREAM")).state.messages
        await asyncio.to_thread(place.proxy.unblock)
        out["after"] = await wait_last(hjs, "SRC", b"m25")
        out["SRC"] = [m[3] for m in (await stream_view(hjs, "SRC"))["msgs"] if m[3] != b"w"]
        left = -1
        for _ in range(50):  # the last acks ride on the next heartbeat's flow control (1 s)
            left = (await ejs.stream_info("ESTREAM")).state.messages
            if left == 0:
                break
            await asyncio.sleep(0.1)
        # what the edge held during the cut, and holds now: the 20 stored in the cut at least
        out["edge"] = (before >= 20, left)
        return out
    finally:
        await ec.close()
        await hc.close()


@pytest.mark.parametrize("retention", ["workqueue", "interest"])
def test_hub_sources_a_retention_stream_across_a_cut(places: dict[str, Place], retention: str) -> None:
    res = on_both(places, retention_source, retention)
    ref, ed = res["nats-server"], res["edged"]
    every = [b"m%d" % i for i in range(1, 26)]
    assert ref["SRC"] == every and ref["first"] and ref["after"]
    # a nats-server origin (level 5): the durable, acked by the hub's flow control answers
    assert ref["consumer"]["config"]["ack_policy"] == "flow_control" and ref["edge"] == (True, 0)
    if API_LEVEL >= 4:
        assert ed == ref
    elif retention == "workqueue":  # the hub's fallback (10185): a consumer of its own, not listed, that acks
        # nothing, so the edge keeps every message
        assert (ed["SRC"], ed["first"], ed["after"], ed["names"]) == (every, True, True, [])
        assert ed["edge"][0] and ed["edge"][1] >= 25
    else:  # interest, fallback: a delivery counts as the ack, so what went into the cut link before the edge
        # saw it go is lost to the hub (what durable sourcing, level 4, is for): the rest in order, once
        got = ed["SRC"]
        idx = [every.index(m) for m in got]
        assert idx == sorted(set(idx)) and got[:5] == every[:5] and ed["first"] and ed["names"] == []
