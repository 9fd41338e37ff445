"""Leafnode remotes: edged solicits links to a hub nats-server, exactly as a nats-server leaf does.

Wire facts come from /work/shared/docs/leafnode-protocol.md (nats-server leafnode.go). The codec half of
this module (`LeafParser`, the encoders, `decode_js_ack_reply`) does no I/O; `LeafConnection` is the
asyncio Protocol shell around it and `RemoteLink` keeps one configured remote connected forever.

What edged enforces itself because the hub does not (§5.5): no `$JS.API.>`, `$KV.>`, `$OBJ.>` or
own-domain `$JS.<domain>.API.>` traffic towards the hub, and the same denies on what comes back.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from edged import SERVER_VERSION
from edged.accounts import Account, Subscription, run_receivers
from edged.creds import read_creds_file
from edged.goformat import rfc3339, rtt_text
from edged.log import TRACE, log
from edged.options import RemoteLeafOpts
from edged.protocol import CRLF, Framer, frame_run, more_of_run
from edged.reads import SlicedReads
from edged.subjects import AllowDenyFilter, is_valid_subject, subject_is_subset
from edged.tlsconf import client_ssl_context

if TYPE_CHECKING:
    from edged.server import Server

DEFAULT_LEAF_PORT = 7422
CONNECT_PROCESS_TIMEOUT = 2.0  # wait this long for the hub's connect_info INFO
LOOP_DELAY = 30.0  # nats-server: leafNodeReconnectDelayAfterLoopDetected
CLUSTER_NAME_DELAY = 30.0
MIN_VERSION_DELAY = 5.0
LEAF_PING_CAP = 15.0  # a spoke pings on its own interval; capped so dead links show within seconds
MAX_LEAF_CONTROL_LINE = 64 * 1024
MAX_LEAF_PAYLOAD = 64 * 1024 * 1024
LDS_PREFIX = "$LDS."
# subjects a spoke never advertises nor forwards to the hub, and drops when they come back (§5.5)
JS_DENY = ("$JS.API.>", "$KV.>", "$OBJ.>")
_JS_DENY_PREFIX = (b"$JS.API.", b"$KV.", b"$OBJ.")
# nats-server's JetStream domain mapping sources (jetstream_api.go generateJSMappingTable)
JS_DOMAIN_SUFFIXES = ("INFO", "STREAM.>", "CONSUMER.>", "DIRECT.>", "META.>", "SERVER.>", "ACCOUNT.>", "$KV.>",
                      "$OBJ.>")

# ---------------------------------------------------------------------------------------------------------
# codec (sans-I/O)

OP_INFO = 1  # (OP_INFO, dict)
OP_PING = 2  # (OP_PING,)
OP_PONG = 3  # (OP_PONG,)
OP_OK = 4  # (OP_OK,)
OP_ERR = 5  # (OP_ERR, text)
OP_LSUB = 6  # (OP_LSUB, subject, queue|None, weight)
OP_LUNSUB = 7  # (OP_LUNSUB, subject, queue|None)
OP_LMSG = 8  # (OP_LMSG, subject: bytes, reply: bytes, queues: tuple[bytes, ...], hdr|None, payload)
OP_ERROR = 9  # (OP_ERROR, text): protocol violation, the parser is dead
# (OP_LMSGS, subject, reply, [payload, ...]): consecutive plain LMSGs (no queues, no headers) with one subject
# and reply, only from a parser made with runs=True; the connection matches and checks once per run
OP_LMSGS = 10

_PING_EV = (OP_PING,)
_PONG_EV = (OP_PONG,)
_OK_EV = (OP_OK,)


def _size(b: bytes) -> int:
    if not b or not b.isdigit() or len(b) > 10:
        return -1
    return int(b)


class LeafParser(Framer):
    """Incremental parser for what a hub sends on a leafnode connection. With `runs`, plain LMSGs that
    follow one another with the same subject and reply come out as one OP_LMSGS event."""

    __slots__ = ("runs", "_lines")

    def __init__(self, max_control_line: int = MAX_LEAF_CONTROL_LINE, max_payload: int = MAX_LEAF_PAYLOAD,
                 runs: bool = False) -> None:
        super().__init__(max_control_line, max_payload)
        self.runs = runs
        # runs mode: plain LMSG control lines seen before -> (subject, reply, size, CRLF + line)
        self._lines: dict[bytes, tuple[bytes, bytes, int, bytes]] = {}

    def feed(self, data: bytes) -> list[tuple]:
        if self.dead:
            return []
        buf = self._join(data)
        if buf is None:
            return []
        events: list[tuple] = []
        append = events.append
        n = len(buf)
        pos = 0
        mcl = self.max_control_line
        find = buf.find
        find_at = buf.startswith
        runs = self.runs
        lines = self._lines
        run: tuple = ()
        single: tuple = ()
        while pos < n:
            nl = find(b"\n", pos)
            if nl < 0:
                if n - pos > mcl:
                    return self._fail(events, "maximum control line exceeded")
                break
            if nl - pos > mcl:
                return self._fail(events, "maximum control line exceeded")
            # runs mode: a plain LMSG line seen before needs no parsing
            ent = lines.get(buf[pos : nl + 1]) if runs and find_at(b"LMSG ", pos) else None
            if ent is not None:
                word = b"LMSG"
                args = [word]
            else:
                end = nl - 1 if nl > pos and buf[nl - 1] == 13 else nl
                line = buf[pos:end]
                args = line.split()
                if not args:
                    pos = nl + 1
                    continue
                word = args[0]
                if word != b"LMSG" and word != b"HMSG":
                    word = word.upper()
            if word == b"LMSG" or word == b"HMSG":
                na = len(args)
                queues: tuple[bytes, ...] = ()
                if ent is not None:
                    subject, reply, size = ent[0], ent[1], ent[2]
                    hsize = -1
                elif word == b"LMSG" and 3 <= na <= 4 and args[-1].isdigit() and len(args[-1]) < 11:
                    # hot path: plain LMSG without a queue list
                    subject = args[1]
                    reply = args[2] if na == 4 else b""
                    hsize = -1
                    size = int(args[-1])
                    if runs and size <= self.max_payload and find_at(b"LMSG ", pos):
                        if len(lines) >= 256:
                            lines.clear()
                        ln = buf[pos : nl + 1]
                        ent = lines[ln] = (subject, reply, size, b"\r\n" + ln)
                else:
                    ev = _msg_args(args, word == b"HMSG")
                    if ev is None:
                        return self._fail(events, "Unknown Protocol Operation")
                    subject, reply, queues, hsize, size = ev
                if size > self.max_payload:
                    return self._fail(events, "Maximum Payload Violation")
                start = nl + 1
                stop = start + size
                if stop + 2 > n:
                    self._keep(buf, pos, stop + 2 - pos)
                    return events
                if buf[stop] != 13 or buf[stop + 1] != 10:
                    return self._fail(events, "Unknown Protocol Operation")
                if hsize < 0 and runs and not queues:
                    last = events[-1] if events else None
                    if last is run and run[1] == subject and run[2] == reply:
                        payloads = run[3]
                        payloads.append(buf[start:stop])
                    elif last is single and single[1] == subject and single[2] == reply:
                        # a second message on the subject: the single event becomes a run
                        payloads = [single[5], buf[start:stop]]
                        run = events[-1] = (OP_LMSGS, subject, reply, payloads)
                    else:
                        # alone until the next message says otherwise: a run of one costs more than an event
                        single = (OP_LMSG, subject, reply, queues, None, buf[start:stop])
                        append(single)
                        pos = stop + 2
                        continue
                    # the messages right behind with the very same control line need no parsing: one
                    # startswith checks this payload's CRLF and the next line together
                    nxt = ent[3] if ent is not None else b"\r\n" + buf[pos:start]
                    if find_at(nxt, stop):
                        stop = more_of_run(buf, stop, nxt, size, payloads)
                        if stop < 0:
                            return self._fail(events, "Unknown Protocol Operation")
                elif hsize < 0:
                    append((OP_LMSG, subject, reply, queues, None, buf[start:stop]))
                else:
                    append((OP_LMSG, subject, reply, queues, buf[start:start + hsize], buf[start + hsize:stop]))
                pos = stop + 2
                continue
            pos = nl + 1
            if word == b"PING":
                append(_PING_EV)
            elif word == b"PONG":
                append(_PONG_EV)
            elif word == b"LS+":
                na = len(args)
                if na == 2:
                    append((OP_LSUB, args[1].decode("utf-8", "surrogateescape"), None, 1))
                elif na == 4:
                    w = _size(args[3])
                    append((OP_LSUB, args[1].decode("utf-8", "surrogateescape"),
                            args[2].decode("utf-8", "surrogateescape"), w if w > 0 else 1))
                else:
                    return self._fail(events, "Unknown Protocol Operation")
            elif word == b"LS-":
                na = len(args)
                if na == 2:
                    append((OP_LUNSUB, args[1].decode("utf-8", "surrogateescape"), None))
                elif na == 3:
                    append((OP_LUNSUB, args[1].decode("utf-8", "surrogateescape"),
                            args[2].decode("utf-8", "surrogateescape")))
                else:
                    return self._fail(events, "Unknown Protocol Operation")
            elif word == b"INFO":
                sp = line.find(b" ")
                try:
                    info = json.loads(line[sp + 1:]) if sp > 0 else None
                except ValueError:
                    info = None
                if not isinstance(info, dict):
                    return self._fail(events, "Unknown Protocol Operation")
                append((OP_INFO, info))
            elif word == b"-ERR":
                sp = line.find(b" ")
                text = line[sp + 1:].decode("utf-8", "replace").strip() if sp > 0 else ""
                if len(text) >= 2 and text[0] == "'" and text[-1] == "'":
                    text = text[1:-1]
                append((OP_ERR, text))
            elif word == b"+OK":
                append(_OK_EV)
            else:
                return self._fail(events, "Unknown Protocol Operation")
        self._buf = buf[pos:] if pos < n else b""
        return events

    def _keep(self, buf: bytes, pos: int, need: int) -> None:
        rest = buf[pos:]
        if len(rest) >= 65536:
            self._chunks = [rest]
            self._have = len(rest)
            self._need = need
            self._buf = b""
        else:
            self._buf = rest

    def _fail(self, events: list[tuple], text: str) -> list[tuple]:
        self.dead = True
        self._buf = b""
        self._chunks.clear()
        events.append((OP_ERROR, text))
        return events


def _msg_args(args: list[bytes], hdr: bool) -> tuple[bytes, bytes, tuple[bytes, ...], int, int] | None:
    """LMSG/HMSG arguments: the count disambiguates, ≥ 4 (5 for HMSG) needs the `+`/`|` indicator."""
    na = len(args) - 1
    nsz = 2 if hdr else 1
    if na < 1 + nsz:
        return None
    subject = args[1]
    reply = b""
    queues: tuple[bytes, ...] = ()
    if na == 1 + nsz:
        pass
    elif na == 2 + nsz:
        reply = args[2]
    else:
        ind = args[2]
        if ind == b"+":
            reply = args[3]
            queues = tuple(args[4:len(args) - nsz])
        elif ind == b"|":
            queues = tuple(args[3:len(args) - nsz])
        else:
            return None
        if not queues:
            return None
    if hdr:
        hsize = _size(args[-2])
        size = _size(args[-1])
        if hsize < 0 or size < 0 or hsize > size:
            return None
    else:
        hsize = -1
        size = _size(args[-1])
        if size < 0:
            return None
    return subject, reply, queues, hsize, size


def connect_line(opts: dict[str, Any]) -> bytes:
    return b"CONNECT " + json.dumps(opts, separators=(",", ":")).encode() + CRLF


def ls_plus(subject: str, queue: str | None = None, weight: int = 1) -> bytes:
    if queue:
        return f"LS+ {subject} {queue} {max(1, weight)}\r\n".encode("utf-8", "surrogateescape")
    return f"LS+ {subject}\r\n".encode("utf-8", "surrogateescape")


def ls_minus(subject: str, queue: str | None = None) -> bytes:
    if queue:
        return f"LS- {subject} {queue}\r\n".encode("utf-8", "surrogateescape")
    return f"LS- {subject}\r\n".encode("utf-8", "surrogateescape")


def msg_head(subject: bytes, reply: bytes, queues: list[bytes] | tuple[bytes, ...], hsize: int, size: int) -> bytes:
    """LMSG (hsize < 0) or HMSG control line; `size` is the payload length without headers."""
    parts = [b"HMSG" if hsize >= 0 else b"LMSG", subject]
    if queues:
        if reply:
            parts += (b"+", reply)
        else:
            parts.append(b"|")
        parts.extend(queues)
    elif reply:
        parts.append(reply)
    if hsize >= 0:
        parts += (b"%d" % hsize, b"%d" % (hsize + size))
    else:
        parts.append(b"%d" % size)
    return b" ".join(parts) + CRLF


def decode_js_ack_reply(subject: bytes, reply: bytes) -> tuple[bytes, bytes]:
    """JetStream deliveries over a leaf carry `<ack reply>@<original subject>` in the reply (§3.4)."""
    if not reply.startswith(b"$JS.ACK.") or b"@" not in reply:
        return subject, reply
    i = reply.find(b"@")
    while i >= 0:
        if reply.count(b".", 0, i) >= 8:
            orig = reply[i + 1:]
            return (orig or subject), reply[:i]
        i = reply.find(b"@", i + 1)
    return subject, reply


# ---------------------------------------------------------------------------------------------------------
# subject filters


def _perm(d: Any) -> tuple[list[str] | None, list[str]]:
    if not isinstance(d, dict):
        return None, []
    allow = d.get("allow")
    deny = d.get("deny") or []
    return (list(allow) if allow else None), list(deny)


# ---------------------------------------------------------------------------------------------------------
# URLs, credentials, TLS


@dataclass
class LeafURL:
    scheme: str  # nats, nats-leaf, tls, ws, wss
    host: str
    port: int
    user: str = ""
    password: str | None = None
    path: str = ""

    @property
    def websocket(self) -> bool:
        return self.scheme in ("ws", "wss")

    @property
    def hostport(self) -> str:
        h = f"[{self.host}]" if ":" in self.host else self.host
        return f"{h}:{self.port}"

    def redacted(self) -> str:
        cred = f"{self.user}:xxxxx@" if self.user else ""
        return f"{self.scheme}://{cred}{self.hostport}{self.path}"


def parse_leaf_url(url: str) -> LeafURL:
    if "://" not in url:
        url = "nats-leaf://" + url
    u = urlsplit(url)
    scheme = u.scheme.lower()
    if scheme not in ("nats", "nats-leaf", "tls", "ws", "wss"):
        raise ValueError(f"leafnode remote URL scheme {scheme!r} not supported (nats, nats-leaf, tls, ws, wss)")
    host = u.hostname or ""
    if not host:
        raise ValueError(f"leafnode remote URL {url!r} has no host")
    port = u.port
    if port is None:
        port = {"ws": 80, "wss": 443}.get(scheme, DEFAULT_LEAF_PORT)
    user = unquote(u.username) if u.username else ""
    password = unquote(u.password) if u.password is not None else None
    return LeafURL(scheme, host, port, user, password, u.path.rstrip("/"))


def sign_nonce(seed: bytes, nonce: str) -> tuple[str, str]:
    """(public key, signature) — the signature is over the nonce's ASCII bytes, base64 RawURL (§9.3)."""
    import nkeys

    kp = nkeys.from_seed(bytearray(seed))
    try:
        sig = kp.sign(nonce.encode())
        pub = kp.public_key.decode()
    finally:
        kp.wipe()
    return pub, base64.urlsafe_b64encode(sig).rstrip(b"=").decode()


def _is_ip(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
        return True
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------------------
# the connection


class LeafConnection(SlicedReads):
    """One solicited leafnode connection to the hub. A router receiver: hub interest becomes
    `Subscription(self, ...)` objects in the bound account."""

    kind = "Leafnode"
    echo = False  # hub messages are never routed back to the hub
    headers = True

    def __init__(self, link: RemoteLink, url: LeafURL, tls_done: bool) -> None:
        self.link = link
        self.server = link.server
        self.account: Account = link.account
        self.url = url
        self.cid = self.server.next_cid()
        self.transport: Any = None
        self.parser = LeafParser(runs=True)
        self.tls_done = tls_done
        self.out: list[bytes] = []
        self.pending = 0
        self.flush_queued = False
        self.closed = False
        self.connected = False  # connect_info INFO received
        self.connect_sent = False
        self.got_info = False
        self.hub_info: dict[str, Any] = {}
        self.nonce = ""
        self.remote_account = ""
        self.remote_name = ""
        self.subs: dict[str, Subscription] = {}
        # local interest advertised: (subject, queue) -> count of local subs
        self.smap: dict[tuple[str, str | None], int] = {}
        self.export = AllowDenyFilter(None, link.remote.deny_exports)
        self.import_ = AllowDenyFilter(None, link.remote.deny_imports)
        self._own_domain_prefix = link.own_domain_prefix
        # the last message written, to merge further deliveries of the same router pass (see deliver)
        self._last_subject: bytes | None = None
        self._last_reply: bytes | None = None
        self._last_hdr: bytes | None = None
        self._last_payload: bytes | None = None
        self._last_subs: tuple[Subscription, ...] = ()
        self._last_idx = 0
        self._exp: AllowDenyFilter | None = None
        self._deny_imp = AllowDenyFilter(None, link.remote.deny_imports) if link.remote.deny_imports else None
        own = link.own_domain_prefix
        self._out_deny: tuple[bytes, ...] = _JS_DENY_PREFIX + ((own,) if own else ())
        self._in_special: tuple[bytes, ...] = _JS_DENY_PREFIX + ((own,) if own else ())
        self.close_reason = ""
        self.extra_delay = 0.0
        self.error = ""
        self.start = time.time()
        self.last_activity = self.start
        self.in_msgs = self.out_msgs = self.in_bytes = self.out_bytes = 0
        self.pings_out = 0
        self.rtt = 0.0
        self._rtt_start = 0.0
        self.host = url.host
        self.port = url.port
        self._timers: list[asyncio.TimerHandle] = []
        self._ping_handle: asyncio.TimerHandle | None = None
        self.closed_fut: asyncio.Future[None] = self.server.loop.create_future()
        self._listening = False

    # -------------------------------------------------------------------------- asyncio callbacks

    def connection_made(self, transport: Any) -> None:
        if self.transport is not None:
            self.transport = transport
            return
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if peer:
            self.host, self.port = peer[0], peer[1]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self._later(self.link.remote.first_info_timeout or 1.0, self._first_info_timeout)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.last_activity = time.time()
        events = self.parser.feed(data)
        if events:
            self.process(events)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.close(f"Connection closed by hub{': ' + str(exc) if exc else ''}", flush=False)

    def eof_received(self) -> bool | None:
        return None

    # -------------------------------------------------------------------------- protocol

    def process(self, events: list[tuple]) -> None:
        for ev in events:
            if self.closed:
                return
            op = ev[0]
            if op == OP_LMSGS:
                self._on_msgs(ev[1], ev[2], ev[3])
            elif op == OP_LMSG:
                self._on_msg(ev[1], ev[2], ev[3], ev[4], ev[5])
            elif op == OP_LSUB:
                self._on_ls_plus(ev[1], ev[2], ev[3])
            elif op == OP_LUNSUB:
                self._on_ls_minus(ev[1], ev[2])
            elif op == OP_PING:
                self.send_raw(b"PONG\r\n")
            elif op == OP_PONG:
                self.pings_out = 0
                if self._rtt_start:
                    self.rtt = time.monotonic() - self._rtt_start
                    self._rtt_start = 0.0
            elif op == OP_INFO:
                self._on_info(ev[1])
            elif op == OP_ERR:
                self._on_err(ev[1])
            elif op == OP_ERROR:
                self._log_error(f"protocol error from hub: {ev[1]}")
                self.close(f"Parse Error: {ev[1]}")
                return

    def _on_info(self, info: dict[str, Any]) -> None:
        if not self.got_info:
            self.got_info = True
            self._cancel_timers()
            self.hub_info = info
            if not info.get("client_id") or "leafnode_urls" not in info:
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
            if remote.credentials:
                jwt, seed = read_creds_file(remote.credentials)
                _, sig = sign_nonce(seed, self.nonce)
                c["jwt"] = jwt
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
        self._rtt_start = time.monotonic()
        self.send_raw(b"".join(out))
        self._schedule_ping()
        self.flush()

    def _on_err(self, text: str) -> None:
        low = text.lower()
        self.error = text
        if "authorization violation" in low or "authentication" in low:
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
        if isinstance(sub.conn, LeafConnection):
            return False  # interest learned from a hub is never re-advertised (spoke semantics)
        subject = sub.subject
        if subject.startswith(LDS_PREFIX):
            return False
        if any(subject_is_subset(subject, d) for d in JS_DENY):
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
            subject_b, reply_b = decode_js_ack_reply(subject_b, reply_b)
        if subject_b.startswith(self._in_special):
            if subject_b.startswith(_JS_DENY_PREFIX):
                return
            # the hub asks edged's domain: answer as local $JS.API unless something local listens on it as is
            subject = subject_b.decode("utf-8", "surrogateescape")
            if not self._local_interest(subject):
                rest = subject_b[len(self._own_domain_prefix):]
                if rest.startswith(b"$KV.") or rest.startswith(b"$OBJ."):
                    subject_b = rest
                else:
                    subject_b = b"$JS.API." + rest
                subject = subject_b.decode("utf-8", "surrogateescape")
        else:
            subject = subject_b.decode("utf-8", "surrogateescape")
            di = self._deny_imp
            if di is not None and not di.allows(subject):
                return
        psubs, qgroups = self.account.sublist.match(subject)
        for sub in psubs:
            conn = sub.conn
            if conn is self or sub.closed:
                continue
            conn.deliver(sub, subject_b, reply_b, hdr, payload)
            if sub.max and sub.delivered >= sub.max:
                conn.auto_unsubscribe(sub)
        if queues and qgroups:
            for group in qgroups:
                q = group[0].queue
                if q is None or q.encode("utf-8", "surrogateescape") not in queues:
                    continue
                _deliver_one(group, self, subject_b, reply_b, hdr, payload)

    def _each(self, subject_b: bytes, reply_b: bytes, payloads: list[bytes]) -> None:
        """A run of LMSGs message by message, stopping if the link closes on the way."""
        on_msg = self._on_msg
        for payload in payloads:
            if self.closed:
                return
            on_msg(subject_b, reply_b, (), None, payload)

    def _on_msgs(self, subject_b: bytes, reply_b: bytes, payloads: list[bytes]) -> None:
        """A run of plain LMSGs with one subject and reply: checked and matched once, handed to each local
        receiver whole when that is what per-message delivery would do (`run_receivers`)."""
        if reply_b.startswith(b"$JS.ACK.") or subject_b.startswith(self._in_special):
            self._each(subject_b, reply_b, payloads)
            return
        n = len(payloads)
        nbytes = sum(map(len, payloads))
        subject = subject_b.decode("utf-8", "surrogateescape")
        di = self._deny_imp
        subs: list[Subscription] | None = []
        if di is None or di.allows(subject):
            sl = self.account.sublist
            psubs, _ = sl.match(subject)  # queue groups only take messages that list them: none here
            if psubs:
                subs = run_receivers(psubs, self, True, n, nbytes + n * (len(subject_b) + len(reply_b)))
            if subs is None:
                # message by message, as _on_msg does it; its match is a cache hit, so the one above
                # is not counted
                sl.count_repeats(-1)
                self._each(subject_b, reply_b, payloads)
                return
            sl.count_repeats(n - 1)
        self.in_msgs += n
        self.in_bytes += nbytes
        for sub in subs:
            sub.conn.deliver_run(sub, subject_b, reply_b, payloads)

    def _local_interest(self, subject: str) -> bool:
        psubs, qgroups = self.account.sublist.match(subject)
        for s in psubs:
            if not isinstance(s.conn, LeafConnection):
                return True
        for g in qgroups:
            for s in g:
                if not isinstance(s.conn, LeafConnection):
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

    def takes_run(self, sub: Subscription, n: int, run_bytes: int) -> bool:
        """Always: delivery only queues output, the slow-consumer check waits for the flush."""
        return True

    def deliver_run(self, sub: Subscription, subject: bytes, reply: bytes, payloads: list[bytes]) -> None:
        """`deliver` of header-less messages with one subject and reply to a plain (non-queue) hub
        subscription: the checks and the LMSG line are done once, equal-sized messages written with one
        join. No other subscription of this connection gets the same messages (`run_receivers`), so there
        is nothing to merge."""
        self._forget_last()
        if self.closed or not self.connected or subject.startswith(self._out_deny):
            return
        exp = self._exp
        if exp is not None and not exp.allows(subject.decode("utf-8", "surrogateescape")):
            return
        q = sub.queue
        if q:  # not reached from the router (queue subscriptions are in groups), kept correct anyway
            for payload in payloads:
                self.deliver(sub, subject, reply, None, payload)
            self._forget_last()
            return
        n = len(payloads)
        sub.delivered += n
        prefix = b"LMSG %s %s " % (subject, reply) if reply else b"LMSG %s " % subject
        total, added = frame_run(self.out, payloads, prefix)
        self.pending += added
        self.out_msgs += n
        self.out_bytes += total
        if not self.flush_queued:
            self.flush_queued = True
            self.server.flush_soon(self)

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
        if self.closed:
            return
        self._forget_last()
        self.out.append(data)
        self.pending += len(data)
        if not self.flush_queued:
            self.flush_queued = True
            self.server.flush_soon(self)

    def flush(self) -> None:
        self.flush_queued = False
        self._forget_last()
        out = self.out
        t = self.transport
        if not out or t is None:
            return
        if t.is_closing():
            out.clear()
            return
        data = b"".join(out) if len(out) > 1 else out[0]
        out.clear()
        self.pending = 0
        t.write(data)
        if t.get_write_buffer_size() > self.server.opts.max_pending:
            self.server.slow_consumers += 1
            self._log_error(f"Slow leafnode connection to {self.url.hostport}: pending bytes over "
                            f"{self.server.opts.max_pending}")
            self.close("Slow Consumer (Pending Bytes)", flush=False, abort=True)

    # -------------------------------------------------------------------------- timers and closing

    def _later(self, delay: float, fn: Callable[[], None]) -> None:
        self._timers.append(self.server.loop.call_later(delay, fn))

    def _cancel_timers(self) -> None:
        for t in self._timers:
            t.cancel()
        self._timers.clear()

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

    def _schedule_ping(self) -> None:
        iv = self.link.ping_interval
        if iv > 0:
            self._ping_handle = self.server.loop.call_later(iv, self._ping_tick)

    def _ping_tick(self) -> None:
        if self.closed:
            return
        if self.pings_out + 1 > self.server.opts.ping_max:
            self.error = "Stale Connection"
            self._log_error(f"Leafnode connection to {self.url.hostport} is stale (no PONG), closing")
            self.send_raw(b"-ERR 'Stale Connection'\r\n")
            self.close("Stale Connection")
            return
        self.pings_out += 1
        self._rtt_start = time.monotonic()
        self.send_raw(b"PING\r\n")
        self._ping_handle = self.server.loop.call_later(self.link.ping_interval, self._ping_tick)

    def _log_error(self, text: str) -> None:
        log.error("%s - lid:%d - %s", self.url.hostport, self.cid, text)

    def close(self, reason: str, flush: bool = True, abort: bool = False) -> None:
        if self.closed:
            return
        if flush:
            try:
                self.flush()
            except Exception:  # a broken transport must not stop the cleanup
                pass
        self.closed = True
        self.close_reason = reason
        if reason == "Stale Connection":
            self.server.stale_connections += 1
            self.server.stale_leafs += 1
        self._cancel_timers()
        if self._ping_handle is not None:
            self._ping_handle.cancel()
        if self._listening:
            try:
                self.account.interest_listeners.remove(self._on_local_interest)
            except ValueError:
                pass
            self._listening = False
        self._forget_last()
        subs = list(self.subs.values())
        self.subs.clear()
        for sub in subs:
            self.account.unsubscribe(sub)
        self.smap.clear()
        t = self.transport
        if t is not None:
            if abort:
                t.abort()
            else:
                t.close()
        if not self.closed_fut.done():
            self.closed_fut.set_result(None)
        self.link.on_closed(self)

    def leaf_info(self, subs: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.cid,
            "name": self.remote_name,
            "is_spoke": True,
            "account": self.account.name,
            "ip": self.host,
            "port": self.port,
            "rtt": rtt_text(self.rtt),
            "in_msgs": self.in_msgs,
            "out_msgs": self.out_msgs,
            "in_bytes": self.in_bytes,
            "out_bytes": self.out_bytes,
            "subscriptions": len(self.subs),
            "compression": "off",
        }
        if subs:
            d["subscriptions_list"] = [s.subject for s in self.subs.values()]
        return d


def _deliver_one(group: tuple, origin: Any, subject: bytes, reply: bytes, hdr: bytes | None, payload: bytes) -> None:
    """One member of a queue group, never one behind a leaf connection (it came from there)."""
    n = len(group)
    i = int(random.random() * n) if n > 1 else 0
    for k in range(n):
        sub = group[(i + k) % n]
        conn = sub.conn
        if sub.closed or conn is origin or isinstance(conn, LeafConnection):
            continue
        conn.deliver(sub, subject, reply, hdr, payload)
        if sub.max and sub.delivered >= sub.max:
            conn.auto_unsubscribe(sub)
        return


# ---------------------------------------------------------------------------------------------------------
# one configured remote


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
        self._tls_name = next((u.host for u in self.urls if not _is_ip(u.host)), "")
        js = self.server.opts.jetstream
        self.domain = js.domain if js.enabled else ""
        self.own_domain_prefix = f"$JS.{self.domain}.API.".encode() if self.domain else b""
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

    # ------------------------------------------------------------ policy helpers

    def wants_tls(self, url: LeafURL) -> bool:
        return url.scheme in ("tls", "wss") or self.remote.tls is not None

    def tls_name(self, url: LeafURL) -> str:
        if not _is_ip(url.host):
            return url.host
        return self._tls_name or url.host

    def user_password(self, url: LeafURL) -> tuple[str, str | None]:
        if url.user:
            return url.user, url.password
        return self._cred

    def check_domains(self, info: dict[str, Any]) -> str:
        """The JetStream domain rules edged must enforce itself (§5.2): a different, non-empty domain."""
        js = self.server.opts.jetstream
        if not js.enabled or self.is_system_account:
            return ""
        hub_domain = str(info.get("domain") or "")
        if not js.domain:
            return (f"JetStream domain missing: local JetStream needs a `domain` (different from the hub's "
                    f"{hub_domain or 'default'!r}) to run behind a leafnode link; not connecting account "
                    f"{self.account.name!r}")
        if info.get("jetstream") and hub_domain == js.domain:
            return (f"JetStream domain conflict: local domain {js.domain!r} equals the hub's; the two JetStreams "
                    f"would answer each other's requests. Use a different domain; not connecting account "
                    f"{self.account.name!r}")
        return ""

    def domain_subjects(self) -> list[str]:
        if not self.domain or self.is_system_account or self.server.jetstream is None:
            return []
        return [f"$JS.{self.domain}.API.{s}" for s in JS_DOMAIN_SUFFIXES]

    def deny_outbound_interest(self, subject: str) -> bool:
        if any(subject_is_subset(subject, d) for d in JS_DENY):
            return True
        return bool(self.domain) and subject_is_subset(subject, f"$JS.{self.domain}.API.>")

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
            if not _is_ip(u.host) and not self._tls_name:
                self._tls_name = u.host
            found.append(u)
        self.discovered = found

    def next_url(self) -> LeafURL:
        cands = self.discovered + self.urls
        u = cands[self._rr % len(cands)]
        self._rr += 1
        return u

    # ------------------------------------------------------------ lifecycle

    def on_connected(self, conn: LeafConnection) -> None:
        self.connects += 1
        self.connected_since = time.time()
        self.last_error = ""
        log.info("Leafnode connection created for account: %s (remote %s, hub %r, remote account %r)",
                 self.account.name, conn.url.hostport, conn.remote_name, conn.remote_account)
        for f in self._wait_connected:
            if not f.done():
                f.set_result(None)
        self._wait_connected.clear()
        # nats-server re-checks mirror/source consumers when a leaf link registers (checkInternalSyncConsumers)
        hook = getattr(self.server.jetstream, "leafnode_connected", None)
        if hook is not None:
            try:
                hook(self.account.name)
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
            from edged.proxy import open_tunnel

            sock = await open_tunnel(proxy, url.host, url.port, tmo)
        else:
            sock = await _tcp_connect(url.host, url.port, tmo)
        handshake_first = remote.tls is not None and remote.tls.handshake_first and not url.websocket
        ssl_ctx: ssl.SSLContext | None = None
        if url.scheme == "wss" or handshake_first:
            ssl_ctx = client_ssl_context(remote.tls)
        tls_tmo = (remote.tls.timeout if remote.tls is not None and remote.tls.timeout else 2.0)
        conn = LeafConnection(self, url, tls_done=ssl_ctx is not None)
        try:
            if url.websocket:
                from edged.leafnode_ws import WSClientProtocol

                proto: asyncio.Protocol = WSClientProtocol(conn, url, no_masking=remote.ws_no_masking,
                                                           compression=remote.ws_compression)
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
        if url.websocket:
            # the LeafConnection only starts its own timers once the upgrade is done
            def upgrade_timeout() -> None:
                if conn.transport is None and not conn.closed:
                    conn.error = "websocket upgrade timeout"
                    wst = getattr(proto, "transport", None)
                    if wst is not None:
                        wst.abort()
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


async def _tcp_connect(host: str, port: int, timeout: float) -> socket.socket:
    loop = asyncio.get_running_loop()
    infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout)
    last: Exception | None = None
    for family, stype, proto, _, addr in infos:
        sock = socket.socket(family, stype, proto)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, addr), timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except (TimeoutError, OSError) as e:
            sock.close()
            last = e if isinstance(e, OSError) else TimeoutError(f"dial timeout after {timeout}s")
    raise last or OSError(f"cannot resolve {host}")


# ---------------------------------------------------------------------------------------------------------
# the manager


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

    def lds_for(self, account: str) -> str:
        s = self._lds.get(account)
        if s is None:
            s = self._lds[account] = LDS_PREFIX + base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode(
            ).replace("-", "A").replace("_", "B")
        return s

    async def start(self) -> None:
        for link in self.links:
            log.info("Leafnode remote for account %s: %s", link.account.name,
                     ", ".join(u.redacted() for u in link.urls))
            link.start()

    async def stop(self) -> None:
        for link in self.links:
            await link.stop()

    @property
    def connections(self) -> list[LeafConnection]:
        return [lk.conn for lk in self.links if lk.is_connected and lk.conn is not None]

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
        """The `leaf` block of /varz (nats-server LeafNodeOptsVarz); `connected` / `last_error` per remote
        are edged additions so the link state is visible without /leafz."""
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
            })
        return {"host": self.opts.host, "port": self.opts.port, "remotes": remotes}

    def healthz(self) -> tuple[bool, str]:
        """(ok, error): not ok while a configured remote is down; edged keeps serving locally meanwhile."""
        down = [lk for lk in self.links if not lk.is_connected]
        if not down:
            return True, ""
        return False, "; ".join(
            f"leafnode remote for account {lk.account.name} not connected"
            + (f": {lk.last_error}" if lk.last_error else "") for lk in down
        )

