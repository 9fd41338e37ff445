"""Differential restarts: one scenario runs against nats-server and edged side by side, each on a store
directory of its own; both are restarted on that directory (gracefully, and with kill -9 under
`sync_interval: always`), and what a client sees afterwards must be the same on both: stream state
(deletes, purges, per-subject limits, emptied, sealed, memory streams, dedupe), consumer state (ack
floors, pending, redelivery counts, max_deliver, pause) and what the durables deliver next. Only
timestamps (and the server name) are masked; corners where nats-server itself is timing-dependent are
left out. What was pending at the restart is fetched only once its ack wait has passed: nats-server
redelivers it then (it keeps delivery times), edged right away (tests/test_js_consumers.py pins that)."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import Callable
from typing import Any

import nats
import pytest
from nats.errors import TimeoutError as NatsTimeout

from tests.support.aio import run
from tests.support.servers import KINDS, ServerProcess

ACK_WAIT = 3  # seconds: pending messages are due again this long after their delivery, also after a restart
PAUSE_UNTIL = "2099-01-01T00:00:00Z"
NS = 1_000_000_000
# differ between any two servers or runs: when a thing happened or was asked, and the server's name
MASKED = {"ts", "created", "first_ts", "last_ts", "pause_remaining", "cluster", "last_active"}
# nats-server 2.11+ additions that edged (reporting itself as 2.10) leaves out, as in the wire tests
DROPPED: set[str] = set()
STREAMS = ["DEL", "PF", "PK", "PS", "MPS", "EMP", "EMD", "SEAL", "DUP", "C", "I", "W"]
CONSUMERS = [("C", c) for c in ("E", "AL", "NO", "NK", "RD", "MD", "PA", "PU", "F", "LP", "EPH")] + [
    ("I", "IA"), ("I", "IB"), ("W", "WC")]


def mask(v: Any, key: str = "") -> Any:
    """`v` with the values of MASKED keys replaced and DROPPED keys (and 2.11 additions) left out."""
    if isinstance(v, dict):
        out = {k: "*" if k in MASKED else mask(x, k) for k, x in v.items()
               if k not in DROPPED and not k.startswith("_nats.") and not (k == "allow_msg_ttl" and x is False)}
        if key == "config" and out.get("metadata") == {}:
            del out["metadata"]
        return out
    if isinstance(v, list):
        return [mask(x) for x in v]
    return v


def conf(d: str, mode: str) -> str:
    """kill -9 loses nats-server's unsynced writes with the default sync interval: sync always there."""
    return f'jetstream {{ store_dir: "{d}"{", sync_interval: always" if mode == "kill9" else ""} }}\n'


class Client:
    """Raw JetStream API calls on one connection, replies as JSON."""

    def __init__(self, nc: Any) -> None:
        self.nc = nc

    async def api(self, subject: str, body: Any = None) -> dict[str, Any]:
        data = b"" if body is None else json.dumps(body).encode()
        r = await self.nc.request(f"$JS.API.{subject}", data, timeout=5)
        return json.loads(r.data)  # type: ignore[no-any-return]

    async def pub(self, subject: str, data: bytes = b"", headers: dict[str, str] | None = None) -> Any:
        """The PubAck (or error) of a publish, as JSON; None when nothing answered."""
        try:
            r = await self.nc.request(subject, data, timeout=3, headers=headers)
        except Exception as e:  # no responders: a stream that is gone
            return type(e).__name__
        return json.loads(r.data) if r.data else dict(r.headers or {})

    async def stream(self, name: str) -> dict[str, Any]:
        return await self.api(f"STREAM.INFO.{name}", {"deleted_details": True, "subjects_filter": ">"})

    async def consumer(self, stream: str, name: str) -> dict[str, Any]:
        return await self.api(f"CONSUMER.INFO.{stream}.{name}")

    async def add_consumer(self, stream: str, cfg: dict[str, Any]) -> None:
        name = cfg.get("durable_name") or cfg["name"]
        r = await self.api(f"CONSUMER.CREATE.{stream}.{name}", {"stream_name": stream, "config": cfg})
        assert "error" not in r, r

    async def fetch(self, stream: str, name: str, n: int, wait: float = 0.5) -> list[Any]:
        """Up to `n` messages of a pull durable: those there now (a no_wait request) or else within `wait`."""
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox)
        try:
            req = {"batch": n, "expires": int(wait * NS)}
            await self.nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}", json.dumps(req).encode(),
                                  reply=inbox)
            out: list[Any] = []
            deadline = time.monotonic() + wait + 2
            while len(out) < n and time.monotonic() < deadline:
                try:
                    m = await sub.next_msg(max(0.05, deadline - time.monotonic()))
                except NatsTimeout:
                    break
                if m.headers and m.headers.get("Status"):
                    break  # 408 request expired / 404 no messages
                out.append(m)
            return out
        finally:
            await sub.unsubscribe()

    async def ack(self, reply: str, body: bytes = b"") -> None:
        """An ack that is done when it returns: it waits for the server's reply."""
        await self.nc.request(reply, body, timeout=3)


def meta(m: Any) -> tuple[Any, ...]:
    """What a client learns from a delivery: subject, payload, and the ack subject's stream sequence,
    consumer sequence, delivery count and pending count (not its timestamp)."""
    t = m.reply.split(".")
    return (m.subject, m.data, int(t[5]), int(t[6]), int(t[4]), int(t[8]))


async def fill(c: Client, name: str, n: int, subjects: list[str], **cfg: Any) -> None:
    r = await c.api(f"STREAM.CREATE.{name}", {"name": name, "subjects": [f"{name.lower()}.>"], **cfg})
    assert "error" not in r, r
    for i in range(n):
        r = await c.pub(f"{name.lower()}.{subjects[i % len(subjects)]}", f"{name}{i + 1}".encode())
        assert "seq" in r, r


async def before(url: str) -> dict[str, Any]:
    """The scenario up to the restart; returns ack subjects kept for after it."""
    nc = await nats.connect(url)
    c = Client(nc)
    keep: dict[str, Any] = {}
    try:
        # -- streams
        await fill(c, "DEL", 10, ["a", "b", "c"])
        for s in (3, 4, 7, 9, 10):  # interior deletes, and the last two
            assert (await c.api("STREAM.MSG.DELETE.DEL", {"seq": s})).get("success")
        await fill(c, "PF", 12, ["a", "b", "c"])
        await c.api("STREAM.PURGE.PF", {"filter": "pf.a"})
        await c.api("STREAM.PURGE.PF", {"filter": "pf.b", "keep": 1})
        await c.api("STREAM.PURGE.PF", {"filter": "pf.c", "seq": 9})
        await fill(c, "PK", 10, ["a", "b"])
        await c.api("STREAM.PURGE.PK", {"keep": 3})
        await fill(c, "PS", 10, ["a", "b"])
        await c.api("STREAM.PURGE.PS", {"seq": 6})
        await fill(c, "MPS", 10, ["a", "b", "c"], max_msgs_per_subject=2)
        await fill(c, "EMP", 5, ["a"])
        await c.api("STREAM.PURGE.EMP")
        await fill(c, "EMD", 3, ["a"])
        for s in (1, 2, 3):
            await c.api("STREAM.MSG.DELETE.EMD", {"seq": s})
        await fill(c, "MEM", 3, ["a"], storage="memory")
        await fill(c, "SEAL", 3, ["a"])
        cfg = (await c.stream("SEAL"))["config"]
        r = await c.api("STREAM.UPDATE.SEAL", {**cfg, "sealed": True})
        assert r["config"]["sealed"], r
        r = await c.api("STREAM.CREATE.DUP", {"name": "DUP", "subjects": ["dup.>"], "duplicate_window": 120 * NS})
        for i in range(1, 4):
            await c.pub("dup.a", f"d{i}".encode(), {"Nats-Msg-Id": f"id{i}"})
        # -- consumers on a limits stream of 20 messages on c.0 .. c.3
        await fill(c, "C", 20, ["0", "1", "2", "3"])
        aw = ACK_WAIT * NS
        await c.add_consumer("C", {"durable_name": "E", "ack_policy": "explicit", "ack_wait": aw})
        ms = await c.fetch("C", "E", 8)
        for i in (0, 2, 1, 6, 4):  # out of order: seqs 1, 3, 2, 7, 5 acked; 4, 6, 8 pending
            await c.ack(ms[i].reply)
        await c.add_consumer("C", {"durable_name": "AL", "ack_policy": "all", "ack_wait": aw})
        ms = await c.fetch("C", "AL", 6)
        await c.ack(ms[3].reply)
        await c.add_consumer("C", {"durable_name": "NO", "ack_policy": "none"})
        await c.fetch("C", "NO", 5)
        await c.add_consumer("C", {"durable_name": "NK", "ack_policy": "explicit", "ack_wait": aw})
        ms = await c.fetch("C", "NK", 3)
        await c.ack(ms[0].reply)
        await c.ack(ms[1].reply, b'-NAK {"delay": 3600000000000}')
        await c.add_consumer("C", {"durable_name": "RD", "ack_policy": "explicit", "ack_wait": aw,
                                   "max_deliver": 5})
        ms = await c.fetch("C", "RD", 3)
        for m in ms:
            await c.ack(m.reply, b"-NAK")
        ms = await c.fetch("C", "RD", 3)
        assert [meta(m)[4] for m in ms] == [2, 2, 2]
        await c.ack(ms[0].reply)
        await c.add_consumer("C", {"durable_name": "MD", "ack_policy": "explicit", "ack_wait": aw,
                                   "max_deliver": 2, "filter_subject": "c.0"})
        for _ in range(2):
            ms = await c.fetch("C", "MD", 1)
            await c.ack(ms[0].reply, b"-NAK")
        ms = await c.fetch("C", "MD", 1)  # seq 1 is past max_deliver: the next one comes
        assert meta(ms[0])[2] == 5
        await c.ack(ms[0].reply)
        await c.add_consumer("C", {"durable_name": "PA", "ack_policy": "explicit", "ack_wait": aw})
        ms = await c.fetch("C", "PA", 2)
        await c.ack(ms[0].reply)
        r = await c.api("CONSUMER.PAUSE.C.PA", {"pause_until": PAUSE_UNTIL})
        assert r.get("paused"), r
        dlv = "dlv.pu"
        sub = await nc.subscribe(dlv)
        await c.add_consumer("C", {"durable_name": "PU", "ack_policy": "explicit", "ack_wait": aw,
                                   "deliver_subject": dlv, "filter_subject": "c.1"})
        got = [await sub.next_msg(3) for _ in range(5)]
        await sub.unsubscribe()  # before anything can be redelivered
        for i in (0, 2):
            await c.ack(got[i].reply)
        await c.add_consumer("C", {"durable_name": "F", "ack_policy": "explicit", "ack_wait": aw,
                                   "filter_subjects": ["c.1", "c.2"]})
        ms = await c.fetch("C", "F", 4)
        for i in (0, 2):
            await c.ack(ms[i].reply)
        await c.add_consumer("C", {"durable_name": "LP", "ack_policy": "explicit", "ack_wait": aw,
                                   "deliver_policy": "last_per_subject", "filter_subject": "c.*"})
        ms = await c.fetch("C", "LP", 2)  # the last of c.0 and of c.1 (17, 18); then 19 and 20
        await c.ack(ms[0].reply)
        await c.add_consumer("C", {"name": "EPH", "ack_policy": "explicit", "ack_wait": aw,
                                   "inactive_threshold": 600 * NS})
        ms = await c.fetch("C", "EPH", 2)
        await c.ack(ms[1].reply)
        # -- interest and work queue retention
        r = await c.api("STREAM.CREATE.I", {"name": "I", "subjects": ["i.>"], "retention": "interest"})
        await c.add_consumer("I", {"durable_name": "IA", "ack_policy": "explicit", "ack_wait": aw,
                                   "filter_subject": "i.a"})
        await c.add_consumer("I", {"durable_name": "IB", "ack_policy": "explicit", "ack_wait": aw})
        for i in range(7):  # i.a at 1, 3, 5, 7 (the last: see the module's report on delivered.stream_seq)
            await c.pub(f"i.{'ab'[i % 2]}", f"I{i + 1}".encode())
        ms = await c.fetch("I", "IA", 3)  # 1, 3, 5
        await c.ack(ms[0].reply)
        await c.ack(ms[2].reply)
        keep["IA3"] = ms[1].reply
        ms = await c.fetch("I", "IB", 4)  # 1 .. 4
        for m in ms[:3]:
            await c.ack(m.reply)
        r = await c.api("STREAM.CREATE.W", {"name": "W", "subjects": ["w.>"], "retention": "workqueue"})
        await c.add_consumer("W", {"durable_name": "WC", "ack_policy": "explicit", "ack_wait": aw})
        for i in range(6):
            await c.pub("w.x", f"W{i + 1}".encode())
        ms = await c.fetch("W", "WC", 4)
        await c.ack(ms[0].reply)
        await c.ack(ms[2].reply)
        keep["W2"] = ms[1].reply
        # a pull request waiting on the paused consumer: num_waiting 1 now, and nothing survives a restart
        wait_inbox = nc.new_inbox()
        await nc.subscribe(wait_inbox)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.C.PA", json.dumps({"batch": 1, "expires": 60 * NS}).encode(),
                         reply=wait_inbox)
        await nc.flush()
        keep["streams"] = {s: await c.stream(s) for s in STREAMS}
        keep["consumers"] = {f"{s}.{n}": await c.consumer(s, n) for s, n in CONSUMERS}
        keep["done"] = time.monotonic()
        return keep
    finally:
        await nc.close()


async def after(url: str, keep: dict[str, Any]) -> dict[str, Any]:
    """What a client sees after the restart: infos first, then what each durable does."""
    nc = await nats.connect(url)
    c = Client(nc)
    out: dict[str, Any] = {}
    try:
        out["streams"] = {s: await c.stream(s) for s in STREAMS}
        out["consumers"] = {f"{s}.{n}": await c.consumer(s, n) for s, n in CONSUMERS}
        out["mem"] = (await c.stream("MEM")).get("error")
        names = await c.api("STREAM.NAMES")
        out["names"] = sorted(names.get("streams") or [])
        names = await c.api("CONSUMER.NAMES.C")
        out["consumer_names"] = sorted(names.get("consumers") or [])
        # -- publishing continues the sequences; dedupe and the last message id survive
        out["pub"] = [
            await c.pub("del.a", b"x"), await c.pub("emp.a", b"x"), await c.pub("emd.a", b"x"),
            await c.pub("pf.a", b"x"), await c.pub("seal.a", b"x"), await c.pub("mem.a", b"x"),
            await c.pub("dup.a", b"again", {"Nats-Msg-Id": "id2"}),
            await c.pub("dup.a", b"next", {"Nats-Msg-Id": "id4", "Nats-Expected-Last-Msg-Id": "id3"}),
            await c.pub("dup.a", b"bad", {"Nats-Expected-Last-Msg-Id": "id3"}),
        ]
        out["streams2"] = {s: await c.stream(s) for s in ("DEL", "EMP", "EMD", "PF", "DUP")}
        # -- acks of deliveries from before the restart still count; retention drops what they free
        await c.ack(keep["IA3"])
        await c.ack(keep["W2"])
        out["retained"] = [await c.stream("I"), await c.stream("W")]
        # -- a paused consumer stays paused
        out["paused_fetch"] = [meta(m) for m in await c.fetch("C", "PA", 1, wait=0.3)]
        # what was pending is due again ACK_WAIT after its delivery, on both servers
        await asyncio.sleep(max(0.0, keep["done"] + ACK_WAIT + 2 - time.monotonic()))
        r = await c.api("CONSUMER.PAUSE.C.PA", {})
        out["resumed"] = r.get("paused")
        fetched: dict[str, Any] = {}
        for s, n in CONSUMERS:
            if n == "PU":
                continue  # a push consumer: below
            ms = await c.fetch(s, n, 10)
            fetched[f"{s}.{n}"] = [meta(m) for m in ms]
            for m in ms:
                if n != "NO":
                    await c.ack(m.reply)
        sub = await nc.subscribe("dlv.pu")
        ms = []
        for _ in range(10):
            try:
                ms.append(await sub.next_msg(0.7))
            except NatsTimeout:
                break
        fetched["C.PU"] = [meta(m) for m in ms]
        for m in ms:
            await c.ack(m.reply)
        await sub.unsubscribe()
        out["fetched"] = fetched
        out["consumers2"] = {f"{s}.{n}": await c.consumer(s, n) for s, n in CONSUMERS}
        out["retained2"] = [await c.stream("I"), await c.stream("W")]
        return out
    finally:
        await nc.close()


def restart(p: ServerProcess, mode: str) -> None:
    """Stop gracefully, or kill -9 once what was acked is on disk on both; then start on the same store."""
    if mode == "kill9":
        time.sleep(0.5)  # nats-server writes consumer state at most every 100 ms, even with sync always
        p.kill9()
    else:
        p.stop()
    p.start()


@pytest.mark.parametrize("mode", ["stop", "kill9"])
def test_restart_is_invisible_to_clients(mode: str, start_server: Callable[..., ServerProcess]) -> None:
    servers = [start_server(k, config=conf(tempfile.mkdtemp(prefix=f"rd-{k}-"), mode)) for k in KINDS]

    async def main() -> dict[str, Any]:
        kept = await asyncio.gather(*(before(p.url) for p in servers))
        await asyncio.gather(*(asyncio.to_thread(restart, p, mode) for p in servers))
        seen = await asyncio.gather(*(after(p.url, k) for p, k in zip(servers, kept, strict=True)))
        return {p.kind: (k, s) for p, k, s in zip(servers, kept, seen, strict=True)}

    got = run(main(), timeout=50)
    for kind, (k, s) in got.items():
        # on each server, a restart changes no stream state, timestamps included
        for name in STREAMS:
            st1, st2 = k["streams"][name]["state"], s["streams"][name]["state"]
            if mode == "kill9" and name == "DEL":
                # nats-server forgets the time of a deleted tail when it rebuilds its state from its
                # blocks, which it does after kill -9 unless it happened to write its index since
                st1, st2 = ({x: y for x, y in st.items() if x != "last_ts"} for st in (st1, st2))
            assert st2 == st1, (kind, name)
            assert s["streams"][name]["config"] == k["streams"][name]["config"], (kind, name)
        # ... nor consumer state; but waiting pull requests are gone, and so are the times of the last
        # delivery and ack (neither server keeps them; the comparison between servers checks that)
        assert k["consumers"]["C.PA"]["num_waiting"] == 1
        for key, ci in s["consumers"].items():
            ci0 = {**k["consumers"][key], "num_waiting": 0}
            for pos in ("delivered", "ack_floor"):
                ci0[pos] = {x: y for x, y in ci0[pos].items() if x != "last_active"}
            assert mask(ci0) == mask(ci), (kind, key)
    ns, ed = (got[k] for k in KINDS)
    # a few absolutes, so that both agreeing means something
    after_ns = ns[1]
    assert [r.get("seq") if isinstance(r, dict) else r for r in after_ns["pub"]] == [
        11, 6, 4, 13, 0, "NoRespondersError", 2, 4, 0]
    assert after_ns["mem"]["err_code"] == 10059 and "MEM" not in after_ns["names"]
    assert after_ns["paused_fetch"] == [] and after_ns["resumed"] is False
    assert [m[2:5] for m in after_ns["fetched"]["C.RD"][:2]] == [(2, 7, 3), (3, 8, 3)]
    assert [m[2] for m in after_ns["fetched"]["C.NK"][:1]] == [3]  # 2 waits out its NAK delay
    assert after_ns["retained2"][0]["state"]["messages"] == after_ns["retained2"][1]["state"]["messages"] == 0
    for i, part in enumerate(("before", "after")):
        a, b = mask(ns[i]), mask(ed[i])
        for key in (("streams", "consumers") if part == "before" else a):
            if isinstance(a[key], dict):
                for sub in a[key]:
                    assert b[key].get(sub) == a[key][sub], (part, key, sub)
            assert b[key] == a[key], (part, key)
