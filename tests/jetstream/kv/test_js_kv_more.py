"""More of the KV and Object Store conventions through nats-py, differential: watch / watchall with delete and
purge markers, history across deletes, key filters, per-key TTL, delete with an expected revision, purging
delete markers, bucket lookup and removal; object metadata, seal, status and removal of a store."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support.aio import run
from tests.support.jsutil import exc_name, kv_keys, session
from tests.support.servers import ServerProcess


async def drain(w: Any) -> list[tuple[str, bytes, Any, int]]:
    """Updates up to the end-of-initial-values marker (None): (key, value, operation, delta)."""
    out = []
    for _ in range(50):
        e = await w.updates(timeout=2)
        if e is None:
            break
        out.append((e.key, e.value, e.operation, e.delta))
    return out


def test_kv_watch_history_filters_and_markers(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        kv = await js.create_key_value(bucket="W", history=5)
        out: list[Any] = [await exc_name(kv.keys())]  # an empty bucket has no keys
        for k, v in (("a", b"1"), ("b", b"1"), ("a", b"2"), ("x.y", b"1"), ("x.z", b"1")):
            await kv.put(k, v)
        await kv.delete("b")
        await kv.purge("x.z")
        w = await kv.watchall(include_history=True)
        out.append(await drain(w))
        await kv.put("b", b"back")
        await kv.delete("a")
        out.append([(e.key, e.value, e.operation) for e in [await w.updates(timeout=2) for _ in range(2)]])
        await w.stop()
        last = await kv.watchall()  # latest per key only, delete/purge markers included
        out.append(await drain(last))
        await last.stop()
        live = await kv.watch("x.*", ignore_deletes=True)
        out.append(await drain(live))
        await live.stop()
        out.append(sorted(await kv_keys(kv)))
        out.append(sorted(await kv_keys(kv, filters=["x."])))
        out.append([(e.value, e.operation) for e in await kv.history("a")])
        out.append([(e.value, e.operation) for e in await kv.history("x.z")])
        rev = (await kv.get("b")).revision
        out.append(await exc_name(kv.delete("b", last=rev - 1)))
        out.append(await kv.delete("b", last=rev))
        out.append(await exc_name(kv.get("b")))
        st = await kv.status()
        out.append((st.bucket, st.history, st.values))
        await kv.purge_deletes(olderthan=-1)  # every marker goes, whatever its age
        st = await kv.status()
        out.append((st.values, sorted(await kv_keys(kv))))
        return out

    got = run(session(js_server, body))
    assert got[0] == "NoKeysError"
    # every revision in stream order: a delete is a marker on top of the history, a purge rolls it up
    assert got[1] == [("a", b"1", None, 5), ("b", b"1", None, 4), ("a", b"2", None, 3), ("x.y", b"1", None, 2),
                      ("b", b"", "DEL", 1), ("x.z", b"", "PURGE", 0)]
    assert got[2] == [("b", b"back", None), ("a", b"", "DEL")]
    assert got[3] == [("x.y", b"1", None, 3), ("x.z", b"", "PURGE", 2), ("b", b"back", None, 1),
                      ("a", b"", "DEL", 0)]
    assert got[4] == [("x.y", b"1", None, 1)]  # the skipped purge marker still counted as pending
    assert got[5] == ["b", "x.y"]
    assert got[6] == ["x.y"]
    assert got[7] == [(b"1", None), (b"2", None), (b"", "DEL")]
    assert got[8] == [(b"", "PURGE")]
    assert got[9] == "BadRequestError"  # nats-py maps only put/update's wrong-revision error
    assert got[10] is True
    assert got[11] == "KeyNotFoundError"
    assert got[12] == ("W", 5, 9)
    assert got[13] == (1, ["x.y"])


def test_kv_per_key_ttl_and_buckets(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        out: list[Any] = [await exc_name(js.key_value("NOPE"))]
        kv = await js.create_key_value(bucket="T")
        await kv.create("short", b"s", msg_ttl=1)
        await kv.put("long", b"l")
        out.append((await kv.get("short")).value)
        await asyncio.sleep(2.2)
        out.append(await exc_name(kv.get("short")))
        out.append((await kv.get("long")).value)
        out.append(await kv.create("short", b"again"))  # the key is free again
        again = await js.key_value("T")
        out.append((await again.get("short")).value)
        out.append(await js.delete_key_value("T"))
        out.append(await exc_name(js.key_value("T")))
        return out

    got = run(session(js_server, body))
    assert got[0] == "BucketNotFoundError"
    assert got[1:4] == [b"s", "KeyNotFoundError", b"l"]
    assert got[4] == 3
    assert got[5:] == [b"again", True, "BucketNotFoundError"]


def test_object_store_meta_seal_and_removal(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        from nats.js.api import ObjectMeta

        ob = await js.create_object_store("OBJ", description="files")
        info = await ob.put("a.txt", b"hello world", meta=ObjectMeta(name="a.txt", description="first"))
        out: list[Any] = [(info.name, info.size, info.chunks, info.description, bool(info.digest))]
        await ob.update_meta("a.txt", ObjectMeta(name="a.txt", description="updated"))
        out.append(await exc_name(ob.get("nope.txt")))
        got = await ob.get("a.txt")
        out.append((got.data, got.info.name, got.info.description))
        await ob.put("empty", b"")
        out.append((await ob.get("empty")).data)
        await ob.delete("empty")
        deleted = await ob.get_info("empty", show_deleted=True)
        out.append((deleted.name, deleted.deleted, deleted.size))
        st = await ob.status()
        out.append((st.bucket, st.description, st.sealed))
        await ob.seal()
        st = await ob.status()
        out.append(st.sealed)
        out.append(await exc_name(ob.put("c.txt", b"late")))
        again = await js.object_store("OBJ")
        out.append((await again.get("a.txt")).data)
        out.append(await js.delete_object_store("OBJ"))
        out.append(await exc_name(js.object_store("OBJ")))
        return out

    got = run(session(js_server, body))
    assert got[0] == ("a.txt", 11, 1, "first", True)
    assert got[1] == "ObjectNotFoundError"
    assert got[2] == (b"hello world", "a.txt", "updated")
    assert got[3] == b""
    assert got[4] == ("empty", True, 0)
    assert got[5] == ("OBJ", "files", False)
    assert got[6] is True
    assert got[7] == "BadRequestError"  # a sealed stream refuses the chunks
    assert got[8] == b"hello world"
    assert got[9] is True
    assert got[10] == "BucketNotFoundError"
