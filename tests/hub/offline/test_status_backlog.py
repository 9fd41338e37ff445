"""`edged status`, /jsz `edged_backlog` and the /metrics backlog gauges, against a real edged linked to a
real nats-server hub through a TCPProxy: a mirror of a hub stream and a hub stream sourcing an edge stream;
the link is cut while both sides keep publishing, then comes back slow: the mirror's lag and the hub's
pending on edged appear (with bytes, age, rate, drain estimate), and go back to 0 once everything is taken."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import nats
import pytest

from tests.support.aio import eventually, run
from tests.support.jsutil import api as req
from tests.support.leaf import Hub, hub_binary
from tests.support.servers import ROOT, ServerProcess, free_port
from tests.support.tcpproxy import TCPProxy

HUB_CONF = """
server_name: hub1
jetstream { store_dir: "./js", domain: hub }
leafnodes { port: $LEAF_PORT }
accounts { APP { jetstream: enabled, users: [ {user: leaf, password: s3cret}, {user: app, password: app} ] } }
"""

EDGE_CONF = """
server_name: edge1
jetstream {{ store_dir: "{store}", domain: leaf }}
leafnodes {{ reconnect: 1s, remotes: [ {{ urls: ["nats://leaf:s3cret@127.0.0.1:{port}"], account: APP,
  ignore_discovered_urls: true }} ] }}
accounts {{ APP {{ jetstream: enabled, users: [ {{user: app, password: app}} ] }} }}
"""

MIRROR = {"name": "commands", "mirror": {"name": "commands", "external": {"api": "$JS.hub.API", "deliver": ""}}}
SOURCE = {"name": "fleet", "sources": [{"name": "telemetry", "external": {"api": "$JS.leaf.API", "deliver": ""}}]}


LAST: list[Any] = []


@pytest.fixture(scope="module")
def hub_bin() -> str:
    """One hub version: the figures are edged's own, the hub is only their peer."""
    return hub_binary("2.15")


def status(port: int, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edged", "status", "-m", str(port), *extra], cwd=ROOT,
                          capture_output=True, text=True, timeout=20)


def status_json(port: int) -> dict[str, Any]:
    p = status(port, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)  # type: ignore[no-any-return]


def the_mirror(doc: dict[str, Any]) -> dict[str, Any]:
    return next(s for s in doc["syncs"] if s["stream"] == "commands" and s["kind"] == "mirror")


def hub_consumer(doc: dict[str, Any]) -> dict[str, Any] | None:
    return next((o for o in doc["origin_consumers"] if o["stream"] == "telemetry"), None)


async def until(what: Callable[[], Any], timeout: float, msg: str) -> Any:
    """aio.eventually, and what `edged status` last said when it times out."""
    try:
        return await eventually(what, timeout, msg, interval=0.1)
    except AssertionError as e:
        raise AssertionError(f"{e} (status: {LAST})") from None


async def count(nc: Any, stream: str) -> int:
    return int((await req(nc, f"$JS.API.STREAM.INFO.{stream}", {}, timeout=1))["state"]["messages"])


def test_status_shows_backlogs_appear_and_drain(hub_bin: str, start_hub: Callable[..., Hub],
                                               start_server: Callable[..., ServerProcess]) -> None:
    hub = start_hub(hub_bin, HUB_CONF)
    with TCPProxy("127.0.0.1", hub.leaf_port) as proxy:
        mport = free_port()
        edge = start_server("edged", config=EDGE_CONF.format(store=tempfile.mkdtemp(prefix="status-"),
                                                             port=proxy.port), http_port=mport)

        async def go() -> None:
            hc = await nats.connect(f"nats://app:app@127.0.0.1:{hub.port}", max_reconnect_attempts=-1)
            ec = await nats.connect(f"nats://app:app@127.0.0.1:{edge.port}", max_reconnect_attempts=-1)
            loop = asyncio.get_running_loop()
            try:
                await req(hc, "$JS.API.STREAM.CREATE.commands", {"name": "commands", "subjects": ["cmd.>"]})
                await req(ec, "$JS.API.STREAM.CREATE.telemetry", {"name": "telemetry", "subjects": ["tm.>"]})
                await until(lambda: req(ec, "$JS.hub.API.INFO", {}, timeout=1), 15, "edge reaches the hub")
                assert "error" not in await req(ec, "$JS.API.STREAM.CREATE.commands", MIRROR)
                await until(lambda: req(hc, "$JS.leaf.API.INFO", {}, timeout=1), 15, "hub reaches the edge")
                assert "error" not in await req(hc, "$JS.API.STREAM.CREATE.fleet", SOURCE)
                for i in range(5):
                    await hc.jetstream().publish(f"cmd.d{i % 2}", b"c%d" % i)
                    await ec.jetstream().publish(f"tm.d{i % 2}", b"t%d" % i)
                await until(lambda: _is(count(ec, "commands"), 5), 15, "mirror synced")
                await until(lambda: _is(count(hc, "fleet"), 5), 15, "hub source synced")

                doc = await loop.run_in_executor(None, status_json, mport)
                remote = doc["leaf_remotes"][0]
                assert remote["connected"] and remote["account"] == "APP" and remote["rtt_seconds"] is not None
                m = the_mirror(doc)
                assert (m["msgs_behind"], m["bytes_behind"], m["syncing"], m["api"]) == (0, 0, True, "$JS.hub.API")
                assert m["origin_seq"] == 5 and m["last_contact_seconds"] is not None
                assert m["last_contact_seconds"] < 5 and m["drain_seconds"] == 0
                o = hub_consumer(doc)
                assert o is not None and o["active"] and o["pending_msgs"] == 0 and o["delivered_stream_seq"] == 5

                # the outage: both sides keep publishing
                proxy.block()
                payload = b"x" * 400
                for i in range(3000):
                    await hc.jetstream().publish(f"cmd.d{i % 2}", payload)
                for i in range(40):
                    await ec.jetstream().publish(f"tm.d{i % 2}", b"offline %d" % i)
                doc = await until(lambda: _down(loop, mport), 15, "status shows the link down")
                remote = doc["leaf_remotes"][0]
                assert remote["rtt_seconds"] is None and remote["since"] != "0001-01-01T00:00:00Z"
                o = hub_consumer(doc)
                assert o is not None and o["pending_msgs"] == 40 and o["pending_bytes"] > 0
                table = (await loop.run_in_executor(None, status, mport)).stdout
                assert "DOWN" in table and "telemetry" in table and "$JS.hub.API" in table

                # back, but slow: the mirror's lag shows, with its bytes, age, rate and estimate
                proxy.rate = 60_000
                proxy.unblock()
                doc = await until(lambda: _lagging(loop, mport), 30, "the mirror's lag shows")
                m = the_mirror(doc)
                assert m["bytes_behind"] > m["msgs_behind"] * 100 and m["oldest_age_seconds"] > 0
                doc = await until(lambda: _rated(loop, mport), 20, "a rate and a drain estimate")
                m = the_mirror(doc)
                assert m["rate_msgs_per_second"] > 0 and m["drain_seconds"] > 0
                table = (await loop.run_in_executor(None, status, mport)).stdout
                row = next(ln for ln in table.splitlines() if ln.startswith("APP > commands"))
                assert "mirror" in row and "/s" in row

                # full speed: everything taken, the figures back to 0
                proxy.rate = None
                await until(lambda: _is(count(ec, "commands"), 3005), 60, "mirror caught up")
                await until(lambda: _is(count(hc, "fleet"), 45), 30, "hub source caught up")
                doc = await until(lambda: _drained(loop, mport), 15, "figures back to 0")
                assert doc["leaf_remotes"][0]["connected"]
                metrics = await loop.run_in_executor(None, _get, mport, "/metrics")
                lab = 'account="APP",stream="commands",kind="mirror",source="commands"'
                assert f"edged_sync_behind_messages{{{lab}}} 0" in metrics
                assert f"edged_sync_active{{{lab}}} 1" in metrics
                assert 'edged_origin_pending_messages{account="APP",stream="telemetry",filter=">"} 0' in metrics
                assert 'edged_leaf_remote_connected{account="APP"' in metrics
                jsz = json.loads(await loop.run_in_executor(None, _get, mport, "/jsz"))
                assert jsz["streams"] == 2 and "edged_backlog" in jsz  # nats-server's fields, and edged's
            finally:
                await hc.close()
                await ec.close()

        run(go(), timeout=180)


def test_status_when_the_port_does_not_answer() -> None:
    p = status(free_port())
    assert p.returncode == 1 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("edged status: cannot read the monitoring port at http://127.0.0.1:")


def _get(port: int, path: str) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.read().decode()


async def _is(n: Any, want: int) -> bool:
    return await n >= want  # type: ignore[no-any-return]


async def _down(loop: Any, port: int) -> dict[str, Any] | None:
    doc = await loop.run_in_executor(None, status_json, port)
    o = hub_consumer(doc)
    ok = not doc["leaf_remotes"][0]["connected"] and o is not None and o["pending_msgs"] == 40
    return doc if ok else None


async def _lagging(loop: Any, port: int) -> dict[str, Any] | None:
    doc = await loop.run_in_executor(None, status_json, port)
    LAST.append((the_mirror(doc)["msgs_behind"], the_mirror(doc)["origin_seq"], doc["leaf_remotes"][0]["url"]))
    return doc if the_mirror(doc)["msgs_behind"] > 100 else None


async def _rated(loop: Any, port: int) -> dict[str, Any] | None:
    doc = await loop.run_in_executor(None, status_json, port)
    m = the_mirror(doc)
    return doc if m["msgs_behind"] > 0 and m["rate_msgs_per_second"] and m["drain_seconds"] else None


async def _drained(loop: Any, port: int) -> dict[str, Any] | None:
    doc = await loop.run_in_executor(None, status_json, port)
    m, o = the_mirror(doc), hub_consumer(doc)
    ok = m["msgs_behind"] == 0 and m["oldest_age_seconds"] == 0 and o is not None and o["pending_msgs"] == 0
    return doc if ok else None
