"""The Prometheus /metrics page (text exposition format 0.0.4), built from the same documents as /varz."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from edged import SERVER_VERSION, __version__
from edged.goformat import parse_rfc3339
from edged.monitor.backlog import backlog, finite
from edged.monitor.documents import accstatz, healthz, jsz, sublist_stats, varz
from edged.monitor.process import state_of

if TYPE_CHECKING:
    from edged.server import Server


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
          server.reloads)
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
    if js_on or server.leafnodes is not None:
        _backlog(m, backlog(server))
    for families in server.metric_blocks:  # services outside edged/ (board health)
        for name, mtype, help_, samples in families():
            m.add(name, mtype, help_, samples)
    return m.text()


def _backlog(m: _Metrics, b: dict[str, Any]) -> None:
    """edged's own figures (/jsz `edged_backlog`): the links, each mirror/source, each hub consumer here.
    An unknown figure (no rate yet, nothing moving) is NaN."""
    rem = b.get("leaf_remotes") or []
    rl = [{"account": r["account"], "urls": ",".join(r["urls"])} for r in rem]
    m.add("edged_leaf_remote_connected", "gauge", "1 while the leafnode remote is connected.",
          [(lab, 1 if r["connected"] else 0) for lab, r in zip(rl, rem, strict=True)])
    m.add("edged_leaf_remote_rtt_seconds", "gauge", "Last measured round trip time of the leafnode link.",
          [(lab, finite(r["rtt_seconds"])) for lab, r in zip(rl, rem, strict=True)])
    m.add("edged_leaf_remote_state_since_seconds", "gauge",
          "Unix time the remote got connected (or was first seen down, while it is down).",
          [(lab, _unix(r["since"])) for lab, r in zip(rl, rem, strict=True)])
    syncs = b.get("syncs") or []
    sl = [{"account": s["account"], "stream": s["stream"], "kind": s["kind"], "source": s["origin"]} for s in syncs]
    for name, key, help_ in (
        ("edged_sync_behind_messages", "msgs_behind", "Messages the origin still holds for this mirror/source."),
        ("edged_sync_behind_bytes", "bytes_behind", "Estimated bytes of those messages (stream mean size)."),
        ("edged_sync_oldest_age_seconds", "oldest_age_seconds", "Age of the oldest message not yet taken."),
        ("edged_sync_last_contact_age_seconds", "last_contact_seconds",
         "Seconds since the origin was last heard (message or heartbeat)."),
        ("edged_sync_rate_messages_per_second", "rate_msgs_per_second", "Recent rate messages are taken at."),
        ("edged_sync_drain_seconds", "drain_seconds", "Estimated seconds to take what is behind at that rate."),
    ):
        m.add(name, "gauge", help_, [(lab, finite(s[key])) for lab, s in zip(sl, syncs, strict=True)])
    m.add("edged_sync_active", "gauge", "1 while the mirror/source has a live origin consumer.",
          [(lab, 1 if s["syncing"] else 0) for lab, s in zip(sl, syncs, strict=True)])
    org = b.get("origin_consumers") or []
    ol = [{"account": o["account"], "stream": o["stream"], "filter": ",".join(o["filters"]) or ">"} for o in org]
    for name, key, help_ in (
        ("edged_origin_pending_messages", "pending_msgs", "Messages a hub's mirror/source still has to take."),
        ("edged_origin_pending_bytes", "pending_bytes", "Estimated bytes of those messages (stream mean size)."),
        ("edged_origin_rate_messages_per_second", "rate_msgs_per_second", "Recent rate the hub takes them at."),
        ("edged_origin_drain_seconds", "drain_seconds", "Estimated seconds until the hub has them all."),
    ):
        m.add(name, "gauge", help_, [(lab, finite(o[key])) for lab, o in zip(ol, org, strict=True)])
    m.add("edged_origin_last_delivery_seconds", "gauge", "Unix time of the last delivery to the hub.",
          [(lab, _unix(o["last_delivery"])) for lab, o in zip(ol, org, strict=True)])


def _unix(t: str) -> float:
    """An RFC 3339 time of the document as Unix seconds; Go's zero time is 0."""
    try:
        ns = parse_rfc3339(t)
    except ValueError:
        return 0
    return ns / 1e9 if ns > 0 else 0
