"""The leafnode accept side: edged as the hub of leafs that connect to its `leafnodes { port }`.

An accepted leaf is the same leafnode kind of connection as a solicited one (`LeafConnection`: same
codec, same LMSG framing and merging, same interest bookkeeping), in the hub role nats-server gives it
(leafnode.go: createLeafNode, processLeafNodeConnect, sendPermsAndAccountInfo,
initLeafNodeSmapAndSendSubs): edged speaks first with an INFO carrying a nonce, authenticates the
leaf's CONNECT, binds it to an account, answers with the `connect_info` INFO and advertises all interest
of that account, the leaf's own excepted. JetStream denies are the hub's (§5.2 of
../shared/docs/leafnode-protocol.md): the local API never goes to the leaf, nor does edged's own domain
API when the leaf runs another domain; requests to edged's domain that come from the leaf are answered
by edged's JetStream.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from edged import API_LEVEL, SERVER_VERSION
from edged.connections.connection import Connection
from edged.connections.listener import Listener, peer_address
from edged.connections.protocol import CRLF
from edged.jetstream.wire.domain import (
    LOCAL_ONLY,
    LOCAL_ONLY_PREFIXES,
    api_prefix,
    domain_subjects,
    hub_out_deny,
)
from edged.leafnode.codec import (
    LDS_PREFIX,
    OP_CONNECT,
    OP_ERR,
    OP_ERROR,
    OP_INFO,
    LeafParser,
    ls_plus,
)
from edged.leafnode.connection import LeafConnection
from edged.leafnode.pacing import tune_link_socket
from edged.log import TRACE, log
from edged.routing.accounts import GLOBAL_ACCOUNT, Account
from edged.routing.receiver import KIND_LEAF, Subscription
from edged.routing.subjects import AllowDenyFilter, is_literal, is_valid_subject, subject_is_subset
from edged.security.auth import AuthError, AuthResult, check_password, decode_sig

if TYPE_CHECKING:
    from edged.leafnode.remote import LeafNodeManager
    from edged.server import Server
    from edged.settings.options import LeafNodeOpts, Permissions

FIRST_PING = 1.0  # nats-server: firstPingInterval, an RTT sample right after CONNECT
LEAF_CONN_TYPE = "LEAFNODE"  # JWT allowed_connection_types of a TCP leaf


def _version_at_least(version: str, minimum: str) -> bool:
    def parts(v: str) -> tuple[int, ...]:
        out = []
        for p in v.lstrip("v").split("-")[0].split(".")[:3]:
            try:
                out.append(int(p))
            except ValueError:
                out.append(0)
        return tuple(out + [0] * (3 - len(out)))

    return parts(version) >= parts(minimum)


def _perm_json(p: Any) -> dict[str, Any] | None:
    if p is None:
        return None
    d: dict[str, Any] = {}
    if p.allow:
        d["allow"] = list(p.allow)
    if p.deny:
        d["deny"] = list(p.deny)
    return d or None


class AcceptedLeafConnection(LeafConnection):
    """A leaf connected to edged's leafnode port; edged is its hub."""

    is_spoke = False

    def __init__(self, acceptor: LeafAcceptor, tls_upgrade: bool) -> None:
        # not LeafConnection.__init__: that one is made for a configured remote; the state it sets up is
        # set here from the CONNECT instead
        Connection.__init__(self, acceptor.server)
        self._delivery_state()
        srv = acceptor.server
        self.acceptor = acceptor
        self.lopts = acceptor.opts
        self.parser = LeafParser(max_payload=srv.opts.max_payload, runs=True)
        self.tls_upgrade = tls_upgrade
        self.connected = False  # CONNECT accepted
        self.account: Account = None  # type: ignore[assignment]  # bound by the CONNECT
        self.nonce = srv.make_nonce()
        self.remote_name = ""
        self.remote_account = ""
        self.remote_cluster = ""
        self.remote_domain = ""
        self.user = ""
        self.lds_subject = ""
        self.smap: dict[tuple[str, str | None], int] = {}
        # what edged advertises (the interest it takes from the leaf: the leaf user's publish permission)
        self.import_ = AllowDenyFilter(None, None)
        # what edged sends to the leaf (the leaf user's subscribe permission, plus the CONNECT's deny_pub)
        self.export = AllowDenyFilter(None, None)
        self._exp: AllowDenyFilter | None = None
        self._deny_imp: AllowDenyFilter | None = None
        js = srv.opts.jetstream
        self.domain = js.domain if js.enabled else ""
        own = api_prefix(self.domain).encode()
        self._own_domain_prefix = own
        self._in_special = (own,) if own else ()
        self._out_deny: tuple[bytes, ...] = LOCAL_ONLY_PREFIXES
        self.extra_delay = 0.0
        self.error = ""
        self._listening = False
        self.closed_fut: asyncio.Future[None] = srv.loop.create_future()

    # -------------------------------------------------------------------------- asyncio callbacks

    def _connected(self, transport: Any) -> None:
        tune_link_socket(transport)
        log.debug("%s:%d - lid:%d - Leafnode connection accepted", self.host, self.port, self.cid)
        self.acceptor.pending.add(self)
        self.send_raw(b"INFO " + _json(self.acceptor.info(self)) + b" " + CRLF)
        if self.tls_upgrade:
            # the ClientHello must reach start_tls, not the parser
            transport.pause_reading()
            self.server.loop.create_task(self._upgrade_tls_server())
        self._later(self.lopts.effective_auth_timeout(), self._auth_timeout)
        self.flush()

    async def _upgrade_tls_server(self) -> None:
        """nats-server's default leafnode TLS: plaintext INFO, then the leaf starts the handshake."""
        ctx = self.acceptor.ssl_context
        tls = self.lopts.tls
        assert ctx is not None and tls is not None
        try:
            self.flush()
            self._upgrading = True
            new = await asyncio.wait_for(
                self.server.loop.start_tls(self.transport, self, ctx, server_side=True), tls.timeout or 2.0)
        except Exception as e:
            self._log_error(f"TLS handshake error: {e or type(e).__name__}")
            self.close("TLS Handshake Error", flush=False)
            return
        if new is None or self.closed:
            self.close("TLS Handshake Error", flush=False)
            return
        self.transport = new
        self._upgrading = False
        self.flush()

    def _lost_reason(self, exc: Exception | None) -> str:
        return "Client Closed"

    # -------------------------------------------------------------------------- protocol

    def process(self, events: list[tuple]) -> None:
        for i, ev in enumerate(events):
            if self.closed:
                return
            if self.connected:  # the link is up: the rest as on either side of a link
                super().process(events[i:] if i else events)
                return
            op = ev[0]
            if op == OP_CONNECT:
                self._on_connect(ev[1])
                continue
            if op == OP_INFO:  # a compression offer: edged offers none, so there is nothing to agree
                continue
            if op == OP_ERROR:
                self.close(f"Parse Error: {ev[1]}")
                return
            self._auth_violation("first protocol was not CONNECT")
            return

    def _on_control(self, ev: tuple) -> bool:
        op = ev[0]
        if op == OP_INFO:
            pass  # nothing a leaf tells its hub later changes the link
        elif op == OP_ERR:
            self.error = ev[1]
            self._log_error(f"Leafnode error from {self.remote_name or 'leaf'}: {ev[1]}")
        elif op == OP_CONNECT:
            self.send_raw(b"-ERR 'Unknown Protocol Operation'\r\n")
            self.close("Protocol Violation")
            return False
        elif op == OP_ERROR:
            self._log_error(f"protocol error from leaf: {ev[1]}")
            self.send_raw(b"-ERR '" + ev[1].encode() + b"'\r\n")
            self.close(f"Parse Error: {ev[1]}")
            return False
        return True

    def _send_err(self, text: str) -> None:
        self.send_raw(b"-ERR '" + text.encode() + b"'" + CRLF)

    def _auth_violation(self, reason: str) -> None:
        self.server.auth_errors += 1
        self._log_error(f"Leafnode Authorization Error: {reason}")
        self._send_err("Authorization Violation")
        self.close("Authentication Failure")

    def _auth_timeout(self) -> None:
        if not self.connected and not self.closed:
            self._log_error("Leafnode Authentication Timeout")
            self._send_err("Authentication Timeout")
            self.close("Authentication Timeout")

    def _on_connect(self, c: dict[str, Any]) -> None:
        if log.isEnabledFor(TRACE):
            safe = {k: ("[REDACTED]" if k in ("pass", "auth_token", "sig", "jwt") else v) for k, v in c.items()}
            log.log(TRACE, "%s:%d - lid:%d - <<- [CONNECT %s]", self.host, self.port, self.cid, safe)
        if c.get("lang"):
            self._send_err("attempted to connect to leaf node port")
            self.close("Wrong Port")
            return
        try:
            res, account = self._authenticate(c)
        except AuthError as e:
            self._auth_violation(e.reason)
            return
        cluster = str(c.get("cluster") or "")
        if " " in cluster:
            self._send_err("Cluster name can not contain spaces")
            self.close("Protocol Violation")
            return
        if c.get("gateway"):
            text = f"Rejecting connection from gateway {c.get('gateway')!r} on the leafnode port"
            self._log_error(text)
            self._send_err(text)
            self.close("Wrong Gateway")
            return
        self.account = account
        self.user = res.user
        self._set_permissions(res.permissions, [str(s) for s in c.get("deny_pub") or []])
        mv = self.lopts.min_version
        if mv and not _version_at_least(str(c.get("version") or "0.0.0"), mv):
            self.send_raw(b"INFO " + _json(self._connect_info(res.permissions)) + b" " + CRLF)
            self._send_err(f'connection rejected since minimum version required is "{mv}"')
            self.close("Minimum Version Required")
            return
        self.remote_name = str(c.get("name") or "")
        self.remote_account = str(c.get("remote_account") or "")
        self.remote_cluster = cluster
        self.remote_domain = str(c.get("domain") or "")
        if c.get("is_hub"):
            self.is_spoke = True  # the leaf says it is the hub: edged plays the spoke on this link
        self._out_deny = hub_out_deny(self.domain, self.remote_domain)
        if self.domain or self.remote_domain:
            log.info("%s:%d - lid:%d - JetStream using domains: local %r, remote %r", self.host, self.port,
                     self.cid, self.domain, self.remote_domain)
        self._cancel_timers()
        self.connected = True
        self.acceptor.add(self)
        self.lds_subject = self.acceptor.mgr.lds_for(account.name)
        self.send_raw(b"INFO " + _json(self._connect_info(res.permissions)) + b" " + CRLF)
        self._send_interest()
        self._schedule_ping(FIRST_PING)
        if res.expires_at:
            self._later(max(0.0, res.expires_at - time.time()), self._expired)
        log.info("%s:%d - lid:%d - Leafnode connection created for account: %s (leaf %r, remote account %r)",
                 self.host, self.port, self.cid, account.name, self.remote_name, self.remote_account)
        js = self.server.jetstream
        if js is not None:  # nats-server re-checks mirror/source consumers (checkInternalSyncConsumers)
            try:
                js.leafnode_connected(account.name)
            except Exception as e:
                log.error("JetStream leafnode hook failed for account %s: %s", account.name, e)
        self.flush()

    def _expired(self) -> None:
        """The user JWT the leaf logged in with has expired (nats-server: authExpired)."""
        self._log_error("Leafnode User Authentication Expired")
        self._send_err("User Authentication Expired")
        self.close("Authentication Expired")

    def _authenticate(self, c: dict[str, Any]) -> tuple[AuthResult, Account]:
        """nats-server isLeafNodeAuthorized: the leafnode port's own logins first, else the clients' rules."""
        lo = self.lopts
        srv = self.server
        user = str(c.get("user") or "")
        if lo.username:
            if user != lo.username or not check_password(str(c.get("pass") or ""), lo.password):
                raise AuthError(f"bad leafnode user/password for {user!r}")
            res = AuthResult(lo.account or GLOBAL_ACCOUNT, user=user)
        elif lo.nkey:
            from edged.security import jwt as jwtmod

            sig = c.get("sig")
            if c.get("nkey") != lo.nkey or not sig or not jwtmod.verify_signature(
                    lo.nkey, self.nonce.encode(), decode_sig(str(sig))):
                raise AuthError("leafnode nkey signature verification failed")
            res = AuthResult(lo.account or GLOBAL_ACCOUNT, user=lo.nkey)
        elif lo.users:
            u = next((u for u in lo.users if u.username == user), None)
            if u is None or not check_password(str(c.get("pass") or ""), u.password):
                raise AuthError(f"leafnode user {user!r} not found or bad password")
            res = AuthResult(u.account or GLOBAL_ACCOUNT, user=user)
        elif srv.auth_required:
            res = srv.authenticator.authenticate(c, self.nonce, conn_type=LEAF_CONN_TYPE)
        else:
            res = AuthResult(lo.account or GLOBAL_ACCOUNT)
        name = res.account or GLOBAL_ACCOUNT
        if name not in srv.accounts and name not in srv.authenticator.accounts:
            raise AuthError(f"account {name!r} not found")
        return res, srv.account_for(res)

    def _set_permissions(self, perms: Permissions | None, deny_pub: list[str]) -> None:
        sub = perms.subscribe if perms is not None else None
        pub = perms.publish if perms is not None else None
        self.export = AllowDenyFilter(list(sub.allow) if sub and sub.allow else None,
                                      (list(sub.deny) if sub else []) + deny_pub)
        self._exp = None if self.export.empty else self.export
        self.import_ = AllowDenyFilter(list(pub.allow) if pub and pub.allow else None,
                                       list(pub.deny) if pub else [])
        self._deny_imp = None if self.import_.empty else self.import_

    def _connect_info(self, perms: Permissions | None) -> dict[str, Any]:
        info = self.acceptor.info(self)
        info.pop("nonce", None)
        if perms is not None:
            imp, exp = _perm_json(perms.subscribe), _perm_json(perms.publish)
            if imp:
                info["import"] = imp
            if exp:
                info["export"] = exp
        info["remote_account"] = self.account.name
        if self.account.name == self.server.system_account_name:
            info["acc_is_sys"] = True
        info["connect_info"] = True
        return info

    def _send_interest(self) -> None:
        """The whole interest of the bound account (nats-server initLeafNodeSmapAndSendSubs, hub role),
        the domain API subjects edged answers, its loop detection subject; then updates as they come."""
        out = [ls_plus(self.lds_subject)]
        if self.server.jetstream is not None and self.domain and self.account.name != self.server.system_account_name:
            out += [ls_plus(s) for s in domain_subjects(self.domain)]
        for sub in self.account.sublist.all_subs():
            b = self._interest_add(sub)
            if b:
                out.append(b)
        self.account.interest_listeners.append(self._on_local_interest)
        self._listening = True
        self.send_raw(b"".join(out))

    # -------------------------------------------------------------------------- interest

    def _may_advertise(self, sub: Subscription) -> bool:
        conn = sub.conn
        if conn is self:
            return False
        if self.is_spoke and conn.kind == KIND_LEAF and getattr(conn, "is_spoke", True):
            return False
        subject = sub.subject
        if subject.startswith(LDS_PREFIX):
            return True  # other servers' loop detection subjects always pass
        if any(subject_is_subset(subject, d) for d in LOCAL_ONLY):
            return False
        return self.import_.allows_interest(subject)

    def _on_ls_plus(self, subject: str, queue: str | None, weight: int) -> None:
        if subject.startswith(LDS_PREFIX) and subject == self.lds_subject:
            self._loop_detected()
            return
        if not is_valid_subject(subject) or (queue is not None and not queue):
            self._send_err("Invalid Subscription")
            return
        if is_literal(subject) and not subject.startswith(LDS_PREFIX):
            # a hub refuses a literal interest it would never deliver to (nats-server processLeafSub)
            if not self.export.allows(subject) or subject.startswith(LOCAL_ONLY_PREFIXES_STR):
                self._send_err(f'Permissions Violation for Subscription to "{subject}"')
                self._log_error(f'Permissions Violation for Subscription to "{subject}"')
                self.close("Subscription Permissions Violation")
                return
        self._add_interest(subject, queue, weight)

    # -------------------------------------------------------------------------- timers and closing

    def ping_interval(self) -> float:
        return self.opts.ping_interval

    def _stale(self) -> None:
        self.error = "Stale Connection"
        self._log_error("Leafnode connection is stale (no PONG), closing")
        Connection._stale(self)

    def _log_error(self, text: str) -> None:
        log.error("%s:%d - lid:%d - %s", self.host, self.port, self.cid, text)

    def _log_slow_consumer(self, pending: int) -> None:
        self._log_error(f"Slow leafnode connection from {self.remote_name or self.host}: pending bytes {pending}")

    def _release(self) -> None:
        self.acceptor.pending.discard(self)
        if self.account is not None:
            super()._release()

    def _closed(self) -> None:
        if not self.closed_fut.done():
            self.closed_fut.set_result(None)
        self.acceptor.remove(self)
        if self.connected:
            log.info("%s:%d - lid:%d - Leafnode connection closed: %s (account %s)", self.host, self.port, self.cid,
                     self.close_reason, self.account.name)


LOCAL_ONLY_PREFIXES_STR = tuple(p.decode() for p in LOCAL_ONLY_PREFIXES)


def _json(d: dict[str, Any]) -> bytes:
    return json.dumps(d, separators=(",", ":")).encode()


class LeafAcceptor:
    """edged's leafnode port: the listener, its INFO, and the leafs connected to it."""

    def __init__(self, mgr: LeafNodeManager) -> None:
        self.mgr = mgr
        self.server: Server = mgr.server
        self.opts: LeafNodeOpts = mgr.opts
        self.leafs: dict[int, AcceptedLeafConnection] = {}
        self.pending: set[AcceptedLeafConnection] = set()
        self.ssl_context: Any = None
        self.listener: Any = None

    def start(self) -> None:
        o = self.opts
        tls = o.tls
        handshake_first = tls is not None and tls.handshake_first
        if tls is not None:
            from edged.security.tlsconf import server_ssl_context

            self.ssl_context = server_ssl_context(tls)

        def factory() -> AcceptedLeafConnection:
            return AcceptedLeafConnection(self, tls_upgrade=tls is not None and not handshake_first)

        self.listener = Listener("leafnode", o.host or "0.0.0.0", o.port, factory,
                                 ssl=self.ssl_context if handshake_first else None,
                                 ssl_handshake_timeout=(tls.timeout or 2.0) if handshake_first and tls else None)
        self.server.add_listener(self.listener)

    @property
    def port(self) -> int:
        lst = self.listener
        return lst.bound_port if lst is not None and lst.bound_port else self.opts.port

    def url(self, conn: AcceptedLeafConnection | None) -> tuple[str, int]:
        """The host:port leafs are told to reach this port at (nats-server setLeafNodeInfoHostPortAndIP)."""
        o = self.opts
        if o.advertise:
            host, _, port = o.advertise.rpartition(":")
            if not host:
                return o.advertise, self.port
            return host.strip("[]"), int(port)
        host = o.host
        if host in ("", "0.0.0.0", "::") and conn is not None and conn.transport is not None:
            sn = conn.transport.get_extra_info("sockname")
            host = peer_address(sn)[0] if sn else host  # on a dual-stack port: 127.0.0.1, not ::ffff:127.0.0.1
        return host or "0.0.0.0", self.port

    def info(self, conn: AcceptedLeafConnection) -> dict[str, Any]:
        """The INFO a leaf gets on this port (nats-server startLeafNodeAcceptLoop + createLeafNode)."""
        srv = self.server
        o = self.opts
        host, port = self.url(conn)
        info: dict[str, Any] = {
            "server_id": srv.server_id,
            "server_name": srv.server_name,
            "version": SERVER_VERSION,
            "proto": 1,
            "go": f"python{sys.version_info[0]}.{sys.version_info[1]}",
            "host": host,
            "port": port,
            "headers": not srv.opts.no_header_support,
            "auth_required": True,
            "max_payload": srv.opts.max_payload,
        }
        if o.tls is not None:
            info["tls_required"] = True
            if o.tls.verify:
                info["tls_verify"] = True
        js = srv.opts.jetstream
        if js.enabled:
            info["jetstream"] = True
            if js.domain:
                info["domain"] = js.domain
        info["ip"] = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        info["client_id"] = conn.cid
        info["nonce"] = conn.nonce
        info["info_on_connect"] = True
        if API_LEVEL:
            info["api_lvl"] = API_LEVEL
        info["leafnode_urls"] = [info["ip"]]
        return info

    def add(self, conn: AcceptedLeafConnection) -> None:
        """Register an authenticated leaf, replacing a stale connection of the same leaf (nats-server
        addLeafNodeConnection, checkForDup)."""
        self.pending.discard(conn)
        old = None
        if conn.remote_name and conn.remote_account:
            for c in self.leafs.values():
                if (c.remote_name == conn.remote_name and c.remote_cluster == conn.remote_cluster
                        and c.account is conn.account and c.remote_account == conn.remote_account):
                    old = c
                    break
        self.leafs[conn.cid] = conn
        if old is not None:
            old._send_err("Duplicate Remote LeafNode Connection")
            old.close("Duplicate Remote LeafNode Connection")
            log.warning("%s:%d - lid:%d - Replacing connection from same server", conn.host, conn.port, conn.cid)

    def remove(self, conn: AcceptedLeafConnection) -> None:
        self.pending.discard(conn)
        self.leafs.pop(conn.cid, None)

    @property
    def connections(self) -> list[AcceptedLeafConnection]:
        return [c for c in self.leafs.values() if not c.closed]

    def stop(self) -> None:
        for c in list(self.pending) + list(self.leafs.values()):
            c.close("Server Shutdown")

    def varz(self) -> dict[str, Any]:
        o = self.opts
        return {"host": o.host or "0.0.0.0", "port": self.port,
                "auth_timeout": o.effective_auth_timeout(),
                "tls_timeout": o.tls.timeout if o.tls is not None and o.tls.timeout else 2.0,
                "tls_required": o.tls is not None, "tls_verify": bool(o.tls is not None and o.tls.verify)}
