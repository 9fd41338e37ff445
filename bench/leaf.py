"""Leafnode link throughput: messages/s through the link (edge publisher -> hub subscriber and hub publisher
-> edge subscriber), edged as the leaf side by side with a nats-server leaf in the same place.

Raw-socket publisher and subscriber (pre-built PUB batches, byte counting) so the client is not the
bottleneck. Run: `python -m bench.leaf [--count N] [--size S]`.
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


async def measure(edge_port: int, hub_port: int, count: int, size: int) -> dict[str, Any]:
    up = await one_direction(edge_port, hub_port, ("", ""), ("app", "app"), count, size, "bench.up")
    down = await one_direction(hub_port, edge_port, ("app", "app"), ("", ""), count, size, "bench.down")
    return {"edge_to_hub": up, "hub_to_edge": down}


def run(count: int = 200_000, size: int = 128) -> dict[str, Any]:
    """Both leaf implementations against the same hub binary; returns figures and ratios."""
    work = tempfile.mkdtemp(prefix="bench-leaf-")
    results: dict[str, Any] = {"count": count, "size": size}
    for kind in ("nats-server", "edged"):
        hub_port, leaf_port, edge_port = free_port(), free_port(), free_port()
        d = os.path.join(work, kind)
        os.makedirs(d)
        with open(os.path.join(d, "hub.conf"), "w") as f:
            f.write(HUB_CONF.format(leaf_port=leaf_port))
        with open(os.path.join(d, "leaf.conf"), "w") as f:
            f.write(LEAF_CONF.format(leaf_port=leaf_port))
        hub = Proc([nats_server(), "-a", "127.0.0.1", "-p", str(hub_port), "-c", "hub.conf"], hub_port, d)
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        if kind == "nats-server":
            cmd = [nats_server(), "-a", "127.0.0.1", "-p", str(edge_port), "-c", "leaf.conf"]
        else:
            cmd = _edged_cmd(edge_port, leaf_port, "leaf.conf")
        edge = Proc(cmd, edge_port, d, env)
        try:
            time.sleep(1.0)  # let the link come up
            results[kind] = asyncio.run(measure(edge_port, hub_port, count, size))
        finally:
            edge.stop()
            hub.stop()
    for k in ("edge_to_hub", "hub_to_edge"):
        ref = results["nats-server"][k]["msgs_per_sec"] or 1
        results[f"ratio_{k}"] = round(results["edged"][k]["msgs_per_sec"] / ref, 3)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    res = run(a.count, a.size)
    if a.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"leafnode link, {a.count} msgs of {a.size} B (raw clients, same hub nats-server)")
    print(f"{'direction':<14}{'nats-server leaf':>20}{'edged leaf':>16}{'ratio':>8}")
    for k, label in (("edge_to_hub", "edge -> hub"), ("hub_to_edge", "hub -> edge")):
        ns, ed = res["nats-server"][k], res["edged"][k]
        lost = "" if ed["received"] == ed["sent"] else f"  (edged lost {ed['sent'] - ed['received']})"
        print(f"{label:<14}{ns['msgs_per_sec']:>16,} m/s{ed['msgs_per_sec']:>12,} m/s{res['ratio_' + k]:>8.2f}{lost}")
    return 0



def run_report(report: Any) -> None:
    """Rows for `python -m bench` (raw-socket clients; target >= 0.8x the nats-server leaf)."""
    res = run(20_000 if report.quick else 200_000, 128)
    for k, label in (("edge_to_hub", "link edge → hub 128 B"), ("hub_to_edge", "link hub → edge 128 B")):
        report.add("leaf", label, "msg/s", res["edged"][k]["msgs_per_sec"], res["nats-server"][k]["msgs_per_sec"],
                   target="≥ 0.8×", check=lambda r: r.ratio >= 0.8)

if __name__ == "__main__":
    sys.exit(main())
