"""Atomic batch publish (`allow_atomic`, nats-server 2.12), differential: staged messages answered with
an empty reply, the commit's PubAck with `batch` and `count`, `eob` commits, every refusal (disabled,
missing sequence, bad id, gaps, a bad commit, too large, duplicate ids, unsupported headers, a failing
expectation that refuses the whole batch), counters inside a batch; and kill -9 while batches commit:
each batch is stored whole or not at all."""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
from typing import Any

import nats

from tests.support.aio import run
from tests.support.jsutil import replies_of_both
from tests.support.servers import KINDS, ServerProcess


async def _req(nc: Any, subject: str, hdrs: dict[str, str] | None = None, payload: bytes = b"") -> Any:
    m = await nc.request(subject, payload, timeout=5, headers=hdrs)
    return json.loads(m.data) if m.data else m.data


def _b(bid: str, seq: int, commit: str | None = None, **extra: str) -> dict[str, str]:
    h = {"Nats-Batch-Id": bid, "Nats-Batch-Sequence": str(seq), **extra}
    if commit is not None:
        h["Nats-Batch-Commit"] = commit
    return h


async def _state(nc: Any, stream: str) -> Any:
    r = await _req(nc, f"$JS.API.STREAM.INFO.{stream}")
    return r["state"]["messages"], r["state"]["last_seq"]


async def _hdrs(nc: Any, stream: str, seq: int) -> Any:
    r = await _req(nc, f"$JS.API.STREAM.MSG.GET.{stream}", payload=json.dumps({"seq": seq}).encode())
    if "error" in r:
        return r["error"]
    return sorted(base64.b64decode(r["message"].get("hdrs", "")).decode().split("\r\n")[1:-2])


async def _scenario(url: str) -> list[Any]:
    nc = await nats.connect(url)
    out: list[Any] = []
    try:
        for cfg in ({"name": "B", "subjects": ["b.>"], "allow_atomic": True},
                    {"name": "NB", "subjects": ["nb.>"]},
                    {"name": "BC", "subjects": ["bc.>"], "allow_atomic": True, "allow_msg_counter": True},
                    {"name": "BAD", "subjects": ["bad.>"], "allow_atomic": True, "persist_mode": "async"},
                    {"name": "BADM", "subjects": ["badm.>"], "storage": "memory", "persist_mode": "async"},
                    {"name": "BADX", "mirror": {"name": "B"}, "allow_atomic": True}):
            r = await _req(nc, f"$JS.API.STREAM.CREATE.{cfg['name']}", payload=json.dumps(cfg).encode())
            out.append(r.get("error") or {k: r["config"].get(k) for k in ("allow_atomic", "persist_mode")})
        steps: list[tuple[str, dict[str, str], bytes]] = [
            ("nb.x", _b("n", 1), b"1"),
            ("b.x", _b("a", 1), b"1"), ("b.y", _b("a", 2), b"2"), ("b.x", _b("a", 3, "1"), b"3"),
            ("b.x", {"Nats-Batch-Id": "m"}, b"1"),
            ("b.x", _b("i" * 65, 1), b"1"),
            ("b.x", _b("s2", 2), b"1"),
            ("b.x", _b("g", 1), b"1"), ("b.x", _b("g", 3), b"3"), ("b.x", _b("g", 4, "1"), b"4"),
            ("b.x", _b("c", 1), b"1"), ("b.x", _b("c", 2, "x"), b"2"), ("b.x", _b("c", 3, "1"), b"3"),
            ("b.x", _b("e", 1), b"1"), ("b.z", _b("e", 2), b"2"), ("b.x", _b("e", 3, "eob"), b""),
            ("b.x", _b("e1", 1, "eob"), b""),
            ("b.x", _b("f", 1), b"1"), ("b.x", _b("f", 2, "1", **{"Nats-Expected-Last-Sequence": "9"}), b"2"),
            ("b.x", _b("f2", 1, **{"Nats-Expected-Last-Sequence": "0"}), b"1"), ("b.x", _b("f2", 2, "1"), b"2"),
            ("b.x", _b("d", 1, **{"Nats-Msg-Id": "dup"}), b"1"), ("b.x", _b("d", 2, "1", **{"Nats-Msg-Id": "dup"}),
                                                               b"2"),
            ("b.x", _b("u", 1, "1", **{"Nats-Expected-Last-Msg-Id": "x"}), b"1"),
            ("b.x", _b("t", 1, "1", **{"Nats-TTL": "5s"}), b"1"),
            ("b.x", _b("big", 1001), b"1"),
            ("b.x", _b("r", 1, "1", **{"Nats-Rollup": "sub"}), b"1"),
            ("b.x", _b("ok2", 1, **{"Nats-Msg-Id": "id1"}), b"1"), ("b.w", _b("ok2", 2, "1"), b"2"),
            ("b.x", _b("ok3", 1, "1", **{"Nats-Msg-Id": "id1"}), b"1"),
            ("bc.n", _b("k", 1, **{"Nats-Incr": "2"}), b""), ("bc.n", _b("k", 2, **{"Nats-Incr": "3"}), b""),
            ("bc.m", _b("k", 3, "1", **{"Nats-Incr": "4"}), b""),
            ("bc.n", _b("k2", 1, **{"Nats-Incr": "2"}), b""), ("bc.n", _b("k2", 2, "1"), b"x"),
        ]
        advisories = await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.>")
        for subject, hdrs, payload in steps:
            out.append((subject, hdrs.get("Nats-Batch-Id", "")[:8], await _req(nc, subject, hdrs, payload)))
        await nc.flush()
        for _ in range(20):  # the batches abandoned as incomplete: g and e1
            try:
                adv = json.loads((await advisories.next_msg(timeout=1)).data)
            except nats.errors.TimeoutError:
                break
            out.append({k: v for k, v in adv.items() if k not in ("id", "timestamp")})
        out.append(await _state(nc, "B"))
        out.append(await _state(nc, "BC"))
        for seq in range(1, 8):
            out.append(await _hdrs(nc, "B", seq))
        r = await _req(nc, "$JS.API.STREAM.MSG.GET.BC", payload=b'{"last_by_subj": "bc.n"}')
        out.append(base64.b64decode(r["message"]["data"]))
    finally:
        await nc.close()
    return out


def test_atomic_batches_as_nats_server() -> None:
    res = replies_of_both(_scenario, "js-batch-")
    for i, (a, b) in enumerate(zip(res["edged"], res["nats-server"], strict=True)):
        assert a == b, (i, a, b)
    assert ("b.x", "a", {"stream": "B", "seq": 3, "batch": "a", "count": 3}) in res["edged"]
    abandoned = [x["batch"] for x in res["edged"] if isinstance(x, dict) and x.get("reason") == "incomplete"]
    assert abandoned == ["g", "e1"]


BATCHES, SIZE = 40, 100


async def _flood(url: str) -> int:
    """Publish BATCHES batches of SIZE without waiting; return once the first commit is acknowledged
    (the rest are on their way or committing when the server is killed)."""
    nc = await nats.connect(url)
    cfg = {"name": "K", "subjects": ["k.>"], "allow_atomic": True}
    await _req(nc, "$JS.API.STREAM.CREATE.K", payload=json.dumps(cfg).encode())
    acks: asyncio.Queue[Any] = asyncio.Queue()

    async def on_ack(m: Any) -> None:
        if m.data:
            acks.put_nowait(json.loads(m.data))

    inbox = nc.new_inbox()
    await nc.subscribe(inbox + ".*", cb=on_ack)
    for b in range(BATCHES):
        for i in range(1, SIZE + 1):
            h = _b(f"b{b}", i, "1" if i == SIZE else None)
            await nc.publish(f"k.{i % 7}", b"x" * 64, reply=f"{inbox}.{b}", headers=h)
    await nc.flush()
    first = await asyncio.wait_for(acks.get(), 10)
    await nc.close()
    return int(first.get("count", 0))


async def _batches_stored(url: str) -> dict[str, list[int]]:
    """Batch id -> the batch sequences stored, read message by message."""
    nc = await nats.connect(url)
    state = (await _req(nc, "$JS.API.STREAM.INFO.K"))["state"]
    got: dict[str, list[int]] = {}
    for seq in range(state["first_seq"], state["last_seq"] + 1) if state["messages"] else ():
        r = await _req(nc, "$JS.API.STREAM.MSG.GET.K", payload=json.dumps({"seq": seq}).encode())
        hdrs = dict(ln.split(": ", 1) for ln in base64.b64decode(r["message"]["hdrs"]).decode().split("\r\n")[1:-2])
        got.setdefault(hdrs["Nats-Batch-Id"], []).append(int(hdrs["Nats-Batch-Sequence"]))
    await nc.close()
    return got


def test_batch_whole_or_absent_after_kill9() -> None:
    for kind in KINDS:
        p = ServerProcess(kind, ["-js", "-sd", tempfile.mkdtemp(prefix="js-batch9-")]).start()
        try:
            assert run(_flood(p.url)) == SIZE
            p.kill9()
            p.restart()
            got = run(_batches_stored(p.url), timeout=120)
            assert got, kind  # the acknowledged batch at least
            for bid, seqs in got.items():
                assert seqs == list(range(1, SIZE + 1)), (kind, bid, len(seqs))
        finally:
            p.stop()
