"""Offline catch-up (issue 19): a backlog built while the leafnode link is cut, drained once it is back,
with edged as the leaf side by side with a nats-server leaf in the same place (same hub binary, same
proxy in the link).

- telemetry: N messages stored in the edge's stream `telemetry` while the link is cut; a hub stream sources
  it through `$JS.edge.API`. From the link back: when the hub's source starts to take them (resync), and
  when it holds all of them.
- commands: N messages published on the hub's `commands` while the link is cut; the edge's stream mirrors it
  through `$JS.hub.API`. The same two times, on the edge.

Rows: resync start (s; target <= 5 s for edged's own mirror), drain msg/s (N / (all held - resync start);
target >= 1.0x the nats-server leaf) and the leaf's CPU us per message over the catch-up window. Each backlog
runs REPS times per leaf kind, the kinds alternating (which goes first rotates), a fresh place per run; the rows
are the MEDIANS of the runs (a single run's drain swung +-30% on a shared machine), every run is in the JSON.
Run: `python -m bench.offline [--count N] [--reps R] [--json]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

from bench.harness import Server, free_port
from tests.support.servers import wait_port
from tests.support.tcpproxy import TCPProxy

HUB_CONF = """
server_name: hub
jetstream {{ store_dir: "{store}", domain: hub }}
leafnodes {{ port: {leaf_port}, advertise: "127.0.0.1:{proxy_port}" }}
accounts {{ APP {{ jetstream: enabled, users: [ {{user: leaf, password: s3cret}}, {{user: app, password: app}} ] }} }}
"""

EDGE_CONF = """
server_name: edge
jetstream {{ store_dir: "{store}", domain: edge }}
leafnodes {{ reconnect: 1s, remotes: [ {{ urls: ["nats://leaf:s3cret@127.0.0.1:{proxy_port}"] }} ] }}
"""

SIZE = 128
KINDS = ("nats-server", "edged")  # the reference first in the first round; rounds alternate
REPS = 3
FIELDS = ("resync_s", "all_s", "msgs_per_sec", "leaf_cpu_us")


class Place:
    """A hub nats-server and a leaf of `kind` linked to it through a cuttable proxy (the hub advertises the
    proxy, so a nats-server leaf does not learn a way around it)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        leaf_port = free_port()
        self.proxy = TCPProxy("127.0.0.1", leaf_port).start()
        work = tempfile.mkdtemp(prefix=f"bench-offline-{kind}-")
        self.hub = Server("nats-server", config=HUB_CONF.format(store=os.path.join(work, "hub"), leaf_port=leaf_port,
                                                               proxy_port=self.proxy.port))
        self.edge = Server(kind, config=EDGE_CONF.format(store=os.path.join(work, "edge"),
                                                         proxy_port=self.proxy.port))
        try:
            self.hub.__enter__()
            assert self.hub.proc.proc is not None
            wait_port(leaf_port, self.hub.proc.proc)
            self.edge.__enter__()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for s in (self.edge, self.hub):
            s.__exit__()
        self.proxy.stop()


async def _req(nc: Any, subject: str, body: Any, timeout: float = 2.0) -> dict[str, Any]:
    r = await nc.request(subject, json.dumps(body).encode(), timeout=timeout)
    return json.loads(r.data)  # type: ignore[no-any-return]


async def _count(nc: Any, stream: str) -> int:
    try:
        info = await _req(nc, f"$JS.API.STREAM.INFO.{stream}", {}, timeout=1)
    except Exception:  # a timeout while the other side is busy: not yet
        return -1
    return int(info.get("state", {}).get("messages", -1))


async def _until(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if await pred():
                return
        except Exception:  # the link is still coming up
            pass
        await asyncio.sleep(0.05)
    raise TimeoutError(what)


async def _fill(nc: Any, subject: str, stream: str, first: int, n: int) -> None:
    """n publishes into `stream` (plain publishes, flushed every 1000), until it holds first + n. The last one
    waits for its PubAck, which a server sends once it and (stores commit in order) every one before it are
    stored: the backlog is stored before the link comes back, as after a real outage, so the drain window does
    not also hold the origin's writing of it (edged counts uncommitted rows in its stream info)."""
    payload = b"x" * SIZE
    for i in range(n - 1):
        await nc.publish(f"{subject}.{i % 10}", payload)
        if i % 1000 == 999:
            await nc.flush()
    await nc.request(f"{subject}.{(n - 1) % 10}", payload, timeout=120)
    await _until(lambda: _has(nc, stream, first + n), 120, f"{stream} stored {first + n}")


async def _has(nc: Any, stream: str, n: int) -> bool:
    return await _count(nc, stream) >= n


async def catch_up(place: Place, what: str, n: int) -> dict[str, Any]:
    """One backlog of `n` (`what`: "telemetry", drained into the hub's source, or "commands", into the edge's
    mirror): seconds from the link back to the first message taken and to all of them, and the leaf's CPU."""
    import nats

    hc = await nats.connect(f"nats://app:app@127.0.0.1:{place.hub.port}", max_reconnect_attempts=-1,
                            reconnect_time_wait=0.2)
    ec = await nats.connect(place.edge.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        await _until(lambda: _linked(hc, ec), 20, "link up")
        if what == "telemetry":
            origin, follower, subject = ec, hc, "tele"
            await _req(ec, "$JS.API.STREAM.CREATE.telemetry", {"name": "telemetry", "subjects": ["tele.>"]})
            await _req(hc, "$JS.API.STREAM.CREATE.telemetry", {"name": "telemetry", "sources": [
                {"name": "telemetry", "external": {"api": "$JS.edge.API", "deliver": ""}}]})
        else:
            origin, follower, subject = hc, ec, "cmd"
            await _req(hc, "$JS.API.STREAM.CREATE.commands", {"name": "commands", "subjects": ["cmd.>"]})
            await _req(ec, "$JS.API.STREAM.CREATE.commands", {"name": "commands", "mirror": {
                "name": "commands", "external": {"api": "$JS.hub.API", "deliver": ""}}})
        await _fill(origin, subject, what, 0, 1)
        await _until(lambda: _has(follower, what, 1), 30, "in sync before the cut")
        await asyncio.to_thread(place.proxy.block)
        await _fill(origin, subject, what, 1, n)
        c0, back = place.edge.cpu(), time.monotonic()
        await asyncio.to_thread(place.proxy.unblock)
        started = None
        deadline = back + 300
        while time.monotonic() < deadline:
            got = await _count(follower, what)
            if started is None and got > 1:
                started = time.monotonic()
            if got >= n + 1:
                break
            await asyncio.sleep(0.02)
        done = time.monotonic()
        cpu = place.edge.cpu() - c0
        if got < n + 1:
            raise TimeoutError(f"{place.kind} {what}: {got - 1} of {n} after {done - back:.0f} s")
        start = (started or done) - back
        return {"resync_s": round(start, 2), "all_s": round(done - back, 2),
                "msgs_per_sec": round(n / max(done - (started or back), 1e-9)),
                "leaf_cpu_us": round(cpu / n * 1e6, 2)}
    finally:
        await ec.close()
        await hc.close()


async def _linked(hc: Any, ec: Any) -> bool:
    a = await _req(ec, "$JS.hub.API.INFO", {}, timeout=1)
    b = await _req(hc, "$JS.edge.API.INFO", {}, timeout=1)
    return "error" not in a and "error" not in b


def run(count: int = 100_000, reps: int = REPS) -> dict[str, Any]:
    """Each backlog `reps` times with each leaf kind, one place (hub + proxy + leaf) at a time, fresh for each
    run, the kinds alternating (round i starts with kind i % 2), so load from other processes falls on both
    alike. Per kind and backlog: the median of each figure, and every run under `runs`."""
    out: dict[str, Any] = {"count": count, "size": SIZE, "reps": reps}
    for what in ("telemetry", "commands"):
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
        for i in range(reps):
            for kind in (KINDS if i % 2 == 0 else KINDS[::-1]):
                place = Place(kind)
                try:
                    runs[kind].append(asyncio.run(asyncio.wait_for(catch_up(place, what, count), 600)))
                finally:
                    place.stop()
        for kind in KINDS:
            med: dict[str, Any] = {f: round(statistics.median(r[f] for r in runs[kind]), 2) for f in FIELDS}
            med["msgs_per_sec"] = round(med["msgs_per_sec"])
            med["runs"] = runs[kind]
            out.setdefault(kind, {})[what] = med
    return out


LABELS = {"telemetry": "telemetry → hub source", "commands": "commands → edge mirror"}


def run_report(report: Any) -> None:
    """Rows for `python -m bench`: per backlog, resync start, drain msg/s, the leaf's CPU per message."""
    n = 10_000 if report.quick else 100_000
    res = run(n, 1 if report.quick else REPS)
    e, s = res["edged"], res["nats-server"]
    for what in ("telemetry", "commands"):
        label = f"{LABELS[what]} {n // 1000}k"
        # the hub's source asks again on the hub's own retry schedule; edged's mirror is edged's to resync
        own = what == "commands"
        report.add("offl", f"{label}, resync start", "s", e[what]["resync_s"], s[what]["resync_s"],
                   higher_is_better=False, target="≤ 5 s" if own else "",
                   check=(lambda r: r.edged <= 5.0) if own else None)
        report.add("offl", f"{label}, drain", "msg/s", e[what]["msgs_per_sec"], s[what]["msgs_per_sec"],
                   target="≥ 1.0×", check=lambda r: r.ratio >= 1.0,
                   all_s={"edged": e[what]["all_s"], "nats-server": s[what]["all_s"]},
                   runs={"edged": e[what]["runs"], "nats-server": s[what]["runs"]})
        report.add("offl", f"{label}, leaf CPU", "µs/msg", e[what]["leaf_cpu_us"], s[what]["leaf_cpu_us"],
                   higher_is_better=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=REPS)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    res = run(a.count, a.reps)
    if a.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"offline catch-up, {a.count} msgs of {SIZE} B, same hub nats-server, link cut by a proxy; "
          f"medians of {a.reps} runs")
    print(f"{'backlog':<26}{'leaf':<13}{'resync s':>9}{'all s':>8}{'msg/s':>10}{'leaf µs/msg':>12}")
    for what in ("telemetry", "commands"):
        for kind in KINDS:
            r = res[kind][what]
            print(f"{LABELS[what]:<26}{kind:<13}{r['resync_s']:>9}{r['all_s']:>8}{r['msgs_per_sec']:>10,}"
                  f"{r['leaf_cpu_us']:>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
