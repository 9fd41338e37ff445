"""KV and Object Store through nats-py, differential: the same calls against nats-server and edged give the
same results (these are client conventions over streams; they must simply work)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support.aio import run
from tests.support.jsutil import exc_name, kv_keys, session
from tests.support.servers import ServerProcess


def test_kv_suite(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        kv = await js.create_key_value(bucket="CFG", history=3)
        out: list[Any] = []
        r1 = await kv.put("a", b"1")
        r2 = await kv.put("a", b"2")
        await kv.put("b.c", b"x")
        e = await kv.get("a")
        out.append((r1, r2, e.value, e.revision, e.key))
        out.append((await kv.get("a", revision=1)).value)
        out.append(await kv.update("a", b"3", last=r2))
        out.append(await exc_name(kv.update("a", b"4", last=r2)))
        out.append(await exc_name(kv.create("a", b"5")))
        out.append(await kv.create("new", b"n"))
        await kv.delete("new")
        out.append(await exc_name(kv.get("new")))
        out.append(await kv.create("new", b"again"))
        out.append(sorted(await kv_keys(kv)))
        out.append([x.value for x in await kv.history("a")])
        await kv.purge("b.c")
        out.append(sorted(await kv_keys(kv)))
        st = await kv.status()
        out.append((st.bucket, st.history, st.values))
        w = await kv.watch("a")
        first = await w.updates(timeout=2)
        marker = await w.updates(timeout=2)
        await kv.put("a", b"live")
        live = await w.updates(timeout=2)
        out.append((first.value, marker, live.value, live.operation))
        await w.stop()
        return out

    got = run(session(js_server, body))
    assert got[0] == (1, 2, b"2", 2, "a")
    assert got[1] == b"1"
    assert got[2] == 4
    assert got[3] == "KeyWrongLastSequenceError"
    assert got[4] == "KeyWrongLastSequenceError"
    assert got[5] == 5
    assert got[6] == "KeyNotFoundError"
    assert got[7] == 7
    assert got[8] == ["a", "b.c", "new"]
    assert got[9] == [b"1", b"2", b"3"]
    assert got[10] == ["a", "new"]
    assert got[11][0:2] == ("CFG", 3)
    assert got[12] == (b"3", None, b"live", None)


def test_kv_ttl(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        kv = await js.create_key_value(bucket="TTL", ttl=1)
        await kv.put("k", b"v")
        before = (await kv.get("k")).value
        await asyncio.sleep(2.2)
        return [before, await exc_name(kv.get("k"))]

    assert run(session(js_server, body)) == [b"v", "KeyNotFoundError"]


def test_object_store_suite(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        ob = await js.create_object_store("FILES")
        data = bytes(range(256)) * 2000  # 512 000 bytes: several chunks
        info = await ob.put("big.bin", data)
        out: list[Any] = [(info.name, info.size, info.chunks)]
        got = await ob.get("big.bin")
        out.append(got.data == data)
        await ob.put("small.txt", b"hello")
        out.append(sorted(i.name for i in await ob.list()))
        i = await ob.get_info("small.txt")
        out.append((i.name, i.size))
        w = await ob.watch(include_history=True)
        seen = []
        for _ in range(2):
            e = await w.updates(timeout=2)
            seen.append(e.name if e else None)
        out.append(sorted(n for n in seen if n))
        await ob.delete("small.txt")
        out.append(await exc_name(ob.get("small.txt")))
        out.append(sorted(i.name for i in await ob.list(ignore_deletes=True)))
        return out

    got = run(session(js_server, body))
    assert got[0] == ("big.bin", 512_000, 4)
    assert got[1] is True
    assert got[2] == ["big.bin", "small.txt"]
    assert got[3] == ("small.txt", 5)
    assert got[4] == ["big.bin", "small.txt"]
    assert got[5] == "ObjectNotFoundError"
    assert got[6] == ["big.bin"]
