"""The MQTT front door as a service of the server: the listener (TCP or TLS), the per-account MQTT state,
authentication of MQTT clients, the NATS side of an MQTT publish, and wills.

`register_mqtt(server)` is what the composition root (edged/app.py) calls when `mqtt {}` is configured.
`MQTTService.connection(websocket=True)` makes an MQTT connection for another transport (the WebSocket
listener feeds it bytes through `data_received` and gives it a transport-like object).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from bridges.mqtt.connection import MQTTConnection, MQTTSub
from bridges.mqtt.manager import MQTTAccount
from bridges.mqtt.natsmsg import Retained, mqtt_header
from bridges.mqtt.session import MSGS_PREFIX
from bridges.mqtt.topics import ignore_for_reserved, topic_to_subject
from edged.connections.listener import Listener
from edged.fatal import StartError
from edged.log import log
from edged.routing.accounts import GLOBAL_ACCOUNT
from edged.security.auth import AuthError, AuthResult, check_password

if TYPE_CHECKING:
    from bridges.mqtt.packets import Connect, Will
    from edged.routing.accounts import Account
    from edged.server import Server

REPLY_HEADER = b"Nmqtt-Reply"


class MQTTService:
    def __init__(self, server: Server) -> None:
        mo = server.opts.mqtt
        assert mo is not None
        self.server = server
        self.opts = mo
        self.accounts: dict[str, MQTTAccount] = {}
        self.max_packet_size = server.opts.max_payload + 65536
        self.reject_qos2 = mo.reject_qos2_publish
        self.downgrade_qos2_sub = mo.downgrade_qos2_subscribe
        self.connect_timeout = mo.auth_timeout or 2.0
        if mo.tls is not None:
            self.connect_timeout = max(self.connect_timeout, mo.tls.timeout + 1.0)
        # True while `publish` routes an MQTT message: what receivers see then came from MQTT (a NATS
        # message may carry a copied Nmqtt-Pub header: nats-py's respond() copies the request's)
        self.publishing = False
        self._wills: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self.listener: Listener | None = None
        self._leaving: set[asyncio.Task[None]] = set()
        # store commits that connections wait on (their QoS 1 PUBACKs), told by the store as it commits
        self._commit_waiters: dict[Any, list[MQTTConnection]] = {}
        self._told_by_store = False
        # subject of an MQTT publish -> (its bytes, its `$MQTT.msgs.` subject as str and bytes); bounded
        self._names: dict[str, tuple[bytes, str, bytes]] = {}
        # (account, subject) -> (the account's sublist and its generation, the QoS 1/2 plain subscriptions
        # that take it or None when anyone else does, whether a session stores it): see `_quiet_route`
        self._quiet: dict[tuple[str, str], tuple[Any, int, list[Any] | None, bool]] = {}

    def connection(self, websocket: bool = False) -> MQTTConnection:
        """A new MQTT connection (an asyncio Protocol) for this server."""
        return MQTTConnection(self.server, self, websocket)

    async def start(self) -> None:
        srv = self.server
        if srv.jetstream is None:
            raise StartError("mqtt requires JetStream to be enabled if running in standalone mode")
        if not srv.opts.server_name:
            raise StartError("mqtt requires server name to be explicitly set")
        mo = self.opts
        ssl = None
        if mo.tls is not None:
            from edged.security.tlsconf import server_ssl_context

            ssl = server_ssl_context(mo.tls)
        # as nats-server: its own host (every interface when empty, not the client port's), -1 any free port
        self.listener = Listener("mqtt", mo.host or "0.0.0.0", mo.port, self.connection,
                                 ssl=ssl, ssl_handshake_timeout=mo.tls.timeout if mo.tls else None)
        srv.add_listener(self.listener)
        store = srv.jetstream.store_for("file")
        listeners = getattr(store, "commit_listeners", None)
        if listeners is not None:
            listeners.append(self._committed)
            self._told_by_store = True
        srv.loop.create_task(self._preload())

    async def _preload(self) -> None:
        await asyncio.sleep(0)
        js = self.server.jetstream
        for name in list(js.accounts):
            acc = self.server.accounts.get(name)
            if acc is None:
                continue
            try:
                await self.account_state(acc).preload()
            except Exception as e:
                log.error("MQTT: loading the state of account %s: %s", name, e)

    def after_commit(self, done: Any, conn: MQTTConnection) -> None:
        """`conn` has replies waiting for the commit `done`: it is told as the store commits (its PUBACKs
        then go out in the flush of the read that committed, with no loop turn between), or else, and
        for a commit that failed, by the future's callback."""
        done.add_done_callback(conn._acks_ready)
        if self._told_by_store:
            w = self._commit_waiters.get(done)
            if w is None:
                self._commit_waiters[done] = [conn]
            else:
                w.append(conn)

    def _committed(self, fut: Any) -> None:
        conns = self._commit_waiters.pop(fut, None)
        if conns is not None:
            for conn in conns:
                fut.remove_done_callback(conn._acks_ready)
                conn._acks_ready(fut)

    def track(self, task: asyncio.Task[None]) -> None:
        """A session being let go (saved or dropped): shutdown waits for it."""
        self._leaving.add(task)
        task.add_done_callback(self._leaving.discard)

    async def stop(self) -> None:
        if self._leaving:  # connections closed by the shutdown are still saving or dropping their sessions
            await asyncio.wait(list(self._leaving), timeout=5.0)
        for h in self._wills.values():
            h.cancel()
        self._wills.clear()
        for a in self.accounts.values():
            a.close()
        js = self.server.jetstream
        store = js.store_for("file") if js is not None else None
        listeners = getattr(store, "commit_listeners", None)
        if listeners is not None and self._committed in listeners:
            listeners.remove(self._committed)

    def routing_mqtt(self) -> bool:
        return self.publishing

    def account_state(self, acc: Account) -> MQTTAccount:
        a = self.accounts.get(acc.name)
        if a is None:
            a = self.accounts[acc.name] = MQTTAccount(self.server, acc, self.routing_mqtt)
        return a

    # ------------------------------------------------------------------ auth

    def authenticate(self, conn: MQTTConnection, c: Connect) -> AuthResult:
        """The MQTT port's own authorization {} if it has one, else the server's users and accounts (with
        the MQTT port's no_auth_user), as nats-server does; an MQTT password alone is a token."""
        mo = self.opts
        user = c.username or ""
        password = (c.password or b"").decode("utf-8", "replace")
        if mo.username or mo.token:
            if mo.username and user == mo.username and check_password(password, mo.password):
                return AuthResult(GLOBAL_ACCOUNT, user=user)
            if mo.token and not user and check_password(password, mo.token):
                return AuthResult(GLOBAL_ACCOUNT)
            raise AuthError("bad MQTT user/password")
        connect: dict[str, Any] = {}
        if user:
            connect["user"] = user
            connect["pass"] = password
        elif password:
            connect["auth_token"] = password
        cert = None
        t = conn.transport
        if t is not None:
            sslobj = t.get_extra_info("ssl_object")
            if sslobj is not None:
                cert = sslobj.getpeercert(binary_form=True)
        authn = self.server.authenticator
        if cert is not None and mo.tls is not None and mo.tls.verify_and_map:
            # the MQTT port's tls { verify_and_map }: the certificate names the user, as nats-server maps it
            return authn._auth_cert(cert, "MQTT")
        saved = authn.opts.no_auth_user
        if mo.no_auth_user:
            authn.opts.no_auth_user = mo.no_auth_user
        try:
            return authn.authenticate(connect, None, client_cert=cert, conn_type="MQTT")
        finally:
            authn.opts.no_auth_user = saved

    # ------------------------------------------------------------------ publishing

    def publish(self, origin: Any, account: Account | None, subject: str, reply: str, hdr: bytes, payload: bytes,
                qos: int) -> Awaitable[None] | None:
        """An MQTT message onto the router: to its subject (NATS subscribers, streams, QoS 0 MQTT
        subscribers) and, at QoS 1/2, into `$MQTT_msgs` for the QoS 1/2 subscribers' consumers. The
        future of the store commit that holds it when anything stored it (None: nothing to wait for)."""
        if account is None:
            return None
        names = self._names.get(subject)
        if names is None:
            if len(self._names) >= 4096:
                self._names.clear()
            m = MSGS_PREFIX + subject
            names = self._names[subject] = (subject.encode(), m, m.encode("utf-8", "surrogateescape"))
        macc = self.account_state(account) if qos > 0 else None
        quiet = self._quiet_route(macc, account, subject) if macc is not None else None
        if quiet is not None:
            macc.matched = quiet  # type: ignore[union-attr]
        else:
            if macc is not None:
                macc.matched = False  # set by the routing below if a QoS 1/2 session subscription takes it
            self.publishing = True
            try:
                account.route(subject, names[0], reply.encode() if reply else b"", hdr, payload, origin)
            finally:
                self.publishing = False
        if macc is not None and macc.matched:
            # the stored copy also names its publisher (an MQTT 5 no-local subscription skips its own) and
            # carries the reply subject in a header (a reply would get the stream's PubAck)
            h = hdr[:-2] + b"Nmqtt-Origin:%d\r\n" % getattr(origin, "cid", 0)
            if reply:
                h += REPLY_HEADER + b":" + reply.encode() + b"\r\n"
            h += b"\r\n"
            client = macc.api.client
            account.route(names[1], names[2], b"", h, payload, client)
        js = self.server.jetstream
        if js is None or qos == 0:
            return None
        store = js.store_for("file")
        if store is None:
            return None
        done = store.durable()
        return None if done.done() else done  # type: ignore[attr-defined]

    def _quiet_route(self, macc: MQTTAccount, account: Account, subject: str) -> bool | None:
        """For a QoS 1/2 MQTT publish to `subject`: when its only receivers would be QoS 1/2 MQTT
        subscriptions' plain subscriptions (which turn such a message down: their copy comes through the
        session's consumer) and the QoS 1/2 sessions' watch subscriptions, routing it would do nothing
        but tell whether a session takes it: that answer (`MQTTAccount.matched`), kept per subject until
        the account's subscriptions change, with no routing. None: route it."""
        if subject.startswith("$MQTT.") or account.links is not None or "route" in account.__dict__:
            return None
        sl = account.sublist
        gen = sl.inserts + sl.removes
        e = self._quiet.get((account.name, subject))
        if e is None or e[0] is not sl or e[1] != gen:
            e = self._classify(macc, account, subject, gen)
        subs = e[2]
        if subs is None:
            return None
        for sub in subs:  # a subscription's QoS changes in place (SUBSCRIBE again)
            if sub.st.qos == 0:
                return None
        return e[3]

    def _classify(self, macc: MQTTAccount, account: Account, subject: str,
                  gen: int) -> tuple[Any, int, list[Any] | None, bool]:
        sl = account.sublist
        psubs, qgroups = sl.match(subject)
        subs: list[Any] | None = []
        matched = False
        internal = account.internal
        watching = macc._watching
        if qgroups:
            subs = None
        else:
            for sub in psubs:
                if type(sub) is MQTTSub and not sub.js and sub.queue is None and not sub.max:
                    subs.append(sub)  # type: ignore[union-attr]
                elif sub.conn is internal and sub.sid in watching and not sub.max:
                    matched = matched or not ignore_for_reserved(watching[sub.sid], subject)
                else:
                    subs = None
                    break
        if len(self._quiet) >= 4096:
            self._quiet.clear()
        e = self._quiet[(account.name, subject)] = (sl, gen, subs, matched)
        return e

    # ------------------------------------------------------------------ wills

    def send_will(self, conn: MQTTConnection, acc: Account, client_id: str, will: Will, delay: float) -> None:
        key = (acc.name, client_id)
        old = self._wills.pop(key, None)
        if old is not None:
            old.cancel()
        if delay > 0:
            self._wills[key] = self.server.loop.call_later(delay, self._will_now, key, conn, acc, will)
        else:
            self._will_now(key, conn, acc, will)

    def cancel_will(self, account: str, client_id: str) -> None:
        """The client is back before its will delay ran out: no will [MQTT-3.1.3-9]."""
        h = self._wills.pop((account, client_id), None)
        if h is not None:
            h.cancel()

    def _will_now(self, key: tuple[str, str], conn: MQTTConnection, acc: Account, will: Will) -> None:
        self._wills.pop(key, None)
        try:
            subject = topic_to_subject(will.topic)
        except ValueError:
            return
        if conn.perms is not None and not conn.perms.can_publish(subject):
            log.error("MQTT: will of %r to %r not allowed", key[1], subject)
            return
        p = will.properties
        hdr = mqtt_header(will.qos, p.user_properties if p else None, p.correlation_data if p else None,
                          p.content_type if p else None, p.payload_format_indicator if p else None)
        reply = ""
        if p is not None and p.response_topic:
            try:
                reply = topic_to_subject(p.response_topic)
            except ValueError:
                reply = ""
        macc = self.account_state(acc)
        self.publish(macc.api.client, acc, subject, reply, hdr, will.payload, will.qos)
        if will.retain:
            r = Retained(subject, will.topic, will.payload, (will.qos << 1) | 1, macc.api.id, conn.user)
            self.server.loop.create_task(self._put_retained(macc, r))
        self.server.flush_now()

    async def _put_retained(self, macc: MQTTAccount, r: Retained) -> None:
        try:
            await macc.retained.put(r)
        except Exception as e:
            log.error("MQTT: storing retained will for %r: %s", r.subject, e)


def register_mqtt(server: Server) -> MQTTService:
    """The composition root's hook: the MQTT service (its listener is added when the server starts)."""
    svc = MQTTService(server)
    server.services.append(svc)
    return svc


def find_service(server: Server) -> MQTTService | None:
    """The server's MQTT service, for another front door carrying MQTT (WebSocket)."""
    for s in server.services:
        if isinstance(s, MQTTService):
            return s
    return None
