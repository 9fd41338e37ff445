"""JetStream streams, differential: the same nats-py scenario against nats-server and edged, with the
same assertions (replies, error codes and texts, state)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.support.aio import run
from tests.support.jsutil import err, session
from tests.support.servers import KINDS, ServerProcess


def test_stream_crud_and_errors(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        out: list[Any] = []
        si = await js.add_stream(name="ORDERS", subjects=["orders.>"], max_msgs=100, description="d")
        c = si.config
        out.append((c.name, c.subjects, c.retention, c.max_msgs, c.max_bytes, c.discard, c.storage,
                    c.duplicate_window, c.num_replicas, c.description, si.state.messages, si.state.first_seq))
        again = await js.add_stream(name="ORDERS", subjects=["orders.>"], max_msgs=100, description="d")
        out.append(again.config.name)
        out.append(await err(js.add_stream(name="ORDERS", subjects=["orders.>"], max_msgs=5)))
        out.append(await err(js.add_stream(name="OTHER", subjects=["orders.new"])))
        r = await nc.request("$JS.API.STREAM.CREATE.BAD", b'{"name":"BAD","subjects":["a..b"]}', timeout=2)
        out.append(json.loads(r.data)["error"]["err_code"])
        out.append(await err(js.stream_info("MISSING")))
        up = await js.update_stream(name="ORDERS", subjects=["orders.>", "returns.*"], max_msgs=50)
        out.append((up.config.subjects, up.config.max_msgs))
        out.append(await err(js.update_stream(name="ORDERS", subjects=["orders.>"], storage="memory")))
        out.append(await err(js.update_stream(name="MISSING", subjects=["m"])))
        await js.add_stream(name="DEFAULTSUBJ")
        out.append((await js.stream_info("DEFAULTSUBJ")).config.subjects)
        out.append(sorted(s.config.name for s in await js.streams_info()))
        out.append(await js.delete_stream("DEFAULTSUBJ"))
        out.append(await err(js.delete_stream("DEFAULTSUBJ")))
        out.append(await err(js.add_stream(name="R3", subjects=["r3"], num_replicas=3)))
        return out

    got = run(session(js_server, body))
    assert got[0] == ("ORDERS", ["orders.>"], "limits", 100, -1, "old", "file", 120.0, 1, "d", 0, 0)
    assert got[1] == "ORDERS"
    assert got[2] == (10058, "stream name already in use with a different configuration")
    assert got[3] == (10065, "subjects overlap with an existing stream")
    assert got[4] == 10052
    assert got[5] == (10059, "stream not found")
    assert got[6] == (["orders.>", "returns.*"], 50)
    assert got[7] == (10052, "stream configuration update can not change storage type")
    assert got[8] == (10059, "stream not found")
    assert got[9] == ["DEFAULTSUBJ"]
    assert got[10] == ["DEFAULTSUBJ", "ORDERS"]
    assert got[11] is True
    assert got[12] == (10059, "stream not found")
    assert got[13][0] in (10074, 10005)  # single server: replicas > 1 refused (nats-server 2.15 may say no peers)


def test_publish_headers(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        out: list[Any] = []
        await js.add_stream(name="S", subjects=["s.>"], allow_rollup_hdrs=True)
        a = await js.publish("s.a", b"1", headers={"Nats-Msg-Id": "m1"})
        d = await js.publish("s.a", b"1 again", headers={"Nats-Msg-Id": "m1"})
        out.append((a.seq, d.seq, d.duplicate))
        out.append(await err(js.publish("s.a", b"", headers={"Nats-Expected-Stream": "OTHER"})))
        out.append(await err(js.publish("s.a", b"", headers={"Nats-Expected-Last-Sequence": "7"})))
        ok = await js.publish("s.a", b"2", headers={"Nats-Expected-Last-Sequence": "1"})
        out.append(ok.seq)
        out.append(await err(js.publish("s.b", b"", headers={"Nats-Expected-Last-Subject-Sequence": "1"})))
        ok = await js.publish("s.b", b"3", headers={"Nats-Expected-Last-Subject-Sequence": "0"})
        out.append(ok.seq)
        await js.publish("s.c", b"4", headers={"Nats-Msg-Id": "m4"})
        out.append(await err(js.publish("s.c", b"", headers={"Nats-Expected-Last-Msg-Id": "zzz"})))
        ok = await js.publish("s.c", b"5", headers={"Nats-Expected-Last-Msg-Id": "m4", "Nats-Msg-Id": "m5"})
        out.append(ok.seq)
        await js.publish("s.a", b"6")
        await js.publish("s.a", b"rolled", headers={"Nats-Rollup": "sub"})
        si = await js.stream_info("S", subjects_filter=">")
        out.append((si.state.messages, si.state.subjects))
        await js.publish("s.z", b"all", headers={"Nats-Rollup": "all"})
        si = await js.stream_info("S")
        out.append((si.state.messages, si.state.last_seq))
        out.append(await err(js.publish("s.z", b"", headers={"Nats-Rollup": "bogus"})))
        await js.add_stream(name="NOROLL", subjects=["nr"])
        out.append(await err(js.publish("nr", b"", headers={"Nats-Rollup": "all"})))
        return out

    got = run(session(js_server, body))
    assert got[0] == (1, 1, True)
    assert got[1] == (10060, "expected stream does not match")
    assert got[2] == (10071, "wrong last sequence: 1")
    assert got[3] == 2
    assert got[4] == (10071, "wrong last sequence: 0")
    assert got[5] == 3
    assert got[6] == (10070, "wrong last msg ID: m4")
    assert got[7] == 5
    assert got[8] == (4, {"s.a": 1, "s.b": 1, "s.c": 2})
    assert got[9] == (1, 8)
    assert got[10] == (10111, 'rollup value invalid: "bogus"')
    assert got[11] == (10111, "rollup not permitted")


def test_get_delete_purge(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        out: list[Any] = []
        await js.add_stream(name="S", subjects=["s.*"])
        for i in range(10):
            await js.publish(f"s.{i % 3}", f"m{i}".encode(), headers={"K": str(i)})
        m = await js.get_msg("S", 2)
        out.append((m.subject, m.seq, m.data, m.headers))
        last = await js.get_last_msg("S", "s.0")
        out.append((last.seq, last.data))
        nxt = await js.get_msg("S", seq=5, next=True, subject="s.2")
        out.append(nxt.seq)
        out.append(await err(js.get_msg("S", 99)))
        out.append(await js.delete_msg("S", 2))
        out.append(await err(js.get_msg("S", 2)))
        si = await js.stream_info("S")
        out.append((si.state.messages, si.state.num_deleted))
        await js.purge_stream("S", subject="s.1")
        out.append((await js.stream_info("S")).state.messages)
        await js.purge_stream("S", keep=2)
        si = await js.stream_info("S")
        out.append((si.state.messages, si.state.first_seq, si.state.last_seq))
        await js.purge_stream("S")
        si = await js.stream_info("S")
        out.append((si.state.messages, si.state.first_seq, si.state.last_seq))
        await js.add_stream(name="LOCKED", subjects=["l"], deny_delete=True, deny_purge=True)
        await js.publish("l", b"x")
        out.append(await err(js.delete_msg("LOCKED", 1)))
        out.append((await err(js.purge_stream("LOCKED")))[0])
        return out

    got = run(session(js_server, body))
    assert got[0] == ("s.1", 2, b"m1", {"K": "1"})
    assert got[1] == (10, b"m9")
    assert got[2] == 6
    assert got[3] == (10037, "no message found")
    assert got[4] is True
    assert got[5] == (10037, "no message found")
    assert got[6] == (9, 1)
    assert got[7] == 7
    assert got[8] == (2, 9, 10)
    assert got[9] == (0, 11, 10)
    assert got[10] == (10057, "message delete not permitted")
    assert got[11] == 10110


def test_limits(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        out: list[Any] = []
        await js.add_stream(name="OLD", subjects=["old"], max_msgs=3)
        for i in range(5):
            await js.publish("old", str(i).encode())
        si = await js.stream_info("OLD")
        out.append((si.state.messages, si.state.first_seq))
        await js.add_stream(name="NEW", subjects=["new"], max_msgs=2, discard="new")
        await js.publish("new", b"1")
        await js.publish("new", b"2")
        out.append(await err(js.publish("new", b"3")))
        await js.add_stream(name="PER", subjects=["per.*"], max_msgs_per_subject=2)
        for i in range(6):
            await js.publish(f"per.{i % 2}", b"x")
        out.append((await js.stream_info("PER")).state.messages)
        await js.add_stream(name="SIZE", subjects=["size"], max_msg_size=10)
        out.append(await err(js.publish("size", b"x" * 11)))
        await js.add_stream(name="BYTES", subjects=["bytes"], max_bytes=300)
        for _ in range(10):
            await js.publish("bytes", b"y" * 50)
        si = await js.stream_info("BYTES")
        out.append(si.state.bytes <= 300 and si.state.messages >= 1)
        await js.add_stream(name="AGE", subjects=["age"], max_age=0.5)
        await js.publish("age", b"soon gone")
        out.append((await js.stream_info("AGE")).state.messages)
        await asyncio.sleep(2.0)
        out.append((await js.stream_info("AGE")).state.messages)
        return out

    got = run(session(js_server, body))
    assert got[0] == (3, 3)
    assert got[1] == (10077, "maximum messages exceeded")
    assert got[2] == 4
    assert got[3] == (10054, "message size exceeds maximum allowed")
    assert got[4] is True
    assert got[5:] == [1, 0]


def test_names_list_paging_and_account_info(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        for i in range(5):
            await js.add_stream(name=f"S{i}", subjects=[f"s{i}.>"])
        await js.publish("s1.x", b"hello")
        ai = await js.account_info()
        names = sorted(s.config.name for s in await js.streams_info())
        r = await nc.request("$JS.API.STREAM.NAMES", b'{"subject":"s3.a"}', timeout=2)
        return [ai.streams, ai.storage > 0, names, json.loads(r.data)["streams"], json.loads(r.data)["total"]]

    got = run(session(js_server, body))
    assert got == [5, True, ["S0", "S1", "S2", "S3", "S4"], ["S3"], 1]


def test_direct_get(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="KVISH", subjects=["k.>"], allow_direct=True, max_msgs_per_subject=1)
        await js.publish("k.a", b"1")
        await js.publish("k.b", b"2")
        await js.publish("k.a", b"3")
        m = await js.get_msg("KVISH", subject="k.a", direct=True)
        r = await nc.request("$JS.API.DIRECT.GET.KVISH.k.b", b"", timeout=2)
        missing = await nc.request("$JS.API.DIRECT.GET.KVISH.k.zzz", b"", timeout=2)
        by_seq = await nc.request("$JS.API.DIRECT.GET.KVISH", b'{"seq":2}', timeout=2)
        return [(m.seq, m.data), (r.data, r.headers["Nats-Sequence"], r.headers["Nats-Subject"]),
                (missing.headers or {}).get("Status"), (by_seq.data, by_seq.headers["Nats-Stream"])]

    got = run(session(js_server, body))
    assert got == [(3, b"3"), (b"2", "2", "k.b"), "404", (b"2", "KVISH")]


def test_msg_ttl(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="NOTTL", subjects=["nottl"])
        out: list[Any] = [await err(js.publish("nottl", b"", headers={"Nats-TTL": "1s"}))]
        await js.add_stream(name="TTL", subjects=["ttl"], allow_msg_ttl=True)
        await js.publish("ttl", b"short", headers={"Nats-TTL": "1s"})
        await js.publish("ttl", b"stays")
        out.append((await js.stream_info("TTL")).state.messages)
        await asyncio.sleep(2.5)
        out.append((await js.stream_info("TTL")).state.messages)
        out.append(await err(js.publish("ttl", b"", headers={"Nats-TTL": "soon"})))
        return out

    got = run(session(js_server, body))
    assert got == [(10166, "per-message TTL is disabled"), 2, 1, (10165, "invalid per-message TTL")]


def test_domain_and_puback(tmp_path: Any) -> None:
    results = {}
    for kind in KINDS:
        conf = f'jetstream {{ store_dir: "{tmp_path / kind}", domain: edge1 }}\n'
        with ServerProcess(kind, config=conf) as p:
            async def body(nc: Any, js: Any) -> list[Any]:
                await js.add_stream(name="D", subjects=["d"])
                ack = await js.publish("d", b"x")
                plain = nc.jetstream()
                info = await plain.stream_info("D")
                return [ack.domain, ack.seq, info.state.messages, (await js.account_info()).domain]

            results[kind] = run(session(p, body, domain="edge1"))
    assert results["edged"] == results["nats-server"] == ["edge1", 1, 1, "edge1"]
