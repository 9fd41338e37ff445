"""Acks that arrive in one socket read together with other requests (edged processes the plain acks of a
read after its output is written, unless something needs them first): whatever comes after an ack in the
same write sees it done. Raw protocol, so that everything really is one write; differential where
nats-server is deterministic too, edged-only where nats-server processes acks asynchronously."""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
from collections.abc import Callable
from typing import Any

from tests.support.aio import run
from tests.support.rawclient import Raw, pub
from tests.support.servers import ServerProcess


async def _setup(c: Raw, cfg: dict[str, Any], n: int, stream: dict[str, Any] | None = None) -> None:
    """Stream S on subject s, durable P, then n messages m0.. (an interest stream keeps them for P)."""
    r = await c.request("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"], **(stream or {})}, b"_I.c")
    assert "error" not in r, r
    r = await c.request("$JS.API.CONSUMER.DURABLE.CREATE.S.P", {"stream_name": "S", "config": cfg}, b"_I.c")
    assert "error" not in r, r
    for i in range(n):
        r = await c.request("s", f"m{i}".encode(), b"_I.p")
        assert "error" not in r, r


def test_acks_then_pull_in_one_write_with_max_ack_pending(js_server: ServerProcess) -> None:
    # the acks make the room the request behind them needs: both servers answer it with messages
    async def body() -> list[Any]:
        c = await Raw.connect(js_server)
        await _setup(c, {"durable_name": "P", "ack_policy": "explicit", "max_ack_pending": 2}, 6)
        nxt = b"$JS.API.CONSUMER.MSG.NEXT.S.P"
        c.w.write(pub(nxt, b"_I.f", b'{"batch":2,"expires":2000000000}'))
        first = await c.take(b"", 2)
        c.w.write(b"".join(pub(m[1]) for m in first) + pub(nxt, b"_I.f", b'{"batch":2,"expires":2000000000}'))
        second = await c.take(b"", 2)
        c.w.write(b"".join(pub(m[1]) for m in second))
        await c.ping()
        for _ in range(40):  # nats-server handles acks apart from requests: give it a moment if needed
            info = await c.request("$JS.API.CONSUMER.INFO.S.P", b"", b"_I.i")
            if info["num_ack_pending"] == 0:
                break
            await asyncio.sleep(0.05)
        c.w.close()
        return [[m[3] for m in first + second], info["num_ack_pending"], info["ack_floor"]["stream_seq"]]

    assert run(body()) == [[b"m0", b"m1", b"m2", b"m3"], 0, 4]


def test_acks_then_info_and_no_wait_in_one_write(start_server: Callable[..., ServerProcess]) -> None:
    # edged: an API request behind acks in the same write sees them done; a no_wait pull request that
    # needs their room does not answer 404/409
    srv = start_server("edged", ["-js", "-sd", tempfile.mkdtemp(prefix="js-")])

    async def body() -> list[Any]:
        c = await Raw.connect(srv)
        await _setup(c, {"durable_name": "P", "ack_policy": "explicit", "max_ack_pending": 3}, 8)
        nxt = b"$JS.API.CONSUMER.MSG.NEXT.S.P"
        c.w.write(pub(nxt, b"_I.f", b'{"batch":3,"no_wait":true}'))
        got = await c.take(b"", 3)
        c.w.write(pub(got[0][1]) + pub(got[2][1]) + pub(b"$JS.API.CONSUMER.INFO.S.P", b"_I.i"))
        info = json.loads((await c.take(b"_I.i", 1))[0][3])
        out: list[Any] = [info["num_ack_pending"], info["ack_floor"]["stream_seq"]]
        c.w.write(pub(got[1][1]) + pub(nxt, b"_I.f", b'{"batch":3,"no_wait":true}'))
        more = await c.take(b"", 3)
        out.append([m[3] for m in more])
        c.w.close()
        return out

    assert run(body()) == [1, 1, [b"m3", b"m4", b"m5"]]


def test_acks_then_publish_to_interest_stream_in_one_write(
        start_server: Callable[..., ServerProcess]) -> None:
    # edged: acks remove the messages of an interest stream at once, so a publish behind them in the same
    # write finds room under max_msgs/discard new
    srv = start_server("edged", ["-js", "-sd", tempfile.mkdtemp(prefix="js-")])

    async def body() -> list[Any]:
        c = await Raw.connect(srv)
        await _setup(c, {"durable_name": "P", "ack_policy": "explicit"}, 2,
                     {"retention": "interest", "max_msgs": 2, "discard": "new"})
        c.w.write(pub(b"$JS.API.CONSUMER.MSG.NEXT.S.P", b"_I.f", b'{"batch":2,"expires":1000000000}'))
        got = await c.take(b"", 2)
        c.w.write(pub(got[0][1]) + pub(got[1][1]) + pub(b"s", b"_I.p", b"m2"))
        ack = json.loads((await c.take(b"_I.p", 1))[0][3])
        info = await c.request("$JS.API.STREAM.INFO.S", b"", b"_I.i")
        c.w.close()
        return [ack.get("seq"), info["state"]["messages"]]

    assert run(body()) == [3, 1]


def test_a_big_write_of_publishes_is_taken_in_slices(js_server: ServerProcess) -> None:
    # ~1 MB in one write: 3000 publishes with replies and a 300 KB message among them; edged reads at most
    # 64 KB at a time, so frames straddle reads. Every PubAck comes back, in order, and the big message
    # is stored whole
    async def body() -> list[Any]:
        c = await Raw.connect(js_server)
        r = await c.request("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"]}, b"_I.c")
        assert "error" not in r, r
        big = bytes(range(256)) * 1200
        frames = [pub(b"s", b"_I.p", b"m%d" % i + b"." * (i % 300)) for i in range(3000)]
        frames.insert(1500, pub(b"s", b"_I.p", big))
        c.w.write(b"".join(frames))
        acks = [json.loads(m[3]) for m in await c.take(b"_I.p", 3001)]
        got = await c.request("$JS.API.STREAM.MSG.GET.S", {"seq": 1501}, b"_I.g")
        c.w.close()
        return [[a["seq"] for a in acks] == list(range(1, 3002)), base64.b64decode(got["message"]["data"]) == big]

    assert run(body()) == [True, True]


def test_pubacks_of_one_commit_to_inbox_subscribers(js_server: ServerProcess) -> None:
    # 60 publishes in one write, each with its own reply under _R (one commit, 60 PubAcks): a client
    # with `_R.*` gets them all, in order; with a literal subscription on one of them, a queue group on
    # another, and a subscriber on a reply of two tokens more, each gets what nats-server delivers
    async def body() -> list[Any]:
        c = await Raw.connect(js_server)
        r = await c.request("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"]}, b"_I.c")
        assert "error" not in r, r
        c.w.write(b"SUB _R.* 2\r\n")
        await c.ping()
        out: list[Any] = []
        for rnd in range(2):
            if rnd:
                other = await Raw.connect(js_server)
                other.w.write(b"SUB _R.107 5\r\nSUB _R.111 q 6\r\nSUB _R.x.> 7\r\n")
                await other.ping()
            replies = [b"_R.%d" % (100 * rnd + i) for i in range(60)] + [b"_R.x.1.2"]
            c.w.write(b"".join(pub(b"s", rp, b"m") for rp in replies))
            while sum(1 for m in c.msgs if m[0].startswith(b"_R.")) < 60:
                await c._fill()
            got = [(m[0], json.loads(m[3])["seq"]) for m in c.msgs if m[0].startswith(b"_R.")]
            c.msgs.clear()
            out.append(got)
            if rnd:
                await other.ping()
                for _ in range(20):
                    if len(other.msgs) >= 3:
                        break
                    await other._fill()
                out.append(sorted((m[0], json.loads(m[3])["seq"]) for m in other.msgs))
                other.w.close()
        c.w.close()
        return out

    res = run(body())
    assert res[0] == [(b"_R.%d" % i, i + 1) for i in range(60)]
    assert res[1] == [(b"_R.%d" % (100 + i), 62 + i) for i in range(60)]
    assert res[2] == [(b"_R.107", 69), (b"_R.111", 73), (b"_R.x.1.2", 122)]
