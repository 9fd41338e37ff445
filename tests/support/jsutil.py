"""Helpers shared by the JetStream tests: a nats-py session, the
(err_code, description) of a failed JetStream call, a wire script's replies from both servers, and
collecting what comes back to requests (ack replies, statuses), and the consumer helpers the differential
consumer tests share."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from typing import Any

import nats
import nats.js.errors
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import APIError

from tests.support.aio import run
from tests.support.servers import KINDS, ServerProcess


async def session(server: ServerProcess, body: Any, domain: str | None = None) -> Any:
    """`body(nc, js)` on a fresh connection, closed afterwards."""
    nc = await nats.connect(server.url)
    try:
        return await body(nc, nc.jetstream(domain=domain))
    finally:
        await nc.close()


async def err(aw: Any) -> tuple[int, str]:
    """(err_code, description) of a JetStream call that must fail."""
    try:
        await aw
    except APIError as e:
        return e.err_code or 0, e.description or ""
    raise AssertionError("expected an API error")


def replies_of_both(scenario: Any, prefix: str) -> dict[str, list[Any]]:
    """`scenario(url)` against a fresh JetStream server of each kind: {kind: what it returned}, for the
    wire scripts that compare every reply."""
    res = {}
    for kind in KINDS:
        p = ServerProcess(kind, ["-js", "-sd", tempfile.mkdtemp(prefix=prefix)]).start()
        try:
            res[kind] = run(scenario(p.url), timeout=120)
        finally:
            p.stop()
    return res


def across_kill9(kind: str, first: Any, after: Any, prefix: str, settle: float = 0.3,
                 after_timeout: float = 120) -> list[Any]:
    """`first(nc)` on a fresh JetStream server of `kind`, kill -9 once `settle` seconds have let the state
    nats-server writes behind reach its files, a restart on the same store, then `after(nc)`: the two
    results, one list."""
    async def session(url: str, body: Any) -> list[Any]:
        nc = await nats.connect(url)
        try:
            return await body(nc)
        finally:
            await nc.close()

    p = ServerProcess(kind, ["-js", "-sd", tempfile.mkdtemp(prefix=prefix)]).start()
    try:
        out = run(session(p.url, first), timeout=120)
        run(asyncio.sleep(settle))
        p.kill9()
        p.start()
        return out + run(session(p.url, after), timeout=after_timeout)
    finally:
        p.stop()


def case_stream(base: str, *case: object) -> str:
    """A stream name of its own for one case of a scenario's loop, e.g. `case_stream("PP", 3)` = "PP_3".
    nats-server removes a deleted stream's files in the background and renames the directory first, and a
    name deleted again before that is done keeps its message files, which the next stream of that name
    takes up, old messages and all (filestore.go, fileStore.Delete). STREAM.INFO already says 10059 then,
    so waiting for it does not help: a loop that deletes its stream never re-creates that name."""
    return "_".join([base, *map(str, case)])


# A stream a scenario creates first and never deletes. After a stream is deleted nats-server removes the
# account's streams directory, if empty, on a goroutine of its own (stream.go, stream.stop), and a stream
# created meanwhile fails with 10049 "error creating store for stream" (mkdir: no such file or directory).
# A scenario whose loop deletes all its streams keeps this one, so that the directory is never empty.
ANCHOR: dict[str, Any] = {"name": "ANCHOR", "subjects": ["anchor.never"]}


def differing(res: dict[str, list[Any]]) -> list[tuple[Any, Any]]:
    """The (edged, nats-server) pairs of a `replies_of_both` result that differ, position by position
    (results of different lengths raise)."""
    return [(a, b) for a, b in zip(res["edged"], res["nats-server"], strict=True) if a != b]


async def drain(sub: Any, wait: float = 0.3, limit: int = 200) -> list[Any]:
    """Whatever `sub` gets until it has been quiet for `wait` seconds (bounded)."""
    out = []
    for _ in range(limit):
        try:
            out.append(await sub.next_msg(wait))
        except NatsTimeout:
            break
    return out


class Probe:
    """Publishes with a reply subject of its own, then tells for each what came back: the empty ack reply
    (b""), a status such as "503" (no responders), or "none"."""

    def __init__(self, nc: Any) -> None:
        self.nc = nc
        self.inbox = nc.new_inbox()
        self.sub: Any = None
        self.keys: list[str] = []

    async def start(self) -> Probe:
        self.sub = await self.nc.subscribe(self.inbox + ".*")
        return self

    async def send(self, key: str, subject: str, payload: bytes = b"") -> None:
        self.keys.append(key)
        await self.nc.publish(subject, payload, reply=f"{self.inbox}.{len(self.keys)}")

    async def collect(self) -> dict[str, Any]:
        await self.nc.flush()
        got: dict[str, Any] = {}
        for m in await drain(self.sub, 0.4):
            key = self.keys[int(m.subject.rsplit(".", 1)[1]) - 1]
            got[key] = (m.headers or {}).get("Status") or m.data
        out = {k: got.get(k, "none") for k in self.keys}
        self.keys = []
        return out


async def quiet(sub: Any, wait: float = 0.4, limit: float = 5.0) -> list[Any]:
    """What arrives on `sub` until it has been quiet for `wait` seconds (`limit` seconds at most)."""
    out = []
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            out.append(await sub.next_msg(wait))
        except NatsTimeout:
            break
    return out


async def exc_name(aw: Any) -> str:
    """The class name of what `aw` raises ("no error" if nothing)."""
    try:
        await aw
    except Exception as e:
        return type(e).__name__
    return "no error"


async def create(nc: Any, stream: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """Create a consumer through the raw API (every config field, as sent); the JSON reply."""
    name = cfg.get("durable_name") or cfg.get("name")
    subj = f"$JS.API.CONSUMER.CREATE.{stream}.{name}" if name else f"$JS.API.CONSUMER.CREATE.{stream}"
    r = await nc.request(subj, json.dumps({"stream_name": stream, "config": cfg}).encode(), timeout=3)
    d = json.loads(r.data)
    assert "error" not in d, d
    return d


def info_t(ci: Any) -> tuple[Any, ...]:
    """The counters of a consumer info that acks move: delivered, ack floor, and the num_* fields."""
    return ((ci.delivered.consumer_seq, ci.delivered.stream_seq), (ci.ack_floor.consumer_seq,
            ci.ack_floor.stream_seq), ci.num_ack_pending, ci.num_redelivered, ci.num_pending, ci.num_waiting)


def masked(data: bytes) -> dict[str, Any]:
    """An advisory without what differs between any two servers (its id and time)."""
    d = json.loads(data)
    d.pop("id", None)
    d.pop("timestamp", None)
    return d


async def sync(nc: Any, m: Any, payload: bytes = b"") -> bytes:
    """An ack of `m` with a reply: done once the reply is in (nats-server takes acks on a queue of its
    own, so a plain publish may still be in flight when the next request is served)."""
    return (await nc.request(m.reply, payload, timeout=2)).data  # type: ignore[no-any-return]


async def kv_keys(kv: Any, **kw: Any) -> list[str]:
    """`kv.keys()` of a bucket that has keys, asked once more if nats-py says it has none: its watcher can
    signal "no more entries" before the first one when the server has delivered them all by the time
    the client reads the consumer's info (a race in the client, seen against nats-server too). A bucket
    with no keys fails both times."""
    try:
        return await kv.keys(**kw)
    except nats.js.errors.NoKeysError:
        await asyncio.sleep(0.05)
        return await kv.keys(**kw)


async def api(nc: Any, subject: str, body: Any, timeout: float = 3.0) -> dict[str, Any]:
    """A JSON request (the JetStream API's shape) and its decoded reply."""
    r = await nc.request(subject, json.dumps(body).encode(), timeout=timeout)
    return json.loads(r.data)  # type: ignore[no-any-return]


async def read_stream(nc: Any, stream: str, n: int, timeout: float = 20.0,
                      api_prefix: str = "$JS.API") -> list[tuple[int, str, dict[str, str], bytes]]:
    """Every message of `stream` (n of them), through one ephemeral push consumer (ack none): (stream
    sequence, subject, headers, data) each, in order. One consumer instead of a get per message, for
    streams of thousands."""
    inbox = nc.new_inbox()
    got: list[Any] = []
    done = asyncio.get_running_loop().create_future()

    async def on_msg(m: Any) -> None:
        if not m.reply:  # a heartbeat or flow control: none asked for
            return
        got.append(m)
        if len(got) >= n and not done.done():
            done.set_result(None)

    sub = await nc.subscribe(inbox, cb=on_msg, pending_msgs_limit=n + 100, pending_bytes_limit=-1)
    try:
        r = await api(nc, f"{api_prefix}.CONSUMER.CREATE.{stream}", {"stream_name": stream, "config": {
            "deliver_subject": inbox, "ack_policy": "none", "deliver_policy": "all", "max_ack_pending": -1}})
        assert "error" not in r, r
        if n:
            await asyncio.wait_for(done, timeout)
    finally:
        await sub.unsubscribe()
    out = []
    for m in got:
        toks = m.reply.split(".")
        seq = int(toks[5] if len(toks) == 9 else toks[7])
        out.append((seq, m.subject, dict(m.headers or {}), m.data))
    return out
