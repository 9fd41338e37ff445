"""The server: listeners, accounts, signals, lame duck, reload. Owns no protocol rules itself."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import socket
import ssl
import sys
import time
from collections.abc import Callable
from typing import Any

import nkeys

from edged import API_LEVEL, SERVER_VERSION, __version__
from edged import log as logmod
from edged.connections.client import ClientConnection
from edged.connections.connection import Connection
from edged.connections.listener import Listener, dual_stack_socket
from edged.fatal import StartError, go_listen_error, go_os_error, listen_error, prepare_store_dir
from edged.log import log
from edged.routing.accounts import GLOBAL_ACCOUNT, Account
from edged.routing.receiver import ReadContext
from edged.settings.options import Options, Permissions


def _server_id() -> str:
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_SERVER)
    return nkeys.from_seed(bytearray(seed)).public_key.decode()


class Server:
    def __init__(self, opts: Options) -> None:
        from edged.security.auth import Authenticator

        self.opts = opts
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self.server_id = _server_id()
        self.server_name = opts.server_name or self.server_id
        self.start_time = time.time()
        self._cid = 0
        # the context of the socket read being processed, shared with the services it reaches
        self.reading = ReadContext()
        # a subject prefix under which clients' empty, reply-less publishes are parsed as runs (set by
        # the service that receives them: JetStream's acks), b"" for none
        self.empty_run_prefix = b""
        self.listeners: list[Listener] = []
        self.clients: dict[int, Connection] = {}
        self.closed_clients: list[dict[str, Any]] = []  # ring for /connz?state=closed
        self.accounts: dict[str, Account] = {}
        self.authenticator = Authenticator(opts)
        self.auth_required = self.authenticator.auth_required
        self.nonce_required = self.authenticator.nonce_required
        self.system_account_name = self.authenticator.system_account
        self.tls_context: ssl.SSLContext | None = None
        self.tls_required = opts.tls is not None
        self.slow_consumers = 0
        self.stale_connections = 0  # closed for unanswered PINGs (nats-server's varz stale_connections)
        self.stale_leafs = 0  # of which leafnode connections
        self.auth_errors = 0
        self.total_connections = 0
        self.lame_duck = False
        self.shutting_down = False
        self._flushq: list[Any] = []
        self._flush_scheduled = False
        self._stopped: asyncio.Event | None = None
        self.client_port = 0
        self.monitor: Any = None
        self.services: list[Any] = []  # subsystems with async start()/stop(): JetStream, leafnodes, front doors
        # what services outside edged/ add to /varz (a block each) and /metrics (families), e.g. hw/
        self.varz_blocks: dict[str, Callable[[], dict[str, Any]]] = {}
        self.metric_blocks: list[Callable[[], list[tuple[str, str, str, list[Any]]]]] = []
        self.reloads = 0
        self.config_load_time = time.time()
        self.systemd: Any = None  # edged.appliance.systemd.Supervisor under systemd (READY/RELOADING/STOPPING)
        self._activation_timer: asyncio.TimerHandle | None = None  # the first activation token to run out
        self._activation_at = 0.0
        self._build_accounts()
        self.jetstream: Any = None
        self.leafnodes: Any = None
        if opts.jetstream.enabled:
            from edged.jetstream import JetStream

            self.jetstream = JetStream(self)
            self.services.append(self.jetstream)
        if opts.leafnodes is not None and (opts.leafnodes.remotes or opts.leafnodes.port):
            from edged.leafnode.remote import LeafNodeManager

            self.leafnodes = LeafNodeManager(self)
            self.services.append(self.leafnodes)

    # ------------------------------------------------------------------ accounts and auth

    def _build_accounts(self) -> None:
        for name, cfg in self.authenticator.account_configs().items():
            if name in self.accounts:
                self.accounts[name].config = cfg
            else:
                self.accounts[name] = self._account(name, cfg)
        if GLOBAL_ACCOUNT not in self.accounts:
            self.accounts[GLOBAL_ACCOUNT] = self._account(GLOBAL_ACCOUNT)
        sysname = self.system_account_name
        if sysname and sysname not in self.accounts:
            self.accounts[sysname] = self._account(sysname)
        self._install_imports()

    def _install_imports(self) -> None:
        """Every account's imports, exports and mappings (in operator mode the account JWTs', on the same
        path as the config's), applied again when the first activation token in use runs out, which drops
        that import (nats-server's activationExpired)."""
        from edged.routing.imports import install

        auth = self.authenticator
        confs = auth.account_configs() if auth.operator_mode else None
        self._watch_activations(install(self.accounts, self.opts, confs, auth.invalid_accounts))

    def _watch_activations(self, at: float) -> None:
        if self._activation_timer is not None:
            self._activation_timer.cancel()
            self._activation_timer = None
        self._activation_at = at
        if at > 0 and self.loop is not None:
            self._activation_timer = self.loop.call_later(max(0.0, at - time.time()) + 0.05, self._run_out)

    def _run_out(self) -> None:
        self._activation_timer = None
        log.debug("An activation token ran out: applying account imports again")
        self._install_imports()

    def update_account_claims(self, pub: str, token: str) -> str:
        """Apply an account JWT pushed to the server (`Authenticator.update_account_jwt`): the account's
        imports, exports and mappings again, and its clients' permissions and revocations."""
        before = self.authenticator.account_jwts.get(pub)
        msg = self.authenticator.update_account_jwt(pub, token)
        if self.authenticator.account_jwts.get(pub) != before:
            self._build_accounts()
            acc = self.accounts.get(pub)
            for conn in [c for c in list(self.clients.values()) if getattr(c, "account", None) is acc]:
                conn.reauthorize()
        return msg

    def _account(self, name: str, cfg: Any = None) -> Account:
        return Account(name, cfg, cache=not self.opts.disable_sublist_cache, reading=self.reading)

    @property
    def system_account(self) -> Account | None:
        return self.accounts.get(self.system_account_name) if self.system_account_name else None

    def authenticate(self, conn: ClientConnection, connect: dict, authenticator: Any = None) -> Any:
        """`connect` checked by the server's authenticator, or by a front door's own (`authenticator`)."""
        cert = None
        t = conn.transport
        if t is not None:
            sslobj = t.get_extra_info("ssl_object")
            if sslobj is not None:
                cert = sslobj.getpeercert(binary_form=True)
        conn_type = "WEBSOCKET" if conn.websocket else "STANDARD"
        return (authenticator or self.authenticator).authenticate(connect, conn.nonce, client_cert=cert,
                                                                 conn_type=conn_type)

    def account_for(self, res: Any) -> Account | None:
        name = res.account or GLOBAL_ACCOUNT
        acc = self.accounts.get(name)
        if acc is None:
            acc = self.accounts[name] = self._account(name)
            log.debug("Registered account %s", name)
        if res.account_claims:
            acc.claims = res.account_claims
        return acc

    def lookup_account(self, name: str) -> Account:
        acc = self.accounts.get(name)
        if acc is None:
            acc = self.accounts[name] = self._account(name)
        return acc

    def permission_checker(self, perms: Permissions | None) -> Any:
        if perms is None:
            return None
        from edged.security.permissions import PermissionChecker

        return PermissionChecker(perms)

    def make_nonce(self) -> str:
        return base64.urlsafe_b64encode(os.urandom(11)).rstrip(b"=").decode()

    # ------------------------------------------------------------------ client bookkeeping

    def next_cid(self) -> int:
        self._cid += 1
        return self._cid

    def accepting_clients_limit_reached(self, conn: ClientConnection) -> bool:
        return len(self.clients) >= self.opts.max_connections

    def register_client(self, conn: Any) -> None:
        self.clients[conn.cid] = conn
        self.total_connections += 1

    def unregister_client(self, conn: Any) -> None:
        if self.clients.pop(conn.cid, None) is not None:
            info = conn.info()
            info["stop"] = time.time()
            info["reason"] = conn.close_reason
            self.closed_clients.append(info)
            if len(self.closed_clients) > 10000:
                del self.closed_clients[:1000]
            log.debug("%s:%d - cid:%d - %s connection closed: %s", conn.host, conn.port, conn.cid, conn.kind,
                      conn.close_reason)

    def flush_soon(self, conn: Any) -> None:
        """Coalesce writes: every connection that got output this loop turn is flushed once."""
        self._flushq.append(conn)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush_all)

    def _flush_all(self) -> None:
        self._flush_scheduled = False
        self.flush_now()

    def flush_now(self) -> None:
        q = self._flushq
        if q:
            self._flushq = []
            for conn in q:
                conn.flush()

    def client_info(self, conn: ClientConnection | None = None) -> dict[str, Any]:
        o = self.opts
        info: dict[str, Any] = {
            "server_id": self.server_id,
            "server_name": self.server_name,
            "version": SERVER_VERSION,
            "proto": 1,
            "go": f"python{sys.version_info[0]}.{sys.version_info[1]}",
            "host": o.host,
            "port": self.client_port or o.port,
            "headers": not o.no_header_support,
            "max_payload": o.max_payload,
        }
        if conn is not None:
            info["client_id"] = conn.cid
            info["client_ip"] = conn.host
        if self.auth_required:
            info["auth_required"] = True
        if self.tls_required:
            info["tls_required"] = True
            if o.tls is not None and o.tls.verify:
                info["tls_verify"] = True
        if conn is not None and conn.nonce:
            info["nonce"] = conn.nonce
        js = self.opts.jetstream
        if js.enabled:
            info["jetstream"] = True
            if js.domain:
                info["domain"] = js.domain
        if self.lame_duck:
            info["ldm"] = True
        if API_LEVEL:  # nats-server's api_lvl (omitempty)
            info["api_lvl"] = API_LEVEL
        return info

    def tls_info_of(self, transport: Any) -> dict[str, Any] | None:
        sslobj = transport.get_extra_info("ssl_object")
        if sslobj is None:
            return None
        return {"version": sslobj.version(), "cipher": (sslobj.cipher() or ("",))[0]}

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._watch_activations(self._activation_at)
        self._stopped = asyncio.Event()
        o = self.opts
        log.info("Starting edged %s (nats-server %s compatible, JetStream API level %d)", __version__,
                 SERVER_VERSION, API_LEVEL)
        log.info("  Version:  %s", __version__)
        log.info("  Name:     %s", self.server_name)
        log.info("  ID:       %s", self.server_id)
        for w in o.warnings:
            log.warning("%s: %s (%s)", w.where, w.message, w.key)
        if o.config_file:
            log.info("Using configuration file: %s", o.config_file)
        self.authenticator.log_preload_issues()
        if o.pid_file:
            try:
                with open(o.pid_file, "w") as f:
                    f.write(str(os.getpid()))
            except OSError as e:
                raise StartError(f"Could not write pidfile: {go_os_error('open', e, o.pid_file)}") from None
        if o.tls is not None:
            from edged.security.tlsconf import server_ssl_context

            self.tls_context = server_ssl_context(o.tls)
        if self.jetstream is not None:
            prepare_store_dir(self.jetstream.store_dir)  # a clear [FTL] line, not the SQLite open's errno
        for svc in self.services:
            await svc.start()
        from edged.monitor.sysreqs import install_system_handlers

        install_system_handlers(self)
        if o.http_port:
            from edged.monitor.httpserver import MonitorServer

            self.monitor = MonitorServer(self)
            try:
                await self.monitor.start()
            except OSError as e:
                where = go_listen_error(o.monitor_host(), o.http_port, e)
                raise StartError(f"Can't start monitoring: can't listen to the monitor port: {where}") from None
        await self._start_listeners()
        log.info("Server is ready")

    def add_listener(self, listener: Listener) -> None:
        """Register a front door; it starts listening with the server (or at once, if already started)."""
        self.listeners.append(listener)
        if self.loop is not None and self.client_port:
            self.loop.create_task(self._listen(listener))

    def _client_listener(self) -> Listener:
        o = self.opts
        tls = o.tls
        handshake_first = tls is not None and tls.handshake_first

        def factory() -> ClientConnection:
            return ClientConnection(self, tls_upgrade=tls is not None and not handshake_first)

        return Listener("client", o.host or "0.0.0.0", o.port, factory,
                        ssl=self.tls_context if handshake_first else None,
                        ssl_handshake_timeout=tls.timeout if handshake_first and tls else None)

    async def _listen(self, lst: Listener) -> None:
        port = lst.port if lst.port != -1 else 0
        try:
            # a wildcard host listens on IPv4 and IPv6 as nats-server does, where the kernel has IPv6
            sock = dual_stack_socket(lst.host, port)
            where: dict[str, Any] = {"sock": sock} if sock is not None else \
                {"host": lst.host, "port": port, "reuse_address": True, "backlog": 1024}
            srv = await self.loop.create_server(lst.factory, ssl=lst.ssl,
                                                ssl_handshake_timeout=lst.ssl_handshake_timeout, **where)
        except OSError as e:
            raise listen_error(lst.host, lst.port, e) from None
        for s in srv.sockets:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        lst.server = srv
        lst.bound_port = srv.sockets[0].getsockname()[1]
        log.info("Listening for %s connections on %s:%d", lst.name, lst.host, lst.bound_port)

    async def _start_listeners(self) -> None:
        client = self._client_listener()
        self.listeners.insert(0, client)
        for lst in self.listeners:
            await self._listen(lst)
        self.client_port = client.bound_port
        if self.opts.tls is not None:
            log.info("TLS required for client connections")

    def _close_listeners(self) -> None:
        for lst in self.listeners:
            if lst.server is not None:
                lst.server.close()

    async def wait_stopped(self) -> None:
        assert self._stopped is not None
        await self._stopped.wait()

    async def shutdown(self) -> None:
        if self.shutting_down:
            return
        self.shutting_down = True
        log.info("Initiating Shutdown...")
        if self.systemd is not None:
            self.systemd.stopping()
        self._close_listeners()
        if self.jetstream is not None and self.jetstream.signal_pull_consumers():
            await asyncio.sleep(0.05)  # as nats-server: let those statuses go out before the clients close
        for conn in list(self.clients.values()):
            conn.close("Server Shutdown")
        if self.monitor is not None:
            await self.monitor.stop()
        for svc in reversed(self.services):
            try:
                await svc.stop()
            except Exception as e:  # a failing subsystem must not block the others from stopping
                log.error("error stopping %s: %s", type(svc).__name__, e)
        if self.opts.pid_file:
            try:
                os.unlink(self.opts.pid_file)
            except OSError:
                pass
        log.info("Server Exiting..")
        assert self._stopped is not None
        self._stopped.set()

    async def lame_duck_mode(self) -> None:
        """SIGUSR2: stop accepting, tell clients (INFO ldm), close them over the lame duck duration."""
        if self.lame_duck or self.shutting_down:
            return
        self.lame_duck = True
        o = self.opts
        log.info("Entering lame duck mode, stop accepting new clients")
        self._close_listeners()
        for conn in list(self.clients.values()):
            conn.enter_lame_duck()
        await asyncio.sleep(min(o.lame_duck_grace_period, o.lame_duck_duration))
        clients = list(self.clients.values())
        remaining = max(0.0, o.lame_duck_duration - o.lame_duck_grace_period)
        if clients:
            step = remaining / len(clients) if remaining > 0 else 0
            for conn in clients:
                conn.close("Server Shutdown")
                if step:
                    await asyncio.sleep(min(step, 1.0))
        await self.shutdown()

    def reload(self) -> None:
        """SIGHUP: re-read the config file; apply auth, permissions and logging without dropping clients.
        Under systemd it is framed by RELOADING=1 and READY=1, so `systemctl reload` waits for it."""
        if self.systemd is not None:
            self.systemd.reloading()
        try:
            self._reload()
        finally:
            if self.systemd is not None:
                self.systemd.reloaded()

    def _reload(self) -> None:
        if not self.opts.config_file:
            log.warning("Reload requested but no configuration file was given")
            return
        from edged.security.auth import Authenticator
        from edged.settings.config import load_options

        try:
            new = load_options(self.opts.config_file)
        except Exception as e:
            log.error("Failed to reload server configuration: %s", e)
            return
        # CLI flags given at start keep precedence, like nats-server
        for k in ("port", "host", "http_port"):
            setattr(new, k, getattr(self.opts, k))
        old = self.opts
        old.users, old.nkeys = new.users, new.nkeys
        old.username, old.password, old.authorization = new.username, new.password, new.authorization
        old.accounts, old.default_permissions, old.no_auth_user = new.accounts, new.default_permissions, new.no_auth_user
        old.mappings = new.mappings
        old.trusted_operators, old.trusted_keys, old.resolver_preload = (
            new.trusted_operators,
            new.trusted_keys,
            new.resolver_preload,
        )
        old.debug, old.trace, old.logtime = new.debug, new.trace, new.logtime
        old.max_payload, old.max_pending, old.ping_interval = new.max_payload, new.max_pending, new.ping_interval
        logmod.setup(debug=old.debug, trace=old.trace, logtime=old.logtime, log_file=old.log_file)
        self.authenticator = Authenticator(old)
        self.authenticator.log_preload_issues()
        self.auth_required = self.authenticator.auth_required
        self.nonce_required = self.authenticator.nonce_required
        self._build_accounts()
        # re-authorise connected clients under the new rules; those no longer allowed are closed
        for conn in list(self.clients.values()):
            conn.reauthorize()
        old.edged = new.edged
        self._reload_leafnodes(new, self._reload_domain(new))
        self.reloads += 1
        self.config_load_time = time.time()
        log.info("Reloaded server configuration")

    def _reload_domain(self, new: Options) -> bool:
        """Apply a changed JetStream domain now, so provisioning a device needs no restart (nats-server
        refuses this reload). Returns whether it changed: the leafnode links then start over, so the
        hub learns the new domain and the link's deny rules follow it."""
        js = self.opts.jetstream
        if new.jetstream.domain == js.domain:
            return False
        log.info("JetStream domain changed from %r to %r", js.domain, new.jetstream.domain)
        js.domain = new.jetstream.domain
        if self.jetstream is not None:
            self.jetstream.set_domain(js.domain)
        return True

    def _reload_leafnodes(self, new: Options, domain_changed: bool = False) -> None:
        """Leafnode remotes follow the file (new URLs or creds: a redial, not a restart); a new JetStream
        domain redials every remote and drops the leafs edged is the hub of (they reconnect)."""
        lo = new.leafnodes
        if self.leafnodes is None:
            if lo is None or not lo.remotes:
                return
            from edged.leafnode.remote import LeafNodeManager

            lo.port = 0  # a leafnode port is opened at start only
            self.opts.leafnodes = lo
            self.leafnodes = LeafNodeManager(self)
            self.services.append(self.leafnodes)
            self.loop.create_task(self.leafnodes.start())
            return
        from edged.settings.options import LeafNodeOpts

        self.loop.create_task(self.leafnodes.reload(lo or LeafNodeOpts(), redial=domain_changed))


async def _run(opts: Options, build: Callable[[Options], Server]) -> int:
    loop = asyncio.get_running_loop()
    # a stop asked for while starting (the client port may accept before start() returns) is kept and
    # carried out once started, as nats-server handles its signals from the start: exit 0, not -15
    early_stop: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, early_stop.append, sig)
    try:
        srv = build(opts)
        await srv.start()
    except StartError as e:
        log.critical("%s", e)
        return 1
    except Exception as e:  # any other start failure is one [FTL] line too, never a traceback
        log.critical("Can't start edged: %s", " ".join(str(e).split()) or type(e).__name__)
        log.debug("start failure", exc_info=True)  # the traceback only with -D, for a bug report
        return 1
    if early_stop:
        await srv.shutdown()
        return 0
    loop.add_signal_handler(signal.SIGTERM, lambda: loop.create_task(srv.shutdown()))
    loop.add_signal_handler(signal.SIGINT, lambda: loop.create_task(srv.shutdown()))
    loop.add_signal_handler(signal.SIGUSR2, lambda: loop.create_task(srv.lame_duck_mode()))
    loop.add_signal_handler(signal.SIGHUP, srv.reload)
    loop.add_signal_handler(
        signal.SIGUSR1, lambda: logmod.setup(opts.debug, opts.trace, opts.logtime, opts.log_file)
    )
    from edged.appliance.systemd import attach

    # READY=1 (with STATUS= and the watchdog) when run by systemd: after the handlers, so a reload or
    # stop that systemd sends right away is handled, not fatal
    attach(srv)
    await srv.wait_stopped()
    return 0


def serve(opts: Options, build: Callable[[Options], Server] = Server) -> int:
    """Blocking entry point used by the CLI, which passes the composition root (edged/app.py) as `build`."""
    try:
        logmod.setup(debug=opts.debug, trace=opts.trace, logtime=opts.logtime, log_file=opts.log_file)
    except OSError as e:  # no logger yet: one line on stderr, as nats-server's log.Fatalf
        print(f"{time.strftime('%Y/%m/%d %H:%M:%S')} error opening file: "
              f"{go_os_error('open', e, opts.log_file)}", file=sys.stderr)
        return 1
    if opts.tls is not None and not opts.tls.handshake_first:
        # nats-server's default TLS (plaintext INFO, then the client's ClientHello) needs reading to
        # stay paused between accept and start_tls; uvloop does not always honour that pause, and a
        # fast ClientHello then reaches the NATS parser. asyncio's loop does, so it runs this mode.
        log.debug("TLS upgrade after INFO: using asyncio's event loop")
        return asyncio.run(_run(opts, build))
    try:
        import uvloop  # optional speed-up, never required
    except ImportError:
        uvloop = None
    if uvloop is None:  # run outside the except block: a start error must not chain to the ImportError
        return asyncio.run(_run(opts, build))
    return uvloop.run(_run(opts, build))
