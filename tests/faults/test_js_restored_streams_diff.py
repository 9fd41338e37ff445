"""Differential: a stream restored at start is administered like one just created. Against nats-server
and edged side by side, each on a store directory of its own: streams with consumers are created, the
servers restart, and then the restored streams are created again (same config: the stream itself;
another config: "already in use"), updated (refused for what an update may not change or for subjects
another stream has; accepted for new subjects and tighter limits, which then apply), published to
(deduplication and the new subjects work) and deleted, with the advisories of each step. Every reply and
advisory must be the same on both, but for times, ids and the server's name."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Callable
from typing import Any

import nats
from nats.errors import TimeoutError as NatsTimeout

from tests.support.aio import run
from tests.support.servers import KINDS, ServerProcess

# differ between any two servers or runs
MASKED = {"ts", "created", "first_ts", "last_ts", "cluster", "id", "timestamp", "server", "last_active"}


def mask(v: Any, key: str = "") -> Any:
    """`v` without what differs between servers: MASKED values, nats-server 2.11+ additions (`_nats.`
    metadata, allow_msg_ttl false, an empty metadata map)."""
    if isinstance(v, dict):
        out = {k: "*" if k in MASKED else mask(x, k) for k, x in v.items()
               if not k.startswith("_nats.") and not (k == "allow_msg_ttl" and x is False)}
        if key == "config" and out.get("metadata") == {}:
            del out["metadata"]
        return out
    if isinstance(v, list):
        return [mask(x) for x in v]
    return v


class Client:
    def __init__(self, nc: Any) -> None:
        self.nc = nc

    async def api(self, subject: str, body: Any = None) -> dict[str, Any]:
        data = b"" if body is None else json.dumps(body).encode()
        r = await self.nc.request(f"$JS.API.{subject}", data, timeout=5)
        return json.loads(r.data)  # type: ignore[no-any-return]

    async def pub(self, subject: str, data: bytes = b"", headers: dict[str, str] | None = None) -> Any:
        """The PubAck (or error) as JSON, or the name of what the request raised (no responders)."""
        try:
            r = await self.nc.request(subject, data, timeout=3, headers=headers)
        except Exception as e:
            return type(e).__name__
        return json.loads(r.data)


async def before(url: str) -> None:
    nc = await nats.connect(url)
    c = Client(nc)
    try:
        for name, extra in (("A", {"duplicate_window": 60_000_000_000, "max_msgs_per_subject": 3}), ("B", {})):
            r = await c.api(f"STREAM.CREATE.{name}", {"name": name, "subjects": [f"{name.lower()}.>"], **extra})
            assert "error" not in r, r
        for durable in ("D1", "D2"):
            r = await c.api(f"CONSUMER.CREATE.A.{durable}",
                            {"stream_name": "A", "config": {"durable_name": durable, "ack_policy": "explicit"}})
            assert "error" not in r, r
        for i in range(6):
            r = await c.pub(f"a.{i % 2}", f"m{i}".encode(), {"Nats-Msg-Id": f"id{i}"})
            assert r.get("seq") == i + 1, r
        await c.pub("b.x", b"b")
    finally:
        await nc.close()


async def after(url: str) -> dict[str, Any]:
    nc = await nats.connect(url)
    c = Client(nc)
    out: dict[str, Any] = {}
    try:
        adv = await nc.subscribe("$JS.EVENT.ADVISORY.*.>")
        await nc.flush()
        cfg = (await c.api("STREAM.INFO.A"))["config"]
        out["create_same"] = await c.api("STREAM.CREATE.A", cfg)
        out["create_other"] = await c.api("STREAM.CREATE.A", {**cfg, "max_msgs": 5})
        out["update_storage"] = await c.api("STREAM.UPDATE.A", {**cfg, "storage": "memory"})
        out["update_overlap"] = await c.api("STREAM.UPDATE.A", {**cfg, "subjects": ["a.>", "b.x"]})
        out["update_subjects"] = await c.api("STREAM.UPDATE.A", {**cfg, "subjects": ["a.>", "a2.>"]})
        out["pub_new_subject"] = await c.pub("a2.x", b"new")
        out["pub_duplicate"] = await c.pub("a.0", b"again", {"Nats-Msg-Id": "id4"})
        out["update_limits"] = await c.api("STREAM.UPDATE.A", {**cfg, "subjects": ["a.>", "a2.>"],
                                                               "max_msgs_per_subject": 1})
        out["state"] = (await c.api("STREAM.INFO.A", {"subjects_filter": ">"}))["state"]
        out["consumers"] = await c.api("CONSUMER.NAMES.A")
        out["delete"] = await c.api("STREAM.DELETE.A")
        out["pub_deleted"] = await c.pub("a.0", b"gone")
        out["names"] = await c.api("STREAM.NAMES")
        out["b"] = (await c.api("STREAM.INFO.B"))["state"]
        await nc.flush()
        events = []
        for _ in range(50):  # bounded: a handful are expected
            try:
                m = await adv.next_msg(0.5)
            except NatsTimeout:
                break
            if m.subject != "$JS.EVENT.ADVISORY.API":  # audits name the client connection
                events.append([m.subject, json.loads(m.data)])
        out["advisories"] = events
        return out
    finally:
        await nc.close()


def test_restored_streams_are_administered_like_created_ones(
        start_server: Callable[..., ServerProcess]) -> None:
    servers = [start_server(k, config=f'jetstream {{ store_dir: "{tempfile.mkdtemp(prefix=f"rs-{k}-")}" }}\n')
               for k in KINDS]

    async def main() -> dict[str, Any]:
        await asyncio.gather(*(before(p.url) for p in servers))
        for p in servers:
            await asyncio.to_thread(p.stop)
            await asyncio.to_thread(p.start)
        seen = await asyncio.gather(*(after(p.url) for p in servers))
        return dict(zip(KINDS, seen, strict=True))

    got = run(main(), timeout=60)
    ns, ed = got["nats-server"], got["edged"]
    # a few absolutes, so that both agreeing means something
    assert ns["create_same"]["state"]["messages"] == 6  # the stream there, messages and all
    assert ns["create_other"]["error"]["err_code"] == 10058
    assert "error" in ns["update_storage"] and "error" in ns["update_overlap"]
    assert ns["update_subjects"]["config"]["subjects"] == ["a.>", "a2.>"]
    assert ns["pub_new_subject"]["seq"] == 7
    assert ns["pub_duplicate"].get("duplicate") is True and ns["pub_duplicate"]["seq"] == 5
    assert ns["state"]["subjects"] == {"a.0": 1, "a.1": 1, "a2.x": 1}
    assert ns["delete"] == {"type": "io.nats.jetstream.api.v1.stream_delete_response", "success": True}
    assert ns["pub_deleted"] == "NoRespondersError" and ns["names"]["streams"] == ["B"]
    kinds = [(s, a.get("action")) for s, a in ns["advisories"]]
    assert ("$JS.EVENT.ADVISORY.STREAM.DELETED.A", "delete") in kinds
    assert ("$JS.EVENT.ADVISORY.CONSUMER.DELETED.A.D1", "delete") in kinds
    a, b = mask(ns), mask(ed)
    for key in a:
        assert b[key] == a[key], key
    assert b == a
