"""Monitoring: nats-server's HTTP endpoints and $SYS.REQ.SERVER requests, checked against the real nats-server.

Pure formatting helpers are unit/property-tested; endpoints are exercised over real sockets with real
nats-py clients against an in-process edged, and side by side with a nats-server subprocess.
"""

from __future__ import annotations

import asyncio
import json
import re
import time

import nats
import pytest
from hypothesis import given
from hypothesis import strategies as st

from edged import goformat as G
from edged import monitor as M
from edged.settings.options import AccountConfig, Options, User
from tests.support.aio import run, until
from tests.support.inprocess import running
from tests.support.servers import free_port, wait_port

# ---------------------------------------------------------------------------------------------------------
# helpers


async def http(port: int, path: str, method: str = "GET", raw: bytes | None = None) -> tuple[int, dict, bytes]:
    """A minimal HTTP/1.0 client on raw sockets (no chunking) (independent of the server's own HTTP code)."""
    r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
    w.write(raw if raw is not None else f"{method} {path} HTTP/1.0\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    await w.drain()
    data = await asyncio.wait_for(r.read(), 10)
    w.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        headers[k.strip().lower()] = v.strip()
    if "content-length" in headers and method != "HEAD":
        assert len(body) == int(headers["content-length"])
    return status, headers, body


async def get_json(port: int, path: str) -> dict:
    status, headers, body = await http(port, path)
    assert status == 200, (path, status, body)
    assert headers["content-type"] == "application/json"
    return json.loads(body)


def opts(**kw) -> Options:
    o = Options(host="127.0.0.1", port=-1, http_host="127.0.0.1", http_port=-1)
    for k, v in kw.items():
        setattr(o, k, v)
    return o


async def start_edged(o: Options):
    from edged.server import Server

    srv = Server(o)
    await srv.start()
    return srv


# ---------------------------------------------------------------------------------------------------------
# pure helpers


@pytest.mark.parametrize("ns,text", [
    (0, "0s"), (1, "1ns"), (999, "999ns"), (1_000, "1µs"), (729_000, "729µs"), (1_500, "1.5µs"),
    (1_500_000, "1.5ms"), (1_234_567, "1.234567ms"), (1_000_000_000, "1s"), (62_000_000_000, "1m2s"),
    (3_600_000_000_000, "1h0m0s"), (7_384_500_000_000, "2h3m4.5s"), (-1_500_000, "-1.5ms"),
])
def test_go_duration_matches_go(ns, text):
    assert G.go_duration(ns) == text


_UNITS = {"ns": 1, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000}


def parse_go_duration(s: str) -> int:
    """An independent reader of Go duration text (time.ParseDuration subset)."""
    neg = s.startswith("-")
    total = 0
    for num, unit in re.findall(r"([0-9.]+)(ns|µs|ms|s|m|h)", s.lstrip("-")):
        whole, _, frac = num.partition(".")
        scale = _UNITS[unit]
        total += int(whole) * scale + (int(frac) * scale // 10 ** len(frac) if frac else 0)
    assert re.fullmatch(r"-?([0-9.]+(ns|µs|ms|s|m|h))+", s), s
    return -total if neg else total


@given(st.integers(min_value=-(10**15), max_value=10**15))
def test_go_duration_roundtrips(ns):
    assert parse_go_duration(G.go_duration(ns)) == ns


@given(st.floats(min_value=0, max_value=4e9, allow_nan=False))
def test_rfc3339_is_go_time_format(t):
    s = G.rfc3339(t)
    m = re.fullmatch(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z", s)
    assert m, s
    if m.group(7):
        assert not m.group(7).endswith("0")
    if t > 0:
        import calendar

        secs = calendar.timegm(tuple(int(x) for x in m.groups()[:6]) + (0, 0, 0))
        frac = int((m.group(7) or "0").ljust(9, "0"))
        assert abs(secs + frac / 1e9 - t) < 1e-6


def test_rfc3339_known_values():
    assert G.rfc3339(0) == "0001-01-01T00:00:00Z"
    assert G.rfc3339(1700000000) == "2023-11-14T22:13:20Z"
    assert G.rfc3339(1700000000.25) == "2023-11-14T22:13:20.25Z"


@pytest.mark.parametrize("secs,text", [
    (0, "0s"), (59.9, "59s"), (62, "1m2s"), (3600, "1h0m0s"), (90061, "1d1h1m1s"), (365 * 86400 + 5, "1y0d0h0m5s"),
])
def test_uptime_text(secs, text):
    assert G.uptime_text(secs) == text


def test_rtt_text_truncates_like_nats_server():
    assert G.rtt_text(0) == "0s"
    assert G.rtt_text(0.000729456) == "729µs"
    assert G.rtt_text(0.0012345) == "1.2345ms"


def test_parse_bool_and_int_errors_use_go_text():
    assert M.parse_bool("subs", "1") and M.parse_bool("subs", "True") and not M.parse_bool("subs", "f")
    assert not M.parse_bool("subs", None)
    with pytest.raises(M.MonitorError, match=r"Error decoding boolean for 'subs': strconv.ParseBool: parsing \"x\""):
        M.parse_bool("subs", "x")
    assert M.parse_int("limit", "-3") == -3
    with pytest.raises(M.MonitorError, match=r"Error decoding int for 'limit': strconv.Atoi: parsing \"x\""):
        M.parse_int("limit", "x")
    with pytest.raises(M.MonitorError, match="uint64"):
        M.parse_int("cid", "-1", unsigned=True)


@given(st.text(max_size=200))
def test_parse_int_never_crashes(s):
    try:
        v = M.parse_int("offset", s)
    except M.MonitorError:
        return
    assert isinstance(v, int)


def test_to_json_is_go_like():
    out = M.to_json({"a": 2.0, "b": 0.5, "s": "foo.>", "l": [1.0, "<&>"]})
    assert out == b'{"a":2,"b":0.5,"s":"foo.\\u003e","l":[1,"\\u003c\\u0026\\u003e"]}'
    assert json.loads(out) == {"a": 2, "b": 0.5, "s": "foo.>", "l": [1, "<&>"]}


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(), lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(), c, max_size=4),
                    max_leaves=20))
def test_to_json_preserves_values(doc):
    assert json.loads(M.to_json(doc)) == json.loads(json.dumps(doc))
    assert json.loads(M.to_json(doc, indent=True)) == json.loads(json.dumps(doc))


# ---------------------------------------------------------------------------------------------------------
# the HTTP server against an in-process edged


def test_http_endpoints_in_process():
    async def main():
        async with running(opts(server_name="edge-1")) as srv:
            mport = srv.monitor.port
            assert mport > 0
            url = f"nats://127.0.0.1:{srv.client_port}"
            a = await nats.connect(url, name="alpha")
            b = await nats.connect(url, name="beta")
            got = []

            async def cb(m):
                got.append(m.data)

            await a.subscribe("foo.>", cb=cb)
            await a.subscribe("bar", queue="q")
            await b.subscribe("baz")
            await a.flush()  # SUBs reach the server before anything is published
            await b.flush()
            for _ in range(3):
                await b.publish("foo.x", b"hello")
            await b.flush()
            await a.flush()
            await until(lambda: len(got) == 3, 3)

            v = await get_json(mport, "/varz")
            assert v["server_name"] == "edge-1" and v["server_id"] == srv.server_id
            assert v["connections"] == 2 and v["total_connections"] == 2
            assert v["port"] == srv.client_port and v["http_port"] == mport
            assert v["in_msgs"] == 3 and v["out_msgs"] == 3 and v["in_bytes"] == 15 and v["out_bytes"] == 15
            assert v["subscriptions"] >= 3
            assert isinstance(v["ping_interval"], int) and v["ping_interval"] == 120 * 10**9
            assert v["auth_timeout"] == 2 and isinstance(v["auth_timeout"], int)
            assert re.fullmatch(r"\d+s", v["uptime"]) and v["mem"] > 0 and v["cores"] >= 1
            assert v["http_req_stats"]["/varz"] == 1

            c = await get_json(mport, "/connz?subs=1")
            assert c["num_connections"] == 2 and c["total"] == 2 and c["limit"] == 1024 and c["offset"] == 0
            byname = {ci["name"]: ci for ci in c["connections"]}
            assert sorted(byname["alpha"]["subscriptions_list"]) == ["bar", "foo.>"]
            assert byname["alpha"]["out_msgs"] == 3 and byname["beta"]["in_msgs"] == 3
            assert byname["alpha"]["lang"] == "python3" and byname["alpha"]["kind"] == "Client"
            assert [ci["cid"] for ci in c["connections"]] == sorted(ci["cid"] for ci in c["connections"])

            c = await get_json(mport, "/connz?subs=detail&sort=msgs_from")
            assert c["connections"][0]["name"] == "beta"
            det = {d["subject"]: d for d in c["connections"][1]["subscriptions_list_detail"]}
            assert det["bar"]["qgroup"] == "q" and det["foo.>"]["msgs"] == 3
            assert "subscriptions_list" not in c["connections"][1]

            cid_a = byname["alpha"]["cid"]
            c = await get_json(mport, f"/connz?cid={cid_a}")
            assert [ci["name"] for ci in c["connections"]] == ["alpha"] and c["limit"] == 1
            c = await get_json(mport, "/connz?offset=1&limit=1")
            assert c["num_connections"] == 1 and c["total"] == 2 and c["connections"][0]["name"] == "beta"
            c = await get_json(mport, "/connz?offset=5")
            assert c["connections"] == [] and c["total"] == 2

            status, _, body = await http(mport, "/connz?sort=bogus")
            assert (status, body) == (400, b"invalid sorting option: bogus")
            status, _, body = await http(mport, "/connz?sort=stop")
            assert (status, body) == (400, b"sort by stop only valid on closed connections")
            status, _, body = await http(mport, "/connz?limit=x")
            assert status == 400 and body.startswith(b"Error decoding int for 'limit'")
            status, _, body = await http(mport, "/connz?state=sideways")
            assert status == 400

            s = await get_json(mport, "/subsz")
            assert s["num_subscriptions"] == v["subscriptions"] and "subscriptions_list" not in s
            assert s["num_matches"] >= 1 and 0 <= s["cache_hit_rate"] <= 1
            s = await get_json(mport, "/subsz?subs=1&test=foo.bar")
            assert [d["subject"] for d in s["subscriptions_list"]] == ["foo.>"] and s["total"] == 1
            assert s["subscriptions_list"][0]["account"] == "$G"
            status, _, body = await http(mport, "/subsz?test=foo.*")
            assert status == 400 and b"invalid test subject" in body

            az = await get_json(mport, "/accountz")
            assert "$G" in az["accounts"]
            ad = (await get_json(mport, "/accountz?acc=$G"))["account_detail"]
            assert ad["account_name"] == "$G" and ad["client_connections"] == 2 and ad["subscriptions"] >= 3
            status, _, body = await http(mport, "/accountz?acc=NOPE")
            assert (status, body) == (400, b"Account NOPE does not exist")
            astz = await get_json(mport, "/accstatz")
            g = [x for x in astz["account_statz"] if x["acc"] == "$G"][0]
            assert g["conns"] == 2 and g["received"]["msgs"] == 3 and g["sent"]["msgs"] == 3

            status, headers, body = await http(mport, "/healthz")
            assert status == 200 and body == b'{"status":"ok"}'
            assert headers["access-control-allow-origin"] == "*"
            assert (await http(mport, "/healthz?js-enabled-only=true"))[2] == b'{"status":"ok"}'
            status, _, body = await http(mport, "/healthz?stream=x")
            assert status == 400
            assert json.loads(body) == {"status": "error",
                                        "error": '"account" must not be empty when checking stream health'}
            status, _, body = await http(mport, "/healthz?stream=x&details=true")
            assert status == 400 and json.loads(body)["errors"][0]["type"] == "BAD_REQUEST"

            lz = await get_json(mport, "/leafz")
            assert lz == {"server_id": srv.server_id, "now": lz["now"], "leafnodes": 0, "leafs": []}
            j = await get_json(mport, "/jsz")
            assert j["disabled"] is True and j["streams"] == 0 and j["config"] == {"max_memory": 0, "max_storage": 0}
            assert (await get_json(mport, "/routez"))["num_routes"] == 0

            status, headers, body = await http(mport, "/")
            assert status == 200 and headers["content-type"].startswith("text/html")
            for p in ("/varz", "/connz", "/subsz", "/healthz", "/metrics", "/jsz", "/leafz", "/accountz"):
                assert f'href=".{p}"'.encode() in body
            status, _, body = await http(mport, "/nope")
            assert (status, body) == (404, b"404 page not found\n")
            status, _, _ = await http(mport, "/varz/")
            assert status == 404
            status, headers, body = await http(mport, "/varz", method="POST")
            assert status == 405 and headers["allow"] == "GET, HEAD"
            status, headers, body = await http(mport, "/varz", method="HEAD")
            assert status == 200 and body == b"" and int(headers["content-length"]) > 100
            status, _, _ = await http(mport, "", raw=b"garbage\r\n\r\n")
            assert status == 400
            status, _, _ = await http(mport, "", raw=b"GET /varz HTTP/1.1\r\n" + b"X: " + b"a" * 20000 + b"\r\n\r\n")
            assert status in (400, 431)

            v2 = await get_json(mport, "/varz")
            assert v2["http_req_stats"]["/varz"] == 3  # GET, HEAD, this GET and v2["http_req_stats"]["/connz"] >= 5

            # closed connections: remembered with their reason
            await b.close()
            await until(lambda: len(srv.clients) == 1, 3)
            c = await get_json(mport, "/connz?state=closed")
            assert c["total"] == 1 and c["connections"][0]["name"] == "beta"
            assert c["connections"][0]["reason"] == "Client Closed" and "stop" in c["connections"][0]
            c = await get_json(mport, "/connz?state=all&sort=cid")
            assert [ci["name"] for ci in c["connections"]] == ["alpha", "beta"]
            c = await get_json(mport, "/connz?state=closed&sort=stop")
            assert c["num_connections"] == 1
            v3 = await get_json(mport, "/varz")
            assert v3["connections"] == 1 and v3["total_connections"] == 2 and v3["in_msgs"] == 3
            await a.close()

    run(main())


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (\S+)$')


def parse_prometheus(text: str) -> dict[str, list[tuple[str, float]]]:
    """Check the text exposition format: every sample belongs to a metric announced by HELP and TYPE."""
    helps, types, samples = set(), {}, {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helps.add(line.split()[2])
        elif line.startswith("# TYPE "):
            _, _, name, mtype = line.split()
            assert mtype in ("counter", "gauge", "untyped", "histogram", "summary")
            types[name] = mtype
        else:
            m = _SAMPLE.match(line)
            assert m, line
            name = m.group(1)
            assert name in helps and name in types, name
            samples.setdefault(name, []).append((m.group(2) or "", float(m.group(4))))
    for name, mtype in types.items():
        if mtype == "counter":
            assert name.endswith("_total"), name
    return samples


def test_metrics_prometheus_format():
    async def main():
        async with running(opts()) as srv:
            nc = await nats.connect(f"nats://127.0.0.1:{srv.client_port}")
            await nc.subscribe("x")
            await nc.flush()
            await nc.publish("x", b"abc")
            await nc.flush()
            status, headers, body = await http(srv.monitor.port, "/metrics")
            assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
            samples = parse_prometheus(body.decode())
            assert samples["edged_varz_connections"] == [("", 1.0)]
            assert samples["edged_varz_in_msgs_total"] == [("", 1.0)]
            assert samples["edged_varz_in_bytes_total"] == [("", 3.0)]
            assert samples["edged_healthz_ok"] == [("", 1.0)]
            assert ('{account="$G"}', 1.0) in samples["edged_account_connections"]
            assert samples["edged_info"][0][0].count("server_id=") == 1
            await nc.close()

    run(main())


def test_base_path_and_fixed_port_and_logging(caplog):
    port = free_port()

    async def main():
        async with running(opts(http_port=port, http_base_path="/mon/")) as srv:
            assert srv.monitor.port == port
            assert (await http(port, "/varz"))[0] == 404
            v = await get_json(port, "/mon/varz")
            assert v["http_base_path"] == "/mon/" and v["http_port"] == port
            assert (await http(port, "/mon"))[0] == 200
        # stopped: the port is released
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)

    import logging

    with caplog.at_level(logging.INFO, logger="edged"):
        logging.getLogger("edged").propagate = True
        try:
            run(main())
        finally:
            logging.getLogger("edged").propagate = False
    assert f"Starting http monitor on 127.0.0.1:{port}" in caplog.text


def test_healthz_unavailable_while_shutting_down():
    async def main():
        srv = await start_edged(opts())
        try:
            srv.shutting_down = True  # the state shutdown() sets first, observed before the port closes
            status, _, body = await http(srv.monitor.port, "/healthz")
            assert status == 503
            assert json.loads(body) == {"status": "unavailable", "error": "server is shutting down"}
        finally:
            srv.shutting_down = False
            await srv.shutdown()

    run(main())


def test_healthz_jetstream_not_running():
    """JetStream configured but no engine running: nats-server answers 503 'JetStream not enabled'."""
    from edged.server import Server

    async def main():
        o = opts()
        srv = Server(o)
        o.jetstream.enabled = True  # after construction: the engine object is absent, as when it failed to start
        srv.jetstream = None
        await srv.start()
        try:
            status, _, body = await http(srv.monitor.port, "/healthz")
            assert status == 503
            assert json.loads(body) == {"status": "unavailable", "error": "JetStream not enabled (10076)"}
            status, _, body = await http(srv.monitor.port, "/healthz?js-server-only=true")
            assert status == 200
            v = await get_json(srv.monitor.port, "/varz")
            assert set(v["jetstream"]) >= {"config", "stats"}
        finally:
            await srv.shutdown()

    run(main())


# ---------------------------------------------------------------------------------------------------------
# $SYS.REQ.SERVER requests


def sys_opts() -> Options:
    return opts(
        accounts=[AccountConfig(name="SYS", users=[User(username="sys", password="sys")]),
                  AccountConfig(name="A", users=[User(username="a", password="a")])],
        system_account="SYS",
    )


def test_sys_requests():
    from edged.monitor.sysreqs import install_system_handlers

    async def main():
        srv = await start_edged(sys_opts())
        handlers = install_system_handlers(srv)
        assert handlers is not None
        try:
            url = f"nats://127.0.0.1:{srv.client_port}"
            app = await nats.connect(url, user="a", password="a", name="app")
            await app.subscribe("telemetry.>")
            await app.flush()
            await app.publish("telemetry.t1", b"21.5")
            await app.flush()
            sysc = await nats.connect(url, user="sys", password="sys", name="ops")

            async def req(subject: str, body: bytes = b"") -> dict:
                m = await sysc.request(subject, body, timeout=2)
                return json.loads(m.data)

            r = await req("$SYS.REQ.SERVER.PING")
            assert r["server"]["id"] == srv.server_id and r["server"]["ver"]
            assert set(r["server"]) >= {"name", "host", "id", "ver", "jetstream", "seq", "time"}
            assert r["statsz"]["connections"] == 2 and r["statsz"]["received"]["msgs"] >= 1
            seq1 = r["server"]["seq"]

            r = await req("$SYS.REQ.SERVER.PING.VARZ")
            assert r["data"]["server_id"] == srv.server_id and r["data"]["connections"] == 2
            assert r["server"]["seq"] > seq1

            r = await req(f"$SYS.REQ.SERVER.{srv.server_id}.CONNZ", b'{"subscriptions": true, "auth": true}')
            conns = {c["name"]: c for c in r["data"]["connections"]}
            assert conns["app"]["subscriptions_list"] == ["telemetry.>"] and conns["app"]["account"] == "A"
            assert conns["app"]["authorized_user"] == "a"

            r = await req("$SYS.REQ.ACCOUNT.A.CONNZ")
            assert [c["name"] for c in r["data"]["connections"]] == ["app"]
            r = await req("$SYS.REQ.ACCOUNT.A.SUBSZ")
            assert [d["subject"] for d in r["data"]["subscriptions_list"]] == ["telemetry.>"]
            r = await req("$SYS.REQ.ACCOUNT.A.INFO")
            assert r["data"]["account_name"] == "A" and r["data"]["client_connections"] == 1

            r = await req("$SYS.REQ.SERVER.PING.SUBSZ", b'{"subscriptions": true, "account": "A"}')
            assert r["data"]["total"] == 1

            r = await req(f"$SYS.REQ.SERVER.{srv.server_id}.HEALTHZ")
            assert r["data"] == {"status": "ok", "status_code": 200}

            r = await req("$SYS.REQ.SERVER.PING.IDZ")
            assert r == {"name": srv.server_name, "host": "127.0.0.1", "id": srv.server_id}

            r = await req("$SYS.REQ.SERVER.PING.ACCOUNTZ")
            assert set(r["data"]["accounts"]) >= {"A", "SYS", "$G"} and r["data"]["system_account"] == "SYS"

            r = await req("$SYS.REQ.SERVER.PING.CONNZ", b"{bad")
            assert r["error"]["code"] == 400 and "data" not in r
            r = await req("$SYS.REQ.SERVER.PING.CONNZ", b'{"sort": "nope"}')
            assert r["error"] == {"code": 500, "description": "invalid sorting option: nope"}
            r = await req("$SYS.REQ.SERVER.PING.RAFTZ")
            assert r["error"]["code"] == 501 and "not supported" in r["error"]["description"]

            # a filter that does not select this server: no answer at all
            with pytest.raises(nats.errors.TimeoutError):
                await sysc.request("$SYS.REQ.SERVER.PING.VARZ", b'{"server_name": "someone-else"}', timeout=0.5)
            r = await req("$SYS.REQ.SERVER.PING.VARZ", b'{"server_name": "%s"}' % srv.server_name[:5].encode())
            assert r["data"]["server_id"] == srv.server_id

            # other accounts cannot reach the system account's subjects
            with pytest.raises((nats.errors.NoRespondersError, nats.errors.TimeoutError)):
                await app.request("$SYS.REQ.SERVER.PING.VARZ", b"", timeout=0.5)

            handlers.close()
            with pytest.raises((nats.errors.NoRespondersError, nats.errors.TimeoutError)):
                await sysc.request("$SYS.REQ.SERVER.PING.VARZ", b"", timeout=0.5)
            await app.close()
            await sysc.close()
        finally:
            handlers.close()
            await srv.shutdown()

    run(main())


def test_sys_requests_need_a_system_account():
    from edged.monitor.sysreqs import install_system_handlers

    async def main():
        async with running(opts(no_system_account=True)) as srv:
            assert srv.system_account is None
            assert install_system_handlers(srv) is None
            assert all(not a.sublist.count for a in srv.accounts.values())

    run(main())


# ---------------------------------------------------------------------------------------------------------
# differential: the same clients against nats-server and edged


async def _exercise(url: str) -> list:
    """Named clients with subscriptions, traffic that both servers count the same way."""
    a = await nats.connect(url, name="sensor-a")
    b = await nats.connect(url, name="sensor-b")
    c = await nats.connect(url, name="collector")
    await c.subscribe("sensors.>")
    await c.subscribe("cmd.*", queue="workers")
    await a.subscribe("cmd.a")
    for n in (a, b, c):
        await n.flush()  # every SUB is in place before the first publish
    for i in range(5):
        await a.publish("sensors.a.temp", b"%d" % i)
    for _ in range(2):  # a sends 5, b sends 4: distinct for the sort comparison
        await b.publish("sensors.b.hum", b"55.5")
    await b.publish("cmd.a", b"reboot")
    await b.publish("nobody.listens", b"x" * 10)
    for n in (a, b, c):
        await n.flush()
    await asyncio.sleep(0.3)
    return [a, b, c]


def test_differential_against_nats_server(start_server):
    async def main():
        nmon = free_port()
        ns = start_server("nats-server", http_port=nmon)
        async with running(opts()) as srv:
            wait_port(nmon)
            emon = srv.monitor.port
            # the harness's port probe is a connection too: compare what the clients add
            v0n, v0e = await get_json(nmon, "/varz"), await get_json(emon, "/varz")
            for _ in range(100):  # nats-server registers the probe asynchronously; wait until it has
                if v0n["total_connections"] >= 1 and v0n["connections"] == 0:
                    break
                await asyncio.sleep(0.02)
                v0n = await get_json(nmon, "/varz")
            cn = await _exercise(ns.url)
            ce = await _exercise(f"nats://127.0.0.1:{srv.client_port}")

            vn, ve = await get_json(nmon, "/varz"), await get_json(emon, "/varz")
            assert set(ve) <= set(vn), set(ve) - set(vn)
            for k in ("subscriptions", "total_connections"):
                assert ve[k] - v0e[k] == vn[k] - v0n[k], k
            for k in ("connections", "in_msgs", "out_msgs", "in_bytes", "out_bytes",
                      "slow_consumers", "max_payload", "max_connections", "ping_interval", "ping_max",
                      "max_control_line", "max_pending", "auth_timeout", "proto", "routes", "leafnodes"):
                assert ve[k] == vn[k], (k, ve[k], vn[k])
            for k in ("cluster", "gateway", "leaf", "mqtt", "websocket", "jetstream"):
                assert ve[k] == vn[k] == {}, k
            for k in ("start", "now", "config_load_time"):
                assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", ve[k])

            qn, qe = await get_json(nmon, "/connz?subs=1"), await get_json(emon, "/connz?subs=1")
            assert set(qe) <= set(qn)
            assert (qe["num_connections"], qe["total"], qe["limit"]) == (qn["num_connections"], qn["total"], 1024)
            n_by = {x["name"]: x for x in qn["connections"]}
            e_by = {x["name"]: x for x in qe["connections"]}
            assert set(n_by) == set(e_by) == {"sensor-a", "sensor-b", "collector"}
            for name, en in e_by.items():
                nn = n_by[name]
                assert set(en) <= set(nn), (name, set(en) - set(nn))
                for k in ("kind", "type", "ip", "subscriptions", "in_msgs", "out_msgs", "in_bytes", "out_bytes",
                          "lang", "version", "pending_bytes"):
                    assert en[k] == nn[k], (name, k, en[k], nn[k])
                assert sorted(en.get("subscriptions_list", [])) == sorted(nn.get("subscriptions_list", []))
                for k in ("rtt", "uptime", "idle"):
                    parse_go_duration(en[k])

            dn = await get_json(nmon, "/connz?subs=detail")
            de = await get_json(emon, "/connz?subs=detail")
            for conn_n, conn_e in zip(sorted(dn["connections"], key=lambda x: x["name"]),
                                      sorted(de["connections"], key=lambda x: x["name"]), strict=True):
                norm = [sorted((d["subject"], d.get("qgroup", ""), d["msgs"]) for d in x.get("subscriptions_list_detail", []))
                        for x in (conn_n, conn_e)]
                assert norm[0] == norm[1]
                assert norm[0] or conn_e["name"] == "sensor-b"
                for d in conn_e.get("subscriptions_list_detail", []):
                    assert set(d) <= {"subject", "qgroup", "sid", "msgs", "max", "cid"}

            for conns, port in ((qn, nmon), (qe, emon)):
                cid = {x["name"]: x["cid"] for x in conns["connections"]}["collector"]
                one = await get_json(port, f"/connz?cid={cid}")
                assert [x["name"] for x in one["connections"]] == ["collector"]
                assert (one["total"], one["limit"], one["num_connections"]) == (3, 1, 1)

            for path in ("/connz?sort=msgs_from&limit=2", "/connz?sort=subs", "/connz?sort=bytes_to&offset=1"):
                ln = [x["name"] for x in (await get_json(nmon, path))["connections"]]
                le = [x["name"] for x in (await get_json(emon, path))["connections"]]
                assert len(ln) == len(le)
                if "msgs_from" in path:
                    assert ln == le

            sn, se = await get_json(nmon, "/subsz"), await get_json(emon, "/subsz")
            assert set(se) <= set(sn) and set(se) == set(sn)
            assert (se["total"], se["offset"], se["limit"]) == (sn["total"], sn["offset"], sn["limit"])
            sn = await get_json(nmon, "/subsz?subs=1&test=sensors.a.temp")
            se = await get_json(emon, "/subsz?subs=1&test=sensors.a.temp")
            assert [d["subject"] for d in se["subscriptions_list"]] == [d["subject"] for d in sn["subscriptions_list"]]
            assert set(se["subscriptions_list"][0]) <= set(sn["subscriptions_list"][0])

            for path in ("/healthz", "/healthz?js-enabled-only=true", "/healthz?stream=x",
                         "/healthz?account=a&consumer=c", "/connz?sort=bogus", "/connz?limit=x", "/subsz?subs=maybe",
                         "/connz?sort=stop", "/nope", "/accountz?acc=NOPE"):
                rn, re_ = await http(nmon, path), await http(emon, path)
                assert rn[0] == re_[0], (path, rn, re_)
                if rn[1].get("content-type") == "application/json":
                    assert json.loads(re_[2]) == json.loads(rn[2]), path
                else:
                    assert re_[2] == rn[2], path

            ln, le = await get_json(nmon, "/leafz"), await get_json(emon, "/leafz")
            assert set(le) == set(ln) and le["leafs"] == ln["leafs"] == []
            jn, je = await get_json(nmon, "/jsz"), await get_json(emon, "/jsz")
            assert set(je) <= set(jn) and je["disabled"] == jn["disabled"] is True
            an, ae = await get_json(nmon, "/accountz"), await get_json(emon, "/accountz")
            assert set(ae) <= set(an) and "$G" in ae["accounts"]
            gn, ge = await get_json(nmon, "/accountz?acc=$G"), await get_json(emon, "/accountz?acc=$G")
            dn_, de_ = gn["account_detail"], ge["account_detail"]
            assert set(de_) <= set(dn_)
            assert de_["client_connections"] == dn_["client_connections"] == 3

            sn_ = {x["acc"]: x for x in (await get_json(nmon, "/accstatz"))["account_statz"]}
            se_ = {x["acc"]: x for x in (await get_json(emon, "/accstatz"))["account_statz"]}
            assert set(se_["$G"]) <= set(sn_["$G"])
            for k in ("conns", "leafnodes", "total_conns", "sent", "received", "slow_consumers"):
                assert se_["$G"][k] == sn_["$G"][k], (k, se_["$G"][k], sn_["$G"][k])

            # closed connections
            await cn[1].close()
            await ce[1].close()
            await asyncio.sleep(0.3)
            qn = await get_json(nmon, "/connz?state=closed")
            qe = await get_json(emon, "/connz?state=closed")
            # nats-server also lists the harness's port probe; compare the client both saw close
            xn = [x for x in qn["connections"] if x.get("name") == "sensor-b"]
            xe = [x for x in qe["connections"] if x.get("name") == "sensor-b"]
            assert len(xn) == len(xe) == 1 and qe["total"] == 1
            xn, xe = xn[0], xe[0]
            assert set(xe) <= set(xn), set(xe) - set(xn)
            for k in ("name", "reason", "in_msgs", "out_msgs", "in_bytes", "out_bytes"):
                assert xe[k] == xn[k], k
            for n in cn + ce:
                await n.close()

    run(main(), timeout=60)


def test_differential_sys_requests(start_server):
    """$SYS.REQ.SERVER envelopes: edged's keys are a subset of nats-server's, data documents alike."""
    conf = """
accounts { SYS { users [{user: sys, password: sys}] }, A { users [{user: a, password: a}] } }
system_account: SYS
"""
    from edged.monitor.sysreqs import install_system_handlers

    async def main():
        ns = start_server("nats-server", config=conf)
        async with running(sys_opts()) as srv:
            install_system_handlers(srv)
            out = {}
            for kind, url in (("n", ns.url), ("e", f"nats://127.0.0.1:{srv.client_port}")):
                app = await nats.connect(url, user="a", password="a", name="app")
                await app.subscribe("x.>")
                await app.flush()
                sysc = await nats.connect(url, user="sys", password="sys", name="ops")
                res = {}
                deadline = time.monotonic() + 5
                for subj, body in (("$SYS.REQ.SERVER.PING", b""), ("$SYS.REQ.SERVER.PING.VARZ", b""),
                                   ("$SYS.REQ.SERVER.PING.CONNZ", b'{"subscriptions":true}'),
                                   ("$SYS.REQ.SERVER.PING.SUBSZ", b""), ("$SYS.REQ.SERVER.PING.HEALTHZ", b""),
                                   ("$SYS.REQ.SERVER.PING.IDZ", b""), ("$SYS.REQ.SERVER.PING.CONNZ", b"{bad")):
                    while True:  # nats-server installs its system handlers shortly after it accepts clients
                        try:
                            m = await sysc.request(subj, body, timeout=2)
                            break
                        except nats.errors.NoRespondersError:
                            if time.monotonic() > deadline:
                                raise
                            await asyncio.sleep(0.1)
                    res[(subj, body)] = json.loads(m.data)
                out[kind] = res
                await app.close()
                await sysc.close()
            for key, rn in out["n"].items():
                re_ = out["e"][key]
                assert set(re_) <= set(rn), (key, set(re_) - set(rn))
                if "server" in rn:
                    assert set(re_["server"]) <= set(rn["server"]), key
                if "data" in rn and isinstance(rn["data"], dict):
                    assert set(re_["data"]) <= set(rn["data"]), (key, set(re_["data"]) - set(rn["data"]))
                if "statsz" in rn:
                    assert set(re_["statsz"]) <= set(rn["statsz"]), set(re_["statsz"]) - set(rn["statsz"])
                if "error" in rn:
                    assert re_["error"]["code"] == rn["error"]["code"]
            hk = ("$SYS.REQ.SERVER.PING.HEALTHZ", b"")
            assert out["e"][hk]["data"] == out["n"][hk]["data"] == {"status": "ok", "status_code": 200}
            ck = ("$SYS.REQ.SERVER.PING.CONNZ", b'{"subscriptions":true}')
            for k in ("n", "e"):
                app = [c for c in out[k][ck]["data"]["connections"] if c["name"] == "app"]
                assert app and app[0]["subscriptions_list"] == ["x.>"], k

    run(main(), timeout=60)


def test_leafz_and_leafnode_health_with_a_real_hub(start_server):
    """edged as a leaf of a nats-server hub: /leafz and /varz see the link; the hub going away fails only
    the opt-in `?leafnodes=true` health check, because an edge keeps serving while offline."""
    from edged.settings.options import LeafNodeOpts, RemoteLeafOpts

    async def main():
        lport, hmon = free_port(), free_port()
        hub = start_server("nats-server", http_port=hmon, config=f"leafnodes {{ port: {lport} }}")
        remote = RemoteLeafOpts(urls=[f"nats://127.0.0.1:{lport}"])
        async with running(opts(leafnodes=LeafNodeOpts(remotes=[remote]))) as srv:
            assert await srv.leafnodes.wait_connected(10)
            mport = srv.monitor.port
            le = await get_json(mport, "/leafz?subs=1")
            lh = await get_json(hmon, "/leafz?subs=1")
            assert le["leafnodes"] == lh["leafnodes"] == 1
            assert set(le) == set(lh)
            # the hub omits an empty subscriptions_list: it may not have had the LS+ dump yet
            assert set(le["leafs"][0]) <= set(lh["leafs"][0]) | {"compression", "subscriptions_list"}
            assert le["leafs"][0]["name"] == lh["server_id"] and lh["leafs"][0]["name"] == srv.server_id
            v = await get_json(mport, "/varz")
            assert v["leafnodes"] == 1 and v["connections"] == 0
            assert (await http(mport, "/healthz?leafnodes=true"))[0] == 200

            hub.stop()
            await until(lambda: not srv.leafnodes.connections, 10)
            status, _, body = await http(mport, "/healthz?leafnodes=true")
            assert status == 503 and json.loads(body)["status"] == "unavailable"
            assert "leafnode" in json.loads(body)["error"]
            assert (await http(mport, "/healthz"))[0] == 200
            assert (await get_json(mport, "/leafz"))["leafnodes"] == 0

    run(main())
