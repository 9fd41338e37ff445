"""Account exports, imports and subject mappings, differential: the same config on nats-server and on
edged, the same observable result (who gets what on which subject, reply flows, response types,
"no responders", the config errors for an import the exporter does not export)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.errors import NoRespondersError

from tests.support.aio import run
from tests.support.servers import KINDS, ROOT, ServerProcess, nats_server_path

CONF = """
accounts {
  A: {
    users: [{user: a, password: a}]
    exports: [
      {service: "svc.>"}
      {service: "st.req", response_type: stream}
      {service: "slow.req", response_type: stream, response_threshold: "1s"}
      {service: "one.req"}
      {service: "in.>"}
      {service: "priv.req", accounts: [B]}
      {stream: "pub.>"}
      {stream: "ev.*.*"}
      {stream: "only.b", accounts: [B]}
    ]
    mappings: { "in.*": "svc.mapped.$1" }
  }
  B: {
    users: [{user: b, password: b}]
    imports: [
      {service: {account: A, subject: "svc.a"}, to: "my.a"}
      {service: {account: A, subject: "svc.w.*"}, to: "w.*"}
      {service: {account: A, subject: "st.req"}}
      {service: {account: A, subject: "slow.req"}}
      {service: {account: A, subject: "one.req"}}
      {service: {account: A, subject: "priv.req"}}
      {service: {account: A, subject: "in.x"}, to: "via.map"}
      {service: {account: A, subject: "svc.info"}, to: "inf"}
      {stream: {account: A, subject: "pub.>"}, prefix: "from_a"}
      {stream: {account: A, subject: "ev.*.*"}, to: "evt.$2.$1"}
      {stream: {account: A, subject: "only.b"}}
    ]
  }
  C: {
    users: [{user: c, password: c}]
    imports: [ {stream: {account: A, subject: "pub.>"}} ]
  }
}
mappings: {
  orders.*: "orders.central.{{wildcard(1)}}"
  split.a: [ {destination: split.one, weight: 50%}, {destination: split.two, weight: 50%} ]
  some.a: [ {destination: some.moved, weight: 40%} ]
}
# the global account ($G, where the server's mappings apply) gets its user here
authorization { users: [
  {user: g, password: g}
  {user: gp, password: gp, permissions: {publish: {allow: ["orders.*", "plain.>"]}}}
] }
"""


def _conf() -> str:
    return CONF


async def _connect(srv: ServerProcess, user: str) -> Any:
    return await nats.connect(f"nats://{user}:{user}@127.0.0.1:{srv.port}")


async def _collect(nc: Any, subject: str, got: list, queue: str = "") -> Any:
    async def cb(m: Any) -> None:
        got.append((m.subject, m.data.decode()))
    return await nc.subscribe(subject, queue=queue, cb=cb)


async def _settle(*ncs: Any) -> None:
    for nc in ncs:
        await nc.flush()
    await asyncio.sleep(0.2)


async def services(srv: ServerProcess) -> dict:
    a, b = await _connect(srv, "a"), await _connect(srv, "b")
    out: dict[str, Any] = {}
    try:
        async def echo(m: Any) -> None:
            await m.respond(f"{m.subject}|{m.reply[:4]}|{m.data.decode()}".encode())

        async def stream3(m: Any) -> None:
            for i in range(3):
                await a.publish(m.reply, f"part{i}".encode())

        infos: list = []

        async def info(m: Any) -> None:
            ri = json.loads((m.headers or {}).get("Nats-Request-Info", "{}"))
            infos.append((sorted(ri), ri.get("acc"), isinstance(ri.get("rtt", 0), int), m.headers.get("X-Mine")))
            await m.respond(b"")

        async def slow(m: Any) -> None:
            await a.publish(m.reply, b"early")
            await asyncio.sleep(2.5)  # past the export's response threshold: the route is gone
            await a.publish(m.reply, b"late")

        await a.subscribe("slow.req", cb=slow)
        await a.subscribe("svc.info", cb=info)
        await a.subscribe("svc.>", cb=echo)
        await a.subscribe("st.req", cb=stream3)
        await a.subscribe("one.req", cb=stream3)
        await a.subscribe("priv.req", cb=echo)
        await _settle(a, b)
        out["renamed"] = (await b.request("my.a", b"x", timeout=2)).data.decode()
        # nats-server tells the exporter who asks: Nats-Request-Info {"acc": .., "rtt": ..}, after the
        # request's own headers
        await b.request("inf", b"", timeout=2, headers={"X-Mine": "1"})
        await b.request("inf", b"", timeout=2)
        out["request info"] = infos
        out["wildcard"] = (await b.request("w.k1", b"y", timeout=2)).data.decode()
        out["accounts_list"] = (await b.request("priv.req", b"z", timeout=2)).data.decode()
        out["exporter_mapping"] = (await b.request("via.map", b"m", timeout=2)).data.decode()
        for subject in ("my.a.b", "svc.a", "nothing"):
            try:
                await b.request(subject, b"", timeout=1)
                out[f"nr {subject}"] = "answered"
            except NoRespondersError:
                out[f"nr {subject}"] = "no responders"
        for subject in ("st.req", "one.req", "slow.req"):
            got: list = []
            inbox = b.new_inbox()
            await _collect(b, inbox, got)
            await b.flush()
            await b.publish(subject, b"", reply=inbox)
            await _settle(b, a)
            if subject == "slow.req":
                await asyncio.sleep(3)
            out[f"type {subject}"] = [d for _, d in got]
        # the requester cannot answer itself through the exporter's _R_ subject
        out["exporter responders see _R_"] = out["renamed"].split("|")[1]
    finally:
        await a.close()
        await b.close()
    # no responders through an import whose service is gone
    b = await _connect(srv, "b")
    try:
        try:
            await b.request("my.a", b"x", timeout=1)
            out["gone"] = "answered"
        except NoRespondersError:
            out["gone"] = "no responders"
    finally:
        await b.close()
    return out


async def streams(srv: ServerProcess) -> dict:
    a, b, c = await _connect(srv, "a"), await _connect(srv, "b"), await _connect(srv, "c")
    out: dict[str, Any] = {}
    try:
        subs: dict[str, list] = {k: [] for k in ("b_all", "b_prefix_x", "b_evt", "b_only", "c_all", "b_q1", "b_q2",
                                                 "a_own")}
        await _collect(b, ">", subs["b_all"])
        await _collect(b, "from_a.pub.x.*", subs["b_prefix_x"])
        await _collect(b, "evt.*.one", subs["b_evt"])
        await _collect(b, "only.b", subs["b_only"])
        await _collect(c, ">", subs["c_all"])
        await _collect(b, "from_a.pub.q", subs["b_q1"], queue="grp")
        await _collect(b, "from_a.pub.q", subs["b_q2"], queue="grp")
        await _collect(a, "pub.>", subs["a_own"])
        await _settle(a, b, c)
        for subject in ("pub.x.1", "pub.y", "ev.one.two", "ev.one.x", "only.b", "other", "pub.q", "pub.q"):
            await a.publish(subject, subject.encode())
        await b.publish("pub.x.2", b"b's own")  # B's own subject space: never goes to A
        await _settle(a, b, c)
        for k, v in subs.items():
            out[k] = sorted(v)
        out["queue total"] = len(subs["b_q1"]) + len(subs["b_q2"])
        del out["b_q1"], out["b_q2"]
    finally:
        for nc in (a, b, c):
            await nc.close()
    return out


async def mappings(srv: ServerProcess) -> dict:
    g, a = await _connect(srv, "g"), await _connect(srv, "a")
    out: dict[str, Any] = {}
    try:
        got: list = []
        got_a: list = []
        await _collect(g, ">", got)
        await _collect(a, "svc.>", got_a)
        await _settle(g, a)
        await g.publish("orders.new", b"1")
        await g.publish("orders.central.x", b"2")
        await a.publish("in.q", b"3")  # account-level mapping in A
        await a.publish("orders.new", b"4")  # the server's mappings are the global account's only
        for _ in range(200):
            await g.publish("split.a", b"")
            await g.publish("some.a", b"")
        await _settle(g, a)
        out["plain"] = sorted(x for x in got if not x[0].startswith(("split.", "some.")))
        out["account"] = got_a
        counts: dict[str, int] = {}
        for s, _ in got:
            if s.startswith(("split.", "some.")):
                counts[s] = counts.get(s, 0) + 1
        out["weighted subjects"] = sorted(counts)
        out["weighted total"] = sum(counts.values())
        out["weighted spread"] = all(40 <= n <= 160 for n in counts.values())
        # publish permissions apply to the mapped subject
        errs: list = []

        async def on_err(e: Exception) -> None:
            errs.append(str(e))
        gp = await nats.connect(f"nats://gp:gp@127.0.0.1:{srv.port}", error_cb=on_err)
        got.clear()
        await gp.publish("orders.denied", b"")
        await gp.publish("plain.ok", b"")
        await gp.flush()
        await _settle(g)
        await gp.close()
        out["perms on mapped subject"] = (got, errs)
    finally:
        await g.close()
        await a.close()
    return out


def _observe(start_server: Callable[..., ServerProcess], scenario: Callable) -> dict[str, dict]:
    res = {}
    for kind in KINDS:
        srv = start_server(kind, config=_conf())
        res[kind] = run(scenario(srv), timeout=60)
    return res


@pytest.mark.parametrize("scenario", [services, streams, mappings], ids=lambda f: f.__name__)
def test_same_as_nats_server(start_server: Callable[..., ServerProcess], scenario: Callable) -> None:
    res = _observe(start_server, scenario)
    assert res["edged"] == res["nats-server"]


def test_the_expected_flows_happen(start_server: Callable[..., ServerProcess]) -> None:
    """Not only the same: the flows the config asks for (so two servers that both drop everything fail)."""
    srv = start_server("edged", config=_conf())
    s = run(services(srv), timeout=60)
    assert s["renamed"] == "svc.a|_R_.|x" and s["wildcard"] == "svc.w.k1|_R_.|y"
    assert s["exporter_mapping"] == "svc.mapped.x|_R_.|m" and s["gone"] == "no responders"
    assert s["type st.req"] == ["part0", "part1", "part2"] and s["type one.req"] == ["part0"]
    assert s["type slow.req"] == ["early"]
    assert s["request info"] == [(["acc", "rtt"], "B", True, "1"), (["acc", "rtt"], "B", True, None)]
    st = run(streams(srv), timeout=60)
    assert ("from_a.pub.x.1", "pub.x.1") in st["b_all"] and ("evt.two.one", "ev.one.two") in st["b_evt"]
    assert st["b_only"] == [("only.b", "only.b")] and st["queue total"] == 2
    assert ("pub.x.2", "b's own") not in st["a_own"]
    m = run(mappings(srv), timeout=60)
    assert ("orders.central.new", "1") in m["plain"] and m["account"] == [("svc.mapped.q", "3")]
    assert m["weighted subjects"] == ["some.a", "some.moved", "split.one", "split.two"] and m["weighted spread"]
    assert m["perms on mapped subject"] == ([("plain.ok", "")],
                                           ['nats: permissions violation for publish to "orders.central.denied"'])


BAD = """
accounts {
  A: { users: [{user: a, password: a}], exports: [{service: "svc.>"}, {stream: "pub.>", accounts: [C]}] }
  B: { users: [{user: b, password: b}], imports: [%s] }
  C: { users: [{user: c, password: c}] }
}
"""

BAD_IMPORTS = [
    ('{service: {account: A, subject: "other.x"}}', 'Error adding service import "other.x": service import not '
                                                    "authorized"),
    ('{stream: {account: A, subject: "pub.>"}}', 'Error adding stream import "pub.>": stream import not authorized'),
    ('{stream: {account: A, subject: "nope"}}', 'Error adding stream import "nope": stream import not authorized'),
    ('{service: {account: Z, subject: "svc.a"}}', '"Z" account not defined for service import'),
    ('{service: {account: A, subject: "svc.*"}, to: "my.x"}',
     'Error adding service import "svc.*": failed to create mapping transform for service import subject from '
     '"my.x" to "svc.*": invalid mapping destination: not using all of the token wildcard(s) in my.x'),
]


@pytest.mark.parametrize(("imp", "reason"), BAD_IMPORTS, ids=[r[:40] for _, r in BAD_IMPORTS])
def test_an_import_the_exporter_does_not_export_is_refused_alike(tmp_path: Path, imp: str, reason: str) -> None:
    (tmp_path / "x.conf").write_text(BAD % imp)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    ref = subprocess.run([nats_server_path(), "-t", "-c", "x.conf"], capture_output=True, text=True, cwd=tmp_path)
    ours = subprocess.run([sys.executable, "-m", "edged", "check", "-c", "x.conf"], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=30)
    assert ref.returncode != 0 and f"x.conf:2:1: {reason}" in ref.stderr, ref.stderr
    assert ours.returncode != 0 and f"edged: configuration error: x.conf:2:1: {reason}" in ours.stderr.splitlines(), \
        ours.stderr


def test_bad_mappings_are_refused_alike(tmp_path: Path) -> None:
    (tmp_path / "m.conf").write_text('mappings { "m.*": "n.$2", "k": [{destination: k.a, weight: 60%}, '
                                     '{destination: k.b, weight: 60%}], "x.y": "z.$1" }\n')
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    ref = subprocess.run([nats_server_path(), "-t", "-c", "m.conf"], capture_output=True, text=True, cwd=tmp_path)
    ours = subprocess.run([sys.executable, "-m", "edged", "check", "-c", "m.conf"], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=30)
    want = [ln.removeprefix("nats-server: ") for ln in ref.stderr.splitlines() if ln]
    assert len(want) == 3 and ref.returncode != 0
    # nats-server walks the block in Go's random map order, edged in file order
    assert [ln.removeprefix("edged: configuration error: ") for ln in ours.stderr.splitlines()] == sorted(
        want, key=lambda ln: int(ln.split(":")[2]))


CYCLES = [
    ('A: { users: [{user: a, password: a}], exports: [{stream: "pub.>"}] }\n'
     '  B: { users: [{user: b, password: b}], imports: [{stream: {account: A, subject: "pub.>"}}, '
     '{stream: {account: A, subject: "pub.>"}}] }', 'Error adding stream import "pub.>": stream import already exists'),
    ('A: { users: [{user: a, password: a}], exports: [{service: "svc.>"}], imports: [{service: {account: B, '
     'subject: "svc.>"}}] }\n  B: { users: [{user: b, password: b}], exports: [{service: "svc.>"}], imports: '
     '[{service: {account: A, subject: "svc.>"}}] }', 'Error adding service import "svc.>": import forms a cycle'),
    ('A: { users: [{user: a, password: a}], exports: [{stream: "pub.>"}], imports: [{stream: {account: B, '
     'subject: "pub.>"}}] }\n  B: { users: [{user: b, password: b}], exports: [{stream: "pub.>"}], imports: '
     '[{stream: {account: A, subject: "pub.>"}}] }', 'Error adding stream import "pub.>": import forms a cycle'),
    ('A: { users: [{user: a, password: a}], exports: [{service: "svc.>"}] }\n'
     '  B: { users: [{user: b, password: b}], imports: [{service: {account: A, subject: "svc.a"}}, '
     '{service: {account: A, subject: "svc.a"}}] }',
     'Duplicate service import subject "svc.a", previously used in import for account "A", subject "svc.a"'),
]


@pytest.mark.parametrize(("accounts", "reason"), CYCLES, ids=[r[:40] for _, r in CYCLES])
def test_duplicate_and_cyclic_imports_are_refused_alike(tmp_path: Path, accounts: str, reason: str) -> None:
    (tmp_path / "c.conf").write_text(f"port: 4222\naccounts {{\n  {accounts}\n}}\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    ref = subprocess.run([nats_server_path(), "-t", "-c", "c.conf"], capture_output=True, text=True, cwd=tmp_path)
    ours = subprocess.run([sys.executable, "-m", "edged", "check", "-c", "c.conf"], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=30)
    # the same text; the line:col of a duplicate service import differs (nats-server names the end of the list)
    assert ref.returncode != 0 and ref.stderr.split(": ", 2)[2].strip() == reason, ref.stderr
    assert ours.returncode != 0 and ours.stderr.strip().endswith(reason), ours.stderr


def test_accountz_lists_imports_and_mappings_alike(start_server: Callable[..., ServerProcess]) -> None:
    import json as _json
    import urllib.request

    from tests.support.servers import free_port

    docs = {}
    for kind in KINDS:
        srv = start_server(kind, config=CONF, http_port=free_port())
        docs[kind] = []
        for acc in ("B", "A", "$G"):
            with urllib.request.urlopen(f"http://127.0.0.1:{srv.http_port}/accountz?acc={acc}", timeout=5) as r:
                d = _json.load(r)["account_detail"]
            # nats-server also lists the system account's imports it adds to every account (edged has none);
            # service imports come in nats-server's map order
            docs[kind].append((sorted((i for i in d.get("imports", []) if i["account"] != "$SYS"),
                                      key=lambda i: (i["type"], i["subject"])), d.get("mappings"),
                               sorted(d.get("exports", []), key=lambda e: (e["type"], e["subject"]))))
    assert docs["edged"] == docs["nats-server"]
    assert any(i.get("local_subject") == "from_a.pub.>" for i in docs["edged"][0][0])
    assert docs["edged"][1][1] == {"in.*": [{"subject": "svc.mapped.$1", "weight": 100}]}
    assert docs["edged"][2][1]["some.a"] == [{"subject": "some.moved", "weight": 40}, {"subject": "some.a", "weight": 100}]


SHARE = """
server_name: srv1
accounts {
  A: { users: [{user: a, password: a}], exports: [{service: "svc.>"}] }
  B: { users: [{user: b, password: b}], imports: [{service: {account: A, subject: "svc.a"}, share: true}] }
}
"""


async def shared_info(srv: ServerProcess) -> dict:
    a = await nats.connect(f"nats://a:a@127.0.0.1:{srv.port}")
    b = await nats.connect(f"nats://b:b@127.0.0.1:{srv.port}", name="bee")
    try:
        seen: list = []

        async def h(m: Any) -> None:
            seen.append(json.loads(m.headers["Nats-Request-Info"]))
            await m.respond(b"")
        await a.subscribe("svc.a", cb=h)
        await a.flush()
        await b.request("svc.a", b"", timeout=2)
    finally:
        await a.close()
        await b.close()
    ri = seen[0]
    # times, ids and the RTT differ between two servers; their presence and the rest must not
    return {"keys": list(ri), **{k: v for k, v in ri.items() if k not in ("start", "id", "rtt")}}


def test_a_shared_import_tells_the_exporter_who_asks_like_nats_server(
        start_server: Callable[..., ServerProcess]) -> None:
    res = {kind: run(shared_info(start_server(kind, config=SHARE)), timeout=30) for kind in KINDS}
    assert res["edged"] == res["nats-server"]
    assert res["edged"]["acc"] == "B" and res["edged"]["name"] == "bee" and res["edged"]["server"] == "srv1"
