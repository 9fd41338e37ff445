"""Consumer edge cases, differential: ack subjects of the wrong shape (no responders), ack payloads that are
almost a known kind, the ack floor around a message dropped for max_deliver, a pull request's heartbeat
timer restarted by each message, malformed pull requests, and the JetStream API audit advisory. The same
nats-py scenario runs against nats-server and edged with the same assertions; timings keep a wide margin
for a busy machine."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import ConsumerConfig

from tests.support.aio import run
from tests.support.jsutil import Probe, drain, info_t, masked, session, sync
from tests.support.servers import ServerProcess

NS = 1_000_000_000
U64_MAX = 2**64 - 1


def test_ack_subject_of_wrong_shape_has_no_responders(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="S", subjects=["s.>"])
        for i in range(3):
            await js.publish(f"s.{i}", b"x")
        psub = await js.pull_subscribe("s.>", durable="C", config=ConsumerConfig(ack_wait=30))
        ms = await psub.fetch(3, timeout=2)
        out: list[Any] = []
        probe = await Probe(nc).start()
        pre = "$JS.ACK.S.C"
        await probe.send("8_tokens", f"{pre}.1.3.3.1")
        await probe.send("10_tokens", f"{pre}.1.3.3.1.0.0")
        await probe.send("12_tokens", f"{pre}.1.3.3.1.0.0.0.0")
        await probe.send("good", ms[0].reply)  # the consumer still takes well-formed acks
        await probe.send("8_tokens_again", f"{pre}.1.1.1.1")
        out.append(await probe.collect())
        out.append(info_t(await js.consumer_info("S", "C")))
        # someone else listening on the ack subjects: delivered to them, so no "no responders"
        mon = await nc.subscribe("$JS.ACK.>")
        await nc.flush()
        await probe.send("8_tokens_watched", f"{pre}.1.3.3.1")
        await probe.send("good_watched", ms[1].reply)
        out.append(await probe.collect())
        out.append(sorted(m.subject.count(".") + 1 for m in await drain(mon, 0.2)))  # tokens
        await mon.unsubscribe()
        await nc.flush()
        await probe.send("10_tokens_after", f"{pre}.1.3.3.1.0.0")
        await probe.send("good_after", ms[2].reply)
        out.append(await probe.collect())
        out.append(info_t(await js.consumer_info("S", "C")))
        return out

    got = run(session(js_server, body))
    assert got == [
        {"8_tokens": "503", "10_tokens": "503", "12_tokens": "503", "good": b"", "8_tokens_again": "503"},
        ((3, 3), (1, 1), 2, 0, 0, 0),
        {"8_tokens_watched": "none", "good_watched": b""},
        [8, 9],
        {"10_tokens_after": "503", "good_after": b""},
        ((3, 3), (3, 3), 0, 0, 0, 0),
    ]


def test_ack_payloads_almost_known_and_non_numeric(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="P", subjects=["p.>"])
        for i in range(4):
            await js.publish(f"p.{i}", b"x")
        adv = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.*.P.C")
        psub = await js.pull_subscribe("p.>", durable="C", config=ConsumerConfig(ack_wait=30))
        ms = await psub.fetch(4, timeout=2)
        out: list[Any] = []
        probe = await Probe(nc).start()
        # not exactly a kind nats-server knows: answered, nothing else happens
        await probe.send("ack_space", ms[0].reply, b"+ACK ")
        await probe.send("space_ack", ms[0].reply, b" +ACK")
        await probe.send("ok_space", ms[1].reply, b"+OK ")
        await probe.send("wpi_space", ms[1].reply, b"+WPI ")
        await probe.send("ack_nl", ms[2].reply, b"+ACK\n")
        out.append(await probe.collect())
        out.append(info_t(await js.consumer_info("P", "C")))
        pre = "$JS.ACK.P.C"
        # a sequence that is not a number: nats-server reads it as the largest one
        await probe.send("nak_x", f"{pre}.1.x.1.0.0", b"-NAK")
        await probe.send("wpi_x", f"{pre}.1.x.1.0.0", b"+WPI")
        await probe.send("ack_x", f"{pre}.1.x.1.0.0")
        await probe.send("term_x", f"{pre}.1.x.1.0.0", b"+TERM")
        await probe.send("nak_dseq_x", f"{pre}.1.1.x.0.0", b"-NAK")
        await probe.send("unknown_x", f"{pre}.1.x.1.0.0", b"+FOO")
        out.append(await probe.collect())
        # prefixes are enough for these
        await probe.send("naked", ms[3].reply, b"-NAKED")
        await probe.send("term_tail", ms[2].reply, b"+TERMINATE")
        out.append(await probe.collect())
        out.append(info_t(await js.consumer_info("P", "C")))
        out.append(sorted((a.subject, json.dumps(masked(a.data), sort_keys=True)) for a in await drain(adv, 0.3)
                           if "MSG_" in a.subject))
        return out

    got = run(session(js_server, body))
    answered = {"ack_space": b"", "space_ack": b"", "ok_space": b"", "wpi_space": b"", "ack_nl": b""}
    assert got[:2] == [answered, ((4, 4), (0, 0), 4, 0, 0, 0)]
    assert got[2] == {"nak_x": b"", "wpi_x": b"", "ack_x": "none", "term_x": "none", "nak_dseq_x": b"",
                      "unknown_x": b""}
    assert got[3:5] == [{"naked": b"", "term_tail": b""}, ((4, 4), (0, 0), 3, 0, 0, 0)]
    base = {"stream": "P", "consumer": "C", "deliveries": 1}
    assert [(s, json.loads(a)) for s, a in got[5]] == [
        ("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.P.C",
         {**base, "type": "io.nats.jetstream.advisory.v1.nak", "stream_seq": 4, "consumer_seq": 4}),
        ("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.P.C",
         {**base, "type": "io.nats.jetstream.advisory.v1.terminated", "stream_seq": U64_MAX, "consumer_seq": 1}),
        ("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.P.C",
         {**base, "type": "io.nats.jetstream.advisory.v1.terminated", "stream_seq": 3, "consumer_seq": 3,
          "reason": "INATE"}),
    ]


def test_ack_floor_stays_below_a_message_dropped_for_max_deliver(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="F", subjects=["f.>"])
        for i in range(5):
            await js.publish(f"f.{i}", b"x")
        adv = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.F.C")
        psub = await js.pull_subscribe("f.>", durable="C", config=ConsumerConfig(ack_wait=30, max_deliver=2))
        out: list[Any] = []
        (m1,) = await psub.fetch(1, timeout=2)
        await sync(nc, m1, b"-NAK")
        (m1b,) = await psub.fetch(1, timeout=2)  # its second and last delivery
        m2, m3 = await psub.fetch(2, timeout=2)
        await sync(nc, m1b, b"-NAK")
        (m4,) = await psub.fetch(1, timeout=2)  # 1 is dropped on the way (max_deliver), 4 comes instead
        out.append([m.metadata.sequence.stream for m in (m1, m1b, m2, m3, m4)])
        out.append(info_t(await js.consumer_info("F", "C")))
        for m in (m2, m4, m3):  # the floor stays below 1 while anything is pending
            await m.ack_sync()
            out.append(info_t(await js.consumer_info("F", "C")))
        (m5,) = await psub.fetch(1, timeout=2)
        await m5.ack_sync()
        out.append(info_t(await js.consumer_info("F", "C")))
        out.append([masked(a.data)["stream_seq"] for a in await drain(adv, 0.2)])
        return out

    got = run(session(js_server, body))
    assert got == [[1, 1, 2, 3, 4], ((5, 4), (0, 0), 3, 1, 1, 0), ((5, 4), (0, 0), 2, 1, 1, 0),
                   ((5, 4), (0, 0), 1, 1, 1, 0), ((5, 4), (5, 4), 0, 1, 1, 0), ((6, 5), (6, 5), 0, 1, 0, 0), [1]]


def test_pull_heartbeat_restarts_with_each_message(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="H", subjects=["h.>"])
        await js.pull_subscribe("h.>", durable="C", config=ConsumerConfig(ack_wait=30))
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        req = {"batch": 50, "expires": 4 * NS, "idle_heartbeat": NS * 8 // 10}
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.H.C", json.dumps(req).encode(), reply=inbox)
        await nc.flush()
        got: list[tuple[float, str]] = []
        t0 = time.monotonic()

        async def reader() -> None:
            while True:
                try:
                    m = await sub.next_msg(0.5)
                except NatsTimeout:
                    if time.monotonic() - t0 > 6:
                        return
                    continue
                status = (m.headers or {}).get("Status")
                got.append((time.monotonic() - t0, status or m.data.decode()))
                if status == "408":
                    return

        task = asyncio.ensure_future(reader())
        for i in range(10):  # one message every 0.2 s for 2 s: well inside the 0.8 s heartbeat
            await asyncio.sleep(0.2)
            await js.publish(f"h.{i}", f"m{i}".encode())
        sent_until = time.monotonic() - t0
        await asyncio.wait_for(task, 8)
        last = max(t for t, w in got if w.startswith("m"))
        return [[w for _, w in got if w.startswith("m")], [w for t, w in got if t < last and w == "100"],
                any(w == "100" for t, w in got if t > last), got[-1][1], last < sent_until + 0.5]

    got = run(session(js_server, body))
    # no heartbeat while messages come; once they stop, heartbeats until the request expires
    assert got == [[f"m{i}" for i in range(10)], [], True, "408", True]


def test_malformed_pull_requests(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="R", subjects=["r.>"])
        for i in range(3):
            await js.publish(f"r.{i}", f"m{i}".encode())
        await js.pull_subscribe("r.>", durable="C", config=ConsumerConfig(ack_wait=30))
        out: list[Any] = []
        for payload in (b"{bad", b'{"batch":"x"}', b'{"batch":1,"no_wait":1}', b'{"expires":1.5}', b"{}x",
                        b"foo", b"[1]"):
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            await nc.publish("$JS.API.CONSUMER.MSG.NEXT.R.C", payload, reply=inbox)
            try:
                m = await sub.next_msg(1.0)
            except NatsTimeout:
                out.append((payload, "none"))
                continue
            finally:
                await sub.unsubscribe()
            h = m.headers or {}
            desc = h.get("Description") or ""
            # a syntax error's description is the text of Go's JSON scanner: only its start is compared
            out.append((payload, h.get("Status") or m.data, desc if "unmarshal" in desc else desc[:13]))
        return out

    got = run(session(js_server, body))
    bad, pre = "400", "Bad Request - json: cannot unmarshal"
    assert got == [(b"{bad", bad, "Bad Request -"),
                   (b'{"batch":"x"}', bad, f"{pre} string into Go struct field .batch of type int"),
                   (b'{"batch":1,"no_wait":1}', bad, f"{pre} number into Go struct field .no_wait of type bool"),
                   (b'{"expires":1.5}', bad, f"{pre} number 1.5 into Go struct field .expires of type time.Duration"),
                   (b"{}x", bad, "Bad Request -"), (b"foo", b"m0", ""), (b"[1]", b"m1", "")]


def test_api_audit_advisories(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        audit = await nc.subscribe("$JS.EVENT.ADVISORY.API")
        await nc.flush()
        await js.add_stream(name="AU", subjects=["au.>"])
        await js.publish("au.1", b"x")
        await nc.request("$JS.API.STREAM.INFO.NOPE", b"", timeout=2)
        await nc.request("$JS.API.STREAM.MSG.GET.AU", b'{"seq":1}', timeout=2)  # a message: not audited
        await nc.request("$JS.API.STREAM.MSG.GET.AU", b'{"seq":9}', timeout=2)
        await nc.request("$JS.API.CONSUMER.CREATE.AU.D", json.dumps(
            {"stream_name": "AU", "config": {"durable_name": "D", "ack_policy": "explicit"}}).encode(), timeout=2)
        inbox = nc.new_inbox()
        nsub = await nc.subscribe(inbox)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.AU.D", b"1", reply=inbox)  # a pull request: not audited
        await nsub.next_msg(2)
        await nc.request("$JS.API.CONSUMER.DELETE.AU.D", b"", timeout=2)
        await nc.request("$JS.API.INFO", b"", timeout=2)
        out = []
        for a in await drain(audit, 0.4):
            d = json.loads(a.data)
            client = d.get("client") or {}
            resp = json.loads(d["response"])
            for k in ("created", "ts"):
                resp.pop(k, None)
            for part in ("config", "state", "cluster"):
                if isinstance(resp.get(part), dict):
                    resp[part] = sorted(resp[part])  # which fields, not their values
            out.append({
                "keys": list(d),
                "type": d["type"], "subject": d["subject"], "request": d.get("request"), "response": resp,
                "server_set": bool(d.get("server")),
                # what is the client's own: name, language, account, kind; ids, times and rtt differ by nature
                "client": {k: v for k, v in client.items() if k not in ("start", "id", "rtt", "server")},
                "client_keys": sorted(client),
            })
        return out

    got = run(session(js_server, body))
    assert [g["subject"] for g in got] == ["$JS.API.STREAM.CREATE.AU", "$JS.API.STREAM.INFO.NOPE",
                                           "$JS.API.STREAM.MSG.GET.AU", "$JS.API.CONSUMER.CREATE.AU.D",
                                           "$JS.API.CONSUMER.DELETE.AU.D", "$JS.API.INFO"]
    for g in got:
        assert g["type"] == "io.nats.jetstream.advisory.v1.api_audit"
        assert g["server_set"]
        assert g["client"] == {"host": "127.0.0.1", "acc": "$G", "lang": "python3", "ver": g["client"]["ver"],
                               "kind": "Client", "client_type": "nats"}
        assert g["client_keys"] == ["acc", "client_type", "host", "id", "kind", "lang", "rtt", "server", "start",
                                    "ver"]
    assert got[0]["keys"] == ["type", "id", "timestamp", "server", "client", "subject", "request", "response"]
    assert got[1]["keys"] == ["type", "id", "timestamp", "server", "client", "subject", "response"]
    assert json.loads(got[0]["request"])["name"] == "AU"
    assert [g["request"] for g in got[1:]] == [None, '{"seq":9}', got[3]["request"], None, None]
    assert got[1]["response"] == {"type": "io.nats.jetstream.api.v1.stream_info_response", "total": 0, "offset": 0,
                                  "limit": 0, "error": {"code": 404, "err_code": 10059,
                                                        "description": "stream not found"}}
    assert got[2]["response"] == {"type": "io.nats.jetstream.api.v1.stream_msg_get_response",
                                  "error": {"code": 404, "err_code": 10037, "description": "no message found"}}
    assert got[4]["response"] == {"type": "io.nats.jetstream.api.v1.consumer_delete_response", "success": True}
    assert got[5]["response"]["type"] == "io.nats.jetstream.api.v1.account_info_response"
    assert got[5]["response"]["api"]["errors"] == 2
    assert got[0]["response"]["type"] == "io.nats.jetstream.api.v1.stream_create_response"
    assert got[3]["response"]["type"] == "io.nats.jetstream.api.v1.consumer_create_response"
    assert got[3]["response"]["name"] == "D"
