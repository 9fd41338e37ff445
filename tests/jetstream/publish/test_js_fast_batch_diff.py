"""Fast batch publishing (`allow_batched`, nats-server 2.14), differential: the reply-subject protocol
(`<prefix>.<id>.<flow>.<gap>.<seq>.<op>.$FI`), the first flow ack, flow acks, gap reports, commits (a
last message or an end-of-batch marker) answered with a PubAck carrying `batch` and `count`, and the
errors (10205-10209), against nats-server and edged with a raw nats-py client."""

from __future__ import annotations

import asyncio
import json
import tempfile
from typing import Any

import pytest

from tests.support.aio import run
from tests.support.jsutil import session
from tests.support.servers import KINDS, ServerProcess

INBOX = "_INBOX.fb"


def reply(bid: str, seq: int, op: int, flow: int = 2, gap: str = "fail") -> str:
    return f"{INBOX}.{bid}.{flow}.{gap}.{seq}.{op}.$FI"


async def batch(nc: Any, subject: str, replies: list[str], settle: float = 0.0,
                headers: dict[str, str] | None = None) -> list[Any]:
    """Publish one message per reply subject, then collect what comes back until a PubAck or an error
    PubAck (bounded), each as (batch seq of the reply it went to, body)."""
    sub = await nc.subscribe(f"{INBOX}.>")
    for i, r in enumerate(replies):
        await nc.publish(subject, b"m%d" % (i + 1), reply=r, headers=headers)
        if settle:
            await asyncio.sleep(settle)
    got: list[Any] = []
    for _ in range(len(replies) * 4 + 8):
        try:
            m = await sub.next_msg(timeout=2)
        except Exception:
            break
        body = json.loads(m.data)
        tok = m.subject.split(".")[-3]
        got.append((int(tok) if tok.isdigit() else 0, body))
        if "stream" in body:  # a PubAck or an error PubAck ends it
            break
    await sub.unsubscribe()
    return got


async def scenario(nc: Any, js: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    r = json.loads((await nc.request("$JS.API.STREAM.CREATE.FB", json.dumps(
        {"name": "FB", "subjects": ["fb.>"], "allow_batched": True}).encode(), timeout=5)).data)
    out["config"] = (r["config"].get("allow_batched"), r["config"]["metadata"]["_nats.req.level"])
    r = json.loads((await nc.request("$JS.API.STREAM.CREATE.FBM", json.dumps(
        {"name": "FBM", "mirror": {"name": "FB"}, "allow_batched": True}).encode(), timeout=5)).data)
    out["mirror"] = r.get("error")
    await js.add_stream(name="OFF", subjects=["off.>"])
    # ten messages, the last one the commit, acks every 2
    out["ten"] = await batch(nc, "fb.a", [reply("b1", 1, 0)] + [reply("b1", i, 1) for i in range(2, 10)]
                             + [reply("b1", 10, 2)], settle=0.02)
    # two messages and an end-of-batch marker (not stored)
    out["eob"] = await batch(nc, "fb.b", [reply("b2", 1, 0), reply("b2", 2, 1), reply("b2", 3, 3)], settle=0.02)
    # a gap in gap-fail mode ends the batch at what came before it
    out["gap"] = await batch(nc, "fb.c", [reply("b3", 1, 0), reply("b3", 3, 1)], settle=0.05)
    # refusals
    out["disabled"] = await batch(nc, "off.a", [reply("b4", 1, 0)])
    out["pattern"] = await batch(nc, "fb.d", [f"{INBOX}.x.$FI"])
    out["unknown"] = await batch(nc, "fb.d", [reply("nope", 2, 1)])
    out["long id"] = await batch(nc, "fb.d", [reply("x" * 65, 1, 0)])
    # gap-ok mode: the gap is reported and the batch goes on
    out["gap ok"] = await batch(nc, "fb.g", [reply("b7", 1, 0, gap="ok"), reply("b7", 3, 1, gap="ok"),
                                             reply("b7", 4, 2, gap="ok")], settle=0.05)
    # a ping repeats the last flow ack; an end-of-batch marker then commits
    out["ping"] = await batch(nc, "fb.p", [reply("b8", 1, 0), reply("b8", 1, 4), reply("b8", 2, 3)], settle=0.05)
    # a memory stream: stored at once
    await nc.request("$JS.API.STREAM.CREATE.FBMEM", json.dumps(
        {"name": "FBMEM", "subjects": ["fbm.>"], "allow_batched": True, "storage": "memory"}).encode(), timeout=5)
    out["memory"] = await batch(nc, "fbm.a", [reply("m1", 1, 0)] + [reply("m1", i, 1) for i in range(2, 6)]
                                + [reply("m1", 6, 2)], settle=0.02)
    # Nats-Required-Api-Level on a batch: refused above the server's level, else taken off
    out["level above"] = await batch(nc, "fb.e", [reply("b5", 1, 0)], headers={"Nats-Required-Api-Level": "99"})
    out["level ok"] = await batch(nc, "fb.e", [reply("b6", 1, 2)], headers={"Nats-Required-Api-Level": "0",
                                                                             "X-Keep": "1"})
    out["level ok headers"] = (await js.get_msg("FB", out["level ok"][-1][1]["seq"])).headers
    si = await js.stream_info("FB")
    msgs = [(await js.get_msg("FB", s)).data for s in range(si.state.first_seq, si.state.last_seq + 1)]
    out["stored"] = (si.state.messages, msgs)
    return out


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    out = {}
    for kind in KINDS:
        p = ServerProcess(kind, ["-js", "-sd", tempfile.mkdtemp(prefix="fb-")]).start()
        try:
            out[kind] = run(session(p, scenario), timeout=90)
        finally:
            p.stop()
    return out


def test_stream_config_like_nats_server(results: dict[str, Any]) -> None:
    ref = results["nats-server"]
    assert ref["config"] == (True, "4") and ref["mirror"]["err_code"] == 10209
    assert results["edged"]["config"] == ref["config"] and results["edged"]["mirror"] == ref["mirror"]


def _acks_then_puback(got: list[Any]) -> None:
    """Flow acks (at increasing sequences) and then the PubAck, nothing else."""
    assert got[0] == (1, {"type": "ack", "seq": 0, "msgs": 2}), got
    seqs = [body["seq"] for _, body in got[1:-1]]
    assert all(body["type"] == "ack" and body["msgs"] == 2 for _, body in got[1:-1]), got
    assert seqs == sorted(seqs) and all(s % 2 == 0 for s in seqs), got


def test_batch_committed_like_nats_server(results: dict[str, Any]) -> None:
    for kind in KINDS:
        got = results[kind]["ten"]
        _acks_then_puback(got)
        assert got[-1] == (10, {"stream": "FB", "seq": 10, "batch": "b1", "count": 10}), (kind, got)
        got = results[kind]["memory"]
        _acks_then_puback(got)
        assert got[-1] == (6, {"stream": "FBMEM", "seq": 6, "batch": "m1", "count": 6}), (kind, got)
        got = results[kind]["eob"]
        assert got[-1] == (3, {"stream": "FB", "seq": 12, "batch": "b2", "count": 2}), (kind, got)
    assert results["edged"]["stored"] == results["nats-server"]["stored"]


def test_gap_ends_the_batch_like_nats_server(results: dict[str, Any]) -> None:
    ref = results["nats-server"]["gap"]
    assert ref[-2:] == [(3, {"type": "gap", "last_seq": 2, "seq": 3}),
                        (3, {"stream": "FB", "seq": 13, "batch": "b3", "count": 1})], ref
    assert results["edged"]["gap"] == ref


def test_required_level_on_a_batch_like_nats_server(results: dict[str, Any]) -> None:
    ref = results["nats-server"]
    assert ref["level above"][-1][1]["error"]["err_code"] == 10185
    assert ref["level ok headers"] == {"X-Keep": "1"}
    for key in ("level above", "level ok", "level ok headers"):
        assert results["edged"][key] == ref[key], key


@pytest.mark.parametrize("case", ["gap ok", "ping"])
def test_gap_ok_and_ping_like_nats_server(results: dict[str, Any], case: str) -> None:
    ref = results["nats-server"][case]
    assert "batch" in ref[-1][1], ref
    assert [b for _, b in results["edged"][case]] == [b for _, b in ref]


@pytest.mark.parametrize("case,code", [("disabled", 10205), ("pattern", 10206), ("unknown", 10208),
                                       ("long id", 10207)])
def test_refusals_like_nats_server(results: dict[str, Any], case: str, code: int) -> None:
    ref = results["nats-server"][case]
    assert ref[-1][1]["error"]["err_code"] == code, ref
    assert [b for _, b in results["edged"][case]] == [b for _, b in ref]

