"""Leafnode link throughput: messages/s through the link (edge publisher -> hub subscriber and hub publisher
-> edge subscriber), edged as the leaf side by side with a nats-server leaf in the same place.

Two kinds of rows:
- raw-socket publisher and subscriber (pre-built PUB batches, byte counting), so the client is not the
  bottleneck: saturation throughput of the link, target >= 0.8x the nats-server leaf;
- the nats-py publisher and subscriber processes of issue 2's core benchmark (bench/core.py): a single
  nats-py process is the limit for both leaves, so the figure is the leaf's CPU us per message.

Both pairs (hub + edged leaf, hub + nats-server leaf) run at once and the runs alternate between them.
Run: `python -m bench.leaf [--count N] [--size S] [--reps R]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import cpu_seconds

ROOT = Path(__file__).resolve().parent.parent

HUB_CONF = """
server_name: hub
leafnodes {{ port: {leaf_port} }}
accounts {{ APP {{ users: [ {{user: leaf, password: s3cret}}, {{user: app, password: app}} ] }} }}
"""

LEAF_CONF = """
server_name: edge
leafnodes {{ remotes: [ {{ urls: ["nats://leaf:s3cret@127.0.0.1:{leaf_port}"] }} ] }}
"""

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nats_server() -> str:
    p = Path(sys.executable).parent / "nats-server"
    return str(p) if p.exists() else (shutil.which("nats-server") or "nats-server")


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"port {port} not open")


class Proc:
    def __init__(self, cmd: list[str], port: int, cwd: str, env: dict[str, str] | None = None) -> None:
        self.log = open(os.path.join(cwd, f"p{port}.log"), "wb")
        self.p = subprocess.Popen(cmd, cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        wait_port(port, self.p)

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
        self.log.close()


def _edged_cmd(port: int, leaf_port: int, conf: str) -> list[str]:
    return [sys.executable, "-m", "edged", "run", "-a", "127.0.0.1", "-p", str(port), "-c", conf]


# ------------------------------------------------------------------------------------ raw clients


async def raw_connect(port: int, user: str = "", password: str = "") -> tuple[asyncio.StreamReader,
                                                                                  asyncio.StreamWriter]:
    r, w = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
    await r.readline()  # INFO
    c: dict[str, Any] = {"verbose": False, "pedantic": False, "headers": True, "protocol": 1, "lang": "bench"}
    if user:
        c["user"], c["pass"] = user, password
    w.write(b"CONNECT " + json.dumps(c).encode() + b"\r\nPING\r\n")
    await w.drain()
    while True:
        line = await r.readline()
        if line.startswith(b"PONG"):
            return r, w
        if line.startswith(b"-ERR"):
            raise RuntimeError(line.decode())


class Counter:
    """Counts fixed-size MSG frames by bytes; PINGs from the server are answered."""

    def __init__(self, frame: int) -> None:
        self.frame = frame
        self.bytes = 0
        self.last = 0.0

    @property
    def n(self) -> int:
        return self.bytes // self.frame

    async def run(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            data = await r.read(1 << 20)
            if not data:
                return
            self.bytes += len(data)
            self.last = time.monotonic()


async def one_direction(pub_port: int, sub_port: int, pub_auth: tuple[str, str], sub_auth: tuple[str, str],
                        count: int, size: int, subject: str) -> dict[str, Any]:
    payload = b"x" * size
    sr, sw = await raw_connect(sub_port, *sub_auth)
    sw.write(f"SUB {subject} 1\r\n".encode())
    await sw.drain()
    frame = len(f"MSG {subject} 1 {size}\r\n".encode()) + size + 2
    ctr = Counter(frame)
    reader = asyncio.ensure_future(ctr.run(sr, sw))
    pr, pw = await raw_connect(pub_port, *pub_auth)
    one = f"PUB {subject} {size}\r\n".encode() + payload + b"\r\n"
    # wait for interest to cross the link
    deadline = time.monotonic() + 10
    while ctr.bytes == 0:
        if time.monotonic() > deadline:
            raise TimeoutError("interest did not cross the link")
        pw.write(one)
        await pw.drain()
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    ctr.bytes = 0
    batch = one * 1000
    t0 = time.monotonic()
    sent = 0
    while sent < count:
        k = min(1000, count - sent)
        pw.write(batch if k == 1000 else one * k)
        sent += k
        await pw.drain()
    deadline = time.monotonic() + 60
    while ctr.n < count and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
        if ctr.last and time.monotonic() - ctr.last > 5:
            break
    got = ctr.n
    elapsed = max((ctr.last or time.monotonic()) - t0, 1e-9)
    reader.cancel()
    for w in (sw, pw):
        w.close()
    return {"sent": count, "received": got, "seconds": round(elapsed, 3), "msgs_per_sec": round(got / elapsed)}


class Pair:
    """A hub nats-server and a leaf (`kind`: edged or nats-server) linked to it, each on free ports."""

    def __init__(self, kind: str, work: str) -> None:
        self.kind = kind
        self.hub_port, leaf_port, self.edge_port = free_port(), free_port(), free_port()
        d = os.path.join(work, kind)
        os.makedirs(d)
        with open(os.path.join(d, "hub.conf"), "w") as f:
            f.write(HUB_CONF.format(leaf_port=leaf_port))
        with open(os.path.join(d, "leaf.conf"), "w") as f:
            f.write(LEAF_CONF.format(leaf_port=leaf_port))
        self.hub = Proc([nats_server(), "-a", "127.0.0.1", "-p", str(self.hub_port), "-c", "hub.conf"],
                        self.hub_port, d)
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        if kind == "nats-server":
            cmd = [nats_server(), "-a", "127.0.0.1", "-p", str(self.edge_port), "-c", "leaf.conf"]
        else:
            cmd = _edged_cmd(self.edge_port, leaf_port, "leaf.conf")
        try:
            self.edge = Proc(cmd, self.edge_port, d, env)
        except BaseException:
            self.hub.stop()
            raise

    @property
    def edge_pid(self) -> int:
        return self.edge.p.pid

    def ends(self, direction: str) -> tuple[tuple[int, tuple[str, str]], tuple[int, tuple[str, str]]]:
        """((publisher port, auth), (subscriber port, auth)) for "edge_to_hub" or "hub_to_edge"."""
        edge, hub = (self.edge_port, ("", "")), (self.hub_port, ("app", "app"))
        return (edge, hub) if direction == "edge_to_hub" else (hub, edge)

    def stop(self) -> None:
        self.edge.stop()
        self.hub.stop()


DIRECTIONS = ("edge_to_hub", "hub_to_edge")


def raw_run(pair: Pair, direction: str, count: int, size: int) -> dict[str, Any]:
    """One raw-socket measurement, with the leaf's CPU us per message over it."""
    (pp, pa), (sp, sa) = pair.ends(direction)
    c0 = cpu_seconds(pair.edge_pid)
    subject = "bench.up" if direction == "edge_to_hub" else "bench.down"
    res = asyncio.run(one_direction(pp, sp, pa, sa, count, size, subject))
    res["leaf_cpu_us"] = round((cpu_seconds(pair.edge_pid) - c0) / max(res["received"], 1) * 1e6, 3)
    return res


async def _interest_crossed(pub: tuple[int, tuple[str, str]], sub: tuple[int, tuple[str, str]], subject: str,
                            timeout: float = 10.0) -> None:
    """Wait until a subscription made on the subscriber's side after `subject`'s has crossed the link:
    interest goes over the link in order, so `subject`'s has crossed too."""
    probe = subject + "_probe"
    sr, sw = await raw_connect(sub[0], *sub[1])
    pr, pw = await raw_connect(pub[0], *pub[1])
    try:
        sw.write(f"SUB {probe} 1\r\nPING\r\n".encode())
        await sw.drain()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pw.write(f"PUB {probe} 0\r\n\r\n".encode())
            await pw.drain()
            try:
                if b"MSG " in await asyncio.wait_for(sr.read(1 << 16), 0.05):
                    return
            except TimeoutError:
                pass
        raise TimeoutError("interest did not cross the link")
    finally:
        sw.close()
        pw.close()


def natspy_run(pair: Pair, direction: str, count: int, size: int) -> dict[str, Any]:
    """Issue 2's pub->sub with nats-py client processes, through the link: deliveries/s from the first
    publish to the last arrival, and the leaf's CPU us per delivered message over that window."""
    from bench.core import CTX, Procs, _publisher, _subscriber

    pub, sub = pair.ends(direction)

    def url(end: tuple[int, tuple[str, str]]) -> str:
        user, password = end[1]
        return f"nats://{user}:{password}@127.0.0.1:{end[0]}" if user else f"nats://127.0.0.1:{end[0]}"

    subject = f"bench.py.{direction}"
    out, go = CTX.Queue(), CTX.Event()
    with Procs() as ps:
        ps.start(_subscriber, url(sub), subject, 1, count, out)
        asyncio.run(_interest_crossed(pub, sub, subject))
        ps.start(_publisher, url(pub), subject, count, size, go, out)
        c0 = cpu_seconds(pair.edge_pid)
        go.set()
        res = {item[0]: item for item in (out.get(timeout=900), out.get(timeout=900))}
        cpu = cpu_seconds(pair.edge_pid) - c0
    _, t0, _t1 = res["pub"]
    _, got, last, _sub_cpu = res["sub"]
    return {"sent": count, "received": got, "msgs_per_sec": round(got / max(last - t0, 1e-9)),
            "leaf_cpu_us": round(cpu / max(got, 1) * 1e6, 3)}


def run(count: int = 200_000, size: int = 128, py_count: int = 200_000, py_size: int = 16, reps: int = 3,
        natspy: bool = True) -> dict[str, Any]:
    """Both leaf implementations, each with its own hub (same binary), measured in alternating runs;
    for each measurement the best run (highest msg/s) and every run's figures."""
    from bench.harness import interleaved

    work = tempfile.mkdtemp(prefix="bench-leaf-")
    pairs: dict[str, Pair] = {}
    results: dict[str, Any] = {"count": count, "size": size, "py_count": py_count, "py_size": py_size,
                               "reps": reps}
    try:
        for kind in ("nats-server", "edged"):
            pairs[kind] = Pair(kind, work)
        time.sleep(1.0)  # let the links come up
        measures: list[tuple[str, Any]] = [("raw", lambda p, d: raw_run(p, d, count, size))]
        if natspy:
            measures.append(("natspy", lambda p, d: natspy_run(p, d, py_count, py_size)))
        for name, fn in measures:
            for d in DIRECTIONS:
                runs = interleaved(pairs, reps, lambda k, p, fn=fn, d=d: fn(p, d))
                for kind, lst in runs.items():
                    top = max(lst, key=lambda r: r["msgs_per_sec"])
                    results.setdefault(kind, {}).setdefault(name, {})[d] = top | {
                        "runs": [r["msgs_per_sec"] for r in lst], "cpu_runs": [r["leaf_cpu_us"] for r in lst]}
    finally:
        for p in pairs.values():
            p.stop()
    for name in ("raw", "natspy"):
        if name not in results["edged"]:
            continue
        for d in DIRECTIONS:
            ref = results["nats-server"][name][d]["msgs_per_sec"] or 1
            results[f"ratio_{name}_{d}"] = round(results["edged"][name][d]["msgs_per_sec"] / ref, 3)
    return results


LABELS = {"edge_to_hub": "edge → hub", "hub_to_edge": "hub → edge"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--count", type=int, default=200_000, help="raw-socket messages per run")
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--py-count", type=int, default=200_000, help="nats-py messages per run (16 B)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-natspy", action="store_true", help="raw-socket rows only")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    res = run(a.count, a.size, a.py_count, 16, a.reps, not a.no_natspy)
    if a.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"leafnode link, same hub nats-server; raw: {a.count} msgs of {a.size} B, nats-py: {a.py_count} msgs "
          f"of 16 B; best of {a.reps}")
    print(f"{'clients':<8}{'direction':<12}{'nats-server leaf':>22}{'edged leaf':>22}{'ratio':>7}")
    for name in ("raw", "natspy"):
        if name not in res["edged"]:
            continue
        for d in DIRECTIONS:
            ns, ed = res["nats-server"][name][d], res["edged"][name][d]
            lost = "" if ed["received"] == ed["sent"] else f"  (edged lost {ed['sent'] - ed['received']})"
            print(f"{name:<8}{LABELS[d]:<12}{ns['msgs_per_sec']:>11,} {ns['leaf_cpu_us']:>5.2f} µs"
                  f"{ed['msgs_per_sec']:>11,} {ed['leaf_cpu_us']:>5.2f} µs{res[f'ratio_{name}_{d}']:>7.2f}{lost}")
    return 0


def run_report(report: Any) -> None:
    """Rows for `python -m bench`: raw-socket saturation throughput (target >= 0.8x the nats-server leaf),
    then the leaf's CPU per message with issue 2's nats-py clients (their msg/s in the row's JSON)."""
    q = report.quick
    res = run(20_000 if q else 200_000, 128, 30_000 if q else 200_000, 16, 1 if q else 3)
    e, n = res["edged"], res["nats-server"]
    for d in DIRECTIONS:
        report.add("leaf", f"link {LABELS[d]} 128 B", "msg/s", e["raw"][d]["msgs_per_sec"],
                   n["raw"][d]["msgs_per_sec"], target="≥ 0.8×", check=lambda r: r.ratio >= 0.8,
                   runs={"edged": e["raw"][d]["runs"], "nats-server": n["raw"][d]["runs"]},
                   leaf_cpu_us={"edged": e["raw"][d]["leaf_cpu_us"], "nats-server": n["raw"][d]["leaf_cpu_us"]})
    for d in DIRECTIONS:
        ed, ns = e["natspy"][d], n["natspy"][d]
        report.add("leaf", f"nats-py {LABELS[d]} 16 B, leaf CPU", "µs/msg", ed["leaf_cpu_us"], ns["leaf_cpu_us"],
                   higher_is_better=False, msgs_per_sec={"edged": ed["msgs_per_sec"], "nats-server": ns["msgs_per_sec"]},
                   runs={"edged": ed["runs"], "nats-server": ns["runs"]},
                   cpu_runs={"edged": ed["cpu_runs"], "nats-server": ns["cpu_runs"]},
                   lost={"edged": ed["sent"] - ed["received"], "nats-server": ns["sent"] - ns["received"]})
        report.note(f"leaf nats-py {LABELS[d]}: {ed['msgs_per_sec']:,} msg/s through edged, "
                    f"{ns['msgs_per_sec']:,} through a nats-server leaf (one nats-py process is the limit)")


if __name__ == "__main__":
    sys.exit(main())
