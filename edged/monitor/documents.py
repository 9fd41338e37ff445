"""The monitoring documents (/varz, /connz, /subsz, /accountz, /accstatz, /leafz, /jsz, /healthz, ...).

Plain functions of the Server, so the HTTP port (httpserver.py) and the `$SYS.REQ.SERVER.*` handlers
(sysreqs.py) answer with exactly the same documents. Field names, orderings, time and duration formats
follow nats-server's server/monitor.go so that tools written for nats-server read edged unchanged.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edged import API_LEVEL, SERVER_VERSION
from edged.appliance.doctor import doctor_of
from edged.goformat import rfc3339, rtt_text, uptime_text
from edged.log import log
from edged.monitor.backlog import backlog
from edged.monitor.process import num_cores, state_of
from edged.monitor.request import MonitorError, parse_bool, parse_int
from edged.routing.accounts import GLOBAL_ACCOUNT, InternalClient
from edged.routing.imports import StreamImportRule
from edged.routing.subjects import is_valid_literal_subject, subject_matches, subjects_overlap
from edged.security.account_jwt import untokenize

if TYPE_CHECKING:
    from edged.connections.client import ClientConnection
    from edged.leafnode import LeafConnection
    from edged.server import Server

DEFAULT_CONN_LIST_SIZE = 1024
DEFAULT_SUB_LIST_SIZE = 1024
LEAF_KIND = "Leafnode"

SORT_OPTIONS = (
    "cid", "start", "subs", "pending", "msgs_to", "msgs_from", "bytes_to", "bytes_from",
    "last", "idle", "uptime", "stop", "reason", "rtt",
)


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
# server state


def _conns(server: Server) -> list[ClientConnection]:
    return list(server.clients.values())


def _leaf_conns(server: Server) -> list[LeafConnection]:
    lm = server.leafnodes
    return lm.connections if lm is not None else []


def jetstream_enabled(server: Server) -> bool:
    js = server.jetstream
    return js is not None and js.enabled


def _account_stats(acc: Any) -> dict[str, Any]:
    """nats-server's SublistStats for one sublist; fanout from the match cache as nats-server does."""
    sl = acc.sublist
    cached, tot, mx = sl.cache_fanout()
    return {
        "num_subscriptions": sl.count,
        "num_cache": sl.cache_size(),
        "num_inserts": sl.inserts,
        "num_removes": sl.removes,
        "num_matches": sl.matches,
        "cache_hits": sl.cache_hits,
        "max_fanout": mx,
        "tot_fanout": tot,
        "cache_cnt": cached,
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
    """Server-wide in/out counters: open connections, leafnodes and the closed ring summed (the core keeps
    no server-wide counters, so history is lost once the ring wraps)."""
    names = ("in_msgs", "in_bytes", "out_msgs", "out_bytes")
    tot = dict.fromkeys(names, 0)
    for c in [*_conns(server), *_leaf_conns(server)]:
        tot["in_msgs"] += c.in_msgs
        tot["in_bytes"] += c.in_bytes
        tot["out_msgs"] += c.out_msgs
        tot["out_bytes"] += c.out_bytes
    for info in list(server.closed_clients):
        for n in names:
            tot[n] += info.get(n, 0)
    return tot


def _client_counts(server: Server) -> tuple[int, int]:
    """(client connections, leafnode connections)."""
    conns = _conns(server)
    leafs = [c for c in conns if c.kind == LEAF_KIND]
    return len(conns) - len(leafs), len(leafs) + len(_leaf_conns(server))


# ---------------------------------------------------------------------------------------------------------
# /varz


def _drop_empty(d: dict[str, Any]) -> dict[str, Any]:
    """Go's omitempty for the nested option blocks."""
    return {k: v for k, v in d.items() if v not in (None, "", 0, False, [], {})}


def _leaf_varz(server: Server) -> dict[str, Any]:
    lm = server.leafnodes
    if lm is not None:
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
    cfg["strict"] = True  # API requests are always read strictly
    return _drop_empty(cfg) | {"max_memory": cfg["max_memory"], "max_storage": cfg["max_storage"]}


FEATURE_FLAGS = {"js_ack_fc_v2": False, "js_api_reply_v2": False, "js_raft_delete_range": False,
                 "js_snapshot_sources": False}


def _empty_js_stats() -> dict[str, Any]:
    return {"memory": 0, "storage": 0, "reserved_memory": 0, "reserved_storage": 0, "accounts": 0,
            "ha_assets": 0, "api": {"level": API_LEVEL, "total": 0, "errors": 0}}


def _js_info(server: Server) -> dict[str, Any] | None:
    """The JetStream engine's `info()` (config, stats, streams, consumers, messages, bytes) if it exists."""
    js = server.jetstream
    if js is None:
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
    http_port = (server.monitor.port if server.monitor is not None else 0) or o.http_port
    v |= {
        "ping_interval": int(o.ping_interval * 1e9),
        "ping_max": o.ping_max,
        "http_host": o.monitor_host(),
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
        "stale_connections": server.stale_connections,
        "stalled_clients": 0,
        "subscriptions": sum(a.sublist.count for a in list(server.accounts.values())),
        "http_req_stats": dict(st.http_req_stats),
        "config_load_time": rfc3339(server.config_load_time),
        "config_digest": server.opts.config_digest,
        # nats-server's opt-in wire formats and Raft switches: edged uses none of them (the v1 ack subject
        # format, no Raft), which is what `false` says
        "feature_flags": dict(FEATURE_FLAGS),
    }
    if server.system_account_name:
        v["system_account"] = server.system_account_name
    v["slow_consumer_stats"] = {"clients": server.slow_consumers, "routes": 0, "gateways": 0, "leafs": 0}
    v["stale_connection_stats"] = {"clients": server.stale_connections - server.stale_leafs, "routes": 0,
                                   "gateways": 0, "leafs": server.stale_leafs}
    v["disk_io_wait_stats"] = {"waiters": 0, "waits": 0, "wait_time": 0, "max_wait_time": 0}
    for name, block in server.varz_blocks.items():  # edged's own blocks (board health: edged_hw)
        v[name] = block()
    return v


def _mqtt_varz(server: Server) -> dict[str, Any]:
    m = server.opts.mqtt
    if m is None:
        return {}
    return _drop_empty({
        "host": m.host, "port": m.port, "no_auth_user": m.no_auth_user,
        "tls_timeout": m.tls.timeout if m.tls else 0, "ack_wait": int(m.ack_wait * 1e9),
        "max_ack_pending": m.max_ack_pending, "js_domain": m.js_domain, "reject_qos2_pub": m.reject_qos2_publish,
        "downgrade_qos2_sub": m.downgrade_qos2_subscribe,
        # edged's: MQTT connections open now (a connection kind that carries an MQTT client id)
        "connections": sum(1 for c in server.clients.values() if getattr(c, "mqtt_client", None) is not None),
    })


def _ws_varz(server: Server) -> dict[str, Any]:
    """nats-server's WebsocketOptsVarz: the listening port (a random one once bound), empty fields left out."""
    w = server.opts.websocket
    if w is None or not w.port:
        return {}
    port = next((lst.bound_port for lst in server.listeners if lst.name == "websocket" and lst.bound_port), w.port)
    return _drop_empty({
        "host": w.host or "0.0.0.0", "port": port, "advertise": w.advertise, "no_auth_user": w.no_auth_user,
        "jwt_cookie": w.jwt_cookie, "handshake_timeout": int(w.handshake_timeout * 1e9),
        "auth_timeout": w.auth_timeout, "no_tls": w.no_tls, "tls_map": bool(w.tls and w.tls.verify_and_map),
        "same_origin": w.same_origin, "allowed_origins": list(w.allowed_origins), "compression": w.compression,
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
    return _conn_info(info, now, o, subs=list(conn.subs.values()), tls_first=_tls_first(conn))


def _tls_first(conn: Any) -> bool:
    tls = conn.server.opts.tls
    return bool(tls is not None and tls.handshake_first and conn.tls_info)


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
            open_conns = [c for c in open_conns if c.account is not None and c.account.name == o.acc]
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
        open_conns = [c for c in open_conns if c.user == o.user]
        closed = [c for c in closed if c.get("user") == o.user]
    if o.mqtt_client:
        # only MQTT connections have a client id, and they carry it in their info()
        open_conns = [c for c in open_conns if c.info().get("mqtt_client") == o.mqtt_client]
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
                # internal (service) subscriptions have no connection id; nats-server's have their own
                details.append(_sub_detail(sub, 0 if isinstance(conn, InternalClient) else conn.cid, name))
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
    js = server.jetstream
    return js is not None and js.account_enabled(acc.name)


def account_info(server: Server, name: str) -> dict[str, Any]:
    acc = server.accounts.get(name)
    if acc is None:
        raise MonitorError(f"Account {name} does not exist")
    cfg = acc.config
    clients = [c for c in list(acc.clients) if c.kind != LEAF_KIND]
    leafs = [c for c in _leaf_conns(server) if c.account.name == name]
    exports = []
    for e in cfg.exports:
        if e.service:
            # nats-server names its response types (ServiceRespType.String) "Streamed" where configs say "stream"
            rt = {"stream": "Streamed", "chunked": "Chunked"}.get(e.response_type.strip().lower(), "Singleton")
            ex: dict[str, Any] = {"subject": e.service, "type": "service", "response_type": rt}
        else:
            ex = {"subject": e.stream or "", "type": "stream"}
        if e.token_req:
            ex["token_req"] = True
        if e.accounts:  # omitted when empty, as nats-server's omitempty does
            ex["approved_accounts"] = list(e.accounts)
        if e.revocations:
            ex["revoked_activations"] = {k: rfc3339(float(t)) for k, t in e.revocations.items()}
        exports.append(ex)
    imports = []
    for si in cfg.stream_imports:
        imp: dict[str, Any] = {"subject": si.subject, "account": si.account}
        imp["local_subject"] = StreamImportRule(acc, si).to  # the import's own subject space
        imports.append(imp | {"type": "stream", "invalid": False, "share": False, "tracking": False})
    for sv in cfg.service_imports:
        local = untokenize(sv.to or sv.subject)  # an account JWT's `$n` references: the subject subscribed
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
    mappings = list(cfg.mappings) + (list(server.opts.mappings) if name == "$G" else [])
    if mappings:
        d["mappings"] = {m.src: _map_dests(m) for m in mappings}
    if cfg.issuer or cfg.nkey:  # an account JWT's issuer: the operator's key (or its signing key)
        d["issuer_key"] = cfg.issuer or cfg.nkey
    d["name_tag"] = cfg.name_tag or name  # an account JWT's name
    d["sublist_stats"] = _public_sublist_stats(_account_stats(acc))
    return d


def _map_dests(m: Any) -> list[dict[str, Any]]:
    """A mapping's destinations as nats-server lists them: by weight, the weights summed up to 100, the
    source itself taking what the others leave."""
    out: list[dict[str, Any]] = []
    clusters = [""] + sorted({d.cluster for d in m.dests if d.cluster})
    for c in clusters:  # an account JWT's cluster-scoped destinations after the others, per cluster
        dests = sorted(((d.weight, d.subject) for d in m.dests if d.cluster == c), key=lambda x: x[0])
        total = sum(w for w, _ in dests)
        if total != 100 and all(subj != m.src for _, subj in dests):
            dests = sorted([*dests, (100 - total if dests else 100, m.src)], key=lambda x: x[0])
        cum = 0
        for w, subj in dests:
            cum += w
            out.append({"subject": subj, "weight": cum} | ({"cluster": c} if c else {}))
    return out


def _msg_bytes(members: list[Any], d: str) -> dict[str, int]:
    if d == "in":
        return {"msgs": sum(c.in_msgs for c in members), "bytes": sum(c.in_bytes for c in members)}
    return {"msgs": sum(c.out_msgs for c in members), "bytes": sum(c.out_bytes for c in members)}


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
        conns = [c for c in list(acc.clients) if c.kind != LEAF_KIND]
        leafs = [c for c in _leaf_conns(server) if c.account.name == name]
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
    lm = server.leafnodes
    if lm is not None:
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
    js = server.jetstream
    head = {"server_id": server.server_id, "now": rfc3339(time.time())}
    # edged's own figures (mirror/source lag, what a hub still has to take, the links) under their own key
    # (only where there is something to show: no JetStream and no leafnode remotes is nats-server's document)
    mine = {"edged_backlog": backlog(server)} if js is not None or server.leafnodes is not None else {}
    for svc in server.services:  # services outside edged/ (the upstream MQTT bridges: mqtt_bridges)
        extra = getattr(svc, "jsz_extra", None)
        if extra is not None:
            mine |= extra()
    if js is not None:
        return _empty_js_stats() | dict(js.jsz(o)) | head | mine
    return _empty_js_stats() | head | {
        "disabled": True, "config": {"max_memory": 0, "max_storage": 0},
        "streams": 0, "consumers": 0, "messages": 0, "bytes": 0, "total": 0,
    } | mine


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
    if server.shutting_down:
        return fail(503, "unavailable", "CONNECTION", "server is shutting down")
    if not server.client_port:
        return fail(500, "error", "CONNECTION",
                    "failed to be ready for connections after 1ms: startup did not complete")
    if o.leafnodes:
        lm = server.leafnodes
        if lm is not None:
            ok, err = lm.healthz()
            if not ok:
                return fail(503, "unavailable", "CONNECTION", err)
    if o.js_server_only or not server.opts.jetstream.enabled:
        return _healthy(server)
    js = server.jetstream
    if js is None or not js.enabled:
        return fail(503, "unavailable", "JETSTREAM", "JetStream not enabled (10076)")
    if o.js_enabled_only or o.js_enabled:
        return _healthy(server)
    try:
        ok, err = js.healthz(account=o.account, stream=o.stream, consumer=o.consumer)
    except Exception as e:
        ok, err = False, str(e)
    if not ok:
        etype = "CONSUMER" if o.consumer else "STREAM" if o.stream else "ACCOUNT" if o.account else "JETSTREAM"
        return fail(503, "unavailable", etype, err, account=o.account, stream=o.stream, consumer=o.consumer)
    return _healthy(server)


def _healthy(server: Server) -> dict[str, Any]:
    """An ok HealthStatus; edged adds `warnings` (the link doctor's: creds expiring soon or a refused creds
    rotation, a link connected but silent for long) worth a person's attention but no reason for a
    supervisor to restart anything."""
    h: dict[str, Any] = {"status": "ok", "status_code": 200}
    warnings = doctor_of(server).findings()
    if warnings:
        h["warnings"] = warnings
    return h
