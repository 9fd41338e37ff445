"""The pipeline's NATS client (pipeline/natsconn.py) with its own frame splitter, against nats-server and
edged: a raw subscription gets every message exactly as published (payloads from empty to larger than a
socket read, header blocks with repeated keys), while nats-py's own subscriptions and requests on the same
connection keep working between its runs. No Spark."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import nats

from pipeline.natsconn import RawClient, connect
from pipeline.options import ReadOptions
from pipeline.wire import Msg
from tests.pipeline.conftest import raw_publish, run
from tests.support.aio import until


def test_raw_subscription_gets_every_frame_beside_nats_py_subscriptions(server: Any) -> None:
    rnd = random.Random(7)
    sizes = [0, 1, 5, 40_000, 300_000, 127, 65_536, 2] + [rnd.randrange(0, 3000) for _ in range(300)]
    sent = []
    for i, n in enumerate(sizes):
        hdr = b"NATS/1.0\r\nK: a\r\nK: b%d\r\n\r\n" % i if i % 2 else b""
        sent.append((f"raw.{i % 3}", hdr, rnd.randbytes(n).replace(b"\r\n", b"MSG ")))

    async def go() -> None:
        nc: RawClient = await connect(ReadOptions.from_options({"servers": server.url, "stream": "x"}).conn)
        got: list[Msg] = []
        plain: list[bytes] = []
        sub = await nc.raw_subscribe("raw.>", got.extend)

        async def on_plain(m: Any) -> None:
            plain.append(m.data)

        async def on_svc(m: Any) -> None:
            await m.respond(m.data[::-1])

        await nc.subscribe("plain", cb=on_plain)
        await nc.subscribe("svc", cb=on_svc)
        await nc.flush()
        other = await nats.connect(server.url)
        for i in range(0, len(sent), 50):
            await asyncio.to_thread(raw_publish, server.url, sent[i:i + 50])
            await other.publish("plain", str(i).encode())
            assert (await nc.request("svc", b"abc%d" % i, timeout=5)).data == (b"abc%d" % i)[::-1]
        await other.flush()
        await until(lambda: len(got) >= len(sent) and len(plain) == (len(sent) + 49) // 50, timeout=20)
        assert [(s.decode(), h, d) for s, _r, h, d in got] == sent
        assert plain == [str(i).encode() for i in range(0, len(sent), 50)]
        await nc.raw_unsubscribe(sub)
        await other.close()
        await nc.close()

    run(go())
