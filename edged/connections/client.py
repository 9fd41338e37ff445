"""A NATS client connection: the I/O shell around the protocol codec and the router.

asyncio Protocols are used instead of stream objects because the hot path must not await per message:
`data_received` parses a whole read, routes every message synchronously, and each receiving
connection's output is coalesced into one socket write per event-loop turn (see Server.flush_soon).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from edged.connections import protocol as P
from edged.connections.connection import Connection
from edged.connections.protocol import (
    OP_ACKS,
    OP_CONNECT,
    OP_ERR,
    OP_ERROR,
    OP_INFO,
    OP_OK,
    OP_PING,
    OP_PONG,
    OP_PUB,
    OP_PUBR,
    OP_PUBS,
    OP_SUB,
    OP_UNSUB,
    frame_batch,
    hmsg_head,
    msg_head,
)
from edged.log import TRACE, log
from edged.routing.accounts import Account
from edged.routing.receiver import KIND_CLIENT, Message, Subscription
from edged.routing.subjects import is_valid_literal_subject, is_valid_queue, is_valid_subject, subject_matches
from edged.security.auth import AuthError

if TYPE_CHECKING:
    from edged.server import Server

CRLF = P.CRLF


class ClientConnection(Connection):
    """One NATS client. Also used for NATS-over-WebSocket through a transport shim (which calls
    `data_received`)."""

    kind = KIND_CLIENT

    def __init__(self, server: Server, *, tls_upgrade: bool = False, websocket: bool = False) -> None:
        super().__init__(server)
        self.parser = P.ClientParser(self.opts.max_control_line, self.opts.max_payload, runs=True,
                                     empty_runs=server.empty_run_prefix)
        self.tls_upgrade = tls_upgrade
        self.websocket = websocket
        self.tls_info: dict[str, Any] | None = None
        self.account: Account | None = None
        self.connected = False  # CONNECT processed
        self.auth_pending = server.auth_required
        self.nonce: str | None = None
        # CONNECT options
        self.verbose = False
        self.pedantic = False
        self.echo = True
        self.headers = False
        self.no_responders = False
        self.name = ""
        self.lang = ""
        self.version = ""
        self.user = ""
        self.perms: Any = None
        self.connect_opts: dict | None = None
        self._auth_timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ asyncio callbacks

    def _connected(self, transport: Any) -> None:
        srv = self.server
        if not self.tls_upgrade and transport.get_extra_info("ssl_object") is not None:
            self.tls_info = srv.tls_info_of(transport)
        if srv.nonce_required:
            self.nonce = srv.make_nonce()
        self.send_raw(P.info_line(self.client_info()))
        if srv.accepting_clients_limit_reached(self):
            self.send_err("maximum connections exceeded")
            self.close("Maximum Connections Exceeded", flush=True)
            return
        srv.register_client(self)
        if self.tls_upgrade:
            # the ClientHello must reach start_tls, not our parser: read nothing until the task runs
            # (start_tls resumes reading on the TLS side itself)
            transport.pause_reading()
            srv.loop.create_task(self._upgrade_tls())
        if self.auth_pending:
            self._auth_timer = srv.loop.call_later(self.auth_timeout(), self._auth_timeout)
        self._schedule_ping()
        self.flush()

    async def _upgrade_tls(self) -> None:
        """nats-server's default: plaintext INFO, then the client starts the TLS handshake."""
        srv = self.server
        tls = srv.opts.tls
        assert tls is not None and srv.tls_context is not None
        try:
            self.flush()
            # until start_tls returns, replies to what arrives over TLS must not go out on the raw transport
            self._upgrading = True
            new = await asyncio.wait_for(
                srv.loop.start_tls(self.transport, self, srv.tls_context, server_side=True), tls.timeout
            )
        except Exception as e:  # handshake failure or timeout: nats-server logs and closes
            log.error("%s - cid:%d - TLS handshake error: %s", self.host, self.cid, e or type(e).__name__)
            self.close("TLS Handshake Error", flush=False)
            return
        if new is None:
            self.close("TLS Handshake Error", flush=False)
            return
        self.transport = new
        self._upgrading = False
        self.tls_info = srv.tls_info_of(new)
        self.flush()

    # ------------------------------------------------------------------ what a front door may change

    def client_info(self, own: bool = True) -> dict[str, Any]:
        """The INFO this client gets (`own`: with its id, address and nonce)."""
        return self.server.client_info(self if own else None)

    def auth_timeout(self) -> float:
        return self.opts.effective_auth_timeout()

    def authenticate(self, connect: dict) -> Any:
        return self.server.authenticate(self, connect)

    # ------------------------------------------------------------------ protocol events

    def process(self, events: list[tuple]) -> None:
        on_pub = self._on_pub
        on_pubs = self._on_pubs
        for ev in events:
            if self.closed:
                return
            op = ev[0]
            if op == OP_PUBS:  # the hot path, header-less PUBs (a run of one or more)
                if self.auth_pending:
                    return self._auth_violation()
                on_pubs(ev[1], ev[2], ev[3], ev[4], ev[5])
            elif op == OP_PUB:
                if self.auth_pending:
                    return self._auth_violation()
                on_pub(ev[1], ev[2], ev[3], ev[4])
            elif op == OP_PUBR:  # header-less PUBs to one subject, each with its own reply
                if self.auth_pending:
                    return self._auth_violation()
                self._on_pubr(ev[1], ev[2], ev[3], ev[4])
            elif op == OP_ACKS:  # empty PUBs under the parser's empty-run prefix
                if self.auth_pending:
                    return self._auth_violation()
                self._on_acks(ev[1])
            elif op == OP_SUB:
                if self.auth_pending:
                    return self._auth_violation()
                self._on_sub(ev[1], ev[2], ev[3])
            elif op == OP_UNSUB:
                if self.auth_pending:
                    return self._auth_violation()
                self._on_unsub(ev[1], ev[2])
            elif op == OP_PING:
                if self.auth_pending:
                    return self._auth_violation()
                self.send_raw(P.PONG)
            elif op == OP_PONG:
                self._on_pong()
            elif op == OP_CONNECT:
                self._on_connect(ev[1])
            elif op == OP_ERROR:
                text = ev[1]
                if text:
                    self.send_err(text)
                    log.error("%s:%d - cid:%d - %s", self.host, self.port, self.cid, text)
                self.close("Protocol Violation" if text != P.ERR_MAX_PAYLOAD else "Maximum Payload Exceeded")
                return
            elif op == OP_ERR:
                # a client sending -ERR: nats-server closes the connection
                self.close("Parse Error")
                return
            elif op == OP_INFO or op == OP_OK:
                if self.auth_pending:
                    return self._auth_violation()

    def _on_connect(self, opts: dict) -> None:
        srv = self.server
        if log.isEnabledFor(TRACE):
            safe = {k: ("[REDACTED]" if k in ("pass", "auth_token", "sig", "jwt") else v) for k, v in opts.items()}
            log.log(TRACE, "%s:%d - cid:%d - <<- [CONNECT %s]", self.host, self.port, self.cid, safe)
        self.connect_opts = opts
        if not self.rtt:
            # nats-server's first estimate until a PING is answered: the time from accept to CONNECT
            self.rtt = max(time.time() - self.start, 1e-9)
        self.verbose = bool(opts.get("verbose", True))  # nats-server defaultOpts: verbose and pedantic on
        self.pedantic = bool(opts.get("pedantic", True))
        self.echo = bool(opts.get("echo", True))
        self.headers = bool(opts.get("headers", False)) and not self.opts.no_header_support
        self.no_responders = bool(opts.get("no_responders", False))
        self.name = str(opts.get("name") or "")
        self.lang = str(opts.get("lang") or "")
        self.version = str(opts.get("version") or "")
        if self.no_responders and not self.headers:
            self.send_err("no responders requires headers support")
            self.close("Protocol Violation")
            return
        if srv.tls_required and self.tls_info is None and not self._upgrading and not self.websocket:
            self.send_err("Secure Connection - TLS Required")
            self.close("TLS Handshake Error")
            return
        try:
            res = self.authenticate(opts)
        except AuthError as e:
            log.error("%s:%d - cid:%d - authentication error: %s", self.host, self.port, self.cid, e)
            return self._auth_violation(e.client_text)
        except Exception as e:  # a malformed CONNECT field the authenticator could not read
            log.error("%s:%d - cid:%d - authentication error: %s", self.host, self.port, self.cid, e)
            return self._auth_violation()
        acc = srv.account_for(res)
        if acc is None:
            return self._auth_violation()
        if self.account is not None and self.account is not acc:
            # re-CONNECT into another account: drop subscriptions of the old one
            for sub in list(self.subs.values()):
                self.account.unsubscribe(sub)
            self.subs.clear()
            self.account.clients.discard(self)
        self.account = acc
        acc.clients.add(self)
        self.user = res.user
        self.perms = srv.permission_checker(res.permissions)
        if res.expires_at:
            delay = max(0.0, res.expires_at - time.time())
            self._timers.append(srv.loop.call_later(delay, self._auth_expired))
        self.auth_pending = False
        self.connected = True
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        if self.verbose:
            self.send_raw(P.OK)
        log.debug("%s:%d - cid:%d - Client connection created", self.host, self.port, self.cid)

    def _on_pub(self, subject: str, reply: str, hdr: bytes | None, payload: bytes) -> None:
        self.in_msgs += 1
        self.in_bytes += len(payload)
        if hdr is not None:
            if not self.headers:
                log.error("%s:%d - cid:%d - message headers not supported", self.host, self.port, self.cid)
                self.close("Protocol Violation")
                return
            self.in_bytes += len(hdr)
        if self.pedantic and not is_valid_literal_subject(subject):
            self.send_err("Invalid Publish Subject")
        perms = self.perms
        if perms is not None and not perms.can_publish(subject):
            self.send_err(f"Permissions Violation for Publish to {_quote(subject)}")
            return
        if self.verbose:
            self.send_raw(P.OK)
        acc = self.account
        if acc is None:
            return
        reply_b = reply.encode("utf-8", "surrogateescape") if reply else b""
        subject_b = subject.encode("utf-8", "surrogateescape")
        if acc.route(subject, subject_b, reply_b, hdr, payload, self):
            # delivered: unless only to a receiver that turned it down (ReadContext.decline)
            if not reply or self.server.reading.declined is None or \
                    not self.server.reading.take_declined(subject, reply):
                return
        if reply and self.no_responders:
            for sub in self.subs.values():
                if sub.queue is None and subject_matches(sub.subject, reply):
                    self.send_raw(P.no_responders_msg(reply_b, sub.sid_b, subject_b))
                    break

    def _on_pubs(self, subject: str, reply: str, subject_b: bytes, reply_b: bytes, payloads: list[bytes]) -> None:
        """A run of header-less PUBs with one subject and reply: checked and routed once when that is the
        same as doing it per message, else message by message (+OK or -ERR per message, reply allowances
        counted per publish, no-responders replies)."""
        perms = self.perms
        if (
            self.verbose
            or (self.pedantic and not is_valid_literal_subject(subject))
            or (perms is not None and not perms.publish_allowed_outright(subject))
            or (reply and self.no_responders)
            or self.account is None
        ):
            on_pub = self._on_pub
            for payload in payloads:
                if self.closed:
                    return
                on_pub(subject, reply, None, payload)
            return
        if len(payloads) == 1:  # a message alone: the per-message route, subject and reply already bytes
            payload = payloads[0]
            self.in_msgs += 1
            self.in_bytes += len(payload)
            self.account.route(subject, subject_b, reply_b, None, payload, self)
            return
        nbytes = sum(map(len, payloads))
        self.in_msgs += len(payloads)
        self.in_bytes += nbytes
        self.account.route_run(subject, subject_b, reply_b, payloads, self, nbytes)

    def _on_pubr(self, subject: str, subject_b: bytes, replies: list[bytes], payloads: list[bytes]) -> None:
        """A run of header-less PUBs to one subject, each with a reply of its own (a JetStream publisher's
        pipelined requests): checked and routed once when the one receiver takes such runs (a stream),
        else message by message."""
        perms = self.perms
        acc = self.account
        if (
            len(payloads) == 1
            or self.verbose
            or (self.pedantic and not is_valid_literal_subject(subject))
            or (perms is not None and not perms.publish_allowed_outright(subject))
            or acc is None
            or not acc.route_replies(subject, subject_b, replies, payloads, self)
        ):
            on_pub = self._on_pub
            for i, payload in enumerate(payloads):
                if self.closed:
                    return
                on_pub(subject, replies[i].decode("utf-8", "surrogateescape"), None, payload)
            return
        self.in_msgs += len(payloads)
        self.in_bytes += sum(map(len, payloads))

    def _on_acks(self, subjects: list[bytes]) -> None:
        """A run of plain JetStream acks (empty PUBs to `$JS.ACK.…`, no reply, no headers): routed as a
        run when nothing per message applies (+OK, pedantic checks, permissions), else one by one."""
        acc = self.account
        if self.verbose or self.pedantic or self.perms is not None or acc is None:
            on_pub = self._on_pub
            for s in subjects:
                if self.closed:
                    return
                on_pub(s.decode("utf-8", "surrogateescape"), "", None, b"")
            return
        self.in_msgs += len(subjects)
        acc.route_empties(subjects, self)

    def _on_sub(self, subject: str, queue: str | None, sid: str) -> None:
        mx = self.opts.max_subscriptions
        if mx and len(self.subs) >= mx:
            log.error("%s:%d - cid:%d - maximum subscriptions exceeded", self.host, self.port, self.cid)
            self.send_err("maximum subscriptions exceeded")
            return
        if not is_valid_subject(subject) or (queue is not None and not is_valid_queue(queue)):
            self.send_err("Invalid Subject")
            return
        perms = self.perms
        if perms is not None and not perms.can_subscribe(subject, queue):
            if queue:
                self.send_err(
                    f"Permissions Violation for Subscription to {_quote(subject)} using queue {_quote(queue)}"
                )
            else:
                self.send_err(f"Permissions Violation for Subscription to {_quote(subject)}")
            return
        if sid not in self.subs and self.account is not None:
            sub = Subscription(self, subject, queue, sid)
            self.subs[sid] = sub
            self.account.subscribe(sub)
        if self.verbose:
            self.send_raw(P.OK)

    def _on_unsub(self, sid: str, mx: int) -> None:
        sub = self.subs.get(sid)
        if sub is not None:
            if mx > 0 and sub.delivered < mx:
                sub.max = mx
            else:
                self.auto_unsubscribe(sub)
        if self.verbose:
            self.send_raw(P.OK)

    def auto_unsubscribe(self, sub: Subscription) -> None:
        if self.subs.pop(sub.sid, None) is not None and self.account is not None:
            self.account.unsubscribe(sub)

    # ------------------------------------------------------------------ delivery (hot path)

    def deliver(self, sub: Subscription, subject: bytes, reply: bytes, hdr: bytes | None, payload: bytes) -> None:
        if self.closed:
            return
        if self.perms is not None and not self._may_deliver(subject, reply):
            return
        sub.delivered += 1
        size = len(payload)
        if hdr is not None and self.headers:
            hs = len(hdr)
            head = hmsg_head(subject, sub.sid_b, reply, hs, size)
            self.out += (head, hdr, payload, CRLF)
            size += hs
        else:
            head = msg_head(subject, sub.sid_b, reply, size)
            self.out += (head, payload, CRLF)
        self.out_msgs += 1
        self.out_bytes += size
        self.pending += size + len(head) + 2
        if not self.flush_queued:
            self.flush_queued = True
            self.server.flush_soon(self)
        if self.pending > self.opts.max_pending:
            # a large batch from one read is not a slow consumer: hand it to the socket now, and let
            # flush() judge by what the kernel could not take
            self.flush()

    def _may_deliver(self, subject: bytes, reply: bytes) -> bool:
        """Subscribe permissions (deny_delivery) for a message to this client; a reply subject it may then
        publish to is noted (allow_responses)."""
        perms = self.perms
        if perms.deny_delivery(subject.decode("utf-8", "surrogateescape")):
            return False
        if reply:
            perms.note_reply(reply.decode("utf-8", "surrogateescape"))
        return True

    def takes_run(self, sub: Subscription, n: int, run_bytes: int) -> bool:
        """True when n more messages cannot push pending past max_pending (no flush, no slow-consumer close
        in the middle of a run). 24 bytes cover a MSG line's words, spaces, size and CRLFs."""
        return self.pending + run_bytes + n * (len(sub.sid_b) + 24) <= self.opts.max_pending

    def deliver_run(self, sub: Subscription, subject: bytes, reply: bytes, payloads: list[bytes]) -> None:
        """`deliver` of header-less messages with one subject and reply: same bytes out, but the MSG line
        is built once per payload size and equal-sized messages are written with one join."""
        if self.closed:
            return
        if self.perms is not None and not self._may_deliver(subject, reply):
            return
        self._queue_run(sub, payloads, P.msg_prefix(subject, sub.sid_b, reply))

    def takes_batch(self, sub: Subscription) -> bool:
        return self.perms is None

    def deliver_batch(self, sub: Subscription, msgs: list[Message], nbytes: int) -> None:
        """`deliver` for each message, framed in one pass with deliver()'s bookkeeping once for the lot.
        Only for a subscription with no delivery permissions to check (`takes_batch`)."""
        if self.closed:
            return
        if self.perms is not None:
            return super().deliver_batch(sub, msgs, nbytes)
        frames = frame_batch(sub.sid_b, msgs, self.headers)
        if not self.headers:
            nbytes -= sum(len(m[2]) for m in msgs if m[2])
        n = len(frames)
        sub.delivered += n
        self.out += frames
        self.out_msgs += n
        self.out_bytes += nbytes
        self.queued(sum(map(len, frames)))
        if self.pending > self.opts.max_pending:
            self.flush()

    def send_err(self, text: str) -> None:
        self.send_raw(P.err_line(text))

    def _log_slow_consumer(self, pending: int) -> None:
        log.info("%s:%d - cid:%d - \"%s\" - Slow Consumer Detected: pending bytes %d", self.host, self.port,
                 self.cid, self.name, pending)

    # ------------------------------------------------------------------ timers and closing

    def _auth_timeout(self) -> None:
        if self.auth_pending and not self.closed:
            self.send_err("Authentication Timeout")
            self.close("Authentication Timeout")

    def _auth_expired(self) -> None:
        if not self.closed:
            self.send_err("User Authentication Expired")
            self.close("Authentication Expired")

    def _auth_violation(self, text: str = "Authorization Violation") -> None:
        self.server.auth_errors += 1
        log.error("%s:%d - cid:%d - %s", self.host, self.port, self.cid, text)
        # nats-server always tells the client "Authorization Violation", whatever the cause
        if text in ("User Authentication Expired", "User Authentication Revoked"):
            self.send_err(text)
        else:
            self.send_err("Authorization Violation")
        self.close("Authentication Failure")

    def enter_lame_duck(self) -> None:
        self.send_raw(P.info_line(self.client_info(own=False)))

    def reauthorize(self) -> None:
        if not self.connected or self.connect_opts is None:
            return
        try:
            res = self.authenticate(self.connect_opts)
        except AuthError as e:
            # revoked by an account JWT update: nats-server tells the client (updateAccountClaimsWithRefresh)
            self._auth_violation("User Authentication Revoked" if e.revoked else e.client_text)
            return
        except Exception:
            self._auth_violation()
            return
        self.perms = self.server.permission_checker(res.permissions)

    def _release(self) -> None:
        if self._auth_timer is not None:
            self._auth_timer.cancel()
        acc = self.account
        if acc is not None:
            for sub in self.subs.values():
                acc.unsubscribe(sub)
            acc.clients.discard(self)
        self.server.unregister_client(self)

    def info(self) -> dict[str, Any]:
        """Identity for monitoring and events."""
        return {
            **super().info(),
            "type": "websocket" if self.websocket else "nats",
            "name": self.name,
            "lang": self.lang,
            "version": self.version,
            "account": self.account.name if self.account else "",
            "user": self.user,
            "tls": self.tls_info,
        }


def _quote(s: str) -> str:
    """Go's %q for the subject strings that appear in -ERR texts."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

