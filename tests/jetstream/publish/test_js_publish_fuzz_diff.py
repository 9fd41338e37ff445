"""Publishes with random JetStream headers, differential: the expectations (Nats-Expected-Stream, -Last-
Sequence, -Last-Subject-Sequence and its -Subject override, -Last-Msg-Id), Nats-Msg-Id, Nats-Rollup and
Nats-TTL with valid, malformed and overflowing values (and the headers of counters, schedules, sourcing
and atomic batches, which edged does not have), on a stream that allows rollups and TTLs, one that allows
neither, and one with a small max_msg_size (checked before the headers' expectations). The PubAcks and
errors (checked in nats-server's order) and the streams' final state must be the same on both servers.
Seeded, so a run is repeatable."""

from __future__ import annotations

import json
import random
from typing import Any

import nats

from tests.support.jsutil import ANCHOR, case_stream, replies_of_both
from tests.support.rawclient import connect_url, hpub, pub, reply_of

HEADERS = ["Nats-Msg-Id", "Nats-Expected-Stream", "Nats-Expected-Last-Sequence", "Nats-Expected-Last-Subject-Sequence",
           "Nats-Expected-Last-Msg-Id", "Nats-Rollup", "Nats-TTL", "Nats-Expected-Last-Subject-Sequence-Subject",
           # features edged does not have, refused as nats-server refuses them on a stream without them
           "Nats-Incr", "Nats-Schedule", "Nats-Scheduler", "Nats-Schedule-Next", "Nats-Stream-Source", "Nats-Batch-Id"]
VALUES = ["", "1", "0", "00", "2", "-1", "x", "S", "T", "sub", "SUB", "all", "1s", "1.5s", "10", "never", "abc",
          "99999999999999999999", "1h", "p.a", "p.*", "0.5s", "99999999999h", "purge", "+5", "@every 1s"]
SUBJECTS = ["p.a", "p.b", "p.c", "q.a", "r.a"]
SEEDS, COUNT = (1, 2, 3), 150
# one that allows rollups and TTLs, one that allows neither, one with a small max_msg_size (some headers fit)
STREAMS: list[dict[str, Any]] = [
    {"name": "S", "subjects": ["p.>"], "allow_rollup_hdrs": True, "allow_msg_ttl": True, "max_msgs_per_subject": 5},
    {"name": "T", "subjects": ["q.>"], "deny_purge": True},
    {"name": "M", "subjects": ["r.>"], "max_msg_size": 60, "allow_msg_ttl": True},
]


def _streams(seed: int) -> list[dict[str, Any]]:
    """STREAMS as one seed's streams are named (`case_stream`: a scenario never re-creates a name it deleted)."""
    return [dict(cfg, name=case_stream(cfg["name"], seed)) for cfg in STREAMS]


def _cases(seed: int) -> list[tuple[str, dict[str, str], bytes]]:
    """A Nats-Expected-Stream of S or T names that stream as the seed's streams are named."""
    rnd = random.Random(seed)
    out = []
    for _ in range(COUNT):
        hdrs = {rnd.choice(HEADERS): rnd.choice(VALUES) for _ in range(rnd.randint(0, 3))}
        if hdrs.get("Nats-Expected-Stream") in ("S", "T"):
            hdrs["Nats-Expected-Stream"] = case_stream(hdrs["Nats-Expected-Stream"], seed)
        out.append((rnd.choice(SUBJECTS), hdrs, rnd.choice([b"x", b""])))
    return out


async def _scenario(url: str) -> list[Any]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(**ANCHOR)
    out: list[Any] = []
    for seed in SEEDS:
        for cfg in _streams(seed):
            await js.add_stream(**cfg)
        for subject, hdrs, data in _cases(seed):
            r = await nc.request(subject, data, timeout=5, headers=hdrs or None)
            ack = json.loads(r.data)
            ack.pop("domain", None)
            out.append((subject, hdrs, ack))
        for cfg in _streams(seed):
            st = (await js.stream_info(cfg["name"])).state
            out.append((cfg["name"], st.messages, st.first_seq, st.last_seq, st.num_deleted))
            await js.delete_stream(cfg["name"])
    await nc.close()
    return out


def test_publishes_with_random_headers_get_the_same_acks_and_errors() -> None:
    got = replies_of_both(_scenario, "js-pubfuzz-")
    edged, ref = got["edged"], got["nats-server"]
    codes = {o[2].get("error", {}).get("err_code") for o in ref if len(o) == 3}
    assert {10071, 10165, 10166, 10111, 10193, 10168, 10188, 10212, 10227, 10174, 10054} <= codes, codes  # all exercised
    bad = [f"\nedged: {e}\nnats:  {n}" for e, n in zip(edged, ref, strict=True) if e != n]
    assert not bad, "".join(bad[:10])


def _frame(subject: str, reply: bytes, hdrs: dict[str, str], data: bytes) -> bytes:
    if hdrs:
        h = b"NATS/1.0\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in hdrs.items()) + b"\r\n"
        return hpub(subject.encode(), reply, h, data)
    return pub(subject.encode(), reply, data)


async def _pipelined(url: str) -> list[Any]:
    c = await connect_url(url)
    assert "error" not in await c.request("$JS.API.STREAM.CREATE.ANCHOR", ANCHOR, b"_C.c")
    out: list[Any] = []
    for seed in SEEDS:
        for body in _streams(seed):
            r = await c.request(f"$JS.API.STREAM.CREATE.{body['name']}", body, b"_C.c")
            assert "error" not in r, r
        cases = _cases(seed) * 3
        c.w.write(b"".join(_frame(s, b"_I.%d.%d" % (seed, i), h, d) for i, (s, h, d) in enumerate(cases)))
        replies = [reply_of(m) for m in await c.take_prefix(b"_I.%d." % seed, len(cases))]
        for _, body in replies:
            if isinstance(body, dict):
                body.pop("domain", None)
        # each stream answers its publishes in order; the streams' answers may interleave differently
        for first in "pqr":
            out.append([r for r in replies if cases[int(r[0].split(".")[2])][0].startswith(first)])
        for body in _streams(seed):
            name = body["name"]
            st = (await c.request(f"$JS.API.STREAM.INFO.{name}", b"", b"_C.i"))["state"]
            out.append((name, st["messages"], st["first_seq"], st["last_seq"], st.get("num_deleted", 0)))
            await c.request(f"$JS.API.STREAM.DELETE.{name}", b"", b"_C.d")
    c.w.close()
    return out


def test_pipelined_publishes_with_random_headers_get_the_same_replies_in_order() -> None:
    # the same cases three times over, each seed's in one write: every reply, and each stream's replies
    # in publish order (a refused or duplicate publish is answered after the PubAcks before it)
    got = replies_of_both(_pipelined, "js-pubfuzz-pipe-")
    bad = [f"\nedged: {e}\nnats:  {n}" for e, n in zip(got["edged"], got["nats-server"], strict=True) if e != n]
    assert not bad, "".join(bad[:5])
