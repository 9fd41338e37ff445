"""`persist_mode` (nats-server 2.12), differential: "async" is taken on a file stream and reported,
refused on a memory stream, beside atomic batches, and as a change on update; publishes to it are
acknowledged as to any stream (on edged before the SQLite commit: see README)."""

from __future__ import annotations

import json
from typing import Any

import nats

from tests.support.jsutil import replies_of_both


async def _req(nc: Any, subject: str, body: Any = None, hdrs: dict[str, str] | None = None,
               payload: bytes = b"") -> Any:
    data = json.dumps(body).encode() if body is not None else payload
    return json.loads((await nc.request(subject, data, timeout=5, headers=hdrs)).data)


def _shown(r: dict[str, Any]) -> Any:
    return r.get("error") or {k: r["config"].get(k) for k in ("persist_mode", "storage")}


async def _scenario(url: str) -> list[Any]:
    nc = await nats.connect(url)
    out: list[Any] = []
    try:
        for cfg in ({"name": "A", "subjects": ["a.>"], "persist_mode": "async"},
                    {"name": "M", "subjects": ["m.>"], "persist_mode": "async", "storage": "memory"},
                    {"name": "AB", "subjects": ["ab.>"], "persist_mode": "async", "allow_atomic": True},
                    {"name": "D", "subjects": ["d.>"], "persist_mode": "default"},
                    {"name": "E", "subjects": ["e.>"], "persist_mode": ""}):
            out.append(_shown(await _req(nc, f"$JS.API.STREAM.CREATE.{cfg['name']}", cfg)))
        out.append(_shown(await _req(nc, "$JS.API.STREAM.UPDATE.A", {"name": "A", "subjects": ["a.>"]})))
        out.append(_shown(await _req(nc, "$JS.API.STREAM.UPDATE.D", {"name": "D", "subjects": ["d.>"],
                                                                     "persist_mode": "async"})))
        out.append(_shown(await _req(nc, "$JS.API.STREAM.UPDATE.A", {"name": "A", "subjects": ["a.>", "a2"],
                                                                     "persist_mode": "async"})))
        for i in range(5):
            out.append(await _req(nc, "a.x", payload=b"%d" % i))
        out.append(await _req(nc, "a.x", hdrs={"Nats-Msg-Id": "1"}))
        out.append(await _req(nc, "a.x", hdrs={"Nats-Msg-Id": "1"}))
        out.append((await _req(nc, "$JS.API.STREAM.INFO.A"))["state"]["messages"])
    finally:
        await nc.close()
    return out


def test_persist_mode_as_nats_server() -> None:
    res = replies_of_both(_scenario, "js-persist-")
    for i, (a, b) in enumerate(zip(res["edged"], res["nats-server"], strict=True)):
        assert a == b, (i, a, b)
    assert res["edged"][0] == {"persist_mode": "async", "storage": "file"}
