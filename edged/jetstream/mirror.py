"""Mirrors and sources: a stream fed by another stream's consumer, on this server or in another domain
or account (`external.api`), synced as nats-server's stream.go does it (setupMirrorConsumer,
trySetupSourceConsumer, processInboundMirrorMsg, processInboundSourceMsg).

Each mirror or source is a `SourceSync` on the router like any service: it asks the origin for a
flow-controlled push consumer (ack none, 1 s heartbeats) through the API prefix, takes the deliveries on
an internal subscription of its deliver subject and stores them: a mirror at the origin's sequence and
time, a source under its own sequences with a `Nats-Stream-Source` header. It answers flow control, and
recreates the consumer from the next sequence it needs when a heartbeat or a sequence gap shows that it
missed something, when no heartbeat came for 5 s, or when a leafnode link comes up. Attempts are at least
2 s apart, 10 s more per failure up to 2 min, so an unreachable origin costs one request now and then.
A backlog arrives in runs (a leafnode hands over what one read brought, `Receiver.deliver_routed_batch`):
a run is stored with one call, before the flow control answer after it; a plain gapless run is checked once
on columns (`_take_whole`), any other message by message.

Nothing but the stored messages is kept: a mirror resumes after its last sequence, a source after the
origin sequence in the last `Nats-Stream-Source` header it wrote (nats-server's startingSequenceForSources),
so a restart or a kill -9 resumes exactly where the committed messages end.
Facts: ../shared/docs/leafnode-protocol.md §8.
"""

from __future__ import annotations

import asyncio
import operator
import os
import random
import re
import time
from collections.abc import Sequence
from itertools import islice, repeat
from typing import TYPE_CHECKING, Any

import msgspec

from edged.goformat import parse_rfc3339, rfc3339ns
from edged.jetstream.stream import index_name
from edged.jetstream.wire.errors import JSApiError, api_error
from edged.log import log
from edged.routing.headers import get_header, make_headers
from edged.routing.receiver import Message
from edged.routing.subjects import SubjectTransform, subject_matches
from storage import StoreError

if TYPE_CHECKING:
    from edged.jetstream.stream import Stream

HEARTBEAT_NS = 1_000_000_000  # sourceHealthHB
HEALTH_S = 10.0  # sourceHealthCheckInterval: the origin consumer's inactive_threshold
# missed heartbeats that make a consumer stale: 5 of them (nats-server waits 10 s; the origin's consumer
# lives on for its inactive_threshold either way)
STALL_S = 5.0
RETRY_THRESHOLD_S = 2.0  # sourceConsumerRetryThreshold
RESPONSE_WAIT_S = 30.0  # srcConsumerWaitTime
DURABLE_RESPONSE_WAIT_S = 5.0  # srcDurableConsumerWaitTime: a reset, nothing to create
ACK_WAIT_NS = 22 * 3600 * 1_000_000_000
LINK_GRACE_S = 10.0  # after a link comes up, a request nobody hears yet is retried soon, not counted
SOURCE_SCAN_LIMIT = 1_000_000
EARLY_MAX = 10_000  # deliveries kept while the create response is on its way  # messages read back at start to find where each source resumes

_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode
_DROP = (b"Nats-Expected-", b"Nats-Batch-")
_DROP_SOURCE = (*_DROP, b"Nats-Stream-Source:")
_EMPTY_HDR = b"NATS/1.0\r\n\r\n"


def _token(n: int = 8) -> str:
    return "".join(_B62[b % 62] for b in os.urandom(n))


def _strip(hdr: bytes | None, source_hdr: bool) -> bytes:
    """The origin's headers without the lines nats-server drops when it mirrors or sources a message
    (removeHeaderIfPrefixPresent: case-sensitive, the rest kept byte for byte): expectations and batch
    markers, checked at the origin already, and for a source an earlier `Nats-Stream-Source`. b"" when
    nothing but the first line would be left."""
    if not hdr:
        return b""
    if b"Nats-Expected-" not in hdr and b"Nats-Batch-" not in hdr and not (
            source_hdr and b"Nats-Stream-Source:" in hdr):
        return hdr
    drop = _DROP_SOURCE if source_hdr else _DROP
    lines = hdr.split(b"\r\n")
    kept = [ln for i, ln in enumerate(lines) if i == 0 or not ln.startswith(drop)]
    out = b"\r\n".join(kept)
    return b"" if len(out) <= len(_EMPTY_HDR) and out.startswith(b"NATS/1.0\r\n") else out


def parse_ack_reply(reply: str) -> tuple[str, int, int, int, int, int] | None:
    """(consumer, delivered count, stream seq, consumer seq, timestamp ns, pending) of a v1 (9 tokens)
    or v2 (11 or more) JetStream ack reply; None for anything else."""
    t = reply.split(".")
    n = len(t)
    if n == 9:
        o = 3
    elif n >= 11:
        o = 5
    else:
        return None
    if t[0] != "$JS" or t[1] != "ACK":
        return None
    try:
        return t[o], int(t[o + 1]), int(t[o + 2]), int(t[o + 3]), int(t[o + 4]), int(t[o + 5])
    except ValueError:
        return None


class SourceSync:
    """One mirror or one source of a stream: its origin consumer, position and health."""

    def __init__(self, stream: Stream, cfg: dict[str, Any], mirror: bool) -> None:
        self.stream = stream
        self.cfg = cfg
        self.mirror = mirror
        self.name: str = cfg["name"]
        ext = cfg.get("external")
        self.external = ext
        self.api = (ext.get("api") if ext else "") or "$JS.API"
        self.deliver_prefix = (ext.get("deliver") if ext else "") or ""
        self.iname = index_name(cfg)
        self._iparts = self.iname.split(" ")
        trs = cfg.get("subject_transforms") or []
        self.filters = [t["src"] or ">" for t in trs] if trs else ([cfg["filter_subject"]] if cfg.get("filter_subject") else [])
        self.transforms = [SubjectTransform(t["src"] or ">", t["dest"]) if t["dest"] else None for t in trs]
        self.cname = ""
        # `consumer`: the user's own durable on the origin (nats-server 2.14): reset, never created or deleted
        self.durable: dict[str, Any] = cfg.get("consumer") or {}
        self.dseq = 0
        self.sseq = 0
        self.lag = 0
        self.last_ns = 0  # last contact (message or heartbeat), for `active`
        self.taken_ts = 0  # origin timestamp of the last message taken (edged status: age of the backlog)
        self.heard = 0.0  # the same on the monotonic clock, for the health check
        self.err: dict[str, Any] | None = None
        self.ident = ""
        self.fails = 0
        self.pending = False  # a create request is out
        self.deadline = 0.0
        self.last_attempt = 0.0
        self.closed = False
        self.reply_sub: Any = None
        self.deliver_subs: list[Any] = []
        self._timer: asyncio.TimerHandle | None = None
        self._warned = ""
        self._framed: tuple[str, bytes, re.Pattern[bytes]] | None = None  # _framed_split's (consumer, prefix, regex)
        self._early: list[tuple[Any, ...]] = []

    # ------------------------------------------------------------------ the origin consumer

    @property
    def _ic(self) -> Any:
        return self.stream.jsa.internal

    def active(self) -> bool:
        return bool(self.cname) and not self.pending

    def cancel(self) -> None:
        """Forget the current consumer (the origin drops it once its deliver subject has no interest)."""
        ic = self._ic
        for sub in self.deliver_subs:
            ic.unsubscribe(sub)
        self.deliver_subs.clear()
        if self.reply_sub is not None:
            ic.unsubscribe(self.reply_sub)
            self.reply_sub = None
        self.cname = ""
        self.pending = False
        self._early = []

    def close(self) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.cancel()

    def schedule(self, delay: float) -> None:
        if self.closed:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(max(delay, 0.0), self._fire)

    def _fire(self) -> None:
        self._timer = None
        self.setup()

    def retry(self, now: bool = False) -> None:
        """Recreate the consumer from the next sequence needed, within the retry pacing (`now`: a link
        came up, start over without waiting)."""
        self.cancel()
        if now:
            self.fails = 0
            self.last_attempt = 0.0
        self.setup()

    def _wait(self) -> float:
        """Seconds until the next attempt is allowed: 2 s after the last one, plus 10 s per failure up to
        2 min, plus 100-200 ms of jitter (nats-server's calculateRetryBackoff)."""
        if not self.last_attempt:
            return 0.0
        back = RETRY_THRESHOLD_S + (min(10.0 * self.fails, 120.0) if self.fails else 0.0)
        left = self.last_attempt + back - time.monotonic()
        return left + 0.1 + random.random() * 0.1 if left > 0 else 0.0

    def setup(self) -> None:
        """Ask the origin for a consumer from the next sequence this stream needs."""
        if self.closed or self.pending:
            return
        wait = self._wait()
        if wait > 0:
            self.schedule(wait)
            return
        if self._timer is not None:  # an attempt scheduled earlier is this one
            self._timer.cancel()
            self._timer = None
        self.cancel()
        ic = self._ic
        now = time.monotonic()
        self.last_attempt = now
        if self.durable:
            self._reset_durable(now)
            return
        kind = "M" if self.mirror else "S"
        deliver = f"{self.deliver_prefix}.{kind}.{_token()}" if self.deliver_prefix else f"$JS.{kind}.{_token()}"
        reply = f"$JSC.R.{_token()}"
        config: dict[str, Any] = {}
        config.update(self._start())
        config.update({"ack_policy": "none", "ack_wait": ACK_WAIT_NS, "max_deliver": 1, "replay_policy": "instant",
                       "idle_heartbeat": HEARTBEAT_NS, "flow_control": True, "deliver_subject": deliver,
                       "inactive_threshold": int(HEALTH_S * 1e9), "num_replicas": 0, "direct": True})
        subject = f"{self.api}.CONSUMER.CREATE.{self.name}"
        if len(self.filters) == 1:
            cname = f"{'mir' if self.mirror else 'src'}-{_token()}"
            config["name"] = cname
            config["filter_subject"] = self.filters[0]
            subject = f"{subject}.{cname}.{self.filters[0]}"
        elif self.filters:
            config["filter_subjects"] = self.filters
        body = _encode({"stream_name": self.name, "config": config, "action": ""})
        self.reply_sub = ic.subscribe(reply, self._on_response)
        self.deliver_subs.append(ic.subscribe(deliver, self._on_deliver, batch=self._on_batch,
                                                 framed=self._on_framed))
        self.pending = True
        self.deadline = now + RESPONSE_WAIT_S
        if not ic.publish(subject, body, reply) and self.pending and self.reply_sub is not None:
            # nobody listens on the API prefix: the origin's domain is unreachable (for now)
            self.cancel()
            link_up = self.stream.js.link_up_at
            if link_up and now - link_up < LINK_GRACE_S:
                self.last_attempt = 0.0
                self.schedule(0.5)  # the hub's interest is on its way after a link came up
                return
            self._failed(None, f"no responders on {self.api}")

    def _reset_durable(self, now: float) -> None:
        """The user named a durable on the origin: it is reset to just above its ack floor (what this stream
        confirmed through flow control), as nats-server asks with `CONSUMER.RESET`, and its deliveries
        are taken on its own deliver subject. A source sends its origin's identity as nats-server does."""
        ic = self._ic
        reply = f"$JSC.R.{_token()}"
        subject = f"{self.api}.CONSUMER.RESET.{self.name}.{self.durable['name']}"
        hdr = None if self.mirror else make_headers([("Nats-Stream-Identity", self.ident)])
        # its deliveries are taken only once the reset is answered (what came before it is from before it)
        self.reply_sub = ic.subscribe(reply, self._on_response)
        self.pending = True
        self.deadline = now + DURABLE_RESPONSE_WAIT_S
        if not ic.publish(subject, b"", reply, hdr=hdr) and self.pending and self.reply_sub is not None:
            self.cancel()
            self._failed(None, f"no responders on {self.api}")

    def _start(self) -> dict[str, Any]:
        """Where the consumer starts: after what is stored, else where the config says (§8.2)."""
        cfg = self.cfg
        store = self.stream.store
        if self.mirror:
            last = store.last_seq
            if last > 0:
                return {"deliver_policy": "by_start_sequence", "opt_start_seq": last + 1}
        elif self.sseq > 0:
            return {"deliver_policy": "by_start_sequence", "opt_start_seq": self.sseq + 1}
        if cfg.get("opt_start_seq"):
            return {"deliver_policy": "by_start_sequence", "opt_start_seq": cfg["opt_start_seq"]}
        if self.mirror:
            if cfg.get("opt_start_time"):
                return {"deliver_policy": "by_start_time", "opt_start_time": cfg["opt_start_time"]}
            return {"deliver_policy": "all"}
        # a source with no position of its own: not before what this stream holds (trySetupSourceConsumer)
        last = rfc3339ns(store.last_ts) if store.msgs and store.last_ts else ""
        start = cfg.get("opt_start_time")
        if start:
            try:
                later = bool(last) and parse_rfc3339(start) < store.last_ts
            except ValueError:
                later = False
            return {"deliver_policy": "by_start_time", "opt_start_time": last if later else start}
        if store.first_seq > 1 and last:
            return {"deliver_policy": "by_start_time", "opt_start_time": last}
        return {"deliver_policy": "all"}

    def _failed(self, err: dict[str, Any] | None, why: str) -> None:
        self.fails += 1
        if err is not None:
            self.err = err
        # one line per change of reason, not one per attempt
        if why != self._warned:
            self._warned = why
            log.warning("JetStream %s '%s > %s' of '%s': %s; retrying", "mirror" if self.mirror else "source",
                        self.stream.account.name, self.stream.name, self.name, why)
        self.schedule(self._wait())

    def _on_response(self, sub: Any, subject: str, reply: str, hdr: bytes | None, payload: bytes) -> None:
        if sub is not self.reply_sub or self.closed:
            return
        self._ic.unsubscribe(sub)
        self.reply_sub = None
        self.pending = False
        try:
            resp = _decode(payload)
        except Exception:
            resp = {}
        if not isinstance(resp, dict):
            resp = {}
        err = resp.get("error")
        info_cfg = resp.get("config")
        if err or not isinstance(info_cfg, dict) or not resp.get("name"):
            self.cancel()
            if not err:
                key = "JSMirrorConsumerSetupFailedErrF" if self.mirror else "JSSourceConsumerSetupFailedErrF"
                err = api_error(key, err="invalid consumer create response").to_dict()
            self._failed(err, f"consumer create failed: {err.get('description')} ({err.get('err_code')})")
            return
        if self.durable and info_cfg.get("ack_policy") != "flow_control":
            self.cancel()
            err = api_error("JSMirrorConsumerRequiresAckFCErr" if self.mirror
                            else "JSSourceConsumerRequiresAckFCErr").to_dict()
            self._failed(err, f"consumer reset failed: {err['description']}")
            return
        self.cname = resp["name"]
        deliver = self.durable.get("deliver_subject") or "" if self.durable else info_cfg.get("deliver_subject") or ""
        if deliver and not any(s.subject == deliver for s in self.deliver_subs):
            self.deliver_subs.append(self._ic.subscribe(deliver, self._on_deliver, batch=self._on_batch,
                                                       framed=self._on_framed))
        delivered = int((resp.get("delivered") or {}).get("stream_seq") or 0)
        store = self.stream.store
        if self.mirror:
            if store.last_seq < delivered:
                # the origin starts past what we hold: its messages before that are gone
                store.skip_to(delivered + 1)
            self.sseq = max(delivered, store.last_seq)
        else:
            ident = get_header(hdr, "Nats-Stream-Identity") or "" if hdr else ""
            if ident and self.ident and ident != self.ident:
                # the origin stream was deleted and created again: its sequences start over
                log.warning("JetStream source stream '%s' for stream '%s > %s' was recreated, resetting source "
                            "state", self.name, self.stream.account.name, self.stream.name)
                self.sseq = 0
                self.ident = ident
                self.retry()
                return
            self.ident = ident
            self.sseq = max(self.sseq, delivered)
        self.dseq = 0
        self.err = None
        self.heard = time.monotonic()
        if self.fails or self._warned:
            log.info("JetStream %s '%s > %s' of '%s' is syncing again", "mirror" if self.mirror else "source",
                     self.stream.account.name, self.stream.name, self.name)
        self.fails = 0
        self._warned = ""
        early, self._early = self._early, []
        for args in early:
            self._on_deliver(*args)

    def check(self, now: float) -> None:
        """The health check: no answer to a create in time, or no heartbeat for 5 s."""
        if self.closed:
            return
        if self.pending:
            if now > self.deadline:
                self.cancel()
                self._failed(None, "no response to the consumer create request")
            return
        if self.cname and now - self.heard > STALL_S:
            self.retry()

    # ------------------------------------------------------------------ deliveries

    def _on_deliver(self, sub: Any, subject: str, reply: str, hdr: bytes | None, payload: bytes) -> None:
        if self.closed or sub not in self.deliver_subs:
            return
        if self.pending:
            # the origin may deliver before its create response arrives (they take different paths
            # there): kept, and taken once the response names the consumer
            if len(self._early) < EARLY_MAX:
                self._early.append((sub, subject, reply, hdr, payload))
            return
        if not payload and hdr and hdr.startswith(b"NATS/1.0 100 "):
            self._control(reply, hdr)
            return
        info = parse_ack_reply(reply)
        if info is None:
            return
        cname, dc, sseq, dseq, ts, pending = info
        if cname != self.cname or dc > 1:
            return  # an earlier consumer's, or a redelivery
        self.heard = time.monotonic()
        self.last_ns = time.time_ns()
        self.taken_ts = ts
        if self.mirror:
            self._mirror_msg(subject, hdr, payload, sseq, dseq, ts, pending)
        else:
            self._source_msg(subject, reply, hdr, payload, sseq, dseq, pending)

    def _on_batch(self, sub: Any, routed: bytes, msgs: list[Message]) -> None:
        """A run of deliveries (`Receiver.deliver_routed_batch`: a backlog drains in runs of hundreds): what
        `_on_deliver` does for each in turn, with the messages stored in one call (`Stream.store_synced_run`)
        before anything else happens, a flow control answer or a recreate included. Anything but a plain
        delivery of the current consumer goes through `_on_deliver` after what came before it is stored."""
        if self.closed or sub not in self.deliver_subs:
            return
        if len(msgs) > 1 and not self.pending and self._take_whole(msgs):
            return
        rows: list[tuple[str, bytes, bytes, int, int, str]] = []
        marks: list[tuple[int, int]] = []  # (sseq, dseq) before each row: where a failed store leaves them
        cname = self.cname.encode()
        mirror = self.mirror
        transforms = self.transforms
        p = self._iparts
        ident = f" {self.ident}" if self.ident else ""
        took = False  # a delivery of the current consumer came (contact, for the health check)
        pending_b = b""  # the origin's pending count after the last message taken
        names: dict[bytes, str] = {}  # subjects decoded (a backlog repeats a few)
        ts = 0
        # the position in locals while only messages are taken; written back before anything else runs
        sseq0, dseq0 = self.sseq, self.dseq
        for subject_b, reply_b, hdr, payload in msgs:
            t = reply_b.split(b".") if not self.pending and payload else ()
            n = len(t)
            o = 3 if n == 9 else 5 if n >= 11 else 0
            if not o or t[0] != b"$JS" or t[1] != b"ACK" or t[o] != cname:
                # a control message, an earlier consumer's, one of another shape or before the create
                # response: on its own, in order
                self.sseq, self.dseq = sseq0, dseq0
                if rows and not self._store_rows(rows, marks):
                    return
                rows, marks = [], []
                self._on_deliver(sub, subject_b.decode("utf-8", "surrogateescape"),
                                 reply_b.decode("utf-8", "surrogateescape"), hdr, payload)
                if self.closed or sub not in self.deliver_subs:
                    return
                sseq0, dseq0 = self.sseq, self.dseq
                cname = self.cname.encode()
                ident = f" {self.ident}" if self.ident else ""
                continue
            if t[o + 1] != b"1":
                # a redelivery (ack none: never expected), or one of another shape
                if not t[o + 1].isdigit() or int(t[o + 1]) > 1:
                    continue
            try:
                sseq, dseq, ts = int(t[o + 2]), int(t[o + 3]), int(t[o + 4])
            except ValueError:
                continue
            if not t[o + 5].isdigit():
                continue
            took = True
            if sseq <= sseq0:
                if dseq == dseq0 + 1:
                    dseq0 = dseq
                continue
            if dseq != dseq0 + 1 and (not mirror or sseq != sseq0 + 1):
                # missed deliveries: what came before is stored, then the consumer is recreated after it
                self.sseq, self.dseq = sseq0, dseq0
                if rows and not self._store_rows(rows, marks):
                    return
                self.retry()
                return
            marks.append((sseq0, dseq0))
            sseq0, dseq0 = sseq, dseq
            pending_b = t[o + 5]
            subject = names.get(subject_b)
            if subject is None:
                subject = names[subject_b] = subject_b.decode("utf-8", "surrogateescape")
            if mirror:
                new_hdr = _strip(hdr, False) if hdr else b""
                msg_id = ""
            else:
                line = f"Nats-Stream-Source: {p[0]} {sseq} {p[1]} {p[2]} {subject}{ident}\r\n\r\n".encode()
                base = _strip(hdr, True)
                new_hdr = base[:-2] + line if base else b"NATS/1.0\r\n" + line
                msg_id = (get_header(hdr, "Nats-Msg-Id") or "") if hdr else ""
            for tr in transforms:
                if tr is not None and subject_matches(tr.src, subject):
                    subject = tr(subject)
                    break
            rows.append((subject, new_hdr, payload, ts if mirror else 0, sseq if mirror else 0, msg_id))
        self.sseq, self.dseq = sseq0, dseq0
        if took:
            self.heard = time.monotonic()
            self.last_ns = time.time_ns()
            self.taken_ts = ts
        if pending_b:
            pending = int(pending_b)
            self.lag = pending - 1 if pending else 0
        if rows:
            self._store_rows(rows, marks)

    def _take_whole(self, msgs: list[Message]) -> bool:
        """`_on_batch` for a run that is nothing but the current consumer's first deliveries of header-less
        messages right after what was taken (consumer sequences without a gap, origin sequences past the last
        taken and rising, for a mirror without a gap): its checks made once for the whole run on columns (the
        ack replies joined and split once, C-level list operations), the run stored in one call. False, with
        nothing done, for any other run: the loop takes it message by message."""
        n = len(msgs)
        subjects_b, replies, hdrs, payloads = zip(*msgs, strict=True)
        if hdrs.count(None) != n or b"" in payloads:
            return False
        k = replies[0].count(b".") + 1  # tokens of an ack reply: 9 (v1) or 11 and more (v2)
        o = 3 if k == 9 else 5 if k >= 11 else 0
        if not o or list(map(bytes.count, replies, repeat(b".", n))).count(k - 1) != n:
            return False
        # every reply begins as the first does up to its delivery count (`$JS.ACK.<stream>.<consumer>.1.` and
        # the v2 tokens): that part checked once, only the numbers after it split
        head = replies[0].split(b".", o + 2)
        if not self._first_delivery(head, o):
            return False
        prefix = replies[0][: len(replies[0]) - len(head[-1])]
        if not all(map(bytes.startswith, replies, repeat(prefix, n))):
            return False
        k -= o + 2
        t = b".".join(map(bytes.removeprefix, replies, repeat(prefix, n))).split(b".")
        pending = t[3::k]
        if b"" in pending or not b"".join(pending).isdigit():
            return False
        try:
            sseqs = list(map(int, t[0::k]))
            dseqs = list(map(int, t[1::k]))
            tss = list(map(int, t[2::k]))
        except ValueError:
            return False
        if not self._follows(sseqs, dseqs):
            return False
        self._store_whole(subjects_b, sseqs, tss, int(pending[-1]), list(payloads))
        return True

    def _on_framed(self, sub: Any, routed: bytes, replies: list[bytes], payloads: list[bytes]) -> bool:
        """`_take_whole` for a run as it crossed a leafnode (`deliver_framed_run`: replies `<ack reply>@<subject>`):
        one regex split of the joined replies checks every one against the current consumer's first-delivery
        prefix and gives its numbers and subject, five objects a message and no message tuples; the sequence
        checks are `_take_whole`'s. False, with nothing done, for any other run (the caller splits it into
        messages for `_on_batch`)."""
        n = len(replies)
        if n < 2 or self.closed or self.pending or sub not in self.deliver_subs or b"" in payloads:
            return False
        pat = self._framed_split(replies[0])
        if pat is None:
            return False
        joined = b" " + b" ".join(replies)
        if joined.count(b" ") != n:  # a reply with a space (none from a leafnode's parser) is no delivery
            return False
        parts = pat.split(joined)
        if len(parts) != 5 * n + 1 or parts[0]:
            return False
        subjects_b = parts[5::5]
        if b"" in subjects_b:
            return False
        sseqs = list(map(int, parts[1::5]))
        if not self._follows(sseqs, list(map(int, parts[2::5]))):
            return False
        self._store_whole(subjects_b, sseqs, list(map(int, parts[3::5])), int(parts[-2]), payloads)
        return True

    def _follows(self, sseqs: list[int], dseqs: list[int]) -> bool:
        """A run's sequences come right after what was taken: consumer sequences without a gap, origin
        sequences past the last taken and rising (for a mirror, without a gap)."""
        n = len(sseqs)
        first = sseqs[0]
        if first <= self.sseq or dseqs != list(range(self.dseq + 1, self.dseq + n + 1)):
            return False
        if self.mirror:
            return sseqs == list(range(first, first + n))
        return all(map(operator.lt, sseqs, islice(sseqs, 1, None)))

    def _first_delivery(self, head: list[bytes], o: int) -> bool:
        """Whether the ack reply split into `head` (the consumer's name at token `o`) is the current
        consumer's first delivery of a message."""
        return head[0] == b"$JS" and head[1] == b"ACK" and head[o] == self.cname.encode() and head[o + 1] == b"1"

    def _framed_split(self, reply: bytes) -> re.Pattern[bytes] | None:
        """The splitter of `_on_framed` for runs whose first reply is `reply`: ` <prefix><sseq>.<dseq>.<ts>.
        <pending>[.<token>...]@` where the prefix is the current consumer's up to a delivery count of 1 (as
        `_take_whole` checks it); kept while the consumer and the reply's shape stay. None: no such reply."""
        k = self._framed
        if k is not None and k[0] == self.cname and reply.startswith(k[1]):
            return k[2]
        at = reply.find(b"@")
        if at <= 0:
            return None
        head = reply[:at].split(b".")
        t = len(head)
        o = 3 if t == 9 else 5 if t >= 11 else 0
        if not o or not self._first_delivery(head, o):
            return None
        prefix = b".".join(head[: o + 2]) + b"."
        pat = re.compile(b" " + re.escape(prefix) + rb"([0-9]+)\.([0-9]+)\.([0-9]+)\.([0-9]+)"
                         + rb"\.[^ .@]*" * (t - o - 6) + b"@")
        self._framed = (self.cname, prefix, pat)
        return pat

    def _store_whole(self, subjects_b: Sequence[bytes], sseqs: list[int], tss: list[int], last_pending: int,
                     data: list[bytes]) -> None:
        """The checked run of `_take_whole` or `_on_framed` stored in one call (`Stream.store_synced_whole`),
        or row by row when this stream checks message by message."""
        n = len(sseqs)
        sseq0, dseq0 = self.sseq, self.dseq
        first = sseqs[0]
        names: dict[bytes, str] = {}  # a backlog repeats a few subjects: each decoded and transformed once
        stored_as: dict[bytes, str] = {}
        for subject_b in dict.fromkeys(subjects_b):
            subject = stored = subject_b.decode("utf-8", "surrogateescape")
            for tr in self.transforms:
                if tr is not None and subject_matches(tr.src, subject):
                    stored = tr(subject)
                    break
            names[subject_b] = subject
            stored_as[subject_b] = stored
        subjects = list(map(stored_as.__getitem__, subjects_b))
        if self.mirror:
            new_hdrs = [b""] * n
            stamps = tss
        else:
            p = self._iparts
            ident = f" {self.ident}" if self.ident else ""
            new_hdrs = [f"NATS/1.0\r\nNats-Stream-Source: {p[0]} {sseq} {p[1]} {p[2]} {subject}{ident}\r\n\r\n".encode()
                        for sseq, subject in zip(sseqs, map(names.__getitem__, subjects_b), strict=True)]
            stamps = [0] * n
        self.sseq, self.dseq = sseqs[-1], dseq0 + n
        self.heard = time.monotonic()
        self.last_ns = time.time_ns()
        self.taken_ts = tss[-1]
        self.lag = last_pending - 1 if last_pending else 0
        try:
            if self.stream.store_synced_whole(subjects, new_hdrs, data, stamps, first if self.mirror else 0):
                return
        except (StoreError, ValueError) as e:
            self.sseq, self.dseq = sseq0, dseq0
            self._store_failed(e)
            return
        # this stream checks message by message (limits, room): the row path, which stops at one that fails
        seqs = sseqs if self.mirror else [0] * n
        rows = list(zip(subjects, new_hdrs, data, stamps, seqs, repeat("", n), strict=True))
        marks = [(sseq0, dseq0), *zip(sseqs, range(dseq0 + 1, dseq0 + n + 1), strict=True)]
        self._store_rows(rows, marks)

    def _store_rows(self, rows: list[tuple[str, bytes, bytes, int, int, str]], marks: list[tuple[int, int]]) -> bool:
        """Store a run `_on_batch` took; False when one could not be stored: the position goes back to
        before it and the consumer is asked for again later from there."""
        done, err = self.stream.store_synced_run(rows)
        if err is None:
            return True
        self.sseq, self.dseq = marks[done]
        self._store_failed(err)
        return False

    def _control(self, reply: str, hdr: bytes) -> None:
        self.heard = time.monotonic()
        self.last_ns = time.time_ns()
        if reply:
            # a flow control request: answered in order with what was processed, which an origin consumer
            # with `ack_policy: flow_control` takes as the ack of all of it (nats-server's handleFlowControl)
            self._ic.publish(reply, b"", hdr=b"NATS/1.0\r\nNats-Last-Consumer: %d\r\nNats-Last-Stream: %d\r\n\r\n"
                             % (self.dseq, self.sseq))
            return
        last = get_header(hdr, "Nats-Last-Consumer")
        if last and last.isdigit() and int(last) > 0 and int(last) != self.dseq and self.cname:
            self.retry()  # the origin delivered what never came
            return
        stalled = get_header(hdr, "Nats-Consumer-Stalled")
        if stalled:
            self._ic.publish(stalled, b"")

    def _mirror_msg(self, subject: str, hdr: bytes | None, payload: bytes, sseq: int, dseq: int, ts: int,
                    pending: int) -> None:
        if sseq <= self.sseq:
            if dseq == self.dseq + 1:
                self.dseq += 1
            return
        if sseq != self.sseq + 1 and dseq != self.dseq + 1:
            self.retry()  # missed deliveries
            return
        # sseq + 1, or a jump the origin made itself (deleted or expired messages there): kept as gaps
        osseq, odseq = self.sseq, self.dseq
        self.dseq, self.sseq = dseq, sseq
        self.lag = pending - 1 if pending else 0
        for tr in self.transforms:
            if tr is not None and subject_matches(tr.src, subject):
                subject = tr(subject)
                break
        try:
            self.stream.store_synced(subject, _strip(hdr, False), payload, ts, seq=sseq)
        except (JSApiError, StoreError, ValueError) as e:
            self.sseq, self.dseq = osseq, odseq
            self._store_failed(e)

    def _source_msg(self, subject: str, reply: str, hdr: bytes | None, payload: bytes, sseq: int, dseq: int,
                    pending: int) -> None:
        if sseq <= self.sseq:
            if dseq == self.dseq + 1:
                self.dseq += 1
            return
        if dseq != self.dseq + 1:
            self.retry()
            return
        osseq, odseq = self.sseq, self.dseq
        self.dseq, self.sseq = dseq, sseq
        self.lag = pending - 1 if pending else 0
        p = self._iparts
        value = f"{p[0]} {sseq} {p[1]} {p[2]} {subject}"
        if self.ident:
            value += f" {self.ident}"
        base = _strip(hdr, True)
        line = b"Nats-Stream-Source: " + value.encode() + b"\r\n\r\n"
        new_hdr = base[:-2] + line if base else b"NATS/1.0\r\n" + line
        for tr in self.transforms:
            if tr is not None and subject_matches(tr.src, subject):
                subject = tr(subject)
                break
        try:
            self.stream.store_synced(subject, new_hdr, payload, 0, msg_id=get_header(hdr, "Nats-Msg-Id") or "")
        except (JSApiError, StoreError, ValueError) as e:
            self.sseq, self.dseq = osseq, odseq
            self._store_failed(e)

    def _store_failed(self, e: Exception) -> None:
        """A message that could not be stored (limits, a full disk): asked for again later, from the
        sequence after the last stored one."""
        why = f"storing failed: {e}"
        if why != self._warned:
            self._warned = why
            log.warning("JetStream %s '%s > %s': %s", "mirror" if self.mirror else "source",
                        self.stream.account.name, self.stream.name, e)
        self.cancel()
        self.fails += 1
        self.schedule(self._wait())

    # ------------------------------------------------------------------ views

    def info(self) -> dict[str, Any]:
        """StreamSourceInfo as nats-server reports it."""
        d: dict[str, Any] = {"name": self.name}
        if self.external:
            d["external"] = {"api": self.external.get("api") or "", "deliver": self.external.get("deliver") or ""}
        d["lag"] = self.lag
        if not self.mirror and self.sseq:
            d["seq"] = self.sseq
        d["active"] = time.time_ns() - self.last_ns if self.last_ns else -1
        if self.err:
            d["error"] = self.err
        if self.cfg.get("filter_subject"):
            d["filter_subject"] = self.cfg["filter_subject"]
        if self.cfg.get("subject_transforms"):
            d["subject_transforms"] = self.cfg["subject_transforms"]
        return d


class StreamSync:
    """A stream's mirror or sources, and the ticker that checks their health."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        cfg = stream.config
        self.mirror: SourceSync | None = SourceSync(stream, cfg["mirror"], True) if cfg.get("mirror") else None
        self.sources = [SourceSync(stream, s, False) for s in cfg.get("sources") or []]
        self._task: asyncio.Task[None] | None = None

    def all(self) -> list[SourceSync]:
        return [self.mirror] if self.mirror is not None else self.sources

    def start(self) -> None:
        if self.sources:
            self._resume_sources()
        loop = asyncio.get_running_loop()
        # on the next turn: at start, after every stream is restored (a local origin may come later)
        for s in self.all():
            s.schedule(0)
        self._task = loop.create_task(self._tick())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        for s in self.all():
            s.close()

    def link_up(self) -> None:
        """A leafnode link came up: every mirror and source not syncing starts over now."""
        for s in self.all():
            # across a link the old consumer may be gone (a restarted hub) or have lost deliveries while
            # the link was down: start over from the next sequence needed
            if s.external or not s.active():
                s.retry(now=True)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            for s in self.all():
                try:
                    s.check(now)
                except Exception as e:  # one sync's trouble must not stop the others' checks
                    log.error("JetStream: checking the sync of stream %s failed: %s", self.stream.name, e)

    def _resume_sources(self) -> None:
        """Where each source resumes: the origin sequence of the last message it brought, read back from
        the `Nats-Stream-Source` headers, newest first (nats-server's startingSequenceForSources)."""
        by_iname = {s.iname: s for s in self.sources}
        left = set(by_iname)
        store = self.stream.store
        seq = store.last_seq
        n = 0
        while left and seq >= store.first_seq and seq > 0 and n < SOURCE_SCAN_LIMIT:
            m = store.load_prev(seq)
            if m is None:
                break
            seq = m.seq - 1
            n += 1
            value = get_header(m.hdr, "Nats-Stream-Source") if m.hdr else None
            if not value:
                continue
            f = value.split(" ")
            if len(f) < 4:
                continue
            iname = f"{f[0]} {f[2]} {f[3]}"
            s = by_iname.get(iname)
            if s is None or iname not in left:
                continue
            left.discard(iname)
            try:
                s.sseq = int(f[1])
            except ValueError:
                continue
            if len(f) >= 6:
                s.ident = f[5]

    def info(self) -> dict[str, Any]:
        if self.mirror is not None:
            return {"mirror": self.mirror.info()}
        return {"sources": [s.info() for s in self.sources]}
