"""Leafnode remotes: each configured remote kept connected for as long as edged runs, exactly as a
nats-server leaf keeps its remotes (reconnect forever, discovered URLs, loop and domain rules), and the
manager of them all, a server service, which also runs the leafnode port (edged/leafnode/accept.py)."""

from __future__ import annotations

import asyncio
import base64
import os
import random
import ssl
import time
from typing import TYPE_CHECKING, Any

from edged.goformat import rfc3339
from edged.jetstream.wire.domain import LOCAL_ONLY, api_prefix, domain_subjects, leaf_domain_problem
from edged.leafnode.accept import LeafAcceptor
from edged.leafnode.codec import LDS_PREFIX
from edged.leafnode.connection import LeafConnection
from edged.leafnode.credsfile import CredsKeeper, CredsSettings
from edged.leafnode.dialing import LeafURL, is_ip, parse_leaf_url, tcp_connect
from edged.leafnode.websocket import WSClientProtocol
from edged.log import log
from edged.routing.subjects import subject_is_subset
from edged.security.tlsconf import client_ssl_context
from edged.settings.options import LeafNodeOpts, RemoteLeafOpts

if TYPE_CHECKING:
    from edged.server import Server

LEAF_PING_CAP = 15.0  # a spoke pings on its own interval; capped so dead links show within seconds


class RemoteLink:
    """Keeps one `remotes` entry connected for as long as edged runs."""

    def __init__(self, mgr: LeafNodeManager, index: int, remote: RemoteLeafOpts) -> None:
        self.mgr = mgr
        self.server = mgr.server
        self.index = index
        self.remote = remote
        acc_name = remote.account or "$G"
        self.account = self.server.lookup_account(acc_name)
        self.is_system_account = bool(self.server.system_account_name) and acc_name == self.server.system_account_name
        self.lds_subject = mgr.lds_for(acc_name)
        self.urls = [parse_leaf_url(u) for u in remote.urls]
        if not self.urls:
            raise ValueError(f"leafnode remote #{index + 1} has no url")
        if len({u.websocket for u in self.urls}) > 1:
            raise ValueError(f"leafnode remote #{index + 1} mixes websocket and non-websocket URLs")
        if remote.compression and remote.compression not in ("off", "disabled", "false"):
            raise ValueError(f"leafnode remote #{index + 1}: compression {remote.compression!r} not supported "
                             "(only \"off\")")
        if remote.hub:
            raise ValueError(f"leafnode remote #{index + 1}: `hub: true` (edged as the hub side) not supported")
        if not remote.no_randomize:
            random.shuffle(self.urls)
        self.discovered: list[LeafURL] = []
        cred = next((u for u in self.urls if u.user), None)
        self._cred = (cred.user, cred.password) if cred else ("", None)
        self._tls_name = next((u.host for u in self.urls if not is_ip(u.host)), "")
        js = self.server.opts.jetstream
        self.domain = js.domain if js.enabled else ""
        self.own_domain_prefix = api_prefix(self.domain).encode()
        o = self.server.opts
        self.ping_interval = min(o.ping_interval, LEAF_PING_CAP) if o.ping_interval > 0 else LEAF_PING_CAP
        self.conn: LeafConnection | None = None
        self.task: asyncio.Task[None] | None = None
        self.attempts = 0
        self.connects = 0
        self.last_error = ""
        self.connected_since = 0.0
        self._wait_connected: list[asyncio.Future[None]] = []
        self._rr = 0
        # the creds the link logs in with, watched for rotation (edged/leafnode/credsfile.py)
        self.creds: CredsKeeper | None = CredsKeeper(remote.credentials) if remote.credentials else None

    # ------------------------------------------------------------ policy helpers

    def wants_tls(self, url: LeafURL) -> bool:
        return url.scheme in ("tls", "wss") or self.remote.tls is not None

    def tls_name(self, url: LeafURL) -> str:
        if not is_ip(url.host):
            return url.host
        return self._tls_name or url.host

    def user_password(self, url: LeafURL) -> tuple[str, str | None]:
        if url.user:
            return url.user, url.password
        return self._cred

    def check_domains(self, info: dict[str, Any]) -> str:
        """The JetStream domain rules edged must enforce itself (§5.2): a different, non-empty domain."""
        js = self.server.opts.jetstream
        return leaf_domain_problem(js.enabled and not self.is_system_account, js.domain, info, self.account.name)

    def domain_subjects(self) -> list[str]:
        if self.is_system_account or self.server.jetstream is None:
            return []
        return domain_subjects(self.domain)

    def deny_outbound_interest(self, subject: str) -> bool:
        if any(subject_is_subset(subject, d) for d in LOCAL_ONLY):
            return True
        return bool(self.domain) and subject_is_subset(subject, api_prefix(self.domain) + ">")

    def learn_urls(self, info: dict[str, Any]) -> None:
        if self.remote.ignore_discovered_urls:
            return
        ws = self.urls[0].websocket
        lst = info.get("ws_connect_urls" if ws else "leafnode_urls")
        if not isinstance(lst, list):
            return
        scheme = self.urls[0].scheme if ws or self.urls[0].scheme == "tls" else "nats-leaf"
        if not ws and self.remote.tls is not None:
            scheme = "tls"
        found: list[LeafURL] = []
        known = {(u.host, u.port) for u in self.urls}
        for hp in lst:
            try:
                u = parse_leaf_url(f"{scheme}://{hp}")
            except ValueError:
                continue
            if (u.host, u.port) in known:
                continue
            u.path = self.urls[0].path
            if not is_ip(u.host) and not self._tls_name:
                self._tls_name = u.host
            found.append(u)
        self.discovered = found

    def next_url(self) -> LeafURL:
        cands = self.discovered + self.urls
        u = cands[self._rr % len(cands)]
        self._rr += 1
        return u

    # ------------------------------------------------------------ lifecycle

    def creds_refused(self, reason: str) -> None:
        """The hub refused the link's login: new creds go back to the previous ones (the next dial)."""
        if self.creds is not None:
            self.creds.refused_by_hub(reason)

    def check_creds(self, force: bool = False) -> None:
        """Rotation: when the creds file holds other creds, close the link so the next dial uses them."""
        if self.creds is None or not self.creds.poll(force):
            return
        if self.conn is not None and not self.conn.closed:
            self.conn.extra_delay = 0.05  # redial at once, not after the reconnect interval
            self.conn.close("Credentials Rotated")

    def on_connected(self, conn: LeafConnection) -> None:
        self.connects += 1
        if self.creds is not None:
            self.creds.accepted()
        self.connected_since = time.time()
        self.last_error = ""
        log.info("Leafnode connection created for account: %s (remote %s, hub %r, remote account %r)",
                 self.account.name, conn.url.hostport, conn.remote_name, conn.remote_account)
        for f in self._wait_connected:
            if not f.done():
                f.set_result(None)
        self._wait_connected.clear()
        # nats-server re-checks mirror/source consumers when a leaf link registers (checkInternalSyncConsumers)
        js = self.server.jetstream
        if js is not None:
            try:
                js.leafnode_connected(self.account.name)
            except Exception as e:  # a JetStream hiccup must not take the link down
                log.error("JetStream leafnode hook failed for account %s: %s", self.account.name, e)

    def on_closed(self, conn: LeafConnection) -> None:
        if conn.error:
            self.last_error = conn.error
        if conn.connected:
            log.info("Leafnode connection closed for account %s (remote %s): %s", self.account.name,
                     conn.url.hostport, conn.close_reason)
        if self.conn is conn:
            self.conn = None
        self.connected_since = 0.0

    @property
    def is_connected(self) -> bool:
        return self.conn is not None and self.conn.connected and not self.conn.closed

    async def wait_connected(self, timeout: float) -> bool:
        if self.is_connected:
            return True
        f: asyncio.Future[None] = self.server.loop.create_future()
        self._wait_connected.append(f)
        try:
            await asyncio.wait_for(f, timeout)
            return True
        except TimeoutError:
            return False

    def start(self) -> None:
        self.task = self.server.loop.create_task(self._run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            # bounded: a dial stuck in a handshake must not hold up the server's shutdown
            done, _ = await asyncio.wait({self.task}, timeout=2.0)
            for t in done:
                if not t.cancelled():
                    t.exception()
        if self.conn is not None:
            self.conn.close("Server Shutdown")

    async def _run(self) -> None:
        interval = self.mgr.reconnect_interval
        while True:
            url = self.next_url()
            self.attempts += 1
            try:
                conn = await self._dial(url)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                msg = str(e) or type(e).__name__
                self.last_error = f"dial {url.hostport}: {msg}"
                if self.attempts == 1 or self.attempts % 30 == 0:
                    log.error("Error trying to connect as leafnode to remote server %r (attempt %d): %s",
                              url.hostport, self.attempts, msg)
                else:
                    log.debug("Error trying to connect as leafnode to remote server %r (attempt %d): %s",
                              url.hostport, self.attempts, msg)
                # nats-server: reconnect interval plus jitter; the jitter is capped at half a second so a
                # hub that comes back is reached within ~interval + 0.5 s
                await asyncio.sleep(interval + random.random() * min(interval, 0.5))
                continue
            self.conn = conn
            await asyncio.shield(conn.closed_fut)
            if conn.connected:
                self.attempts = 0
            delay = conn.extra_delay or (interval if conn.connected else interval + random.random() * min(
                interval, 0.5))
            await asyncio.sleep(delay)

    async def _dial(self, url: LeafURL) -> LeafConnection:
        loop = self.server.loop
        remote = self.remote
        tmo = remote.dial_timeout or 1.0
        proxy = remote.proxy or None
        if proxy and proxy.get("url"):
            from edged.leafnode.proxy import open_tunnel

            sock = await open_tunnel(proxy, url.host, url.port, tmo)
        else:
            sock = await tcp_connect(url.host, url.port, tmo)
        handshake_first = remote.tls is not None and remote.tls.handshake_first and not url.websocket
        ssl_ctx: ssl.SSLContext | None = None
        if url.scheme == "wss" or handshake_first:
            ssl_ctx = client_ssl_context(remote.tls)
        tls_tmo = (remote.tls.timeout if remote.tls is not None and remote.tls.timeout else 2.0)
        conn = LeafConnection(self, url, tls_done=ssl_ctx is not None)
        ws: WSClientProtocol | None = None
        try:
            if url.websocket:
                ws = WSClientProtocol(conn, url, no_masking=remote.ws_no_masking, compression=remote.ws_compression)
                proto: asyncio.Protocol = ws
            else:
                proto = conn
            await asyncio.wait_for(
                loop.create_connection(lambda: proto, sock=sock, ssl=ssl_ctx,
                                       server_hostname=self.tls_name(url) if ssl_ctx else None,
                                       ssl_handshake_timeout=tls_tmo if ssl_ctx else None),
                tls_tmo + tmo,
            )
        except BaseException:
            sock.close()
            raise
        if ws is not None:
            # the LeafConnection only starts its own timers once the upgrade is done
            def upgrade_timeout() -> None:
                if conn.transport is None and not conn.closed:
                    conn.error = "websocket upgrade timeout"
                    if ws.transport is not None:
                        ws.transport.abort()
                    conn.close("WebSocket Upgrade Timeout", flush=False)

            loop.call_later(tls_tmo + (remote.first_info_timeout or 1.0), upgrade_timeout)
        return conn

    def info(self) -> dict[str, Any]:
        c = self.conn
        return {
            "account": self.account.name,
            "urls": [u.redacted() for u in self.urls],
            "connected": self.is_connected,
            "url": c.url.redacted() if c is not None else "",
            "connected_since": self.connected_since,
            "attempts": self.attempts,
            "connects": self.connects,
            "last_error": self.last_error,
        }


class LeafNodeManager:
    """All configured remotes. Registered by the server as a service (start/stop)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        lo = server.opts.leafnodes
        assert lo is not None
        self.opts = lo
        self.reconnect_interval = lo.reconnect if lo.reconnect and lo.reconnect > 0 else 1.0
        self._lds: dict[str, str] = {}
        self.links: list[RemoteLink] = []
        for i, r in enumerate(lo.remotes):
            if r.disabled:
                log.info("Leafnode remote #%d is disabled", i + 1)
                continue
            self.links.append(RemoteLink(self, i, r))
        # edged as a hub: the leafnode port, when configured
        self.acceptor: LeafAcceptor | None = LeafAcceptor(self) if lo.port else None
        self.creds_settings = CredsSettings.from_block(server.opts.edged)
        self._watcher: asyncio.Task[None] | None = None

    def lds_for(self, account: str) -> str:
        s = self._lds.get(account)
        if s is None:
            s = self._lds[account] = LDS_PREFIX + base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode(
            ).replace("-", "A").replace("_", "B")
        return s

    async def start(self) -> None:
        if self.acceptor is not None:
            self.acceptor.start()
        for link in self.links:
            log.info("Leafnode remote for account %s: %s", link.account.name,
                     ", ".join(u.redacted() for u in link.urls))
            link.start()
        if any(lk.creds is not None for lk in self.links):
            self._watcher = self.server.loop.create_task(self._watch_creds())

    async def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
        if self.acceptor is not None:
            self.acceptor.stop()
        for link in self.links:
            await link.stop()

    async def _watch_creds(self) -> None:
        """Poll the remotes' creds files: a changed file is used at a forced redial within seconds."""
        while True:
            await asyncio.sleep(self.creds_settings.watch_interval)
            for link in list(self.links):
                try:
                    link.check_creds()
                except Exception as e:  # a bad file is reported by the keeper; nothing here may stop the watch
                    log.error("Leafnode credentials check failed: %s", e)

    async def reload(self, lo: LeafNodeOpts, redial: bool = False) -> None:
        """SIGHUP: remotes whose settings changed are replaced (new URLs, creds file, TLS), new ones
        start, removed ones stop; the others re-read their creds file at once. The leafnode port and
        its settings stay as they were started (a restart applies them). `redial` (a new JetStream
        domain) replaces every remote and closes the accepted leafs, whose CONNECT / INFO carried it."""
        if redial and self.acceptor is not None:
            for c in self.acceptor.connections:
                c.close("JetStream Domain Changed")
        self.creds_settings = CredsSettings.from_block(self.server.opts.edged)
        old = {lk.index: lk for lk in self.links}
        links: list[RemoteLink] = []
        for i, r in enumerate(lo.remotes):
            if r.disabled:
                continue
            lk = old.pop(i, None)
            if lk is not None and lk.remote == r and not redial:
                links.append(lk)
                lk.check_creds(force=True)
                continue
            if lk is not None:
                await lk.stop()
            new = RemoteLink(self, i, r)
            links.append(new)
            log.info("Leafnode remote for account %s (re)configured: %s", new.account.name,
                     ", ".join(u.redacted() for u in new.urls))
            new.start()
        for lk in old.values():
            log.info("Leafnode remote for account %s removed", lk.account.name)
            await lk.stop()
        self.links = links
        self.opts.remotes = lo.remotes
        self.opts.reconnect = lo.reconnect
        if self._watcher is None and any(lk.creds is not None for lk in self.links):
            self._watcher = self.server.loop.create_task(self._watch_creds())

    @property
    def connections(self) -> list[LeafConnection]:
        """Every leafnode connection that is up: solicited links to hubs, then leafs accepted as their hub."""
        conns = [lk.conn for lk in self.links if lk.is_connected and lk.conn is not None]
        if self.acceptor is not None:
            conns += self.acceptor.connections
        return conns

    def all_connected(self) -> bool:
        return all(lk.is_connected for lk in self.links)

    async def wait_connected(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        for lk in self.links:
            if not await lk.wait_connected(max(0.0, deadline - time.monotonic())):
                return False
        return True

    def leafz(self, subs: bool = False, account: str = "") -> dict[str, Any]:
        """nats-server's /leafz JSON (monitor.go Leafz)."""
        leafs = [c.leaf_info(subs) for c in self.connections if not account or c.account.name == account]
        return {
            "server_id": self.server.server_id,
            "now": rfc3339(time.time()),
            "leafnodes": len(leafs),
            "leafs": leafs,
        }

    def varz(self) -> dict[str, Any]:
        """The `leaf` block of /varz (nats-server LeafNodeOptsVarz); `connected` / `last_error` / `js_domain`
        per remote are edged additions so the link state is visible without /leafz."""
        remotes = []
        for lk in self.links:
            r = lk.remote
            deny = {k: v for k, v in (("exports", list(r.deny_exports)), ("imports", list(r.deny_imports))) if v}
            remotes.append({
                "local_account": lk.account.name,
                "tls_timeout": r.tls.timeout if r.tls is not None else 0,
                "urls": [u.hostport for u in lk.urls],
                "deny": deny or None,
                "connected": lk.is_connected,
                "last_error": lk.last_error,
                "js_domain": lk.domain,  # the domain this link advertises (a new one after a reload's redial)
            })
            if lk.creds is not None:
                remotes[-1]["creds"] = lk.creds.status(self.creds_settings.expiry_warning_days)
        d: dict[str, Any] = {"host": self.opts.host, "port": self.opts.port}
        if self.acceptor is not None:
            d.update(self.acceptor.varz())
        d["remotes"] = remotes
        return d

    def creds_warnings(self) -> list[str]:
        """Creds that expire within the warning window, or whose rotation failed: reported, never fatal."""
        out = []
        days = self.creds_settings.expiry_warning_days
        for lk in self.links:
            if lk.creds is None:
                continue
            st = lk.creds.status(days)
            if st["expiring"]:
                left = st["expires_in_seconds"]
                when = "expired" if left <= 0 else f"expire in {left / 86400:.1f} days"
                out.append(f"leafnode credentials {st['file']} (user {st['user']}) {when}")
            if st["problem"]:
                out.append(st["problem"])
        return out

    def healthz(self) -> tuple[bool, str]:
        """(ok, error): not ok while a configured remote is down; edged keeps serving locally meanwhile."""
        down = [lk for lk in self.links if not lk.is_connected]
        if not down:
            return True, ""
        return False, "; ".join(
            f"leafnode remote for account {lk.account.name} not connected"
            + (f": {lk.last_error}" if lk.last_error else "") for lk in down
        )

