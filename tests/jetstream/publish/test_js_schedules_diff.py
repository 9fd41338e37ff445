"""Message schedules (`allow_msg_schedules`, nats-server 2.12), differential: config rules, the
publish-time refusals (cron patterns and time zones included), a one-shot `@at` that fires onto its
target (headers, payload, TTL) and purges itself, an `@every` and a cron pattern that repeat until purged
with `Nats-Schedule-Next: purge`; and a schedule set
before a kill -9 that fires after the restart."""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
import time
from typing import Any

import nats

from edged.goformat import format_time
from tests.support.aio import run
from tests.support.jsutil import replies_of_both
from tests.support.servers import KINDS, ServerProcess


async def _req(nc: Any, subject: str, hdrs: dict[str, str] | None = None, payload: bytes = b"") -> Any:
    m = await nc.request(subject, payload, timeout=5, headers=hdrs)
    return json.loads(m.data) if m.data else m.data


async def _last(nc: Any, stream: str, subject: str) -> Any:
    r = await _req(nc, f"$JS.API.STREAM.MSG.GET.{stream}", payload=json.dumps({"last_by_subj": subject}).encode())
    if "error" in r:
        return r["error"]["err_code"]
    m = r["message"]
    hdrs = dict(ln.split(": ", 1) for ln in base64.b64decode(m.get("hdrs", "")).decode().split("\r\n")[1:-2])
    return {"data": base64.b64decode(m.get("data", "")).decode(), "hdrs": hdrs}


async def _wait_for(nc: Any, stream: str, subject: str, limit: float = 15.0) -> Any:
    for _ in range(int(limit * 10)):
        got = await _last(nc, stream, subject)
        if isinstance(got, dict):
            return got
        await asyncio.sleep(0.1)
    return None


async def _every_fired(nc: Any) -> int:
    """How often out.e has fired, once it has twice (bounded wait)."""
    n = 0
    for _ in range(100):
        st = (await _req(nc, "$JS.API.STREAM.INFO.S", payload=b'{"subjects_filter": "out.e"}'))["state"]
        n = st.get("subjects", {}).get("out.e", 0)
        if n >= 2:
            break
        await asyncio.sleep(0.1)
    return n


def _at(seconds: float) -> str:
    return "@at " + format_time(int(time.time() + seconds) * 1_000_000_000)


async def _scenario(url: str) -> list[Any]:
    nc = await nats.connect(url)
    out: list[Any] = []
    try:
        for cfg in ({"name": "BAD1", "subjects": ["b1"], "allow_msg_schedules": True, "discard": "new"},
                    {"name": "BAD2", "subjects": ["b2"], "allow_msg_schedules": True, "pedantic": True},
                    {"name": "BAD3", "mirror": {"name": "S"}, "allow_msg_schedules": True},
                    {"name": "S", "subjects": ["sched.>", "out.>"], "allow_msg_schedules": True,
                     "allow_msg_ttl": True},
                    {"name": "P", "subjects": ["p.>"]}):
            r = await _req(nc, f"$JS.API.STREAM.CREATE.{cfg['name']}", payload=json.dumps(cfg).encode())
            out.append(r.get("error") or {k: r["config"].get(k) for k in ("allow_msg_schedules", "allow_rollup_hdrs")})
        ok = {"Nats-Schedule": "@at 2099-01-01T06:00:00Z", "Nats-Schedule-Target": "out.z"}
        for subject, hdrs in [
            ("p.a", ok),
            ("sched.z", {**ok, "Nats-Schedule": "@at bogus"}),
            ("sched.z", {**ok, "Nats-Schedule": "@every 500ms"}),
            ("sched.z", {"Nats-Schedule": "@at 2099-01-01T06:00:00Z"}),
            ("sched.z", {**ok, "Nats-Schedule-Target": "sched.z"}),
            ("sched.z", {**ok, "Nats-Schedule-Target": "elsewhere"}),
            ("sched.z", {**ok, "Nats-Schedule-Target": "out.*"}),
            ("sched.z", {**ok, "Nats-Schedule-TTL": "bad"}),
            ("sched.z", {**ok, "Nats-Schedule-Rollup": "all"}),
            ("sched.z", {**ok, "Nats-Rollup": "all"}),
            ("sched.z", {**ok, "Nats-Schedule-Time-Zone": "Nowhere/Never"}),
            ("sched.z", {**ok, "Nats-Schedule-Time-Zone": "Europe/Berlin"}),
            ("sched.c", {**ok, "Nats-Schedule": "0 30 6 * * *", "Nats-Schedule-Time-Zone": "Europe/Berlin"}),
            ("sched.c", {**ok, "Nats-Schedule": "@daily"}),
            ("sched.c", {**ok, "Nats-Schedule": "0 0 0 * * MON-FRI"}),
            ("sched.c", {**ok, "Nats-Schedule": "0 30 6 * *"}),
            ("sched.c", {**ok, "Nats-Schedule": "60 * * * * *"}),
            ("sched.c", {**ok, "Nats-Schedule": "* * * * * 7"}),
            ("sched.c", {**ok, "Nats-Schedule": "*/0 * * * * *"}),
            ("sched.c", {**ok, "Nats-Schedule": "0 0 0 31 2 *"}),
            ("sched.c", {**ok, "Nats-Schedule": "@sometimes"}),
            ("sched.z", {**ok, "Nats-Schedule-Source": "out.z"}),
            ("sched.z", {"Nats-Scheduler": "sched.y"}),
            ("sched.z", {"Nats-Schedule-Next": "later", "Nats-Scheduler": "sched.y"}),
            ("sched.z", ok),
        ]:
            out.append(await _req(nc, subject, hdrs, b"x"))
        out.append(await _last(nc, "S", "sched.z"))
        # a one-shot: fires onto out.a with a TTL, then its schedule is gone
        out.append(await _req(nc, "sched.a", {"Nats-Schedule": _at(1), "Nats-Schedule-Target": "out.a",
                                              "Nats-Schedule-TTL": "1m", "Nats-Msg-Id": "m1", "X-Mine": "1"},
                              b"fire"))
        out.append(await _wait_for(nc, "S", "out.a"))
        out.append(await _last(nc, "S", "sched.a"))
        # repeating every second, until purged
        out.append(await _req(nc, "sched.e", {"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": "out.e"}, b"e"))
        for _ in range(60):
            st = (await _req(nc, "$JS.API.STREAM.INFO.S", payload=b'{"subjects_filter": "out.e"}'))["state"]
            if st.get("subjects", {}).get("out.e", 0) >= 2:
                break
            await asyncio.sleep(0.1)
        out.append(st.get("subjects", {}).get("out.e", 0) >= 2)
        e = await _last(nc, "S", "out.e")
        out.append(sorted(e["hdrs"]))
        out.append(await _req(nc, "sched.stop", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "sched.e"}))
        out.append(await _last(nc, "S", "sched.e"))
        # a cron pattern firing every second
        await _req(nc, "sched.c", {"Nats-Schedule": "* * * * * *", "Nats-Schedule-Target": "out.c"}, b"c")
        c = await _wait_for(nc, "S", "out.c")
        out.append((c["data"], sorted(c["hdrs"])) if c else None)
        await _req(nc, "sched.stop", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "sched.c"})
    finally:
        await nc.close()
    return out


def test_schedules_as_nats_server() -> None:
    res = replies_of_both(_scenario, "js-sched-")
    for i, (a, b) in enumerate(zip(res["edged"], res["nats-server"], strict=True)):
        assert a == b, (i, a, b)
    fired = [x for x in res["edged"] if isinstance(x, dict) and x.get("data") == "fire"]
    assert fired and fired[0]["hdrs"]["Nats-Scheduler"] == "sched.a"


def test_schedule_fires_after_kill9() -> None:
    for kind in KINDS:
        p = ServerProcess(kind, ["-js", "-sd", tempfile.mkdtemp(prefix="js-sched9-")]).start()
        try:
            async def before(url: str) -> Any:
                nc = await nats.connect(url)
                cfg = {"name": "S", "subjects": ["sched.>", "out.>"], "allow_msg_schedules": True}
                await _req(nc, "$JS.API.STREAM.CREATE.S", payload=json.dumps(cfg).encode())
                ack = await _req(nc, "sched.a", {"Nats-Schedule": _at(4), "Nats-Schedule-Target": "out.a"}, b"later")
                await _req(nc, "sched.e", {"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": "out.e"}, b"e")
                await nc.close()
                return ack

            assert run(before(p.url)) == {"stream": "S", "seq": 1}
            time.sleep(0.3)  # past a file store's flush, as nats-server's own data is only then on disk
            p.kill9()
            p.restart()

            async def after(url: str) -> Any:
                nc = await nats.connect(url)
                got = await _wait_for(nc, "S", "out.a", 20)
                fired = await _every_fired(nc)
                await nc.close()
                return got, fired

            got, fired = run(after(p.url), timeout=60)
            assert fired >= 2, kind  # the repeating one goes on after the restart
            assert got is not None and got["data"] == "later", kind
            assert got["hdrs"] == {"Nats-Scheduler": "sched.a", "Nats-Schedule-Next": "purge"}, (kind, got)
        finally:
            p.stop()
