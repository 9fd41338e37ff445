"""`$SYS.REQ.SERVER.*` / `$SYS.REQ.ACCOUNT.*` requests: monitoring over NATS in the system account.

Tools such as `nats server list|report|info` and hub-side dashboards ping every server with
`$SYS.REQ.SERVER.PING[.VARZ|.CONNZ|...]` or address one with `$SYS.REQ.SERVER.<id>.<ENDPOINT>`. The answers
carry nats-server's envelope (server/events.go ServerAPIResponse): `{"server": ServerInfo, "data": ...}`
or `{"server": ..., "error": {"code", "description"}}`, and the data documents are the very ones the
HTTP monitor serves (documents.py).
"""

from __future__ import annotations

import json
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from edged import SERVER_VERSION
from edged import goformat as G
from edged.log import log
from edged.monitor import documents as D
from edged.monitor.encoding import to_json
from edged.monitor.request import MonitorError

if TYPE_CHECKING:
    from edged.routing.accounts import InternalClient, Subscription
    from edged.server import Server

SERVER_PING = "$SYS.REQ.SERVER.PING"
SERVER_PING_FMT = "$SYS.REQ.SERVER.PING.{}"
SERVER_DIRECT_FMT = "$SYS.REQ.SERVER.{}.{}"
ACCOUNT_REQ_FMT = "$SYS.REQ.ACCOUNT.*.{}"
# account JWT pushes (operator mode, MEMORY resolver), the current subject and the older one
CLAIMS_UPDATE = ("$SYS.REQ.ACCOUNT.*.CLAIMS.UPDATE", "$SYS.ACCOUNT.*.CLAIMS.UPDATE")
SERVER_STATSZ_FMT = "$SYS.SERVER.{}.STATSZ"

# nats-server endpoints that edged does not implement: answered with an explicit API error, not silence
NOT_SUPPORTED = ("PROFILEZ", "EXPVARZ", "IPQUEUESZ", "RAFTZ", "KICK", "LDM", "RELOAD")

Builder = Callable[[dict[str, Any]], Any]


class _Skip(Exception):
    """The request's filter options do not select this server: stay silent, as nats-server does."""


class SystemHandlers:
    """The internal subscriptions answering monitoring requests. `close()` removes them."""

    def __init__(self, server: Server, client: InternalClient) -> None:
        self.server = server
        self.client = client
        self.seq = 0
        self.subs: list[Subscription] = []

    # ------------------------------------------------------------------ envelope

    def server_info(self) -> dict[str, Any]:
        srv = self.server
        js = srv.opts.jetstream.enabled
        si: dict[str, Any] = {"name": srv.server_name, "host": srv.opts.host, "id": srv.server_id}
        if js and srv.opts.jetstream.domain:
            si["domain"] = srv.opts.jetstream.domain
        self.seq += 1
        si |= {
            "ver": SERVER_VERSION,
            "jetstream": js,
            # JetStreamEnabled | BinaryStreamSnapshot capability bits, as nats-server sets them together
            "flags": 3 if js else 0,
            "seq": self.seq,
            "time": G.rfc3339(time.time()),
        }
        return si

    def filtered_out(self, opts: dict[str, Any]) -> bool:
        """nats-server's filterRequest: server_name / host / cluster / tags / domain selectors."""
        srv = self.server
        name, host, cluster = opts.get("server_name") or "", opts.get("host") or "", opts.get("cluster") or ""
        if opts.get("exact_match"):
            if (name and name != srv.server_name) or (host and host != srv.opts.host) or cluster:
                return True
        elif (name and name not in srv.server_name) or (host and host not in srv.opts.host) or cluster:
            return True
        tags = opts.get("tags") or []
        have = set(srv.opts.edged.get("tags", []) or []) if isinstance(srv.opts.edged, dict) else set()
        if any(t not in have for t in tags):
            return True
        domain = opts.get("domain") or ""
        return bool(domain and domain != srv.opts.jetstream.domain)

    def respond(self, reply: str, doc: dict[str, Any]) -> None:
        self.client.publish(reply, to_json(doc))

    # ------------------------------------------------------------------ request plumbing

    def subscribe(self, subject: str, handler: Callable[[str, str, bytes], None]) -> None:
        loop = self.server.loop

        def cb(sub: Subscription, subj: str, reply: str, hdr: bytes | None, payload: bytes) -> None:
            # answer after the requester's PUB has been fully processed, never re-entrantly inside routing
            loop.call_soon(self._run, handler, subj, reply, payload)

        self.subs.append(self.client.subscribe(subject, cb))

    def _run(self, handler: Callable[[str, str, bytes], None], subject: str, reply: str, payload: bytes) -> None:
        try:
            handler(subject, reply, payload)
        except Exception as e:  # never let a monitoring request hurt the router
            log.error("Error answering system request on %s: %s", subject, e, exc_info=True)

    def z_handler(self, build: Callable[[str, dict[str, Any]], Any]) -> Callable[[str, str, bytes], None]:
        """nats-server's zReq: decode options, apply filters, build, wrap in the envelope."""

        def handle(subject: str, reply: str, payload: bytes) -> None:
            if not reply:
                return
            opts: dict[str, Any] = {}
            doc: dict[str, Any]
            if payload.strip():
                try:
                    opts = json.loads(payload)
                    if not isinstance(opts, dict):
                        raise ValueError("request options must be a JSON object")
                except ValueError as e:
                    self.respond(reply, {"server": self.server_info(),
                                         "error": {"code": 400, "description": str(e)}})
                    return
                if self.filtered_out(opts):
                    return
            try:
                data = build(subject, opts)
            except _Skip:
                return
            except MonitorError as e:
                doc = {"server": self.server_info(), "error": {"code": 500, "description": str(e)}}
            except (TypeError, ValueError) as e:
                doc = {"server": self.server_info(), "error": {"code": 400, "description": str(e)}}
            else:
                doc = {"server": self.server_info(), "data": data}
            self.respond(reply, doc)

        return handle

    # ------------------------------------------------------------------ statsz / idz

    def statsz(self) -> dict[str, Any]:
        srv = self.server
        v = D.varz(srv)
        active = sum(1 for a in list(srv.accounts.values()) if a.clients)
        st: dict[str, Any] = {
            "start": v["start"], "mem": v["mem"], "cores": v["cores"], "cpu": v["cpu"],
            "connections": v["connections"], "total_connections": v["total_connections"],
            "active_accounts": active, "subscriptions": v["subscriptions"],
            "sent": {"msgs": v["out_msgs"], "bytes": v["out_bytes"]},
            "sent_to_clients": {"msgs": v["out_client_msgs"], "bytes": v["out_client_bytes"]},
            "received": {"msgs": v["in_msgs"], "bytes": v["in_bytes"]},
            "received_from_clients": {"msgs": v["in_client_msgs"], "bytes": v["in_client_bytes"]},
            "slow_consumers": v["slow_consumers"],
        }
        if v["slow_consumers"]:
            st["slow_consumer_stats"] = v["slow_consumer_stats"]
        st["active_servers"] = 1
        if v.get("jetstream"):
            st["jetstream"] = v["jetstream"]
        st["gomaxprocs"] = v["gomaxprocs"]
        return st

    def handle_statsz(self, subject: str, reply: str, payload: bytes) -> None:
        if payload.strip():
            try:
                opts = json.loads(payload)
            except ValueError as e:
                if reply:
                    self.respond(reply, {"server": self.server_info(),
                                         "error": {"code": 400, "description": str(e)}})
                return
            if isinstance(opts, dict) and self.filtered_out(opts):
                return
        # no reply: nats-server publishes on its own broadcast subject
        target = reply or SERVER_STATSZ_FMT.format(self.server.server_id)
        self.respond(target, {"server": self.server_info(), "statsz": self.statsz()})

    def handle_idz(self, subject: str, reply: str, payload: bytes) -> None:
        if reply:
            srv = self.server
            self.respond(reply, {"name": srv.server_name, "host": srv.opts.host, "id": srv.server_id})

    def not_supported(self, name: str) -> Callable[[str, str, bytes], None]:
        def handle(subject: str, reply: str, payload: bytes) -> None:
            if reply:
                self.respond(reply, {"server": self.server_info(),
                                     "error": {"code": 501, "description": f"{name} is not supported by edged"}})

        return handle

    def handle_claims_update(self, subject: str, reply: str, payload: bytes) -> None:
        """nats-server's accountClaimUpdate: apply the pushed account JWT, log and answer as it does."""
        from edged.security.auth import ClaimsUpdateError

        toks = subject.split(".")
        pub = toks[3] if len(toks) == 6 else toks[2]
        doc: dict[str, Any] = {"server": self.server_info()}
        try:
            msg = self.server.update_account_claims(pub, payload.decode("utf-8", "replace"))
        except ClaimsUpdateError as e:
            log.error("%s - %s - %s", e.message, pub, e.err)
            doc["error"] = {"account": pub, "code": 500, "description": f"{e.message} - {e.err}"}
        else:
            log.debug("%s - %s", msg, pub)
            doc["data"] = {"account": pub, "code": 200, "message": msg}
        if reply:
            self.respond(reply, doc)

    def close(self) -> None:
        for sub in self.subs:
            self.client.unsubscribe(sub)
        self.subs.clear()


def _account_of(subject: str) -> str:
    toks = subject.split(".")
    if len(toks) != 5:
        raise MonitorError(f'subject "{subject}" is malformed')
    return toks[3]


# the handlers installed per server (Server.start installs them; a second call returns the same ones)
_INSTALLED: weakref.WeakKeyDictionary[Server, SystemHandlers] = weakref.WeakKeyDictionary()


def install_system_handlers(server: Server) -> SystemHandlers | None:
    """Subscribe the monitoring requests in the system account. None when there is no system account.

    Must run on the server's event loop after `server.loop` is set (i.e. from Server.start)."""
    existing = _INSTALLED.get(server)
    if existing is not None:
        return existing
    sacc = server.system_account
    if sacc is None:
        log.debug("No system account: $SYS.REQ.SERVER requests are not served")
        return None
    h = SystemHandlers(server, sacc.internal)
    srv = server

    def connz(subject: str, o: dict[str, Any]) -> Any:
        return D.connz(srv, D.ConnzOptions.from_json(o))

    def subsz(subject: str, o: dict[str, Any]) -> Any:
        return D.subsz(srv, D.SubszOptions.from_json(o))

    def healthz(subject: str, o: dict[str, Any]) -> Any:
        return D.healthz(srv, D.HealthzOptions.from_json(o))

    def jsz(subject: str, o: dict[str, Any]) -> Any:
        jo = D.JszOptions.from_json(o)
        if jo.leader_only and not D.jetstream_enabled(srv):
            raise _Skip()
        return D.jsz(srv, jo)

    zs: dict[str, Callable[[str, dict[str, Any]], Any]] = {
        "VARZ": lambda s, o: D.varz(srv),
        "SUBSZ": subsz,
        "CONNZ": connz,
        "ROUTEZ": lambda s, o: D.routez(srv),
        "GATEWAYZ": lambda s, o: D.gatewayz(srv),
        "LEAFZ": lambda s, o: D.leafz(srv, bool(o.get("subscriptions")), str(o.get("account") or "")),
        "ACCOUNTZ": lambda s, o: D.accountz(srv, str(o.get("account") or "")),
        "ACCSTATZ": lambda s, o: D.accstatz(srv, bool(o.get("include_unused")), o.get("accounts") or ()),
        "JSZ": jsz,
        "HEALTHZ": healthz,
    }
    h.subscribe(SERVER_PING, h.handle_statsz)
    for name, fn in [("STATSZ", h.handle_statsz), ("IDZ", h.handle_idz)]:
        h.subscribe(SERVER_PING_FMT.format(name), fn)
        h.subscribe(SERVER_DIRECT_FMT.format(srv.server_id, name), fn)
    for name, build in zs.items():
        handler = h.z_handler(build)
        h.subscribe(SERVER_PING_FMT.format(name), handler)
        h.subscribe(SERVER_DIRECT_FMT.format(srv.server_id, name), handler)
    for name in NOT_SUPPORTED:
        handler = h.not_supported(name)
        if name not in ("KICK", "LDM", "RELOAD"):
            h.subscribe(SERVER_PING_FMT.format(name), handler)
        h.subscribe(SERVER_DIRECT_FMT.format(srv.server_id, name), handler)

    # account-scoped variants: $SYS.REQ.ACCOUNT.<acc>.SUBSZ|CONNZ|LEAFZ|JSZ|INFO
    def acc_subsz(subject: str, o: dict[str, Any]) -> Any:
        so = D.SubszOptions.from_json(o)
        so.subscriptions, so.account = True, _account_of(subject)
        return D.subsz(srv, so)

    def acc_connz(subject: str, o: dict[str, Any]) -> Any:
        co = D.ConnzOptions.from_json(o)
        co.acc = _account_of(subject)
        return D.connz(srv, co)

    def acc_leafz(subject: str, o: dict[str, Any]) -> Any:
        return D.leafz(srv, bool(o.get("subscriptions")), _account_of(subject))

    def acc_jsz(subject: str, o: dict[str, Any]) -> Any:
        jo = D.JszOptions.from_json(o)
        jo.account = _account_of(subject)
        return D.jsz(srv, jo)

    def acc_info(subject: str, o: dict[str, Any]) -> Any:
        return D.account_info(srv, _account_of(subject))

    for name, build in [("SUBSZ", acc_subsz), ("CONNZ", acc_connz), ("LEAFZ", acc_leafz), ("JSZ", acc_jsz),
                        ("INFO", acc_info)]:
        h.subscribe(ACCOUNT_REQ_FMT.format(name), h.z_handler(build))
    if srv.authenticator.operator_mode:
        for subject in CLAIMS_UPDATE:
            h.subscribe(subject, h.handle_claims_update)
    log.debug("Serving $SYS.REQ.SERVER requests in system account %s", sacc.name)
    _INSTALLED[server] = h
    return h
