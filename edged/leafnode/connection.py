"""One leafnode connection to the hub: the leafnode kind of `edged.connections.connection.Connection`.

Hub interest (LS+/LS-) becomes `Subscription(self, ...)` objects in the bound account; messages from the
hub enter the router through `Account.route` like any other input; deliveries to the hub are framed as
LMSG. What edged enforces itself because the hub does not (§5.5): no local JetStream API traffic
(`$JS.API.>`, `$KV.>`, `$OBJ.>`, its own `$JS.<domain>.API.>`) towards the hub, the same denies on what
comes back (see edged/jetstream/wire/domain.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any

from edged import SERVER_VERSION
from edged.connections.connection import Connection
from edged.connections.protocol import CRLF
from edged.goformat import rtt_text
from edged.jetstream.wire.domain import (
    ACK_PREFIX,
    LOCAL_ONLY,
    LOCAL_ONLY_PREFIXES,
    api_subject_of,
    decode_ack_reply,
)
from edged.leafnode.codec import (
    LDS_PREFIX,
    OP_ERR,
    OP_ERROR,
    OP_INFO,
    OP_LMSG,
    OP_LMSGR,
    OP_LMSGS,
    OP_LSUB,
    OP_LUNSUB,
    OP_PING,
    OP_PONG,
    LeafParser,
    connect_line,
    ls_minus,
    ls_plus,
    msg_head,
)
from edged.leafnode.dialing import LeafURL, sign_nonce
from edged.leafnode.pacing import UNSENT_LOWAT, queue_sizes, set_paced, tune_link_socket
from edged.log import TRACE, log
from edged.routing.accounts import Account
from edged.routing.receiver import KIND_LEAF, Message, Subscription
from edged.routing.subjects import AllowDenyFilter, is_valid_subject, subject_is_subset
from edged.security.tlsconf import client_ssl_context

if TYPE_CHECKING:
    from edged.leafnode.remote import RemoteLink

# output (queued and in the transport) past which bulk producers wait (Receiver.backlogged): a JetStream
# drain to the hub keeps at most this much ahead of the link's own PINGs, PONGs, LS+/LS- and core messages
# on a slow link; a fast one is allowed pacing.QUEUE_TIME of its measured drain rate, up to BACKLOG_MAX
BACKLOG_BYTES = 128 * 1024
BACKLOG_MAX = 4 * 1024 * 1024
RATE_WINDOW = 0.1  # seconds over which the link's drain rate is measured
PACED_FOR = 2.0
CONNECT_PROCESS_TIMEOUT = 2.0  # wait this long for the hub's connect_info INFO
LOOP_DELAY = 30.0  # nats-server: leafNodeReconnectDelayAfterLoopDetected
CLUSTER_NAME_DELAY = 30.0
MIN_VERSION_DELAY = 5.0
_MSG_OPS = (OP_LMSG, OP_LMSGR)


class LeafConnection(Connection):
    """One solicited leafnode connection to the hub. A router receiver: hub interest becomes
    `Subscription(self, ...)` objects in the bound account."""

    kind = KIND_LEAF
    echo = False  # hub messages are never routed back to the hub
    headers = True
    is_spoke = True  # this side solicited the link (edged/leafnode/accept.py has the hub side)

    def __init__(self, link: RemoteLink, url: LeafURL, tls_done: bool) -> None:
        super().__init__(link.server)
        self._delivery_state()
        self.link = link
        self.account: Account = link.account
        self.url = url
        self.parser = LeafParser(runs=True)
        self.tls_done = tls_done
        self.connected = False  # connect_info INFO received
        self.connect_sent = False
        self.got_info = False
        self.hub_info: dict[str, Any] = {}
        self.nonce = ""
        self.remote_account = ""
        self.remote_name = ""
        # local interest advertised: (subject, queue) -> count of local subs
        self.smap: dict[tuple[str, str | None], int] = {}
        self.export = AllowDenyFilter(None, link.remote.deny_exports)
        self.import_ = AllowDenyFilter(None, link.remote.deny_imports)
        self._own_domain_prefix = link.own_domain_prefix
        self._exp: AllowDenyFilter | None = None
        self._deny_imp = AllowDenyFilter(None, link.remote.deny_imports) if link.remote.deny_imports else None
        own = link.own_domain_prefix
        self._out_deny: tuple[bytes, ...] = LOCAL_ONLY_PREFIXES + ((own,) if own else ())
        self._in_special: tuple[bytes, ...] = LOCAL_ONLY_PREFIXES + ((own,) if own else ())
        self.extra_delay = 0.0
        self.error = ""
        self.host = url.host
        self.port = url.port
        self.closed_fut: asyncio.Future[None] = self.server.loop.create_future()
        self._listening = False

    def _delivery_state(self) -> None:
        """The state of the delivery path (deliver, deliver_routed, backlogged), whichever side made the
        link: both kinds of leafnode connection set it up here."""
        # the last message written, to merge further deliveries of the same router pass (see deliver)
        self._last_subject: bytes | None = None
        self._last_reply: bytes | None = None
        self._last_hdr: bytes | None = None
        self._last_payload: bytes | None = None
        self._last_subs: tuple[Subscription, ...] = ()
        self._last_idx = 0
        # the last JetStream delivery's reply, subject and `reply@subject` (see deliver_routed)
        self._at_reply = self._at_subject = self._at_encoded = b""
        self._drain_waiters: dict[Callable[[], None], None] = {}  # see backlogged (a dict: once each, in order)
        self._paced = False  # the socket's unsent queue kept small (see backlogged)
        self._paced_until = 0.0
        # the queues a drain may fill, sized by the link's drain rate (_measure)
        self._cap = BACKLOG_BYTES
        self._lowat = UNSENT_LOWAT
        self._rate = 0.0
        self._written = 0  # bytes handed to the transport so far
        self._rate_at = 0.0  # the current measuring window began then, with _rate_sent bytes gone to the kernel
        self._rate_sent = 0
        self._held = False  # a bulk producer was held back in the current window

    # -------------------------------------------------------------------------- asyncio callbacks

    def _connected(self, transport: Any) -> None:
        tune_link_socket(transport)
        self._later(self.link.remote.first_info_timeout or 1.0, self._first_info_timeout)

    def _lost_reason(self, exc: Exception | None) -> str:
        return f"Connection closed by hub{': ' + str(exc) if exc else ''}"

    def eof_received(self) -> bool | None:
        return None

    # -------------------------------------------------------------------------- protocol

    def process(self, events: list[tuple]) -> None:
        i = 0
        n = len(events)
        while i < n:
            if self.closed:
                return
            ev = events[i]
            i += 1
            op = ev[0]
            if op == OP_LMSGS:
                self._on_msgs(ev[1], ev[2], ev[3])
            elif op == OP_LMSGR:
                if not self._on_framed_run(ev):
                    i = self._on_js_run(events, i - 1)
            elif op == OP_LMSG:
                if i < n and not ev[3] and ev[2].startswith(b"$JS.ACK.") and events[i][0] in _MSG_OPS \
                        and events[i][1] == ev[1]:
                    i = self._on_js_run(events, i - 1)
                else:
                    self._on_msg(ev[1], ev[2], ev[3], ev[4], ev[5])
            elif op == OP_LSUB:
                self._on_ls_plus(ev[1], ev[2], ev[3])
            elif op == OP_LUNSUB:
                self._on_ls_minus(ev[1], ev[2])
            elif op == OP_PING:
                self.send_raw(self.pong_word)
            elif op == OP_PONG:
                self._on_pong()
            elif not self._on_control(ev):
                return

    def _on_control(self, ev: tuple) -> bool:
        """INFO, -ERR and protocol errors: what this side of the link makes of them. False: stop reading."""
        op = ev[0]
        if op == OP_INFO:
            self._on_info(ev[1])
        elif op == OP_ERR:
            self._on_err(ev[1])
        elif op == OP_ERROR:
            self._log_error(f"protocol error from hub: {ev[1]}")
            self.close(f"Parse Error: {ev[1]}")
            return False
        return True

    def _on_info(self, info: dict[str, Any]) -> None:
        if not self.got_info:
            self.got_info = True
            self._cancel_timers()
            self.hub_info = info
            # a leafnode port's first INFO has a client id and either the hub's leafnode URLs or, with
            # leafnodes { no_advertise } on the hub, none but `info_on_connect` (a client port has neither)
            if not info.get("client_id") or ("leafnode_urls" not in info and not info.get("info_on_connect")):
                self.error = "attempted to connect to wrong port"
                self._log_error(f"Attempted to connect to a non-leafnode port {self.url.hostport}: check the "
                                "remote URL points at the hub's leafnodes port")
                self.close("Attempted To Connect To Wrong Port")
                return
            self.remote_name = str(info.get("server_name") or info.get("server_id") or "")
            self.nonce = str(info.get("nonce") or "")
            problem = self.link.check_domains(info)
            if problem:
                self.error = problem
                self._log_error(problem)
                self.extra_delay = LOOP_DELAY
                self.close("JetStream Domain Conflict")
                return
            self.link.learn_urls(info)
            need_tls = (bool(info.get("tls_required")) or self.link.wants_tls(self.url)) and not self.url.websocket
            if need_tls and not self.tls_done:
                self.server.loop.create_task(self._upgrade_tls())
            else:
                self._send_connect()
            return
        if info.get("connect_info"):
            self._on_connect_info(info)
        else:
            self.link.learn_urls(info)

    async def _upgrade_tls(self) -> None:
        remote = self.link.remote
        tmo = remote.tls.timeout if remote.tls is not None and remote.tls.timeout else 2.0
        try:
            ctx = client_ssl_context(remote.tls)
            name = self.link.tls_name(self.url)
            new = await asyncio.wait_for(
                self.server.loop.start_tls(self.transport, self, ctx, server_hostname=name), tmo + 0.5
            )
        except Exception as e:
            self.error = f"TLS handshake error: {e or type(e).__name__}"
            self.link.last_error = self.error  # the transport may already have reported the close
            self._log_error(f"TLS handshake error with {self.url.hostport}: {e or type(e).__name__}")
            self.close("TLS Handshake Error", flush=False)
            return
        if self.closed:
            if new is not None:
                new.close()
            return
        self.transport = new
        self.tls_done = True
        self._send_connect()
        self.flush()

    def _send_connect(self) -> None:
        srv = self.server
        remote = self.link.remote
        js = srv.opts.jetstream
        c: dict[str, Any] = {
            "version": SERVER_VERSION,
            "server_id": srv.server_id,
            "name": srv.server_name,
            "headers": True,
            "jetstream": bool(js.enabled),
            "remote_account": self.account.name,
            "protocol": 1,
        }
        if js.enabled and js.domain:
            c["domain"] = js.domain
        if remote.deny_imports:
            c["deny_pub"] = list(remote.deny_imports)
        try:
            if self.link.creds is not None:
                creds = self.link.creds.credentials()
                _, sig = sign_nonce(creds.seed, self.nonce)
                c["jwt"] = creds.jwt
                c["sig"] = sig
            elif remote.seed or remote.nkey:
                seed_s = remote.seed if remote.seed.startswith("S") else remote.nkey
                if not seed_s.startswith("S"):
                    raise ValueError("remote nkey must be a user nkey seed (SU...)")
                pub, sig = sign_nonce(seed_s.encode(), self.nonce)
                c["nkey"] = pub
                c["sig"] = sig
        except Exception as e:
            self.error = f"credentials error: {e}"
            self._log_error(f"Error loading leafnode credentials: {e}")
            self.close("Credentials Error")
            return
        user, password = self.link.user_password(self.url)
        if user:
            c["user"] = user
            if password is None:
                c["auth_token"] = user
            else:
                c["pass"] = password
        if log.isEnabledFor(TRACE):
            safe = {k: ("[REDACTED]" if k in ("pass", "auth_token", "sig", "jwt") else v) for k, v in c.items()}
            log.log(TRACE, "%s - lid:%d - ->> [CONNECT %s]", self.url.hostport, self.cid, safe)
        self.connect_sent = True
        self.send_raw(connect_line(c))
        if self.hub_info.get("info_on_connect"):
            self._later(CONNECT_PROCESS_TIMEOUT, self._connect_process_timeout)
        else:
            self._on_connect_info({})

    def _on_connect_info(self, info: dict[str, Any]) -> None:
        if self.connected:
            return
        self._cancel_timers()
        self.remote_account = str(info.get("remote_account") or "")
        remote = self.link.remote
        imp_allow, imp_deny = _perm(info.get("import"))
        exp_allow, exp_deny = _perm(info.get("export"))
        self.import_ = AllowDenyFilter(imp_allow, imp_deny + list(remote.deny_imports))
        self.export = AllowDenyFilter(exp_allow, exp_deny + list(remote.deny_exports))
        self._exp = None if self.export.empty else self.export
        if info.get("acc_is_sys") and not self.link.is_system_account:
            log.warning("Leafnode %s: local account %r is bound to the hub's system account", self.url.hostport,
                        self.account.name)
        self.connected = True
        self.link.on_connected(self)
        # full local interest dump, then incremental updates from the account listener
        out = [ls_plus(self.link.lds_subject)]
        for subj in self.link.domain_subjects():
            out.append(ls_plus(subj))
        for sub in self.account.sublist.all_subs():
            b = self._interest_add(sub)
            if b:
                out.append(b)
        self.account.interest_listeners.append(self._on_local_interest)
        self._listening = True
        out.append(b"PING\r\n")  # first RTT sample right away, like nats-server's first-ping timer
        self.pings_out = 1
        self.rtt_start = time.monotonic()
        self.send_raw(b"".join(out))
        self._schedule_ping(self.link.ping_interval)
        self.flush()

    def _on_err(self, text: str) -> None:
        low = text.lower()
        self.error = text
        if "authorization violation" in low or "authentication" in low:
            self.link.creds_refused(text)
            self._log_error(f"Leafnode authentication failed for account {self.account.name!r} at "
                            f"{self.url.redacted()}: {text} (check the remote's credentials)")
        elif low.startswith("loop detected"):
            self.extra_delay = LOOP_DELAY
            self._log_error(f"Leafnode loop detected by the hub: {text}")
        elif "same cluster name" in low:
            self.extra_delay = CLUSTER_NAME_DELAY
            self._log_error(f"Leafnode rejected by the hub: {text}")
        elif "minimum version" in low:
            self.extra_delay = MIN_VERSION_DELAY
            self._log_error(f"Leafnode rejected by the hub: {text}")
        elif "leaf node port" in low or "wrong port" in low:
            self._log_error(f"Leafnode connection rejected, wrong port: {text}")
        elif "permissions violation" in low:
            self._log_error(f"Leafnode permissions violation reported by the hub: {text}")
        else:
            self._log_error(f"Leafnode error from hub: {text}")
        # the hub closes the connection itself after an -ERR (client.go processErr, case LEAF)

    # -------------------------------------------------------------------------- interest from the hub

    def _on_ls_plus(self, subject: str, queue: str | None, weight: int) -> None:
        if subject.startswith(LDS_PREFIX) and subject == self.link.lds_subject:
            self._loop_detected()
            return
        if not is_valid_subject(subject) or (queue is not None and not queue):
            log.debug("Leafnode %s: ignoring invalid LS+ %r", self.url.hostport, subject)
            return
        if self.link.deny_outbound_interest(subject) or not self.export.allows_interest(subject):
            return  # nothing would be sent there anyway
        self._add_interest(subject, queue, weight)

    def _add_interest(self, subject: str, queue: str | None, weight: int) -> None:
        """The far side's interest (LS+) as a subscription of this connection in the bound account; a queue
        interest seen again updates its weight."""
        key = subject if queue is None else f"{subject} {queue}"
        sub = self.subs.get(key)
        if sub is not None:
            if queue is not None:
                sub.weight = weight
            return
        sub = Subscription(self, subject, queue, key)
        sub.weight = weight
        self.subs[key] = sub
        self.account.subscribe(sub)

    def _on_ls_minus(self, subject: str, queue: str | None) -> None:
        key = subject if queue is None else f"{subject} {queue}"
        sub = self.subs.pop(key, None)
        if sub is not None:
            self.account.unsubscribe(sub)

    def auto_unsubscribe(self, sub: Subscription) -> None:
        if self.subs.pop(sub.sid, None) is not None:
            self.account.unsubscribe(sub)

    def _loop_detected(self) -> None:
        text = f"Loop detected for leafnode account={self.account.name!r}. Delaying attempt to reconnect for 30s"
        self.error = text
        self._log_error(text)
        self.extra_delay = LOOP_DELAY
        self.send_raw(b"-ERR '" + text.encode() + b"'\r\n")
        self.close("Loop Detected")

    # -------------------------------------------------------------------------- local interest -> hub

    def _may_advertise(self, sub: Subscription) -> bool:
        subject = sub.subject
        if sub.conn.kind == KIND_LEAF:
            # interest learned from a hub is never re-advertised (spoke semantics); a leaf that connects to
            # edged is local interest, its loop detection subject included (nats-server updateSmap)
            if sub.conn.is_spoke:
                return False
            if subject.startswith(LDS_PREFIX):
                return True
        elif subject.startswith(LDS_PREFIX):
            return False
        if any(subject_is_subset(subject, d) for d in LOCAL_ONLY):
            return False
        return self.import_.allows_interest(subject)

    def _interest_add(self, sub: Subscription) -> bytes | None:
        if not self._may_advertise(sub):
            return None
        key = (sub.subject, sub.queue or None)
        n = self.smap.get(key, 0) + 1
        self.smap[key] = n
        if key[1] is None:
            return ls_plus(key[0]) if n == 1 else None
        return ls_plus(key[0], key[1], n)

    def _interest_remove(self, sub: Subscription) -> bytes | None:
        key = (sub.subject, sub.queue or None)
        n = self.smap.get(key)
        if n is None or not self._may_advertise(sub):
            return None
        n -= 1
        if n <= 0:
            del self.smap[key]
            return ls_minus(key[0], key[1])
        self.smap[key] = n
        return ls_plus(key[0], key[1], n) if key[1] is not None else None

    def _on_local_interest(self, sub: Subscription, added: bool) -> None:
        if self.closed or sub.conn is self:
            return
        b = self._interest_add(sub) if added else self._interest_remove(sub)
        if b:
            self.send_raw(b)

    # -------------------------------------------------------------------------- messages from the hub

    def _on_msg(self, subject_b: bytes, reply_b: bytes, queues: tuple[bytes, ...], hdr: bytes | None,
                payload: bytes) -> None:
        self.in_msgs += 1
        self.in_bytes += len(payload) if hdr is None else len(payload) + len(hdr)
        if reply_b and reply_b.startswith(b"$JS.ACK."):
            framed, reply_b = decode_ack_reply(subject_b, reply_b)
            if framed is not subject_b:
                self._on_js_delivery(subject_b, framed, reply_b, queues, hdr, payload)
                return
        if subject_b.startswith(self._in_special):
            if subject_b.startswith(LOCAL_ONLY_PREFIXES):
                return
            # the hub asks edged's domain: answer as local $JS.API unless something local listens on it as is
            subject = subject_b.decode("utf-8", "surrogateescape")
            if not self._local_interest(subject):
                subject_b = api_subject_of(subject_b, self._own_domain_prefix)
                subject = subject_b.decode("utf-8", "surrogateescape")
        else:
            subject = subject_b.decode("utf-8", "surrogateescape")
            di = self._deny_imp
            if di is not None and not di.allows(subject):
                return
        self.account.route(subject, subject_b, reply_b, hdr, payload, self, queues)

    def _on_js_delivery(self, subject_b: bytes, framed: bytes, reply_b: bytes, queues: tuple[bytes, ...],
                        hdr: bytes | None, payload: bytes) -> None:
        """A JetStream delivery (§3.4): matched on its deliver subject and handed to receivers under its
        original subject, as nats-server does (processMsgResults: pa.deliver) and as edged's own consumers
        deliver; a further leafnode gets both (`Account.route_as`)."""
        subject = subject_b.decode("utf-8", "surrogateescape")
        di = self._deny_imp
        if di is not None and not di.allows(subject):
            return
        self.account.route_as(subject, subject_b, framed, reply_b, hdr, payload, self, queues)

    def _on_framed_run(self, ev: tuple) -> bool:
        """An OP_LMSGR run handed as it came (`Account.route_framed_run`) to a receiver that takes its replies'
        `<ack reply>@<subject>` form itself (a mirror's deliver subject: one check of the run, no message
        tuples). False, with nothing done: `_on_js_run` splits it."""
        if self._deny_imp is not None or self.closed:
            return False
        subject_b, replies, payloads = ev[1], ev[2], ev[3]
        nbytes = sum(map(len, payloads))
        if not self.account.route_framed_run(subject_b.decode("utf-8", "surrogateescape"), subject_b, replies,
                                             payloads, nbytes, self):
            return False
        self.in_msgs += len(payloads)
        self.in_bytes += nbytes
        return True

    def _on_js_run(self, events: list[tuple], i: int) -> int:
        """Messages one after another to one subject, each with its own reply (OP_LMSGR runs, and single
        LMSGs with headers): the JetStream deliveries among them (a consumer's backlog, as a mirror or source
        drains it) decoded and checked as `_on_js_delivery` does and routed as runs
        (`Account.route_as_batch`), anything else as `_on_msg`, in order. Returns the index of the first
        event not taken."""
        subject_b = events[i][1]
        msgs: list[Message] = []
        nbytes = 0
        n = len(events)
        j = i
        while j < n:
            ev = events[j]
            op = ev[0]
            if op == OP_LMSGR:
                if ev[1] != subject_b:
                    break
                replies, payloads = ev[2], ev[3]
                m = len(replies)
                acks, ats, framed_subjects = zip(*map(bytes.partition, replies, repeat(b"@", m)), strict=True)
                if ats.count(b"@") == m and b"" not in framed_subjects and \
                        min(map(bytes.count, acks, repeat(b".", m))) >= 8 and \
                        all(map(bytes.startswith, acks, repeat(ACK_PREFIX, m))):
                    # every reply `<ack reply>@<subject>`: decode_ack_reply's answers, the run at once
                    msgs += zip(framed_subjects, acks, repeat(None, m), payloads, strict=True)
                    nbytes += sum(map(len, payloads))
                    j += 1
                    continue
                for reply_b, payload in zip(replies, payloads, strict=True):
                    at = reply_b.find(b"@")
                    if at > 0 and reply_b.count(b".", 0, at) >= 8 and reply_b.startswith(b"$JS.ACK."):
                        # decode_ack_reply's answer when the first `@` is the one
                        msgs.append((reply_b[at + 1:] or subject_b, reply_b[:at], None, payload))
                        nbytes += len(payload)
                        continue
                    framed, ack = decode_ack_reply(subject_b, reply_b)
                    if framed is subject_b:  # not a delivery that crossed a link (no `@<subject>`)
                        if msgs:
                            self._route_js_run(subject_b, msgs, nbytes)
                            msgs, nbytes = [], 0
                        if self.closed:
                            return n
                        self._on_msg(subject_b, reply_b, (), None, payload)
                        continue
                    msgs.append((framed, ack, None, payload))
                    nbytes += len(payload)
            elif op == OP_LMSG and ev[1] == subject_b and not ev[3]:
                framed, ack = decode_ack_reply(subject_b, ev[2])
                if framed is subject_b:
                    break
                hdr = ev[4]
                payload = ev[5]
                msgs.append((framed, ack, hdr, payload))
                nbytes += len(payload) if hdr is None else len(payload) + len(hdr)
            else:
                break
            j += 1
        if msgs:
            self._route_js_run(subject_b, msgs, nbytes)
        if j == i:  # a single LMSG that is no delivery after all
            ev = events[i]
            self._on_msg(ev[1], ev[2], ev[3], ev[4], ev[5])
            return i + 1
        return j

    def _route_js_run(self, subject_b: bytes, msgs: list[Message], nbytes: int) -> None:
        if self.closed:
            return
        self.in_msgs += len(msgs)
        self.in_bytes += nbytes
        subject = subject_b.decode("utf-8", "surrogateescape")
        di = self._deny_imp
        if di is None or di.allows(subject):
            self.account.route_as_batch(subject, subject_b, msgs, nbytes, self, ())

    def _on_msgs(self, subject_b: bytes, reply_b: bytes, payloads: list[bytes]) -> None:
        """A run of plain LMSGs with one subject and reply: checked once and routed as a run."""
        if reply_b.startswith(b"$JS.ACK.") or subject_b.startswith(self._in_special):
            on_msg = self._on_msg
            for payload in payloads:
                if self.closed:
                    return
                on_msg(subject_b, reply_b, (), None, payload)
            return
        n = len(payloads)
        nbytes = sum(map(len, payloads))
        self.in_msgs += n
        self.in_bytes += nbytes
        subject = subject_b.decode("utf-8", "surrogateescape")
        di = self._deny_imp
        if di is not None and not di.allows(subject):
            return
        self.account.route_run(subject, subject_b, reply_b, payloads, self, nbytes, ())

    def _local_interest(self, subject: str) -> bool:
        psubs, qgroups = self.account.sublist.match(subject)
        for s in psubs:
            if s.conn.kind != KIND_LEAF:
                return True
        for g in qgroups:
            for s in g:
                if s.conn.kind != KIND_LEAF:
                    return True
        return False

    # -------------------------------------------------------------------------- messages to the hub (hot path)

    def deliver(self, sub: Subscription, subject: bytes, reply: bytes, hdr: bytes | None, payload: bytes) -> None:
        """Called by the router once per matching hub subscription. One router pass that hits several of
        them (`foo.*` and `foo.>`, or plain and queue interest) must become one LMSG, as a hub delivers
        once per connection: the message is written at once and its control line rewritten in place when
        the same message (same objects) comes again for another subscription."""
        if payload is self._last_payload and subject is self._last_subject and reply is self._last_reply \
                and hdr is self._last_hdr and sub not in self._last_subs:
            self._merge(sub)
            return
        if self.closed or not self.connected or subject.startswith(self._out_deny):
            return
        exp = self._exp
        if exp is not None and not exp.allows(subject.decode("utf-8", "surrogateescape")):
            return
        sub.delivered += 1
        size = len(payload)
        q = sub.queue
        if hdr is None:
            if q:
                head = msg_head(subject, reply, (q.encode("utf-8", "surrogateescape"),), -1, size)
            elif reply:
                head = b"LMSG %s %s %d\r\n" % (subject, reply, size)
            else:
                head = b"LMSG %s %d\r\n" % (subject, size)
            out = self.out
            self._last_idx = len(out)
            out += (head, payload, CRLF)
        else:
            hs = len(hdr)
            head = msg_head(subject, reply, (q.encode("utf-8", "surrogateescape"),) if q else (), hs, size)
            out = self.out
            self._last_idx = len(out)
            out += (head, hdr, payload, CRLF)
            size += hs
        self._last_subject = subject
        self._last_reply = reply
        self._last_hdr = hdr
        self._last_payload = payload
        self._last_subs = (sub,)
        self.out_msgs += 1
        self.out_bytes += size
        self.pending += size + len(head) + 2
        if not self.flush_queued:
            self.flush_queued = True
            self.server.flush_soon(self)

    def deliver_routed(self, sub: Subscription, routed: bytes, subject: bytes, reply: bytes, hdr: bytes | None,
                       payload: bytes) -> None:
        """A JetStream delivery (matched on its deliver subject or pull request inbox) as nats-server sends
        it over a leafnode: `LMSG <routed> <reply>@<subject>`, which the hub decodes back (§3.4). The
        encoded reply is kept for the other subscriptions of the same router pass, so `deliver` sees the
        same objects again and merges them into one LMSG."""
        if reply:
            if reply is self._at_reply and subject is self._at_subject:
                reply = self._at_encoded
            else:
                self._at_reply, self._at_subject = reply, subject
                reply = self._at_encoded = reply + b"@" + subject
        self.deliver(sub, routed, reply, hdr, payload)

    def takes_routed_batch(self, sub: Subscription) -> bool:
        """For a plain (non-queue) subscription: framing only queues output, the slow-consumer check waits
        for the flush."""
        return not sub.queue

    def deliver_routed_batch(self, sub: Subscription, routed: bytes, msgs: list[Message], nbytes: int) -> None:
        """`deliver_routed` of each message (`LMSG <routed> <reply>@<subject>`), checked once and framed into
        one buffer: a consumer draining a backlog to the hub hands over hundreds at a time."""
        if not self._run_allowed(routed):
            return
        parts: list[bytes] = []
        add = parts.append
        for subject, reply, hdr, payload in msgs:
            if hdr is None:
                if reply:
                    add(b"LMSG %s %s@%s %d\r\n%s\r\n" % (routed, reply, subject, len(payload), payload))
                else:
                    add(b"LMSG %s %d\r\n%s\r\n" % (routed, len(payload), payload))
            else:
                hs = len(hdr)
                if reply:
                    add(b"HMSG %s %s@%s %d %d\r\n%s%s\r\n" % (routed, reply, subject, hs, hs + len(payload), hdr,
                                                               payload))
                else:
                    add(b"HMSG %s %d %d\r\n%s%s\r\n" % (routed, hs, hs + len(payload), hdr, payload))
        self._queue_batch(sub, b"".join(parts), len(msgs), nbytes)

    def deliver_numbered_run(self, sub: Subscription, routed: bytes, subjects: list[bytes], payloads: list[bytes],
                             reply_fmt: bytes, numbers: Sequence[Sequence[int]], nbytes: int) -> None:
        """`deliver_routed_batch` of a run whose replies are `reply_fmt` and numbers (a push consumer draining a
        backlog to the hub): each LMSG, its `<reply>@<subject>` included, made with one formatting, no reply
        object of its own, no Message tuple."""
        if not self._run_allowed(routed):
            return
        frame = (b"LMSG " + routed.replace(b"%", b"%%") + b" " + reply_fmt + b"@%s %d\r\n%s\r\n").__mod__
        self._queue_batch(sub, b"".join(map(frame, zip(*numbers, subjects, map(len, payloads), payloads, strict=True))),
                          len(payloads), nbytes)

    def _queue_batch(self, sub: Subscription, data: bytes, n: int, nbytes: int) -> None:
        """`n` messages framed into `data` (`nbytes` of payload) go out with the next flush, counted."""
        sub.delivered += n
        self.out.append(data)
        self.out_msgs += n
        self.out_bytes += nbytes
        self.queued(len(data))

    def takes_run(self, sub: Subscription, n: int, run_bytes: int) -> bool:
        """Always: delivery only queues output, the slow-consumer check waits for the flush."""
        return True

    def deliver_run(self, sub: Subscription, subject: bytes, reply: bytes, payloads: list[bytes]) -> None:
        """`deliver` of header-less messages with one subject and reply to a plain (non-queue) hub
        subscription: the checks and the LMSG line are done once, equal-sized messages written with one
        join. No other subscription of this connection gets the same messages (`run_receivers`), so there
        is nothing to merge."""
        if not self._run_allowed(subject):
            return
        q = sub.queue
        if q:  # not reached from the router (queue subscriptions are in groups), kept correct anyway
            for payload in payloads:
                self.deliver(sub, subject, reply, None, payload)
            self._forget_last()
            return
        self._queue_run(sub, payloads, b"LMSG %s %s " % (subject, reply) if reply else b"LMSG %s " % subject)

    def _run_allowed(self, subject: bytes) -> bool:
        """May a run of messages routed by `subject` go to the hub (`deliver`'s checks, once for the run)?"""
        self._forget_last()
        if self.closed or not self.connected or subject.startswith(self._out_deny):
            return False
        exp = self._exp
        return exp is None or exp.allows(subject.decode("utf-8", "surrogateescape"))

    def _merge(self, sub: Subscription) -> None:
        """Another subscription of the same router pass: add its queue group to the written LMSG."""
        self._last_subs += (sub,)
        sub.delivered += 1
        queues = [s.queue.encode("utf-8", "surrogateescape") for s in self._last_subs if s.queue]
        if not queues:
            return
        seen: list[bytes] = []
        for q in queues:
            if q not in seen:
                seen.append(q)
        hdr = self._last_hdr
        size = len(self._last_payload)
        old = self.out[self._last_idx]
        self.out[self._last_idx] = head = msg_head(self._last_subject, self._last_reply, seen,
                                                   len(hdr) if hdr is not None else -1, size)
        self.pending += len(head) - len(old)

    def _forget_last(self) -> None:
        self._last_payload = self._last_subject = self._last_reply = self._last_hdr = None
        self._last_subs = ()

    def send_raw(self, data: bytes) -> None:
        self._forget_last()
        super().send_raw(data)

    def flush(self) -> None:
        self._forget_last()
        self._written += self.pending
        super().flush()
        if self._drain_waiters:
            self._wake_drained()
        if self._paced and time.monotonic() > self._paced_until:
            self._paced = False
            set_paced(self.transport, False)
            self._resize(0.0)  # the next drain starts small: the link may be another by then
            self._rate_at = 0.0

    # -------------------------------------------------------------------------- backpressure for bulk producers

    def backlogged(self) -> bool:
        t = self.transport
        # a bulk producer is draining over the link: keep the kernel's unsent queue small while it does
        # (pacing.py), until PACED_FOR seconds after it last asked
        self._paced_until = time.monotonic() + PACED_FOR
        if not self._paced:
            self._paced = True
            set_paced(t, True, self._lowat)
        tbuf = t.get_write_buffer_size() if t is not None else 0
        now = self._paced_until - PACED_FOR
        if now - self._rate_at >= RATE_WINDOW:
            self._measure(now, self._written - tbuf)
        if self.pending + tbuf > self._cap:
            self._held = True
            return True
        return False

    def _measure(self, now: float, sent: int) -> None:
        """The link's drain rate over the window that ends now: what the kernel took of edged's output in
        it. A window in which the producer was held back measures the link; one in which it never was
        measures the producer, a lower bound of the link. The queues allowed grow at most twofold a window
        (the kernel's own queue filling up at first is no measure of the link)."""
        if self._rate_at and now - self._rate_at < 4 * RATE_WINDOW:
            rate = (sent - self._rate_sent) / (now - self._rate_at)
            if not self._held:
                rate = max(rate, self._rate)
            self._resize(min(rate, 2 * self._rate if self._rate else rate))
        self._rate_at, self._rate_sent, self._held = now, sent, False

    def _resize(self, rate: float) -> None:
        """The queues for a drain at `rate` bytes/s (0: the floors). The transport calls resume_writing
        once half of edged's share is written, so a producer refills before the link runs out."""
        self._rate = rate
        cap, lowat = queue_sizes(rate, BACKLOG_BYTES, BACKLOG_MAX)
        t = self.transport
        if cap != self._cap and t is not None and not t.is_closing():
            if cap > BACKLOG_BYTES:
                t.set_write_buffer_limits(high=cap, low=cap // 2)
            else:
                t.set_write_buffer_limits()  # the transport's defaults, as before any drain
        self._cap = cap
        if lowat != self._lowat and (lowat > self._lowat * 1.25 or lowat < self._lowat * 0.8
                                     or lowat == UNSENT_LOWAT):
            self._lowat = lowat
            if self._paced:
                set_paced(t, True, lowat)


    def on_drained(self, fn: Callable[[], None]) -> None:
        self._drain_waiters[fn] = None

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._drain_waiters:
            self._wake_drained()

    def _wake_drained(self) -> None:
        if self.closed or not self.backlogged():
            waiters = list(self._drain_waiters)
            self._drain_waiters.clear()
            for fn in waiters:
                fn()

    def _log_slow_consumer(self, pending: int) -> None:
        self._log_error(f"Slow leafnode connection to {self.url.hostport}: pending bytes over "
                        f"{self.opts.max_pending}")

    # -------------------------------------------------------------------------- timers and closing

    def _first_info_timeout(self) -> None:
        if not self.got_info and not self.closed:
            self.error = "no INFO from the hub"
            self._log_error(f"Did not receive the hub's INFO from {self.url.hostport} within "
                            f"{self.link.remote.first_info_timeout or 1.0}s (wrong port or TLS handshake_first "
                            "mismatch?)")
            self.close("Read Error")

    def _connect_process_timeout(self) -> None:
        if not self.connected and not self.closed:
            self.send_raw(b"-ERR 'Stale Leaf Node Connection - Closing'\r\n")
            if not self.error:
                self.error = "no response to CONNECT"
            self._log_error(f"Leafnode connection to {self.url.hostport} did not complete: {self.error}")
            self.close("Stale Connection")

    def ping_interval(self) -> float:
        return self.link.ping_interval

    def _stale(self) -> None:
        self.error = "Stale Connection"
        self._log_error(f"Leafnode connection to {self.url.hostport} is stale (no PONG), closing")
        super()._stale()

    def _log_error(self, text: str) -> None:
        log.error("%s - lid:%d - %s", self.url.hostport, self.cid, text)

    def _release(self) -> None:
        if self._listening:
            try:
                self.account.interest_listeners.remove(self._on_local_interest)
            except ValueError:
                pass
            self._listening = False
        self._forget_last()
        if self._drain_waiters:
            self._wake_drained()  # closed: whoever waits finds out there is nobody to deliver to any more
        subs = list(self.subs.values())
        self.subs.clear()
        for sub in subs:
            self.account.unsubscribe(sub)
        self.smap.clear()

    def _closed(self) -> None:
        if not self.closed_fut.done():
            self.closed_fut.set_result(None)
        self.link.on_closed(self)

    def leaf_info(self, subs: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.cid,
            "name": self.remote_name,
            "is_spoke": self.is_spoke,
            "account": self.account.name if self.account is not None else "",
            "ip": self.host,
            "port": self.port,
            "rtt": rtt_text(self.rtt),
            **self.stats(),
            "compression": "off",
        }
        if subs:
            d["subscriptions_list"] = [s.subject for s in self.subs.values()]
        return d


def _perm(d: Any) -> tuple[list[str] | None, list[str]]:
    if not isinstance(d, dict):
        return None, []
    allow = d.get("allow")
    deny = d.get("deny") or []
    return (list(allow) if allow else None), list(deny)
