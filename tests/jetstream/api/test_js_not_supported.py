"""What edged does not have is refused clearly, never accepted and then quietly not done: sequences past
edged's 2**44, and a Nats-TTL too large to keep, which must
not fail the other publishes committed with it."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Callable
from typing import Any

import nats

from tests.support.aio import run
from tests.support.servers import ServerProcess


def test_far_sequences_are_refused_as_not_supported(start_server: Callable[..., ServerProcess]) -> None:
    p = start_server("edged", ["-js", "-sd", tempfile.mkdtemp(prefix="js-nosup-")])

    async def body() -> list[Any]:
        nc = await nats.connect(p.url)
        js = nc.jetstream()
        out = []
        await js.add_stream(name="U", subjects=["u"])
        # a purge that would make the next sequence 2**45
        await js.publish("u", b"1")
        r = json.loads((await nc.request("$JS.API.STREAM.PURGE.U", b'{"seq": 35184372088832}', timeout=5)).data)
        out.append(r.get("error"))
        out.append((await js.stream_info("U")).state.messages)
        r = json.loads((await nc.request("$JS.API.STREAM.CREATE.V", b'{"name":"V","first_seq":35184372088832}',
                                         timeout=5)).data)
        out.append(r.get("error"))
        names = await js.streams_info()
        out.append(sorted(s.config.name for s in names))
        await nc.close()
        return out

    purge, left, far_first, names = run(body())
    assert purge == {"code": 500, "err_code": 10110, "description": "sequences above 2**44 are not supported by edged"}
    assert left == 1  # nothing purged
    assert far_first is not None and "2**44" in far_first["description"]
    assert names == ["U"]  # none of the refused streams exists


def test_a_ttl_too_large_to_keep_is_kept_as_never_and_fails_no_other_publish(
        start_server: Callable[..., ServerProcess]) -> None:
    """nats-server reads `Nats-TTL: 99999999999999999999` as a count of seconds (wrapping as Go's int64
    does) and accepts it; edged kept it in ns past SQLite's int64 and failed the whole group commit, the
    other publishers' messages in it included."""
    p = start_server("edged", ["-js", "-sd", tempfile.mkdtemp(prefix="js-bigttl-")])

    async def body() -> tuple[list[Any], int]:
        nc = await nats.connect(p.url)
        js = nc.jetstream()
        await js.add_stream(name="T", subjects=["t.>"], allow_msg_ttl=True)
        acks = await asyncio.gather(*(js.publish(f"t.{i}", b"x", headers={"Nats-TTL": "99999999999999999999"} if i % 5 == 0
                                                 else None) for i in range(50)))
        n = (await js.stream_info("T")).state.messages
        await nc.close()
        return [a.seq for a in acks], n

    seqs, n = run(body())
    assert sorted(seqs) == list(range(1, 51)) and n == 50
