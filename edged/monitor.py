"""Monitoring: nats-server's HTTP endpoints (/varz, /connz, /subsz, ...) and a Prometheus /metrics page.

The JSON builders are plain functions of the Server so that the `$SYS.REQ.SERVER.*` handlers
(edged/sysreqs.py) answer with exactly the same documents as the HTTP port. Field names, orderings,
time and duration formats follow nats-server's server/monitor.go so that tools written for
nats-server (nats CLI, prometheus-nats-exporter, dashboards) read edged unchanged.

The HTTP server is a deliberately small HTTP/1.1 responder on asyncio streams: GET/HEAD only,
one request per connection, bounded header size and read time. It owns no monitoring rules.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from email.utils import formatdate
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from edged import SERVER_VERSION, __version__
from edged.accounts import GLOBAL_ACCOUNT
from edged.goformat import rfc3339, rtt_text, uptime_text
from edged.log import log
from edged.subjects import is_valid_literal_subject, subject_matches, subjects_overlap

if TYPE_CHECKING:
    from edged.server import Server

DEFAULT_CONN_LIST_SIZE = 1024
DEFAULT_SUB_LIST_SIZE = 1024
LEAF_KIND = "Leafnode"

VARZ_PATH = "/varz"
CONNZ_PATH = "/connz"
ROUTEZ_PATH = "/routez"
GATEWAYZ_PATH = "/gatewayz"
LEAFZ_PATH = "/leafz"
SUBSZ_PATH = "/subsz"
SUBSCRIPTIONSZ_PATH = "/subscriptionsz"
ACCOUNTZ_PATH = "/accountz"
ACCSTATZ_PATH = "/accstatz"
JSZ_PATH = "/jsz"
HEALTHZ_PATH = "/healthz"
METRICS_PATH = "/metrics"
ROOT_PATH = "/"

SORT_OPTIONS = (
    "cid", "start", "subs", "pending", "msgs_to", "msgs_from", "bytes_to", "bytes_from",
    "last", "idle", "uptime", "stop", "reason", "rtt",
)


class MonitorError(ValueError):
    """A bad monitoring request; HTTP answers 400 with the text, $SYS requests an API error."""

    def __init__(self, text: str, code: int = 400) -> None:
        super().__init__(text)
        self.code = code


# ---------------------------------------------------------------------------------------------------------
# JSON as Go's encoding/json writes it (pure)


def _go_numbers(v: Any) -> Any:
    """Go marshals a float64 2.0 as `2`: integral floats become ints so typed Go decoders accept them."""
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e21:
            return int(v)
        return v
    if isinstance(v, dict):
        return {k: _go_numbers(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_go_numbers(x) for x in v]
    return v


def to_json(doc: Any, indent: bool = False) -> bytes:
    """encoding/json output: integral floats as ints, and <, >, & escaped as \\u003c etc."""
    text = json.dumps(_go_numbers(doc), ensure_ascii=False, indent=2 if indent else None,
                      separators=(",", ": ") if indent else (",", ":"))
    # these characters only ever occur inside JSON strings, so a textual replace is exact
    text = text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    return text.encode()


def parse_bool(name: str, value: str | None) -> bool:
    """strconv.ParseBool with nats-server's error text."""
    if value is None or value == "":
        return False
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise MonitorError(f"Error decoding boolean for '{name}': strconv.ParseBool: parsing \"{value}\": invalid syntax")


def parse_int(name: str, value: str | None, unsigned: bool = False) -> int:
    if value is None or value == "":
        return 0
    s = value[1:] if value[:1] in "+-" and not unsigned else value
    if not s.isascii() or not s.isdigit():
        fn = "strconv.ParseUint" if unsigned else "strconv.Atoi"
        kind = "uint64" if unsigned else "int"
        raise MonitorError(f"Error decoding {kind} for '{name}': {fn}: parsing \"{value}\": invalid syntax")
    return int(value)


def tls_version_text(v: str) -> str:
    """ssl's "TLSv1.3" as nats-server's "1.3"."""
    return v[4:] if v.startswith("TLSv") else v


_CIPHER_NAMES = {
    "ECDHE-RSA-AES128-GCM-SHA256": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-RSA-AES256-GCM-SHA384": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "ECDHE-ECDSA-AES128-GCM-SHA256": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "ECDHE-RSA-CHACHA20-POLY1305": "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "ECDHE-ECDSA-CHACHA20-POLY1305": "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
}


def cipher_text(name: str) -> str:
    """OpenSSL cipher names as Go's tls.CipherSuiteName (TLS 1.3 names are already the same)."""
    return _CIPHER_NAMES.get(name, name)


# ---------------------------------------------------------------------------------------------------------
# process usage


class _ProcUsage:
    """RSS and CPU% of this process. CPU is averaged since the previous sample, like nats-server's pse."""

    def __init__(self) -> None:
        self._last_cpu = _cpu_seconds()
        self._last_wall = time.monotonic()
        self._pcpu = 0.0

    def sample(self) -> tuple[float, int]:
        now = time.monotonic()
        cpu = _cpu_seconds()
        dt = now - self._last_wall
        if dt >= 0.5:
            self._pcpu = round(100.0 * (cpu - self._last_cpu) / dt, 1)
            self._last_cpu, self._last_wall = cpu, now
        return self._pcpu, rss_bytes()


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def num_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# ---------------------------------------------------------------------------------------------------------
# server state access (tolerant of subsystems that have not landed yet)


class MonitorState:
    """Per-server monitoring state kept outside Server: HTTP request counts and the CPU sampler."""

    def __init__(self) -> None:
        self.http_req_stats: dict[str, int] = {}
        self.usage = _ProcUsage()


def state_of(server: Server) -> MonitorState:
    st = getattr(server, "_monitor_state", None)
    if st is None:
        st = MonitorState()
        server._monitor_state = st  # type: ignore[attr-defined]
    return st


def _conns(server: Server) -> list[Any]:
    return [c for c in list(server.clients.values()) if hasattr(c, "info")]


def _leaf_manager(server: Server) -> Any:
    return getattr(server, "leafnodes", None)


def _leaf_conns(server: Server) -> list[Any]:
    lm = _leaf_manager(server)
    if lm is None:
        return []
    try:
        return list(getattr(lm, "connections", []) or [])
    except Exception:  # a half-started leafnode subsystem must not break monitoring
        return []


def _jetstream(server: Server) -> Any:
    return getattr(server, "jetstream", None)


def _js_enabled(server: Server) -> bool:
    js = _jetstream(server)
    if js is None:
        return False
    return bool(getattr(js, "enabled", True))


def _account_stats(acc: Any) -> dict[str, Any]:
    """nats-server's SublistStats for one sublist; fanout from the match cache as nats-server does."""
    sl = acc.sublist
    cache = getattr(sl, "_cache", {}) or {}
    tot = mx = 0
    for r in list(cache.values()):
        n = len(r[0]) + len(r[1])
        tot += n
        mx = max(mx, n)
    return {
        "num_subscriptions": sl.count,
        "num_cache": sl.cache_size(),
        "num_inserts": sl.inserts,
        "num_removes": sl.removes,
        "num_matches": sl.matches,
        "cache_hits": sl.cache_hits,
        "max_fanout": mx,
        "tot_fanout": tot,
        "cache_cnt": len(cache),
    }


def sublist_stats(server: Server, account: str = "") -> dict[str, Any]:
    agg = {"num_subscriptions": 0, "num_cache": 0, "num_inserts": 0, "num_removes": 0, "num_matches": 0,
           "cache_hits": 0, "max_fanout": 0, "tot_fanout": 0, "cache_cnt": 0}
    for name, acc in list(server.accounts.items()):
        if account and name != account:
            continue
        st = _account_stats(acc)
        for k, v in st.items():
            agg[k] = max(agg[k], v) if k == "max_fanout" else agg[k] + v
    return _public_sublist_stats(agg)


def _public_sublist_stats(agg: dict[str, Any]) -> dict[str, Any]:
    return {
        "num_subscriptions": agg["num_subscriptions"],
        "num_cache": agg["num_cache"],
        "num_inserts": agg["num_inserts"],
        "num_removes": agg["num_removes"],
        "num_matches": agg["num_matches"],
        "cache_hit_rate": agg["cache_hits"] / agg["num_matches"] if agg["num_matches"] else 0.0,
        "max_fanout": agg["max_fanout"],
        "avg_fanout": agg["tot_fanout"] / agg["cache_cnt"] if agg["tot_fanout"] else 0.0,
    }


def message_totals(server: Server) -> dict[str, int]:
    """Server-wide in/out counters.

    Uses Server counters when the core keeps them; otherwise sums open connections and the closed ring
    (which loses history once the ring wraps)."""
    names = ("in_msgs", "in_bytes", "out_msgs", "out_bytes")
    if all(isinstance(getattr(server, n, None), int) for n in names):
        return {n: getattr(server, n) for n in names}
    tot = dict.fromkeys(names, 0)
    for c in _conns(server):
        for n in names:
            tot[n] += getattr(c, n, 0)
    for info in list(server.closed_clients):
        for n in names:
            tot[n] += info.get(n, 0)
    for lc in _leaf_conns(server):
        for n in names:
            tot[n] += getattr(lc, n, 0)
    return tot


def _client_counts(server: Server) -> tuple[int, int]:
    """(client connections, leafnode connections)."""
    conns = _conns(server)
    leafs = [c for c in conns if getattr(c, "kind", "") == LEAF_KIND]
    return len(conns) - len(leafs), len(leafs) + len(_leaf_conns(server))


# ---------------------------------------------------------------------------------------------------------
# /varz


def _drop_empty(d: dict[str, Any]) -> dict[str, Any]:
    """Go's omitempty for the nested option blocks."""
    return {k: v for k, v in d.items() if v not in (None, "", 0, False, [], {})}


def _leaf_varz(server: Server) -> dict[str, Any]:
    lm = _leaf_manager(server)
    if lm is not None and hasattr(lm, "varz"):
        try:
            d = dict(lm.varz())
            d["remotes"] = [_drop_empty(dict(r)) for r in d.get("remotes", [])]
            return _drop_empty(d)
        except Exception as e:  # pragma: no cover - defensive, logged
            log.debug("leafnode varz failed: %s", e)
    lo = server.opts.leafnodes
    if lo is None:
        return {}
    remotes = []
    for r in lo.remotes:
        urls = [u.split("://", 1)[-1].rsplit("@", 1)[-1] for u in r.urls]
        deny = _drop_empty({"exports": list(r.deny_exports), "imports": list(r.deny_imports)})
        remotes.append(_drop_empty({
            "local_account": r.account, "tls_timeout": r.tls.timeout if r.tls else 0, "urls": urls,
            "deny": deny or None,
        }))
    return _drop_empty({
        "host": lo.host, "port": lo.port, "tls_timeout": lo.tls.timeout if lo.tls else 0,
        "tls_required": lo.tls is not None, "remotes": remotes,
    })


def _js_config_from_opts(server: Server) -> dict[str, Any]:
    js = server.opts.jetstream
    si = js.sync_interval
    cfg: dict[str, Any] = {
        "max_memory": js.max_memory_store if js.max_memory_store > 0 else 0,
        "max_storage": js.max_file_store if js.max_file_store > 0 else 0,
        "store_dir": js.store_dir,
    }
    if si == "always":
        cfg["sync_always"] = True
    elif isinstance(si, int | float) and si > 0:
        cfg["sync_interval"] = int(si * 1e9)
    if js.domain:
        cfg["domain"] = js.domain
    if js.unique_tag:
        cfg["unique_tag"] = js.unique_tag
    return _drop_empty(cfg) | {"max_memory": cfg["max_memory"], "max_storage": cfg["max_storage"]}


def _empty_js_stats() -> dict[str, Any]:
    return {"memory": 0, "storage": 0, "reserved_memory": 0, "reserved_storage": 0, "accounts": 0,
            "ha_assets": 0, "api": {"level": 0, "total": 0, "errors": 0}}


def _js_info(server: Server) -> dict[str, Any] | None:
    """The JetStream engine's `info()` (config, stats, streams, consumers, messages, bytes) if it exists."""
    js = _jetstream(server)
    if js is None or not hasattr(js, "info"):
        return None
    try:
        info = js.info()
    except Exception as e:
        log.debug("jetstream info failed: %s", e)
        return None
    return dict(info) if isinstance(info, dict) else None


def jetstream_varz(server: Server) -> dict[str, Any]:
    if not server.opts.jetstream.enabled:
        return {}
    info = _js_info(server) or {}
    out: dict[str, Any] = {
        "config": info.get("config") or _js_config_from_opts(server),
        "stats": info.get("stats") or _empty_js_stats(),
    }
    if info.get("limits"):
        out["limits"] = info["limits"]
    return out


def varz(server: Server) -> dict[str, Any]:
    o = server.opts
    st = state_of(server)
    pcpu, rss = st.usage.sample()
    now = time.time()
    clients, leafs = _client_counts(server)
    totals = message_totals(server)
    cores = num_cores()
    v: dict[str, Any] = {
        "server_id": server.server_id,
        "server_name": server.server_name,
        "version": SERVER_VERSION,
        "proto": 1,
        "go": f"python{sys.version_info[0]}.{sys.version_info[1]}",  # as the INFO line says
        "host": o.host,
        "port": server.client_port or o.port,
    }
    if server.auth_required:
        v["auth_required"] = True
    if server.tls_required:
        v["tls_required"] = True
        if o.tls is not None and o.tls.verify:
            v["tls_verify"] = True
    if o.client_advertise:
        v["connect_urls"] = [o.client_advertise]
    v["max_connections"] = o.max_connections
    if o.max_subscriptions:
        v["max_subscriptions"] = o.max_subscriptions
    mon = getattr(server, "monitor", None)
    http_port = getattr(mon, "port", 0) or o.http_port
    v |= {
        "ping_interval": int(o.ping_interval * 1e9),
        "ping_max": o.ping_max,
        "http_host": o.http_host,
        "http_port": http_port,
        "http_base_path": o.http_base_path,
        "https_port": 0,
        "auth_timeout": o.effective_auth_timeout(),
        "max_control_line": o.max_control_line,
        "max_payload": o.max_payload,
        "max_pending": o.max_pending,
        "cluster": {},
        "gateway": {},
        "leaf": _leaf_varz(server),
        "mqtt": _mqtt_varz(server),
        "websocket": _ws_varz(server),
        "jetstream": jetstream_varz(server),
        "tls_timeout": o.tls.timeout if o.tls is not None else 2.0,
        "write_deadline": int(o.write_deadline * 1e9),
        "start": rfc3339(server.start_time),
        "now": rfc3339(now),
        "uptime": uptime_text(now - server.start_time),
        "mem": rss,
        "cores": cores,
        "gomaxprocs": cores,
        "cpu": pcpu,
        "connections": clients,
        "total_connections": server.total_connections,
        "routes": 0,
        "remotes": 0,
        "leafnodes": leafs,
        "in_msgs": totals["in_msgs"],
        "in_bytes": totals["in_bytes"],
        "in_client_msgs": totals["in_msgs"],
        "in_client_bytes": totals["in_bytes"],
        "out_msgs": totals["out_msgs"],
        "out_bytes": totals["out_bytes"],
        "out_client_msgs": totals["out_msgs"],
        "out_client_bytes": totals["out_bytes"],
        "slow_consumers": server.slow_consumers,
        "stale_connections": getattr(server, "stale_connections", 0),
        "stalled_clients": 0,
        "subscriptions": sum(a.sublist.count for a in list(server.accounts.values())),
        "http_req_stats": dict(st.http_req_stats),
        "config_load_time": rfc3339(server.config_load_time),
    }
    if server.system_account_name:
        v["system_account"] = server.system_account_name
    v["slow_consumer_stats"] = {"clients": server.slow_consumers, "routes": 0, "gateways": 0, "leafs": 0}
    v["stale_connection_stats"] = {"clients": getattr(server, "stale_connections", 0), "routes": 0,
                                   "gateways": 0, "leafs": 0}
    v["disk_io_wait_stats"] = {"waiters": 0, "waits": 0, "wait_time": 0, "max_wait_time": 0}
    return v


def _mqtt_varz(server: Server) -> dict[str, Any]:
    m = server.opts.mqtt
    if m is None:
        return {}
    return _drop_empty({
        "host": m.host, "port": m.port, "no_auth_user": m.no_auth_user,
        "tls_timeout": m.tls.timeout if m.tls else 0, "ack_wait": int(m.ack_wait * 1e9),
        "max_ack_pending": m.max_ack_pending,
    })


def _ws_varz(server: Server) -> dict[str, Any]:
    w = server.opts.websocket
    if w is None:
        return {}
    return _drop_empty({
        "host": w.host, "port": w.port, "no_tls": w.no_tls, "same_origin": w.same_origin,
        "allowed_origins": list(w.allowed_origins), "compression": w.compression,
    })


# ---------------------------------------------------------------------------------------------------------
# /connz


@dataclass
class ConnzOptions:
    sort: str = ""
    auth: bool = False
    subscriptions: bool = False
    subscriptions_detail: bool = False
    offset: int = 0
    limit: int = 0
    cid: int = 0
    state: int = 0  # 0 open, 1 closed, 2 all (nats-server's ConnState)
    user: str = ""
    acc: str = ""
    mqtt_client: str = ""
    filter_subject: str = ""

    @classmethod
    def from_query(cls, q: dict[str, str]) -> ConnzOptions:
        subs_v = q.get("subs", "")
        detail = subs_v.lower() == "detail"
        st = q.get("state", "")
        state = {"": 0, "open": 0, "closed": 1, "any": 2, "all": 2}.get(st.lower())
        auth = parse_bool("auth", q.get("auth"))
        subs = False if detail else parse_bool("subs", subs_v)
        offset = parse_int("offset", q.get("offset"))
        limit = parse_int("limit", q.get("limit"))
        cid = parse_int("cid", q.get("cid"), unsigned=True)
        if state is None:
            raise MonitorError(f"Error decoding state for {st}")
        return cls(sort=q.get("sort", ""), auth=auth, subscriptions=subs, subscriptions_detail=detail,
                   offset=offset, limit=limit, cid=cid, state=state, user=q.get("user", ""),
                   acc=q.get("acc", ""), mqtt_client=q.get("mqtt_client", ""))

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ConnzOptions:
        return cls(sort=str(d.get("sort") or ""), auth=bool(d.get("auth")),
                   subscriptions=bool(d.get("subscriptions")),
                   subscriptions_detail=bool(d.get("subscriptions_detail")), offset=int(d.get("offset") or 0),
                   limit=int(d.get("limit") or 0), cid=int(d.get("cid") or 0), state=int(d.get("state") or 0),
                   user=str(d.get("user") or ""), acc=str(d.get("acc") or ""),
                   mqtt_client=str(d.get("mqtt_client") or ""), filter_subject=str(d.get("filter_subject") or ""))


def _sub_detail(sub: Any, cid: int, account: str | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if account is not None:
        d["account"] = account
        d["account_tag"] = account
    d["subject"] = sub.subject
    if sub.queue:
        d["qgroup"] = sub.queue
    d["sid"] = sub.sid
    d["msgs"] = sub.delivered
    if sub.max:
        d["max"] = sub.max
    d["cid"] = cid
    return d


def _conn_info_open(conn: Any, now: float, o: ConnzOptions) -> dict[str, Any]:
    info = conn.info()
    return _conn_info(info, now, o, subs=list(getattr(conn, "subs", {}).values()), tls_first=_tls_first(conn))


def _tls_first(conn: Any) -> bool:
    tls = conn.server.opts.tls if hasattr(conn, "server") else None
    return bool(tls is not None and tls.handshake_first and getattr(conn, "tls_info", None))


def _conn_info(info: dict[str, Any], now: float, o: ConnzOptions, subs: list[Any] | None,
               tls_first: bool = False) -> dict[str, Any]:
    """One ConnInfo. For a closed connection, `info` carries stop/reason and times are frozen at stop."""
    stop = info.get("stop")
    ref = stop if stop else now
    start = info.get("start") or 0.0
    last = info.get("last_activity") or start
    ci: dict[str, Any] = {
        "cid": info["cid"],
        "kind": info.get("kind") or "Client",
        "type": info.get("type") or "nats",
        "ip": info.get("ip", ""),
        "port": info.get("port", 0),
        "start": rfc3339(start),
        "last_activity": rfc3339(last),
    }
    if stop:
        ci["stop"] = rfc3339(stop)
    if info.get("reason"):
        ci["reason"] = info["reason"]
    ci |= {
        "rtt": rtt_text(info.get("rtt") or 0.0),
        "uptime": uptime_text(ref - start),
        "idle": uptime_text(ref - last),
        "pending_bytes": info.get("pending_bytes", 0),
        "in_msgs": info.get("in_msgs", 0),
        "out_msgs": info.get("out_msgs", 0),
        "in_bytes": info.get("in_bytes", 0),
        "out_bytes": info.get("out_bytes", 0),
        "subscriptions": info.get("subscriptions", 0),
    }
    for k in ("name", "lang", "version"):
        if info.get(k):
            ci[k] = info[k]
    tls = info.get("tls")
    if tls:
        if tls.get("version"):
            ci["tls_version"] = tls_version_text(tls["version"])
        if tls.get("cipher"):
            ci["tls_cipher_suite"] = cipher_text(tls["cipher"])
        if tls_first:
            ci["tls_first"] = True
    account = info.get("account") or ""
    if o.auth:
        if info.get("user"):
            ci["authorized_user"] = info["user"]
        if account and account != GLOBAL_ACCOUNT:
            ci["account"] = account
    if subs is None:
        subs = [_ClosedSub(s) for s in info.get("subs_list", ())]
    if subs:
        if o.subscriptions_detail:
            ci["subscriptions_list_detail"] = [_sub_detail(s, info["cid"]) for s in subs]
        elif o.subscriptions:
            ci["subscriptions_list"] = [s.subject for s in subs]
    if o.auth:
        if info.get("jwt"):
            ci["jwt"] = info["jwt"]
        if account:
            ci["name_tag"] = account
    if info.get("mqtt_client"):
        ci["mqtt_client"] = info["mqtt_client"]
    ci["_rtt"] = info.get("rtt") or 0.0
    ci["_start"] = start
    ci["_last"] = last
    ci["_stop"] = stop or 0.0
    ci["_uptime"] = ref - start
    return ci


class _ClosedSub:
    """A subscription recorded with a closed connection: (subject, queue, sid, msgs, max) or a dict."""

    def __init__(self, rec: Any) -> None:
        if isinstance(rec, dict):
            self.subject = rec.get("subject", "")
            self.queue = rec.get("qgroup") or rec.get("queue")
            self.sid = str(rec.get("sid", ""))
            self.delivered = rec.get("msgs", 0)
            self.max = rec.get("max", 0)
        elif isinstance(rec, str):
            self.subject, self.queue, self.sid, self.delivered, self.max = rec, None, "", 0, 0
        else:
            subject, queue, sid, msgs, mx = (list(rec) + [None, "", 0, 0])[:5]
            self.subject, self.queue, self.sid, self.delivered, self.max = subject, queue, str(sid), msgs, mx


_SORT_KEYS: dict[str, tuple[Callable[[dict[str, Any]], Any], bool]] = {
    "cid": (lambda c: c["cid"], False),
    "start": (lambda c: c["cid"], False),
    "subs": (lambda c: c["subscriptions"], True),
    "pending": (lambda c: c["pending_bytes"], True),
    "msgs_to": (lambda c: c["out_msgs"], True),
    "msgs_from": (lambda c: c["in_msgs"], True),
    "bytes_to": (lambda c: c["out_bytes"], True),
    "bytes_from": (lambda c: c["in_bytes"], True),
    "last": (lambda c: c["_last"], True),
    "idle": (lambda c: c["_last"], False),  # most idle first = oldest activity first
    "uptime": (lambda c: c["_uptime"], False),  # shortest uptime first, as nats-server
    "stop": (lambda c: c["_stop"], True),
    "reason": (lambda c: c.get("reason", ""), False),
    "rtt": (lambda c: c["_rtt"], True),
}


def connz(server: Server, o: ConnzOptions | None = None) -> dict[str, Any]:
    o = o or ConnzOptions()
    sort = o.sort or "cid"
    if sort not in SORT_OPTIONS:
        raise MonitorError(f"invalid sorting option: {sort}")
    state = o.state
    if state not in (0, 1, 2):
        raise MonitorError(f"invalid state: {state}")
    if sort == "stop" and state != 1:
        raise MonitorError("sort by stop only valid on closed connections")
    if sort == "reason" and state != 1:
        raise MonitorError("sort by reason only valid on closed connections")
    offset = max(0, o.offset)
    limit = o.limit if o.limit > 0 else DEFAULT_CONN_LIST_SIZE
    filt = ""
    if o.filter_subject and o.filter_subject != ">":
        if not o.acc:
            raise MonitorError("filter by subject only valid with account filtering")
        filt = o.filter_subject
    if o.cid > 0:
        limit = 1
    now = time.time()
    out: dict[str, Any] = {"server_id": server.server_id, "now": rfc3339(now)}

    open_conns: list[Any] = []
    closed: list[dict[str, Any]] = []
    if state in (0, 2):
        open_conns = _conns(server)
        if o.acc:
            open_conns = [c for c in open_conns if getattr(getattr(c, "account", None), "name", "") == o.acc]
    if state in (1, 2):
        closed = list(server.closed_clients)
        if o.acc:
            closed = [c for c in closed if c.get("account") == o.acc]
    total = len(open_conns) + len(closed)
    if o.cid > 0:
        found = [c for c in open_conns if c.cid == o.cid]
        open_conns = found
        closed = [] if found else [c for c in closed if c.get("cid") == o.cid][:1]
    if o.user:
        open_conns = [c for c in open_conns if getattr(c, "user", "") == o.user]
        closed = [c for c in closed if c.get("user") == o.user]
    if o.mqtt_client:
        open_conns = [c for c in open_conns if getattr(c, "mqtt_client", "") == o.mqtt_client]
        closed = [c for c in closed if c.get("mqtt_client") == o.mqtt_client]
    if filt:
        open_conns = [c for c in open_conns if any(subjects_overlap(filt, s.subject) for s in c.subs.values())]

    infos = [_conn_info_open(c, now, o) for c in open_conns]
    infos += [_conn_info(c, now, o, subs=None) for c in closed]
    # like nats-server, `total` counts before the cid/user filters; pagination runs over what is left
    n = len(infos)
    key, reverse = _SORT_KEYS[sort]
    infos.sort(key=lambda c: (key(c), c["cid"]) if not reverse else (key(c), -c["cid"]), reverse=reverse)
    lo = min(offset, n)
    hi = lo + min(limit, n - lo)
    page = [{k: v for k, v in ci.items() if not k.startswith("_")} for ci in infos[lo:hi]]
    out |= {"num_connections": len(page), "total": total, "offset": offset, "limit": limit, "connections": page}
    return out


# ---------------------------------------------------------------------------------------------------------
# /subsz


@dataclass
class SubszOptions:
    subscriptions: bool = False
    offset: int = 0
    limit: int = 0
    account: str = ""
    test: str = ""

    @classmethod
    def from_query(cls, q: dict[str, str]) -> SubszOptions:
        return cls(subscriptions=parse_bool("subs", q.get("subs")), offset=parse_int("offset", q.get("offset")),
                   limit=parse_int("limit", q.get("limit")), account=q.get("acc", ""), test=q.get("test", ""))

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SubszOptions:
        return cls(subscriptions=bool(d.get("subscriptions")), offset=int(d.get("offset") or 0),
                   limit=int(d.get("limit") or 0), account=str(d.get("account") or ""), test=str(d.get("test") or ""))


def subsz(server: Server, o: SubszOptions | None = None) -> dict[str, Any]:
    o = o or SubszOptions()

    offset = max(0, o.offset)
    limit = o.limit if o.limit > 0 else DEFAULT_SUB_LIST_SIZE
    if o.test and not is_valid_literal_subject(o.test):
        raise MonitorError(f"invalid test subject, must be valid publish subject: {o.test}")
    out: dict[str, Any] = {"server_id": server.server_id, "now": rfc3339(time.time())}
    out |= sublist_stats(server, o.account)
    total = 0
    details: list[dict[str, Any]] = []
    if o.subscriptions:
        for name, acc in list(server.accounts.items()):
            if o.account and name != o.account:
                continue
            for sub in acc.sublist.all_subs():
                if o.test and not subject_matches(sub.subject, o.test):
                    continue
                conn = sub.conn
                details.append(_sub_detail(sub, int(getattr(conn, "cid", 0) or 0), name))
        total = len(details)
    out |= {"total": total, "offset": offset, "limit": limit}
    if o.subscriptions:
        lo = min(offset, total)
        page = details[lo:lo + min(limit, total - lo)]
        if page:
            out["subscriptions_list"] = page
    return out


# ---------------------------------------------------------------------------------------------------------
# /accountz, /accstatz


def accountz(server: Server, account: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"server_id": server.server_id, "now": rfc3339(time.time())}
    if server.system_account is not None:
        out["system_account"] = server.system_account_name
    if not account:
        out["accounts"] = list(server.accounts)
        return out
    out["account_detail"] = account_info(server, account)
    return out


def _account_js_enabled(server: Server, acc: Any) -> bool:
    if not server.opts.jetstream.enabled:
        return False
    js = _jetstream(server)
    f = getattr(js, "account_enabled", None)
    if callable(f):
        try:
            return bool(f(acc.name))
        except Exception:
            return False
    if acc.config.jetstream is not None:
        return True
    return acc.name == GLOBAL_ACCOUNT and not server.opts.accounts


def account_info(server: Server, name: str) -> dict[str, Any]:
    acc = server.accounts.get(name)
    if acc is None:
        raise MonitorError(f"Account {name} does not exist")
    cfg = acc.config
    clients = [c for c in list(acc.clients) if getattr(c, "kind", "Client") != LEAF_KIND]
    leafs = [c for c in _leaf_conns(server) if getattr(getattr(c, "account", None), "name", "") == name]
    exports = []
    for e in cfg.exports:
        if e.service:
            ex: dict[str, Any] = {"subject": e.service, "type": "service", "response_type": e.response_type}
        else:
            ex = {"subject": e.stream or "", "type": "stream"}
        ex["approved_accounts"] = list(e.accounts)
        exports.append(ex)
    imports = []
    for si in cfg.stream_imports:
        imp: dict[str, Any] = {"subject": si.subject, "account": si.account}
        if si.to:
            imp["local_subject"] = si.to
        imports.append(imp | {"type": "stream", "invalid": False, "share": False, "tracking": False})
    for sv in cfg.service_imports:
        local = sv.to or sv.subject
        imports.append({"subject": sv.subject, "account": sv.account, "to": local, "local_subject": local,
                        "type": "service", "invalid": False, "share": False, "tracking": False})
    d: dict[str, Any] = {"account_name": name, "update_time": rfc3339(server.config_load_time)}
    if acc is server.system_account:
        d["is_system"] = True
    d |= {
        "expired": False,
        "complete": True,
        "jetstream_enabled": _account_js_enabled(server, acc),
        "leafnode_connections": len(leafs),
        "client_connections": len(clients),
        "subscriptions": acc.sublist.count,
    }
    if exports:
        d["exports"] = exports
    if imports:
        d["imports"] = imports
    if cfg.nkey:
        d["issuer_key"] = cfg.nkey
    d["name_tag"] = name
    d["sublist_stats"] = _public_sublist_stats(_account_stats(acc))
    return d


def _msg_bytes(members: list[Any], d: str) -> dict[str, int]:
    return {"msgs": sum(getattr(c, f"{d}_msgs", 0) for c in members),
            "bytes": sum(getattr(c, f"{d}_bytes", 0) for c in members)}


def _data_stats(conns: list[Any], leafs: list[Any], d: str) -> dict[str, Any]:
    """nats-server's DataStats: totals plus per-kind blocks (edged has no routes or gateways)."""
    return _msg_bytes(conns + leafs, d) | {"gateways": {"msgs": 0, "bytes": 0}, "routes": {"msgs": 0, "bytes": 0},
                                          "leafs": _msg_bytes(leafs, d)}


def accstatz(server: Server, include_unused: bool = False, accounts: Iterable[str] = ()) -> dict[str, Any]:
    names = list(accounts) or list(server.accounts)
    stats = []
    for name in names:
        acc = server.accounts.get(name)
        if acc is None:
            continue
        conns = [c for c in list(acc.clients) if getattr(c, "kind", "Client") != LEAF_KIND]
        leafs = [c for c in _leaf_conns(server) if getattr(getattr(c, "account", None), "name", "") == name]
        if not include_unused and not conns and not leafs:
            continue
        stats.append({
            "acc": name, "name": name, "conns": len(conns), "leafnodes": len(leafs),
            "total_conns": len(conns) + len(leafs), "num_subscriptions": acc.sublist.count,
            # the account receives what its connections send in, and sends what they are delivered
            "sent": _data_stats(conns, leafs, "out"), "received": _data_stats(conns, leafs, "in"),
            "slow_consumers": 0,
        })
    return {"server_id": server.server_id, "now": rfc3339(time.time()), "account_statz": stats}


# ---------------------------------------------------------------------------------------------------------
# /leafz, /jsz, /routez, /gatewayz


def leafz(server: Server, subs: bool = False, account: str = "") -> dict[str, Any]:
    lm = _leaf_manager(server)
    if lm is not None and hasattr(lm, "leafz"):
        try:
            d = dict(lm.leafz(subs=subs, account=account))
            d["server_id"] = server.server_id
            d.setdefault("now", rfc3339(time.time()))
            d.setdefault("leafs", [])
            d.setdefault("leafnodes", len(d["leafs"]))
            return d
        except Exception as e:
            log.error("leafnode monitoring failed: %s", e)
    return {"server_id": server.server_id, "now": rfc3339(time.time()), "leafnodes": 0, "leafs": []}


@dataclass
class JszOptions:
    account: str = ""
    accounts: bool = False
    streams: bool = False
    consumer: bool = False
    config: bool = False
    leader_only: bool = False
    offset: int = 0
    limit: int = 0

    @classmethod
    def from_query(cls, q: dict[str, str]) -> JszOptions:
        return cls(account=q.get("acc", ""), accounts=parse_bool("accounts", q.get("accounts")),
                   streams=parse_bool("streams", q.get("streams")),
                   consumer=parse_bool("consumers", q.get("consumers")),
                   config=parse_bool("config", q.get("config")),
                   leader_only=parse_bool("leader-only", q.get("leader-only")),
                   offset=parse_int("offset", q.get("offset")), limit=parse_int("limit", q.get("limit")))

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> JszOptions:
        return cls(account=str(d.get("account") or ""), accounts=bool(d.get("accounts")),
                   streams=bool(d.get("streams")), consumer=bool(d.get("consumer")), config=bool(d.get("config")),
                   leader_only=bool(d.get("leader_only")), offset=int(d.get("offset") or 0),
                   limit=int(d.get("limit") or 0))


def jsz(server: Server, o: JszOptions | None = None) -> dict[str, Any]:
    o = o or JszOptions()
    js = _jetstream(server)
    head = {"server_id": server.server_id, "now": rfc3339(time.time())}
    if js is not None and hasattr(js, "jsz"):
        d = dict(js.jsz(o))
        return _empty_js_stats() | d | head
    if js is None or not _js_enabled(server):
        return _empty_js_stats() | head | {
            "disabled": True, "config": {"max_memory": 0, "max_storage": 0},
            "streams": 0, "consumers": 0, "messages": 0, "bytes": 0, "total": 0,
        }
    info = _js_info(server) or {}
    stats = info.get("stats") or _empty_js_stats()
    out = dict(stats) | head | {"config": info.get("config") or _js_config_from_opts(server)}
    if info.get("limits"):
        out["limits"] = info["limits"]
    out |= {k: info.get(k, 0) for k in ("streams", "consumers", "messages", "bytes")}
    out["total"] = stats.get("accounts", 0)
    return out


def routez(server: Server) -> dict[str, Any]:
    return {"server_id": server.server_id, "server_name": server.server_name, "now": rfc3339(time.time()),
            "num_routes": 0, "routes": []}


def gatewayz(server: Server) -> dict[str, Any]:
    return {"server_id": server.server_id, "now": rfc3339(time.time()), "outbound_gateways": {},
            "inbound_gateways": {}}


# ---------------------------------------------------------------------------------------------------------
# /healthz


@dataclass
class HealthzOptions:
    js_enabled: bool = False
    js_enabled_only: bool = False
    js_server_only: bool = False
    js_meta_only: bool = False
    account: str = ""
    stream: str = ""
    consumer: str = ""
    details: bool = False
    leafnodes: bool = False  # edged-only: also fail while a configured leafnode remote is down

    @classmethod
    def from_query(cls, q: dict[str, str]) -> HealthzOptions:
        return cls(js_enabled=parse_bool("js-enabled", q.get("js-enabled")),
                   js_enabled_only=parse_bool("js-enabled-only", q.get("js-enabled-only")),
                   js_server_only=parse_bool("js-server-only", q.get("js-server-only")),
                   js_meta_only=parse_bool("js-meta-only", q.get("js-meta-only")),
                   details=parse_bool("details", q.get("details")),
                   account=q.get("account", ""), stream=q.get("stream", ""), consumer=q.get("consumer", ""),
                   leafnodes=parse_bool("leafnodes", q.get("leafnodes")))

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> HealthzOptions:
        return cls(js_enabled=bool(d.get("js-enabled")), js_enabled_only=bool(d.get("js-enabled-only")),
                   js_server_only=bool(d.get("js-server-only")), js_meta_only=bool(d.get("js-meta-only")),
                   account=str(d.get("account") or ""), stream=str(d.get("stream") or ""),
                   consumer=str(d.get("consumer") or ""), details=bool(d.get("details")),
                   leafnodes=bool(d.get("leafnodes")))


def healthz(server: Server, o: HealthzOptions | None = None) -> dict[str, Any]:
    """HealthStatus with `status_code` (the HTTP layer moves it to the status line)."""
    o = o or HealthzOptions()
    errors: list[dict[str, Any]] = []

    def fail(code: int, status: str, etype: str, text: str, **where: str) -> dict[str, Any]:
        if o.details:
            errors.append({"type": etype, **{k: v for k, v in where.items() if v}, "error": text})
            return {"status": "error", "status_code": code, "errors": errors}
        return {"status": status, "status_code": code, "error": text}

    if not o.account and o.stream:
        return fail(400, "error", "BAD_REQUEST", '"account" must not be empty when checking stream health')
    if not o.stream and o.consumer:
        return fail(400, "error", "BAD_REQUEST", '"stream" must not be empty when checking consumer health')
    if getattr(server, "shutting_down", False):
        return fail(503, "unavailable", "CONNECTION", "server is shutting down")
    if not server.client_port:
        return fail(500, "error", "CONNECTION",
                    "failed to be ready for connections after 1ms: startup did not complete")
    if o.leafnodes:
        lm = _leaf_manager(server)
        if lm is not None and hasattr(lm, "healthz"):
            ok, err = lm.healthz()
            if not ok:
                return fail(503, "unavailable", "CONNECTION", err)
    if o.js_server_only or not server.opts.jetstream.enabled:
        return {"status": "ok", "status_code": 200}
    js = _jetstream(server)
    if js is None or not _js_enabled(server):
        return fail(503, "unavailable", "JETSTREAM", "JetStream not enabled (10076)")
    if o.js_enabled_only or o.js_enabled:
        return {"status": "ok", "status_code": 200}
    check = getattr(js, "healthz", None)
    if callable(check):
        try:
            ok, err = check(account=o.account, stream=o.stream, consumer=o.consumer)
        except Exception as e:
            ok, err = False, str(e)
        if not ok:
            etype = "CONSUMER" if o.consumer else "STREAM" if o.stream else "ACCOUNT" if o.account else "JETSTREAM"
            return fail(503, "unavailable", etype, err, account=o.account, stream=o.stream, consumer=o.consumer)
    return {"status": "ok", "status_code": 200}


# ---------------------------------------------------------------------------------------------------------
# /metrics (Prometheus text exposition 0.0.4)


def _esc_label(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt_num(v: float | int) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if v != v:
        return "NaN"
    if v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


class _Metrics:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, name: str, mtype: str, help_: str, samples: list[tuple[dict[str, str], float | int]]) -> None:
        self.lines.append(f"# HELP {name} {help_}")
        self.lines.append(f"# TYPE {name} {mtype}")
        for labels, value in samples:
            if labels:
                lab = ",".join(f'{k}="{_esc_label(str(v))}"' for k, v in labels.items())
                self.lines.append(f"{name}{{{lab}}} {_fmt_num(value)}")
            else:
                self.lines.append(f"{name} {_fmt_num(value)}")

    def one(self, name: str, mtype: str, help_: str, value: float | int) -> None:
        self.add(name, mtype, help_, [({}, value)])

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def metrics(server: Server) -> str:
    v = varz(server)
    m = _Metrics()
    m.add("edged_info", "gauge", "Build and identity information; the value is always 1.", [(
        {"version": __version__, "nats_version": SERVER_VERSION, "server_id": server.server_id,
         "server_name": server.server_name}, 1)])
    m.one("edged_varz_start_time_seconds", "gauge", "Unix time the server started.", server.start_time)
    m.one("edged_varz_uptime_seconds", "gauge", "Seconds since the server started.", time.time() - server.start_time)
    m.one("edged_varz_mem_bytes", "gauge", "Resident set size of the process.", v["mem"])
    m.one("edged_varz_cpu_percent", "gauge", "Process CPU usage since the previous sample.", v["cpu"])
    m.one("edged_varz_cores", "gauge", "CPU cores available to the process.", v["cores"])
    m.one("edged_varz_connections", "gauge", "Client connections currently open.", v["connections"])
    m.one("edged_varz_accepted_connections_total", "counter", "Client connections accepted since start.",
          v["total_connections"])
    m.one("edged_varz_max_connections", "gauge", "Configured connection limit.", v["max_connections"])
    m.one("edged_varz_leafnodes", "gauge", "Leafnode connections currently up.", v["leafnodes"])
    m.one("edged_varz_subscriptions", "gauge", "Subscriptions in all accounts.", v["subscriptions"])
    m.one("edged_varz_slow_consumers_total", "counter", "Connections closed as slow consumers.",
          v["slow_consumers"])
    m.one("edged_varz_in_msgs_total", "counter", "Messages received from connections.", v["in_msgs"])
    m.one("edged_varz_out_msgs_total", "counter", "Messages delivered to connections.", v["out_msgs"])
    m.one("edged_varz_in_bytes_total", "counter", "Payload bytes received from connections.", v["in_bytes"])
    m.one("edged_varz_out_bytes_total", "counter", "Payload bytes delivered to connections.", v["out_bytes"])
    m.one("edged_varz_config_reloads_total", "counter", "Successful configuration reloads.",
          getattr(server, "reloads", 0))
    m.one("edged_varz_config_load_time_seconds", "gauge", "Unix time the configuration was last loaded.",
          server.config_load_time)
    m.one("edged_varz_max_payload_bytes", "gauge", "Configured maximum message payload.", v["max_payload"])
    st = sublist_stats(server)
    m.one("edged_subsz_cache_entries", "gauge", "Entries in the subject match caches.", st["num_cache"])
    m.one("edged_subsz_matches_total", "counter", "Subject match lookups.", st["num_matches"])
    m.one("edged_subsz_inserts_total", "counter", "Subscriptions inserted.", st["num_inserts"])
    m.one("edged_subsz_removes_total", "counter", "Subscriptions removed.", st["num_removes"])
    m.one("edged_subsz_cache_hit_ratio", "gauge", "Fraction of match lookups served from cache.",
          st["cache_hit_rate"])
    acc = accstatz(server, include_unused=True)["account_statz"]
    m.add("edged_account_connections", "gauge", "Client connections per account.",
          [({"account": a["acc"]}, a["conns"]) for a in acc])
    m.add("edged_account_subscriptions", "gauge", "Subscriptions per account.",
          [({"account": a["acc"]}, a["num_subscriptions"]) for a in acc])
    m.add("edged_account_in_msgs_total", "counter", "Messages received from an account's connections.",
          [({"account": a["acc"]}, a["received"]["msgs"]) for a in acc])
    m.add("edged_account_out_msgs_total", "counter", "Messages delivered to an account's connections.",
          [({"account": a["acc"]}, a["sent"]["msgs"]) for a in acc])
    h = healthz(server)
    m.one("edged_healthz_ok", "gauge", "1 when /healthz reports ok.", 1 if h["status"] == "ok" else 0)
    m.add("edged_http_requests_total", "counter", "Monitoring HTTP requests by endpoint.",
          [({"path": p}, n) for p, n in sorted(state_of(server).http_req_stats.items())])
    js_on = server.opts.jetstream.enabled
    m.one("edged_jetstream_enabled", "gauge", "1 when JetStream is configured.", 1 if js_on else 0)
    if js_on:
        j = jsz(server)
        m.one("edged_jetstream_memory_bytes", "gauge", "Memory used by JetStream streams.", j.get("memory", 0))
        m.one("edged_jetstream_storage_bytes", "gauge", "Storage used by JetStream streams.", j.get("storage", 0))
        m.one("edged_jetstream_streams", "gauge", "JetStream streams.", j.get("streams", 0))
        m.one("edged_jetstream_consumers", "gauge", "JetStream consumers.", j.get("consumers", 0))
        m.one("edged_jetstream_messages", "gauge", "Messages stored in JetStream streams.", j.get("messages", 0))
        m.one("edged_jetstream_bytes", "gauge", "Bytes stored in JetStream streams.", j.get("bytes", 0))
        api = j.get("api") or {}
        m.one("edged_jetstream_api_requests_total", "counter", "JetStream API requests.", api.get("total", 0))
        m.one("edged_jetstream_api_errors_total", "counter", "JetStream API requests that failed.",
              api.get("errors", 0))
    return m.text()


# ---------------------------------------------------------------------------------------------------------
# the HTTP server

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
            431: "Request Header Fields Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}
MAX_HEADER_BYTES = 16 * 1024
READ_TIMEOUT = 10.0

_ENDPOINTS = [
    (VARZ_PATH, "General"), (JSZ_PATH, "JetStream"), (CONNZ_PATH, "Connections"), (ACCOUNTZ_PATH, "Accounts"),
    (ACCSTATZ_PATH, "Account Stats"), (SUBSZ_PATH, "Subscriptions"), (ROUTEZ_PATH, "Routes"),
    (LEAFZ_PATH, "LeafNodes"), (GATEWAYZ_PATH, "Gateways"), (HEALTHZ_PATH, "Health Probe"),
    (METRICS_PATH, "Prometheus Metrics"),
]


def _query(qs: str) -> dict[str, str]:
    """Go's URL.Query().Get(): first value of each key, blanks kept."""
    out: dict[str, str] = {}
    for k, vals in parse_qs(qs, keep_blank_values=True).items():
        out[k] = vals[0]
    return out


class MonitorServer:
    """The HTTP monitoring port. Started and stopped by Server when `http_port` is set."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.state = state_of(server)
        self.port = 0
        self.host = server.opts.http_host or "0.0.0.0"
        base = (server.opts.http_base_path or "").strip("/")
        self.base = "/" + base if base else ""
        self._srv: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._routes: dict[str, Callable[[dict[str, str]], tuple[int, str, bytes]]] = {
            ROOT_PATH: self._root,
            VARZ_PATH: lambda q: self._json(varz(self.server)),
            CONNZ_PATH: lambda q: self._json(connz(self.server, ConnzOptions.from_query(q))),
            SUBSZ_PATH: self._subsz,
            SUBSCRIPTIONSZ_PATH: self._subsz,
            ACCOUNTZ_PATH: lambda q: self._json(accountz(self.server, q.get("acc", ""))),
            ACCSTATZ_PATH: lambda q: self._json(accstatz(self.server, parse_bool("unused", q.get("unused")))),
            LEAFZ_PATH: lambda q: self._json(leafz(self.server, parse_bool("subs", q.get("subs")),
                                                   q.get("acc", ""))),
            JSZ_PATH: lambda q: self._json(jsz(self.server, JszOptions.from_query(q))),
            ROUTEZ_PATH: lambda q: self._json(routez(self.server)),
            GATEWAYZ_PATH: lambda q: self._json(gatewayz(self.server)),
            HEALTHZ_PATH: self._healthz,
            METRICS_PATH: lambda q: (200, "text/plain; version=0.0.4; charset=utf-8",
                                     metrics(self.server).encode()),
        }

    async def start(self) -> None:
        port = self.server.opts.http_port
        self._srv = await asyncio.start_server(
            self._handle, host=self.host, port=0 if port == -1 else port, reuse_address=True,
            limit=MAX_HEADER_BYTES,
        )
        self.port = self._srv.sockets[0].getsockname()[1]
        log.info("Starting http monitor on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        srv, self._srv = self._srv, None
        if srv is not None:
            srv.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if srv is not None:
            try:
                await asyncio.wait_for(srv.wait_closed(), 2.0)
            except TimeoutError:
                pass

    # ------------------------------------------------------------------ request handling

    def _json(self, doc: Any) -> tuple[int, str, bytes]:
        return 200, "application/json", to_json(doc, indent=True)

    def _subsz(self, q: dict[str, str]) -> tuple[int, str, bytes]:
        return self._json(subsz(self.server, SubszOptions.from_query(q)))

    def _healthz(self, q: dict[str, str]) -> tuple[int, str, bytes]:
        hs = healthz(self.server, HealthzOptions.from_query(q))
        code = hs.pop("status_code", 200)
        if code != 200:
            log.warning("Healthcheck failed: %r", hs.get("error") or hs.get("errors"))
        return code, "application/json", to_json(hs)

    def _root(self, q: dict[str, str]) -> tuple[int, str, bytes]:
        links = "\n".join(
            f'    <a href=".{p}">{title}<span class="endpoint"> {p}</span></a>' for p, title in _ENDPOINTS
        )
        page = f"""<html lang="en">
  <head>
    <title>edged monitoring</title>
    <style type="text/css">
      body {{ font-family: ui-sans-serif, system-ui, sans-serif; margin-left: 32px }}
      a {{ display: block; padding-bottom: 6px; color: rgb(72 72 92); text-decoration: none }}
      a:hover {{ font-weight: 600 }}
      .endpoint {{ font-size: 12px; color: #999; font-family: monospace }}
    </style>
  </head>
  <body>
    <h2>edged v{__version__}</h2>
    <p>nats-server {SERVER_VERSION} compatible &middot; {self.server.server_name}</p>
{links}
  </body>
</html>
"""
        return 200, "text/html; charset=utf-8", page.encode()

    def dispatch(self, method: str, target: str) -> tuple[int, str, bytes, dict[str, str]]:
        """Route one request; returns (status, content type, body, extra headers). No I/O."""
        if method not in ("GET", "HEAD"):
            return 405, "text/plain; charset=utf-8", b"Method Not Allowed\n", {"Allow": "GET, HEAD"}
        parts = urlsplit(target)
        path = unquote(parts.path or "/")
        if self.base:
            if path == self.base:
                path = "/"
            elif path.startswith(self.base + "/"):
                path = path[len(self.base):]
            else:
                return 404, "text/plain; charset=utf-8", b"404 page not found\n", {}
        handler = self._routes.get(path)
        if handler is None:
            return 404, "text/plain; charset=utf-8", b"404 page not found\n", {}
        stats = self.state.http_req_stats
        stats[path] = stats.get(path, 0) + 1
        try:
            status, ctype, body = handler(_query(parts.query))
        except MonitorError as e:
            return e.code, "text/plain; charset=utf-8", str(e).encode(), {}
        except Exception as e:  # a monitoring bug must not take the daemon's port down
            log.error("Error handling monitoring request %s: %s", path, e, exc_info=True)
            return 500, "text/plain; charset=utf-8", f"internal error: {e}".encode(), {}
        return status, ctype, body, {}

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            try:
                method, target = await asyncio.wait_for(self._read_request(reader), READ_TIMEOUT)
            except TimeoutError:
                await self._respond(writer, "GET", 408, "text/plain; charset=utf-8", b"Request Timeout\n", {})
                return
            except (ValueError, asyncio.LimitOverrunError, asyncio.IncompleteReadError) as e:
                code = 431 if isinstance(e, ValueError | asyncio.LimitOverrunError) and "limit" in str(e) else 400
                await self._respond(writer, "GET", code, "text/plain; charset=utf-8",
                                    f"{code} {_REASONS[code]}\n".encode(), {})
                return
            status, ctype, body, extra = self.dispatch(method, target)
            await self._respond(writer, method, status, ctype, body, extra)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            try:
                writer.close()
            except Exception:
                pass

    @staticmethod
    async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str]:
        line = await reader.readline()
        if not line.endswith(b"\n"):
            raise asyncio.IncompleteReadError(line, None)
        fields = line.decode("latin-1").strip().split(" ")
        if len(fields) != 3 or not fields[2].startswith("HTTP/1."):
            raise ValueError("malformed request line")
        total = len(line)
        while True:
            h = await reader.readline()
            total += len(h)
            if total > MAX_HEADER_BYTES:
                raise ValueError("header limit exceeded")
            if not h.endswith(b"\n"):
                raise asyncio.IncompleteReadError(h, None)
            if h in (b"\r\n", b"\n"):
                break
        return fields[0], fields[1]

    @staticmethod
    async def _respond(writer: asyncio.StreamWriter, method: str, status: int, ctype: str, body: bytes,
                       extra: dict[str, str]) -> None:
        headers = {
            "Content-Type": ctype,
            "Access-Control-Allow-Origin": "*",
            "Date": formatdate(usegmt=True),
            "Content-Length": str(len(body)),
            "Connection": "close",
        } | extra
        head = f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        writer.write(head.encode("latin-1") + (b"" if method == "HEAD" else body))
        await writer.drain()
