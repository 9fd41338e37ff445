"""More consumer behaviour, differential: push delivery held at max_ack_pending and resumed by acks, paced
by rate_limit_bps; ordered consumers across deletes and purges; KV watchers during deletes and purges and
keys() of a large bucket; a many-chunk object overwritten and deleted; pull consumers with several filters
delivering the last message per subject; DIRECT.GET multi_last over several filters. The same nats-py
scenario against nats-server and edged with the same assertions."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from tests.support.aio import run
from tests.support.jsutil import create, exc_name, kv_keys, quiet, session
from tests.support.servers import ServerProcess


async def counts(nc: Any, stream: str, name: str) -> tuple[int, int, int]:
    """(num_ack_pending, num_pending, delivered stream seq) of a consumer."""
    r = await nc.request(f"$JS.API.CONSUMER.INFO.{stream}.{name}", b"", timeout=3)
    d = json.loads(r.data)
    return d["num_ack_pending"], d["num_pending"], d["delivered"]["stream_seq"]


async def msgs_subjects(nc: Any, stream: str) -> tuple[int, int]:
    """(messages, num_subjects) of a stream, from the raw STREAM.INFO reply."""
    r = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=3)
    st = json.loads(r.data)["state"]
    return st["messages"], st["num_subjects"]


# ------------------------------------------------------------------------------------ push consumers


def test_push_max_ack_pending_stalls_and_resumes(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="P", subjects=["p.*"])
        for i in range(10):
            await js.publish(f"p.{i % 3}", str(i).encode())
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.flush()
        await create(nc, "P", {"durable_name": "MAP", "deliver_subject": inbox, "ack_policy": "explicit",
                               "max_ack_pending": 3, "ack_wait": 30 * 10**9})
        out: list[Any] = []
        held = await quiet(sub)
        out.append([m.data for m in held])
        out.append(await counts(nc, "P", "MAP"))
        await held[1].ack()  # any ack makes room, not only the oldest
        more = await quiet(sub)
        out.append([m.data for m in more])
        out.append(await counts(nc, "P", "MAP"))
        held = [held[0], held[2], *more]
        for m in held[:2]:
            await m.ack()
        more = await quiet(sub)
        out.append([m.data for m in more])
        out.append(await counts(nc, "P", "MAP"))
        held = held[2:] + more
        for m in held:  # the rest, acked as they come
            await m.ack()
        rest = []
        for _ in range(10):
            got = await quiet(sub)
            if not got:
                break
            rest += got
            for m in got:
                await m.ack()
        out.append([m.data for m in rest])
        await nc.flush()
        await asyncio.sleep(0.2)
        out.append(await counts(nc, "P", "MAP"))
        for i in range(10, 14):  # new messages while nothing is pending: three go, one waits
            await js.publish("p.9", str(i).encode())
        late = await quiet(sub)
        out.append([m.data for m in late])
        out.append(await counts(nc, "P", "MAP"))
        return out

    got = run(session(js_server, body))
    assert got[0] == [b"0", b"1", b"2"]  # held at max_ack_pending
    assert got[1] == (3, 7, 3)
    assert got[2] == [b"3"]
    assert got[3] == (3, 6, 4)
    assert got[4] == [b"4", b"5"]
    assert got[5] == (3, 4, 6)
    assert got[6] == [b"6", b"7", b"8", b"9"]
    assert got[7] == (0, 0, 10)
    assert got[8] == [b"10", b"11", b"12"]
    assert got[9] == (3, 1, 13)


def test_push_max_ack_pending_ack_all_nak_and_term(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="PA", subjects=["pa"])
        for i in range(8):
            await js.publish("pa", str(i).encode())
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.flush()
        await create(nc, "PA", {"durable_name": "ALL", "deliver_subject": inbox, "ack_policy": "all",
                                "max_ack_pending": 3, "ack_wait": 30 * 10**9})
        out: list[Any] = []
        held = await quiet(sub)
        out.append([m.data for m in held])
        await held[2].ack()  # acks the two below it too: three slots
        more = await quiet(sub)
        out.append([m.data for m in more])
        out.append(await counts(nc, "PA", "ALL"))
        await more[0].nak()  # a nak does not free a slot: it comes again
        again = await quiet(sub)
        out.append([(m.data, m.metadata.num_delivered) for m in again])
        await more[1].term()  # a term does (ack_policy all: and what is below it)
        after = await quiet(sub)
        out.append([m.data for m in after])
        out.append(await counts(nc, "PA", "ALL"))
        return out

    got = run(session(js_server, body))
    assert got[0] == [b"0", b"1", b"2"]
    assert got[1] == [b"3", b"4", b"5"]
    assert got[2] == (3, 2, 6)
    assert got[3] == [(b"3", 2)]  # only the nak'd message, still at the limit
    assert got[4] == [b"6", b"7"]  # the term of 4 took 3 with it
    assert got[5] == (3, 0, 8)


def test_push_rate_limit_bps(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        # a small max_msg_size: nats-server lets one message size of burst through unpaced
        await js.add_stream(name="RL", subjects=["rl"], max_msg_size=2048)
        payload = b"x" * 1000
        for _ in range(20):
            await js.publish("rl", payload)
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.flush()
        start = time.monotonic()
        await create(nc, "RL", {"durable_name": "RATE", "deliver_subject": inbox, "ack_policy": "none",
                                "rate_limit_bps": 8 * 20_000})  # 20 KB/s: ~20 KB takes about a second
        got = []
        for _ in range(20):
            got.append(await sub.next_msg(5))
        took = time.monotonic() - start
        c = await create(nc, "RL", {"durable_name": "FAST", "deliver_subject": nc.new_inbox(),
                                    "ack_policy": "none"})
        return [len(got), all(m.data == payload for m in got), took, c["config"].get("rate_limit_bps"),
                (await create(nc, "RL", {"durable_name": "RATE", "deliver_subject": inbox, "ack_policy": "none",
                                         "rate_limit_bps": 8 * 20_000}))["config"]["rate_limit_bps"]]

    got = run(session(js_server, body))
    assert got[:2] == [20, True]
    assert 0.6 <= got[2] <= 4.0, got[2]  # paced, not all at once
    assert got[3] is None  # unset: left out of the config
    assert got[4] == 160_000


def test_push_rate_limit_burst_of_max_payload(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        # no max_msg_size: the burst is the server's max_payload (1 MiB), delivered at once, then paced
        await js.add_stream(name="RB", subjects=["rb"])
        payload = b"y" * 50_000
        for _ in range(30):
            await js.publish("rb", payload)
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.flush()
        start = time.monotonic()
        await create(nc, "RB", {"durable_name": "BURST", "deliver_subject": inbox, "ack_policy": "none",
                                "rate_limit_bps": 8 * 500_000})  # ~0.5 MB past the burst: about a second
        at = []
        for _ in range(30):
            await sub.next_msg(5)
            at.append(time.monotonic() - start)
        return [at[14], at[29]]

    got = run(session(js_server, body))
    assert got[0] < 0.5, got  # well inside the burst: not paced
    assert 0.6 <= got[1] <= 4.0, got


# ------------------------------------------------------------------------------- ordered consumers


def test_ordered_consumer_across_deletes_and_purge(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="O", subjects=["o.>"])
        for i in range(10):
            await js.publish(f"o.{i % 2}", str(i).encode())
        for seq in (3, 4, 8):
            await js.delete_msg("O", seq)
        sub = await js.subscribe("o.>", ordered_consumer=True, idle_heartbeat=0.5)
        out: list[Any] = []
        first = [await sub.next_msg(3) for _ in range(7)]
        out.append([(m.data, m.metadata.sequence.stream, m.metadata.sequence.consumer,
                     m.metadata.num_pending) for m in first])
        await js.purge_stream("O")
        for i in range(10, 14):
            await js.publish(f"o.{i % 2}", str(i).encode())
        after = [await sub.next_msg(3) for _ in range(4)]
        out.append([(m.data, m.metadata.sequence.stream) for m in after])
        await js.purge_stream("O", subject="o.1")
        await js.publish("o.0", b"14")
        m = await sub.next_msg(3)
        out.append((m.data, m.metadata.sequence.stream))
        # a filtered ordered consumer started on a stream whose first messages were purged
        sub2 = await js.subscribe("o.0", ordered_consumer=True)
        out.append([(m.data, m.metadata.sequence.stream) for m in [await sub2.next_msg(3) for _ in range(3)]])
        si = await js.stream_info("O")
        out.append((si.state.messages, si.state.first_seq, si.state.last_seq))
        return out

    got = run(session(js_server, body))
    assert got[0] == [(b"0", 1, 1, 6), (b"1", 2, 2, 5), (b"4", 5, 3, 4), (b"5", 6, 4, 3), (b"6", 7, 5, 2),
                      (b"8", 9, 6, 1), (b"9", 10, 7, 0)]
    assert got[1] == [(b"10", 11), (b"11", 12), (b"12", 13), (b"13", 14)]
    assert got[2] == (b"14", 15)
    assert got[3] == [(b"10", 11), (b"12", 13), (b"14", 15)]
    assert got[4] == (3, 11, 15)


def test_kv_watchall_through_deletes_purges_and_many_keys(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        kv = await js.create_key_value(bucket="KW", history=3)
        await kv.put("a", b"1")
        await kv.put("b", b"1")
        w = await kv.watchall()
        out: list[Any] = []
        init = []
        while (e := await w.updates(timeout=2)) is not None:
            init.append((e.key, e.value, e.operation, e.revision))
        out.append(init)
        await kv.put("a", b"2")
        await kv.delete("b")
        await kv.put("c", b"1")
        await kv.purge("a")
        await kv.put("b", b"3")
        live = [await w.updates(timeout=2) for _ in range(5)]
        out.append([(e.key, e.value, e.operation, e.revision) for e in live])
        await w.stop()
        for i in range(300):
            await kv.put(f"k.{i // 100}.{i % 100:02d}", str(i).encode())
        await kv.delete("k.0.07")
        await kv.purge("k.0.08")
        keys = await kv_keys(kv)
        out.append((len(keys), len(set(keys)), sorted(keys)[:3], "k.0.07" in keys, "k.0.08" in keys))
        out.append(len(await kv_keys(kv, filters=["k.1."])))
        out.append(sorted(await kv_keys(kv, filters=["a", "b", "c"])))
        st = await kv.status()
        out.append(st.values)
        hist = await kv.history("a")
        out.append([(e.value, e.operation) for e in hist])
        return out

    got = run(session(js_server, body), timeout=90)
    assert got[0] == [("a", b"1", None, 1), ("b", b"1", None, 2)]
    assert got[1] == [("a", b"2", None, 3), ("b", b"", "DEL", 4), ("c", b"1", None, 5),
                      ("a", b"", "PURGE", 6), ("b", b"3", None, 7)]
    assert got[2] == (300, 300, ["b", "c", "k.0.00"], False, False)
    assert got[3] == 100
    assert got[4] == ["b", "c"]
    assert got[5] == 306  # b's 3 revisions, c, a's purge marker, 298 keys, k.0.07's put and delete, k.0.08's purge
    assert got[6] == [(b"", "PURGE")]


# ------------------------------------------------------------------------------------ object store


def test_object_store_many_chunks_overwrite_and_delete(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        from nats.js.api import ObjectMeta, ObjectMetaOptions

        ob = await js.create_object_store("BIG")
        data = bytes(range(256)) * 8192  # 2 MiB
        opts = ObjectMetaOptions(max_chunk_size=128 * 1024)
        info = await ob.put("blob", data, meta=ObjectMeta(name="blob", options=opts))
        out: list[Any] = [(info.size, info.chunks)]
        got = await ob.get("blob")
        out.append(got.data == data)
        out.append(await msgs_subjects(nc, "OBJ_BIG"))
        await ob.put("small", b"tiny")
        new = bytes(reversed(data[: 300 * 1024]))
        info = await ob.put("blob", new, meta=ObjectMeta(name="blob", options=opts))
        out.append((info.size, info.chunks))
        out.append(await msgs_subjects(nc, "OBJ_BIG"))  # the old version's chunks are purged
        out.append((await ob.get("blob")).data == new)
        out.append(sorted((i.name, i.size, i.chunks) for i in await ob.list()))
        await ob.delete("blob")
        out.append(await msgs_subjects(nc, "OBJ_BIG"))
        out.append(sorted((i.name, bool(i.deleted)) for i in await ob.list()))
        out.append(sorted((i.name, bool(i.deleted)) for i in await ob.list(ignore_deletes=True)))
        out.append(await exc_name(ob.get("blob")))
        return out

    got = run(session(js_server, body), timeout=90)
    assert got[0] == (2 * 1024 * 1024, 16)
    assert got[1] is True
    assert got[2] == (17, 2)  # 16 chunks and the meta message
    assert got[3] == (300 * 1024, 3)
    assert got[4] == (6, 4)  # 3 new chunks, 2 metas, small's chunk
    assert got[5] is True
    assert got[6] == [("blob", 300 * 1024, 3), ("small", 4, 1)]
    assert got[7] == (3, 3)  # the deleted object's chunks go, its meta stays as a marker
    assert got[8] == [("blob", True), ("small", False)]
    assert got[9] == [("small", False)]
    assert got[10] == "ObjectNotFoundError"


# --------------------------------------------------------------------- filters and last per subject


def test_pull_filter_subjects_last_per_subject_and_multi_last(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="L", subjects=["l.>"], allow_direct=True)
        for i, s in enumerate(["l.a", "l.b", "l.c", "l.a", "l.d.x", "l.b", "l.d.y", "l.c", "l.a", "l.e"]):
            await js.publish(s, str(i + 1).encode())
        await create(nc, "L", {"durable_name": "LPS", "deliver_policy": "last_per_subject", "ack_policy": "explicit",
                               "filter_subjects": ["l.a", "l.b", "l.d.*"]})
        out: list[Any] = [await counts(nc, "L", "LPS")]
        psub = await js.pull_subscribe_bind("LPS", "L")
        msgs = await psub.fetch(10, timeout=1)
        out.append([(m.subject, m.data, m.metadata.sequence.stream, m.metadata.num_pending) for m in msgs])
        for m in msgs:
            await m.ack()
        for s in ("l.c", "l.b", "l.e", "l.d.z"):
            await js.publish(s, b"new")
        msgs = await psub.fetch(10, timeout=1)
        out.append([(m.subject, m.metadata.sequence.stream) for m in msgs])
        out.append(await counts(nc, "L", "LPS"))
        out.append(await exc_name(psub.fetch(1, timeout=0.5)))
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        for req in ({"multi_last": ["l.a", "l.d.*"]}, {"multi_last": ["l.>"], "up_to_seq": 6},
                    {"multi_last": ["l.a", "l.b"], "batch": 1}, {"multi_last": ["l.zz"]}):
            await nc.publish("$JS.API.DIRECT.GET.L", json.dumps(req).encode(), reply=inbox)
            got = []
            for _ in range(12):
                r = await sub.next_msg(2)
                h = r.headers or {}
                got.append((h.get("Nats-Subject"), r.data, h.get("Nats-Sequence"), h.get("Status"),
                            h.get("Nats-Num-Pending")))
                if h.get("Status"):
                    break
            out.append(got)
        return out

    got = run(session(js_server, body))
    assert got[0] == (0, 4, 4)
    assert got[1] == [("l.d.x", b"5", 5, 3), ("l.b", b"6", 6, 2), ("l.d.y", b"7", 7, 1), ("l.a", b"9", 9, 0)]
    assert got[2] == [("l.b", 12), ("l.d.z", 14)]
    assert got[3] == (2, 0, 14)
    assert got[4] == "TimeoutError"
    # the last message of each subject the filters match, in stream order, and the end of the batch
    assert got[5] == [("l.d.x", b"5", "5", None, "3"), ("l.d.y", b"7", "7", None, "2"), ("l.a", b"9", "9", None, "1"),
                      ("l.d.z", b"new", "14", None, "0"), (None, b"", None, "204", "0")]
    assert got[6] == [("l.c", b"3", "3", None, "3"), ("l.a", b"4", "4", None, "2"), ("l.d.x", b"5", "5", None, "1"),
                      ("l.b", b"6", "6", None, "0"), (None, b"", None, "204", "0")]  # as of up_to_seq
    assert got[7] == [("l.a", b"9", "9", None, "1"), (None, b"", None, "204", "1")]
    assert got[8] == [(None, b"", None, "404", None)]
