"""The consumers another server's mirror or source creates (`direct`, `sourcing`), as a client sees them on
nats-server and on edged: their config checks, a name of their own per request, the stream identity
header, and their absence from listings and counts (nats-server's jetstream_api.go jsConsumerCreateRequest,
consumer.go checkConsumerCfg / checkNewConsumerConfig)."""

from __future__ import annotations

import json
import re
from typing import Any

import nats

from tests.support.jsutil import replies_of_both


def _shape(d: dict[str, Any]) -> Any:
    """A create response without what differs by nature: the error, or the name's shape and the config's
    direct/sourcing flags."""
    if "error" in d:  # 10225 names the stream's identity: a hash of its creation time
        e = d["error"]
        return {**e, "description": re.sub(r": [0-9A-Za-z]{8}$", ": <identity>", e["description"])}
    name = re.sub(r"-[0-9A-Za-z]{8}$", "-<random>", d["name"])
    if name not in ("C", "D") and re.fullmatch(r"[0-9A-Za-z]{8}", name):
        name = "<ephemeral>"
    return name, {k: v for k, v in d["config"].items() if k in ("direct", "sourcing", "deliver_subject")}


async def scenario(url: str) -> list[Any]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["e.>"])
        await js.add_stream(name="W", subjects=["w.>"], retention="workqueue")
        await js.publish("e.1", b"x")
        out: list[Any] = []

        async def create(subject: str, stream: str, cfg: dict[str, Any], hdr: dict[str, str] | None = None) -> Any:
            r = await nc.request(f"$JS.API.CONSUMER.CREATE.{subject}",
                                 json.dumps({"stream_name": stream, "config": cfg}).encode(), headers=hdr)
            d = json.loads(r.data)
            ident = (r.headers or {}).get("Nats-Stream-Identity")
            out.append((_shape(d), ident is not None and len(ident)))
            return d

        push = {"deliver_subject": "dlv", "ack_policy": "none", "inactive_threshold": 10_000_000_000}
        await create("S", "S", {"direct": True, "ack_policy": "none"})  # 10090: push only
        await create("S.D", "S", {**push, "direct": True, "durable_name": "D"})  # 10091: ephemeral only
        # a hub's mirror asks twice under one stable name: two consumers, each named apart
        src = {**push, "direct": True, "sourcing": True, "name": "JS_MIRROR_x"}
        a = await create("S", "S", src)
        b = await create("S", "S", src)
        out.append(a["name"] != b["name"])
        await create("W", "W", {**push, "deliver_subject": "w1", "direct": True})  # workqueue rules skipped
        # the stream's identity must match when the request names one
        await create("S", "S", {**push, "deliver_subject": "i1", "direct": True}, {"Nats-Stream-Identity": "nope"})
        # a plain consumer may not become direct or sourcing
        await create("S.C", "S", {**push, "deliver_subject": "c1"})
        await create("S.C", "S", {**push, "deliver_subject": "c1", "direct": True})
        await create("S.C", "S", {**push, "deliver_subject": "c1", "sourcing": True})
        # not listed, not counted in the stream's consumers
        names = json.loads((await nc.request("$JS.API.CONSUMER.NAMES.S", b"")).data)["consumers"]
        si = await js.stream_info("S")
        out.append((names, si.state.consumer_count))
        return out
    finally:
        await nc.close()


def test_direct_consumers_as_nats_server_has_them() -> None:
    res = replies_of_both(scenario, "jsdirect-")
    ref = res["nats-server"]
    assert ref[0][0]["err_code"] == 10090 and ref[1][0]["err_code"] == 10091, ref
    assert res["edged"] == ref
