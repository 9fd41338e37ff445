"""A stream's first sequence before it holds any, differential. nats-server reports first_seq 0 for a
stream created without `first_seq` that has had no message and no purge, and 1 (the next sequence) once
it is purged or when it was created with `first_seq: 1`; the value survives a restart. edged reported 0
for every stream whose last sequence was 0. Covers both storages, purge bodies and deletes on such
streams, then a restart (file streams) and a publish."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from typing import Any

import nats

from tests.support.aio import run
from tests.support.jsutil import differing
from tests.support.servers import KINDS, ServerProcess

# (name suffix, extra config, operations before the first look)
CASES: list[tuple[str, dict[str, Any], list[tuple[str, dict[str, Any]]]]] = [
    ("plain", {}, []),
    ("fs0", {"first_seq": 0}, []),
    ("fs1", {"first_seq": 1}, []),
    ("fs7", {"first_seq": 7}, []),
    ("purge", {}, [("PURGE", {})]),
    ("pfilt", {}, [("PURGE", {"filter": "x.a"})]),
    ("pseq1", {}, [("PURGE", {"seq": 1})]),
    ("pseq4", {}, [("PURGE", {"seq": 4})]),
    ("pkeep", {}, [("PURGE", {"keep": 2})]),
    ("del", {}, [("MSG.DELETE", {"seq": 1})]),
    ("fs1purge", {"first_seq": 1}, [("PURGE", {})]),
    ("fs7purge", {"first_seq": 7}, [("PURGE", {})]),
]


def _state(d: dict[str, Any]) -> tuple[Any, ...]:
    s = d["state"]
    return s["messages"], s["first_seq"], s["last_seq"]


async def _setup(url: str) -> list[Any]:
    nc = await nats.connect(url)
    out: list[Any] = []
    for storage in ("file", "memory"):
        for tag, extra, ops in CASES:
            name = f"{storage[0].upper()}{tag}"
            cfg = {"name": name, "subjects": [f"{name}.x.>"], "storage": storage, **extra}
            r = json.loads((await nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(cfg).encode(), timeout=5)).data)
            out.append((name, "create", _state(r)))
            for api, body in ops:
                if "filter" in body:
                    body = {**body, "filter": f"{name}.{body['filter']}"}
                r = json.loads((await nc.request(f"$JS.API.STREAM.{api}.{name}", json.dumps(body).encode(),
                                                 timeout=5)).data)
                r.pop("type", None)
                out.append((name, api, body, r))
            info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=5)).data)
            out.append((name, "info", _state(info)))
    await nc.close()
    return out


async def _after(url: str) -> list[Any]:
    """After the restart: each file stream as it came back, then after one publish."""
    nc = await nats.connect(url)
    out: list[Any] = []
    for tag, _, _ in CASES:
        name = f"F{tag}"
        info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=5)).data)
        out.append((name, "restarted", _state(info)))
        ack = json.loads((await nc.request(f"{name}.x.a", b"m", timeout=5)).data)
        ack.pop("domain", None)
        info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=5)).data)
        out.append((name, ack, _state(info)))
    await nc.close()
    return out


def test_first_seq_of_streams_without_messages(start_server: Callable[..., ServerProcess]) -> None:
    res: dict[str, list[Any]] = {}
    for kind in KINDS:
        d = tempfile.mkdtemp(prefix="firstseq-")
        p = start_server(kind, ["-js", "-sd", d])
        got = run(_setup(p.url), timeout=60)
        p.stop()
        p = start_server(kind, ["-js", "-sd", d])  # the same store
        got += run(_after(p.url), timeout=60)
        res[kind] = got
    edged, nats_server = res["edged"], res["nats-server"]
    assert len(edged) == len(nats_server)
    diffs = differing(res)
    assert not diffs, diffs[:5]
    # the case this is about: created without first_seq, then purged
    assert ("Fpurge", "info", (0, 1, 0)) in nats_server
    assert ("Fplain", "info", (0, 0, 0)) in nats_server
