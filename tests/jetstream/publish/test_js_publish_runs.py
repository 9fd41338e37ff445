"""Pipelined publishes, each with a reply of its own (a JetStream publisher's requests, written back to
back): edged takes those to one subject as a run when a stream is their one receiver. Differential, raw
protocol, so that the runs really are one write: every reply, error and no-responders status, and what a
core subscriber and the streams end up with, the same as nats-server's."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support.jsutil import differing, replies_of_both
from tests.support.rawclient import Raw, connect_url, hpub, pub, reply_of

HDR_ID = b"NATS/1.0\r\nNats-Msg-Id: once\r\n\r\n"


async def _take_all(c: Raw, n: int) -> list[tuple[str, Any]]:
    """The first n messages to `_I.>`, then whatever else comes before a PING's PONG and a short wait."""
    got = await c.take_prefix(b"_I.", n)
    await asyncio.sleep(0.2)
    await c.ping()
    got += [m for m in c.msgs if m[0].startswith(b"_I.")]
    c.msgs = [m for m in c.msgs if not m[0].startswith(b"_I.")]
    return [reply_of(m) for m in got]


async def _scenario(url: str) -> list[Any]:
    c = await connect_url(url)
    for body in ({"name": "S", "subjects": ["s"], "max_msg_size": 64},
                 {"name": "L", "subjects": ["l"], "max_msgs": 5, "discard": "new"},
                 {"name": "N", "subjects": ["n"], "no_ack": True}):
        r = await c.request(f"$JS.API.STREAM.CREATE.{body['name']}", body, b"_C.c")
        assert "error" not in r, r
    out: list[Any] = []
    # requests whose lines never repeat: after a few hundred, edged parses them as runs by subject
    c.w.write(b"".join(pub(b"s", b"_I.w%d" % i, b"w") for i in range(300)))
    out.append(await _take_all(c, 300))
    frames = [pub(b"s", b"_I.a%d" % i, b"x" * (65 if i == 20 else i)) for i in range(50)]
    frames[30:30] = [hpub(b"s", b"_I.d1", HDR_ID, b"d"), hpub(b"s", b"_I.d2", HDR_ID, b"d")]
    frames += [pub(b"l", b"_I.l%d" % i, b"l") for i in range(10)]
    frames += [pub(b"n", b"_I.n%d" % i, b"n") for i in range(5)]
    frames += [pub(b"nobody", b"_I.z%d" % i, b"z") for i in range(5)]
    frames += [pub(b"s", b"_I.b%d" % i, b"b") for i in range(20)]
    c.w.write(b"".join(frames))
    got = await _take_all(c, 50 + 2 + 10 + 5 + 20)
    # nats-server answers no-responders at once and PubAcks from its stream's goroutine: the order within
    # each kind of reply is compared, and every reply
    for prefix in ("_I.a", "_I.d", "_I.l", "_I.n", "_I.z", "_I.b"):
        out.append([g for g in got if g[0].startswith(prefix)])
    # a core subscriber on the stream's subject beside the stream: every message to both, in order
    sub = await connect_url(url)
    sub.w.write(b"SUB s 9\r\n")
    await sub.ping()
    c.w.write(b"".join(pub(b"s", b"_I.c%d" % i, b"c%d" % i) for i in range(30)))
    out.append(await _take_all(c, 30))
    seen = await sub.take(b"s", 30)
    out.append([(m[1].decode(), m[3].decode()) for m in seen])
    for name in ("S", "L", "N"):
        info = await c.request(f"$JS.API.STREAM.INFO.{name}", b"", b"_C.i")
        st = info["state"]
        out.append([name, st["messages"], st["first_seq"], st["last_seq"]])
    msg = await c.request("$JS.API.STREAM.MSG.GET.S", {"seq": 321}, b"_C.g")
    out.append(msg["message"]["subject"])
    c.w.close()
    sub.w.close()
    return out


def test_pipelined_requests_to_streams_as_runs() -> None:
    res = replies_of_both(_scenario, "js-pubruns-")
    assert differing(res) == []
    e = res["edged"]
    assert [g[1]["seq"] for g in e[0]] == list(range(1, 301))
    assert e[1][20] == ("_I.a20", {"error": {"code": 400, "err_code": 10054,
                                             "description": "message size exceeds maximum allowed"},
                                   "stream": "S", "seq": 0})
    assert [g[1].get("duplicate", False) for g in e[2]] == [False, True]
    assert sum("error" in g[1] for g in e[3]) == 5 and e[4] == [] and [g[1] for g in e[5]] == ["NATS/1.0 503"] * 5
    assert [g[1]["seq"] for g in e[7]] == list(range(371, 401))
    assert e[8] == [(f"_I.c{i}", f"c{i}") for i in range(30)]
