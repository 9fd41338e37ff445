"""Plain acks sent as a run in one write (a consumer client acks a whole fetch, then asks for the next batch
in the same write), differential. edged parses such a run as one event and hands the acks of one consumer
to it in one call; this checks that nothing tells that apart from acks taken one by one: consumer state,
what a pull request right behind the acks gets, acks of other shapes mixed in (a payload, a reply, a
wrong number of tokens, another consumer's, one twice), a client subscribed to `$JS.ACK.>` (sees every
ack, in order), a verbose client (+OK for each), and the per-connection message counts in /connz."""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
import urllib.request
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import nats

from tests.support.aio import run
from tests.support.jsutil import differing, drain
from tests.support.rawclient import Raw
from tests.support.servers import KINDS, ServerProcess, free_port

CONSUMERS = {
    "CE": {"ack_policy": "explicit"},
    "CF": {"ack_policy": "explicit", "filter_subject": "ar.a"},
    "CA": {"ack_policy": "all"},
}


def _ack_frame(subject: str, rnd: random.Random) -> bytes:
    return b"PUB %s%s0\r\n\r\n" % (subject.encode(), b" " * rnd.choice([1, 2]))


async def _settled(nc: Any) -> dict[str, Any]:
    """Each consumer's state once it stops changing (nats-server takes plain acks apart from the read
    they came in, so they may land a moment after a PING's PONG)."""
    last: dict[str, Any] = {}
    for _ in range(40):
        now = {}
        for name in CONSUMERS:
            r = json.loads((await nc.request(f"$JS.API.CONSUMER.INFO.AR.{name}", b"", timeout=5)).data)
            now[name] = {k: r[k] for k in ("num_ack_pending", "num_redelivered", "num_pending", "num_waiting")}
            for k in ("delivered", "ack_floor"):
                now[name][k] = (r[k]["consumer_seq"], r[k]["stream_seq"])
        if now == last:
            return now
        last = now
        await asyncio.sleep(0.1)
    return last


async def _verbose_oks(port: int, data: bytes) -> int:
    """+OK lines a verbose client gets for CONNECT, `data` and a PING (read up to the PONG)."""
    r, w = await asyncio.open_connection("127.0.0.1", port)
    await r.readline()
    w.write(b'CONNECT {"verbose":true,"pedantic":false,"protocol":1}\r\n' + data + b"PING\r\n")
    buf = b""
    while b"PONG\r\n" not in buf:
        d = await asyncio.wait_for(r.read(1 << 16), 5)
        if not d:
            break
        buf += d
    w.close()
    return buf.count(b"+OK\r\n")


def _connz_in_msgs(http_port: int, port: int) -> list[int]:
    """in_msgs of the client connections, ordered by connection id."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/connz?sort=cid", timeout=5) as f:
        conns = json.load(f)["connections"]
    return [c["in_msgs"] for c in conns]


async def _scenario(port: int, http_port: int) -> list[Any]:
    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    js = nc.jetstream()
    out: list[Any] = []
    rnd = random.Random(11)
    await js.add_stream(name="AR", subjects=["ar.*"])
    for name, cfg in CONSUMERS.items():
        r = json.loads((await nc.request(f"$JS.API.CONSUMER.CREATE.AR.{name}", json.dumps(
            {"stream_name": "AR", "config": {"durable_name": name, "ack_wait": 30_000_000_000, **cfg}}).encode(),
            timeout=5)).data)
        assert "error" not in r, r
    for i in range(90):
        await js.publish(f"ar.{'ab'[i % 3 == 0]}", f"m{i}".encode())
    subs = {name: await js.pull_subscribe_bind(name, "AR") for name in CONSUMERS}
    raw = await Raw.connect(SimpleNamespace(port=port))  # type: ignore[arg-type]
    pulled = await nc.subscribe("_R.>")
    spy = None
    for phase in ("run", "spied", "verbose"):
        if phase == "spied":
            spy = await nc.subscribe("$JS.ACK.>")
            await nc.flush()
        fetched = {name: await subs[name].fetch(8, timeout=2) for name in CONSUMERS}
        frames: list[bytes] = []
        for msgs in fetched.values():
            # a random part of each fetch, in random order, one of them twice
            part = rnd.sample(msgs, k=rnd.randint(3, len(msgs)))
            frames += [_ack_frame(m.reply, rnd) for m in part + part[:1]]
        frames.insert(rnd.randrange(len(frames)), b"PUB $JS.ACK.AR.CE.1.2 0\r\n\r\n")  # not nine tokens
        frames.insert(rnd.randrange(len(frames)), b"PUB %s 4\r\n+ACK\r\n" % fetched["CF"][-1].reply.encode())
        frames.insert(rnd.randrange(len(frames)), b"PUB %s  0\r\n\r\n" % fetched["CF"][0].reply.encode())
        data = b"".join(frames)
        if phase == "verbose":
            out.append(await _verbose_oks(port, data))
        else:
            req = b'{"batch":4,"no_wait":true}'
            raw.w.write(data + b"PUB $JS.API.CONSUMER.MSG.NEXT.AR.CE _R.%s %d\r\n%s\r\n" % (phase.encode(), len(req), req))
            await raw.ping()
        got = await drain(pulled, wait=0.3, limit=10) if phase != "verbose" else []
        out.append([(m.subject, m.data, (m.headers or {}).get("Status")) for m in got])
        out.append(await _settled(nc))
        if spy is not None:
            seen = [m.subject for m in await drain(spy, wait=0.3, limit=200)]
            sent = [f.split(b" ")[1].decode() for f in frames]
            out.append(seen == sent if phase == "spied" else len(seen))
    out.append(_connz_in_msgs(http_port, port))
    await nc.close()
    raw.w.close()
    return out


def test_plain_ack_runs_match_nats_server(start_server: Callable[..., ServerProcess]) -> None:
    res = {}
    for kind in KINDS:
        port, http_port = free_port(), free_port()
        start_server(kind, ["-js", "-sd", tempfile.mkdtemp(prefix="ackruns-")], port=port, http_port=http_port)
        res[kind] = run(_scenario(port, http_port), timeout=120)
    assert res["edged"][1]["CE"]["num_ack_pending"] > 0  # a real mix of acked and pending
    assert res["edged"][4] is True  # the spy saw every ack frame, in order
    assert res["edged"][5] > 20  # +OK per ack
    assert differing(res) == []
