"""JetStream consumers: delivery (push and pull), acks, redelivery, persisted state (config rules are in
consumer_config.py).

A consumer walks its stream from `sseq` in order. Delivery is driven by events (new message, pull
request, ack, timer) and runs synchronously on the loop: each step delivers as many messages as the
consumer may (interest, max_ack_pending, waiting requests), without a per-message await.
"""

from __future__ import annotations

import asyncio
import itertools
import operator
import os
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import msgspec

from edged.goformat import ZERO_TIME, go_duration, parse_rfc3339, rfc3339ns
from edged.jetstream.consumer_config import DEFAULT_ACK_WAIT
from edged.jetstream.wire.gojson import syntax_error
from edged.routing.headers import get_header, make_headers
from edged.routing.receiver import Message, Receiver, Subscription
from edged.routing.subjects import subject_is_subset, subject_matches
from edged.settings.config import parse_duration
from storage.base import StoredMsg

if TYPE_CHECKING:
    from edged.jetstream.stream import Stream

NS = 1_000_000_000
# flow control, as nats-server: a window of unanswered bytes that starts at 1/16 of the limit and doubles on
# every answer; the request goes out past half the window, delivery stops once it is full
FC_MAX_PENDING = 32 * 1024 * 1024
FC_START_WINDOW = FC_MAX_PENDING // 16
READ_AHEAD_MAX = 512  # messages a consumer reads ahead at most (memory bound)
BATCH_FLUSH = 256 * 1024  # bytes of messages handed to a leafnode at once (with ~64 per message)
# bytes of a batch written to a client at once while the rest are built: nats-server's writer holds a
# client's output while a producer is still adding to it, until this much is pending (client.go, writeLoop,
# maxBufSize), so a small batch leaves in one write and a client's pending limits see it whole
WRITE_AT = 64 * 1024

_enc = msgspec.json.Encoder().encode
_dec = msgspec.json.Decoder()



U64_MAX = 2**64 - 1
_FC_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_decode = bytes.decode


def _header_int(hdr: bytes, name: str) -> int:
    """A header's integer value (nats-server's parseInt64: -1 when absent or not a number)."""
    v = get_header(hdr, name)
    return int(v) if v and v.isascii() and v.isdigit() else -1


def _ack_num(tok: str) -> int:
    """A number of an ack subject as nats-server reads it: anything but decimal digits is -1, which it
    then holds as an unsigned 64-bit value (so a NAK of `x` is answered, an ack of `x` is "beyond")."""
    return int(tok) if tok.isascii() and tok.isdigit() else U64_MAX


def _ack_seqs(toks: list[str]) -> tuple[int, int] | None:
    """(stream seq, consumer seq) from the tokens of `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>
    .<ts>.<pending>`; None for a subject of another shape (nats-server subscribes to exactly these nine
    tokens: see `Consumer._wrong_shape`)."""
    if len(toks) != 9:
        return None
    try:
        return int(toks[5]), int(toks[6])
    except ValueError:
        return _ack_num(toks[5]), _ack_num(toks[6])


# the fields of nats-server's pull request and their Go types (named in its type errors)
_PULL_FIELDS = {"expires": "time.Duration", "batch": "int", "max_bytes": "int", "no_wait": "bool",
                "idle_heartbeat": "time.Duration", "group": "string", "min_pending": "int64",
                "min_ack_pending": "int64", "id": "string", "priority": "int"}
_JSON_KIND = {str: "string", bool: "bool", list: "array", dict: "object"}


def _pull_fields(body: bytes) -> dict[str, Any] | str:
    """A JSON pull request's known fields, or the error nats-server puts after "Bad Request - ": the text
    of Go's syntax error (see gojson) or type error. Keys match case-insensitively and a later key wins, as
    in Go's decoder."""
    try:
        r = _dec.decode(body)
    except msgspec.DecodeError:
        return syntax_error(body) or "invalid JSON"
    if not isinstance(r, dict):
        return "invalid JSON"
    out: dict[str, Any] = {}
    for k, v in r.items():
        name = k if k in _PULL_FIELDS else k.lower()
        gotype = _PULL_FIELDS.get(name)
        if gotype is None or v is None:
            continue
        if gotype == "string":
            ok = type(v) is str
        elif gotype == "bool":
            ok = type(v) is bool
        else:
            ok = type(v) is int and -(2**63) <= v < 2**63
        if not ok:
            if type(v) in (int, float) and gotype != "string" and gotype != "bool":
                # a number that is no Go integer: named with its literal text (1.5, 1e2, ...)
                kind = "number " + _number_text(body, k)
            else:
                kind = _JSON_KIND.get(type(v), "number")
            return f"json: cannot unmarshal {kind} into Go struct field .{name} of type {gotype}"
        out[name] = v
    return out


def _number_text(body: bytes, key: str) -> str:
    """The literal text of the number given for `key` in `body` (for Go's type error)."""
    text = body.decode(errors="replace")
    i = text.find(msgspec.json.encode(key).decode())
    if i < 0:
        return ""
    j = text.find(":", i) + 1
    while j < len(text) and text[j] in " \t\r\n":
        j += 1
    k = j
    while k < len(text) and text[k] in "+-.0123456789eE":
        k += 1
    return text[j:k]


_REPLY = operator.itemgetter(1)  # of a Message
_RUN_HDR = operator.itemgetter(1)  # of a read_run row
_RUN_DATA = operator.itemgetter(2)
_RUN_SUBJECT = operator.itemgetter(0)
_RUN_TS = operator.itemgetter(3)


def _digits(lo: int, hi: int) -> int:
    """Decimal digits of all the integers lo..hi (0 <= lo; none when hi < lo): flow control counts the bytes
    of ack replies built from them without building them."""
    total = 0
    width, top = 1, 10
    while lo <= hi:
        end = min(hi, top - 1)
        if end >= lo:
            total += (end - lo + 1) * width
            lo = end + 1
        width += 1
        top *= 10
    return total


class SubjectBytes(dict[str, bytes]):
    """Stream subjects as the bytes a frame needs, encoded once: a hit is a plain dict lookup, a miss
    encodes (bounded: cleared at 4096 subjects)."""

    def __missing__(self, subject: str) -> bytes:
        if len(self) >= 4096:
            self.clear()
        b = self[subject] = subject.encode("utf-8", "surrogateescape")
        return b


class PullRequest:
    __slots__ = ("reply", "batch", "max_bytes", "expires", "no_wait", "heartbeat", "sent_bytes", "hb_handle",
                 "received", "asked", "sent_at", "group", "pin", "min_pending", "min_ack_pending", "priority")

    def __init__(self, reply: str, batch: int, max_bytes: int, expires: float, no_wait: bool, heartbeat: int) -> None:
        self.reply = reply
        self.batch = batch  # what is left of it
        self.asked = batch
        self.max_bytes = max_bytes
        self.expires = expires  # monotonic deadline, 0 = none
        self.no_wait = no_wait
        self.heartbeat = heartbeat
        self.sent_bytes = 0
        self.hb_handle: asyncio.TimerHandle | None = None
        self.received = time.time_ns()
        self.sent_at = 0  # when a message last went to it: its heartbeat timer restarts from there
        # a priority group consumer's request: its group ("" in a plain number request: None), the pin id it
        # has, the overflow thresholds, its priority (0 first)
        self.group: str | None = None
        self.pin = ""
        self.min_pending = self.min_ack_pending = self.priority = 0


class Consumer:
    def __init__(self, stream: Stream, name: str, config: dict[str, Any], created: int,
                 state: dict[str, Any] | None = None, durable_store: bool = True) -> None:
        self.stream = stream
        self.js = stream.js
        self.reading = stream.js.server.reading
        self.name = name
        self.config = config
        self.created = created
        # `direct`: a consumer another server's mirror or source made (kept out of the stream's consumer
        # count and the consumer listings, as nats-server does). Unlike nats-server, edged stores it like
        # any other: after a restart (kill -9 included) it goes on where it stopped, with contiguous
        # consumer sequences, to the hub's mirror that still listens, instead of that mirror waiting for
        # its 10 s stall check to ask again; one nobody listens to goes after its inactive threshold.
        self.direct = bool(config.get("direct"))
        self.persist = durable_store and not config.get("mem_storage") and stream.config["storage"] == "file"
        self.ic = stream.jsa.internal
        self.loop = asyncio.get_event_loop()
        self.closed = False
        # state
        self.dseq = 0  # last delivered consumer sequence
        self.sseq = 0  # last delivered stream sequence
        self.afloor_c = 0
        self.afloor_s = 0
        self.pending: dict[int, list[int]] = {}  # sseq -> [dseq, delivered_ns]
        self.rdc: dict[int, int] = {}  # sseq -> deliveries
        self.redeliver: deque[int] = deque()
        self.waiting: deque[PullRequest] = deque()
        self.last_active = 0  # any sign of life (deliveries, acks, requests): inactivity and heartbeats
        self.last_delivered = self.last_ack = 0  # what consumer info reports, as nats-server
        self.fc_pending: str | None = None  # reply subject of the unanswered flow control request
        self.fc_bytes = 0  # bytes delivered and not yet covered by an answered request
        self.fc_sz = 0  # what the answer to fc_pending covers
        self.fc_window = FC_START_WINDOW
        self.fc_stalled = False  # the window is full: nothing more until an answer
        self._head_ok: PullRequest | None = None  # the first waiting request, known to have a listener
        self._ack_sub: Any = None
        self._fc_sub: Any = None
        # the stream's last sequence when a delivery run last found nothing more for this consumer: where
        # nats-server's position stands then (its heartbeats' Nats-Last-Stream), past what the filter skips
        self._eof_at = 0
        self._dirty = False
        self._kick_scheduled = False
        self._hb_handle: asyncio.TimerHandle | None = None
        self._inactive_handle: asyncio.TimerHandle | None = None
        self._expire_handle: asyncio.Handle | None = None  # see _arm_expiry
        self._expire_at = 0.0
        self._pace_handle: asyncio.TimerHandle | None = None
        self._pace_last_ts = 0
        self._pace_sent_at = 0.0
        self._rl_tokens = 0.0  # rate_limit_bps: bytes that may go now (a token bucket, as nats-server's)
        self._rl_at = 0.0
        self.paused_until = 0
        self.pin_id = ""  # pinned_client: the pin of the client now served, when it was given, its timer
        self.pinned_ts = 0
        self._pin_timer: asyncio.TimerHandle | None = None
        self._pin_fresh: PullRequest | None = None  # the request the pin was just given to
        self._np: int | None = None  # cached num_pending; None = count again
        # read-ahead of the next messages after sseq: store.read_rows tuples (seq, subject, hdr, data, ts...)
        self._buf: deque[Any] = deque()
        self._prefetching = False
        self._last_batch = 256  # how much a pull consumer's read-ahead reads
        self._redeliver_set: set[int] = set()
        self._apply_config()
        if state:
            self._load_state(state)
        else:
            self._initial_position()
        self._ackq: list[str] = []  # plain acks of the client read being processed (see ReadContext.defer)
        if self.ack != "none":
            # ack_policy none takes no acks at all: an ack with a reply gets "no responders", as from nats-server
            self._ack_sub = self.ic.subscribe(f"$JS.ACK.{stream.name}.{name}.>", self._on_ack, passive=True,
                                              empties=self._on_plain_acks)
            # every ack subject is new: let the router answer them from one memo entry
            self.ic.account.sublist.add_prefix(f"$JS.ACK.{stream.name}.{name}")
        if self.push and self.fc:
            # answers to flow control requests: subscribed (and so advertised over a leafnode) for as long
            # as the consumer lives, as nats-server does
            self._fc_sub = self.ic.subscribe(f"$JS.FC.{stream.name}.{name}.*", self._on_fc)
        self._ack_timer = self.loop.call_later(self._ack_check_interval(), self._check_acks)
        if self.push and self.hb:
            self._hb_handle = self.loop.call_later(self.hb / NS, self._heartbeat)
        self._arm_inactive()

    # ------------------------------------------------------------------ config and position

    def _apply_config(self) -> None:
        c = self.config
        self.push = bool(c.get("deliver_subject"))
        self.deliver_subject = c.get("deliver_subject") or ""
        self._dsubj_b = self.deliver_subject.encode("utf-8", "surrogateescape")
        self.ack = c["ack_policy"]
        self.ack_wait = c.get("ack_wait") or DEFAULT_ACK_WAIT
        self.max_deliver = c["max_deliver"]
        self.backoff = c.get("backoff") or []
        self.filters = c.get("filter_subjects") or ([c["filter_subject"]] if c.get("filter_subject") else [])
        self.flt: Any = self.filters[0] if len(self.filters) == 1 else (list(self.filters) or None)
        self._one_filter: str | None = self.filters[0] if len(self.filters) == 1 else None
        self.max_ack_pending = c.get("max_ack_pending") or 0
        self.max_waiting = c.get("max_waiting") or 0
        self.headers_only = bool(c.get("headers_only"))
        self.hb = c.get("idle_heartbeat") or 0
        self.fc = bool(c.get("flow_control"))
        self.inactive = c.get("inactive_threshold") or 0
        self.durable = bool(c.get("durable_name"))
        self.max_batch = c.get("max_batch") or 0
        self.max_expires = c.get("max_expires") or 0
        self.max_bytes_req = c.get("max_bytes") or 0
        self.rate_bps = int(c.get("rate_limit_bps") or 0)
        # nats-server lets a burst of the largest message the stream (or else the server) takes go unpaced
        mms = self.stream.max_msg_size
        self._rl_burst = float(mms if mms > 0 else self.js.server.opts.max_payload)
        self._rl_tokens, self._rl_at = self._rl_burst, time.monotonic()
        sf = str(c.get("sample_freq") or "").strip().rstrip("%")
        self.sample = min(100, max(0, int(sf))) / 100 if sf.isdigit() else 0.0
        self.replay_original = c["replay_policy"] == "original"
        # priority groups (pull only): the policy chooses which waiting request a message goes to
        self.policy = c.get("priority_policy") or ""
        self.groups = c.get("priority_groups") or []
        self.pinned_ttl = c.get("priority_timeout") or 0
        # what `_send_new` leaves to the per-message path: paced, headers-only delivery, the max_deliver
        # advisory a first delivery may already trigger, and a priority policy's choice
        self._fast = not (self.rate_bps or self.replay_original or self.headers_only
                          or (self.max_deliver == 1 and self.ack != "none") or self.policy)
        self._ack_prefix = f"$JS.ACK.{self.stream.name}.{self.name}.1.".encode()
        self._subj_b = SubjectBytes()
        pu = c.get("pause_until")
        self.paused_until = parse_rfc3339(pu) if pu else 0

    def _matches(self, subject: str) -> bool:
        f = self._one_filter
        if f is not None:  # the usual case, without a generator per message
            return subject_matches(f, subject)
        if not self.filters:
            return True
        return any(subject_matches(f, subject) for f in self.filters)

    def _initial_position(self) -> None:
        st = self.stream.store
        c = self.config
        dp = c["deliver_policy"]
        first = st.state().first_seq
        if dp == "all" or dp == "last_per_subject":
            start = first
        elif dp == "last":
            m = st.load_last(self.flt)
            start = m.seq if m is not None else st.last_seq + 1
        elif dp == "new":
            start = st.last_seq + 1
        elif dp == "by_start_sequence":
            start = max(int(c["opt_start_seq"]), first)
        else:  # by_start_time
            ns = parse_rfc3339(str(c["opt_start_time"]))
            m = st.load_next(first, self.flt)
            while m is not None and m.ts < ns:
                m = st.load_next(m.seq + 1, self.flt)
            start = m.seq if m is not None else st.last_seq + 1
        self.sseq = start - 1
        self.afloor_s = start - 1
        self._lps: list[int] | None = None
        if dp == "last_per_subject":
            seqs = []
            for subj in st.subject_counts(self.flt):
                m = st.load_last(subj)
                if m is not None:
                    seqs.append(m.seq)
            self._lps = sorted(seqs)
            if self._lps:
                # nats-server starts at the first of those: info shows delivered/ack floor just before it
                self.sseq = self.afloor_s = self._lps[0] - 1

    def _load_state(self, s: dict[str, Any]) -> None:
        self.dseq, self.sseq = s.get("d", [0, 0])
        self.afloor_c, self.afloor_s = s.get("a", [0, 0])
        self.pending = {int(k): list(v) for k, v in (s.get("p") or {}).items()}
        self.rdc = {int(k): int(v) for k, v in (s.get("r") or {}).items()}
        self._lps = None
        # what was pending when we stopped is redelivered once its ack_wait (or backoff, or NAK delay) has
        # run from its delivery, as nats-server does; acked stays acked
        if self.pending:
            self.loop.call_soon(self._scan_pending)

    def state_bytes(self) -> bytes:
        if self._ackq:
            self._drain_acks()
        # msgspec writes int keys as JSON strings itself: no str() copy of the pending map per save
        return _enc({"d": [self.dseq, self.sseq], "a": [self.afloor_c, self.afloor_s],
                     "p": self.pending, "r": self.rdc})

    def _save(self) -> None:
        """The state changed (deliveries, plain acks, removals): written with a later commit, encoded once
        however often it changed by then (`update_consumer_state_later`). What waits for the state on
        disk (a synchronous ack, a reset, a stop) writes it at once (`_flush_state`)."""
        if not self.persist or self.closed:
            return
        if not self._dirty:
            self._dirty = True
            try:
                self.stream.store.update_consumer_state_later(self.name, self._later_state)
            except Exception:
                pass

    def _later_state(self) -> bytes | None:
        if self.closed:
            return None
        if self._ackq:
            self._drain_acks()
        if not self._dirty:
            return None  # written since (_flush_state)
        self._dirty = False
        return self.state_bytes()

    def _flush_state(self) -> None:
        self._dirty = False
        if self.closed:
            return
        try:
            self.stream.store.update_consumer_state(self.name, self.state_bytes())
        except Exception:
            pass

    def update(self, cfg: dict[str, Any]) -> None:
        if self._ackq:
            self._drain_acks()
        self.config = cfg
        self._apply_config()
        if self.pin_id and (self.policy != "pinned_client" or not self.groups):
            self._drop_pin()  # no longer a pinned_client consumer (a new priority_timeout counts from the next request)
        self._buf.clear()
        self._np = None
        if self.persist:
            self.stream.store.put_consumer(self.name, _enc({"config": cfg, "created": self.created}), self.state_bytes())
        self.kick()

    def reset(self, seq: int) -> int:
        """`$JS.API.CONSUMER.RESET`: start over at `seq` (0: just above the ack floor) as nats-server's
        resetStartingSeq does: nothing pending or queued for redelivery, delivered and ack floor at
        `seq - 1`, consumer sequences from 1 again. A position below what the deliver policy allows is
        refused (ValueError with nats-server's reason). Returns the sequence delivery starts from."""
        if self._ackq:
            self._drain_acks()
        c = self.config
        dp = c["deliver_policy"]
        if seq == 0:
            seq = self.afloor_s + 1
        elif dp == "by_start_sequence":
            if seq < int(c.get("opt_start_seq") or 0):
                raise ValueError("below start seq")
        elif dp == "by_start_time":
            if seq < self.stream.seq_from_time(parse_rfc3339(str(c["opt_start_time"]))):
                raise ValueError("below start time")
        elif dp != "all":
            raise ValueError("not allowed")
        seq = max(seq, 1)
        self.pending.clear()
        self.rdc.clear()
        self.redeliver.clear()
        self._redeliver_set.clear()
        self.sseq, self.dseq = seq - 1, 0
        self.afloor_c, self.afloor_s = 0, seq - 1
        self.last_delivered = self.last_ack = 0
        self._lps = None
        self._eof_at = 0
        self.forget_read_ahead()
        if self.persist and not self.closed:
            self._flush_state()
        if self.stream.retention == "interest":
            self.stream.drop_acked(seq - 1)
        self.kick()
        return seq

    # ------------------------------------------------------------------ events from the stream

    def on_msg(self, seq: int, subject: str, row: tuple[Any, ...] | None = None) -> bool:
        """A message was stored; `row` is it as `read_rows` gives it (seq, subject, hdr, data, ts), when the
        stream has it at hand. Returns whether the filter takes it."""
        if self.filters and not self._matches(subject):
            return False  # as nats-server, which wakes only the consumers whose filter takes the message
        if self.closed:
            return True
        if self._np is not None and seq > self.sseq:
            self._np += 1
        if row is not None and self._lps is None:
            buf = self._buf
            if (buf[-1][0] == seq - 1 and len(buf) < READ_AHEAD_MAX) if buf else max(self.sseq, self._eof_at) == seq - 1:
                # it comes right after what this consumer has been through (delivered, found not its own, or
                # read ahead): it joins the read-ahead with no read of the store
                buf.append(row)
        self.kick()
        return True

    def on_removed(self, first_seq: int, seqs: Any = ()) -> None:
        """See Stream.notify_removed: removals other than a purge leave the position alone and settle the
        pending messages they took as terminated (`seqs`: those removed past the stream's front)."""
        self.forget_read_ahead()
        pend = self.pending
        took = set(seqs) if seqs else ()
        gone = sorted(s for s in pend if s < first_seq or s in took) if pend else []
        explicit = self.ack == "explicit"
        # as nats-server: each is terminated, which counts as an ack: with ack_policy all, one of everything
        # up to it (the floor goes there; on an interest stream what is below goes too)
        taken = [(s, pend[s][0], self.rdc.get(s, 1)) for s in gone]
        for s, dseq, deliveries in taken:
            self._terminated(dseq, s, deliveries, "Unacknowledged message was deleted")
            if not explicit and s in pend:
                self._ack(s, dseq, sample=False)
            if pend.pop(s, None) is not None:
                self.rdc.pop(s, None)
                if explicit:
                    self._move_floor(dseq, s)
        if self.rdc:
            for s in [s for s in self.rdc if s < first_seq]:
                del self.rdc[s]  # past max_deliver, now gone from the stream
        if gone:
            self._save()

    def forget_read_ahead(self) -> None:
        """Messages left the stream: what was read ahead or counted may name them."""
        if self._ackq:
            self._drain_acks()
        self._np = None
        self._buf.clear()

    def purge_covers(self, subject: str | None) -> bool | None:
        """How a purge of `subject` (None: all) concerns this consumer, as nats-server's stream purge tells
        its consumers apart: True if the filter lies within it, False if the filter is wider (the purge
        lies within the filter, or there is no filter), None if they are apart."""
        if subject is None:
            return True
        if any(subject_is_subset(f, subject) for f in self.filters):
            return True
        if not self.filters or any(subject_is_subset(subject, f) for f in self.filters):
            return False
        return None

    def purged(self, start: int, last: int, wider: bool) -> None:
        """nats-server's consumer purge. `start`: the stream's new first sequence, or for a purge of a
        subject the first one of that subject left (0: none, then past `last`); `wider`: the filter is
        wider than the purged subject, so pending messages it removed go too. The position moves up to
        `start`, the floor too with what was pending below it, the floor's delivery becoming the
        highest of those; with nothing left pending the floor is what was delivered. What was queued
        for redelivery is dropped (it is redelivered after ack_wait, if still pending)."""
        self.forget_read_ahead()
        if start == 0 and not wider:
            start = last + 1
        if self.sseq < start - 1:
            self.sseq = start - 1
        pend = self.pending
        if self.afloor_s < start:
            self.afloor_s = start - 1
            st = self.stream.store
            for s in [s for s in pend if s < start or (wider and st.load(s) is None)]:
                d = pend.pop(s)[0]
                self.rdc.pop(s, None)
                if d > self.afloor_c:
                    self.afloor_c = d
        if not pend:
            self.afloor_c, self.afloor_s = self.dseq, self.sseq
        if self.redeliver:
            self.redeliver = deque(s for s in self.redeliver if s > self.sseq)
            self._redeliver_set = set(self.redeliver)
        self._save()

    def is_acked(self, seq: int) -> bool:
        if self._ackq:
            self._drain_acks()
        # past max_deliver (out of pending, still in rdc) is not acked: interest retention keeps it
        return seq <= self.sseq and seq not in self.pending and seq not in self.rdc

    def kick(self) -> None:
        if not self._kick_scheduled and not self.closed:
            self._kick_scheduled = True
            self.loop.call_soon(self._deliver_loop)

    # ------------------------------------------------------------------ delivery

    def _has_push_interest(self) -> bool:
        return self.stream.account.sublist.has_interest(self.deliver_subject)

    def _backlog_watch(self) -> list[Any]:
        """The receivers of the deliver subject that can be backlogged (a leafnode to a hub; see
        Receiver.backlogged): only those are asked during a delivery run, so a run to plain clients asks
        nothing per message."""
        psubs, qgroups = self.stream.account.sublist.match(self.deliver_subject)
        base = Receiver.backlogged
        out = [s.conn for s in psubs if type(s.conn).backlogged is not base]
        for group in qgroups:
            out += [s.conn for s in group if type(s.conn).backlogged is not base]
        return out

    def _held_back(self, watch: list[Any]) -> bool:
        """Does one of `watch` have output waiting past what a drain should add to (a leafnode to a hub
        that is slower than the store)? Then delivery waits until it is written: its wake-up is this
        consumer's next delivery run."""
        for conn in watch:
            if conn.backlogged():
                conn.on_drained(self.kick)
                return True
        return False

    def _next_msg(self) -> Any:
        st = self.stream.store
        while self.redeliver:
            s = self.redeliver[0]
            if s not in self.pending:
                self._redeliver_set.discard(self.redeliver.popleft())
                continue
            if self.max_deliver > 0 and self.rdc.get(s, 1) >= self.max_deliver:
                self._redeliver_set.discard(self.redeliver.popleft())
                self._max_delivered(s, self.rdc.get(s, 1))
                continue
            m = st.load(s)
            if m is None:
                self._redeliver_set.discard(self.redeliver.popleft())
                self.pending.pop(s, None)
                continue
            return m, True
        if self._lps is not None:
            while self._lps:
                s = self._lps.pop(0)
                if s > self.sseq:
                    m = st.load(s)
                    if m is not None:
                        if not self._lps:
                            self._lps = None
                        return m, False
            self._lps = None
        buf = self._buf
        while buf and buf[0][0] <= self.sseq:
            buf.popleft()
        if not buf:
            if self.sseq >= st.last_seq:
                self._eof_at = st.last_seq
                return None, False
            buf.extend(st.read_rows(self.sseq + 1, self.flt, 256))
            if not buf:
                self._eof_at = st.last_seq
                return None, False
        m = buf.popleft()
        return (m if type(m) is StoredMsg else StoredMsg(*m)), False

    def _deliver_loop(self) -> None:
        self._kick_scheduled = False
        if self.closed or self.fc_stalled:
            return
        if self.paused_until and time.time_ns() < self.paused_until:
            return
        watch = self._backlog_watch() if self.push else []
        if self.push:
            if not self._has_push_interest() or (watch and self._held_back(watch)):
                return
        else:
            self._expire_waiting()
            if not self.waiting:
                return
        if self._pace_handle is not None:
            return  # a paced (rate-limited / replay original) delivery is scheduled
        paced = self.push and (self.rate_bps > 0 or self.replay_original)
        if self._ackq and self.redeliver:
            self._drain_acks()  # an acked message is not redelivered
        n = 0
        passed_over = False
        self._head_ok = None  # a listener may have gone since the last run
        while n < 4096:
            if not self.push and (not self.waiting or (self.waiting[0] is not self._head_ok
                                                       and not self._head_interest())):
                break
            if self.policy and not self._priority_head():
                passed_over = True  # messages there, but no request may have them now
                break
            if self.ack != "none" and self.max_ack_pending and len(self.pending) >= self.max_ack_pending \
                    and not self.redeliver:
                if self._ackq:
                    self._drain_acks()  # queued acks may make room
                    continue
                break
            if self._fast and self._lps is None and not self.redeliver and (self.push or
                                                                            not self.waiting[0].max_bytes):
                k = self._send_new(4096 - n)
                if not k:
                    break
                n += k
                if self.fc_stalled or (watch and self._held_back(watch)):
                    break
                continue
            m, redelivery = self._next_msg()
            if m is None:
                break
            if redelivery:
                self._redeliver_set.discard(self.redeliver.popleft())
            if paced and not redelivery:
                delay = self._pace_delay(m)
                if delay > 0:
                    # hold this one back until its time; it is taken again from the read-ahead
                    if self._lps is not None:
                        self._lps.insert(0, m.seq)
                    else:
                        self._buf.appendleft(m)
                    self._pace_handle = self.loop.call_later(delay, self._paced)
                    break
            if not self._send(m, redelivery) and not self._send_to_next(m, redelivery):
                self._unget(m, redelivery)
                break
            if paced:
                self._pace_last_ts = m.ts
                now = self._pace_sent_at = time.monotonic()
                if self.rate_bps > 0:
                    self._rl_tokens = min(self._rl_burst, self._rl_tokens + (now - self._rl_at) * self.rate_bps / 8) \
                        - self._rate_size(m)
                    self._rl_at = now
            n += 1
            if self.fc_stalled or (watch and self._held_back(watch)):
                break
        if n:
            self.last_active = self.last_delivered = time.time_ns()
            self._arm_inactive()
            self._save()
        if not self.push and self.waiting:
            # no_wait requests that found nothing more end now with 404
            self._finish_no_wait(passed_over)
        if n >= 4096:
            self.kick()
        elif n and not self.push and not self._buf and self.reading.active and not self._prefetching:
            # a pull client asks again once it has what it got: read its next batch while it does
            self._prefetching = True
            self.reading.defer(self._prefetch)

    def _prefetch(self) -> None:
        self._prefetching = False
        st = self.stream.store
        if self.closed or self._buf or self.sseq >= st.last_seq or self._lps is not None:
            return
        self._buf.extend(st.read_rows(self.sseq + 1, self.flt, self._last_batch))

    def _send_new(self, budget: int) -> int:
        """Deliver up to `budget` never-delivered messages from the read-ahead in one tight loop, the
        common case of push and pull alike; what `_send` does per message, minus its per-message
        lookups, branches and router call. Returns how many were sent (0: nothing to send now)."""
        buf = self._buf
        sseq = self.sseq
        while buf and buf[0][0] <= sseq:
            buf.popleft()
        st = self.stream.store
        run: list[tuple[bytes, bytes, bytes, int]] | None = None
        to: Subscription | None = None
        if not buf:
            if sseq >= st.last_seq:
                self._eof_at = st.last_seq
                return 0
            want = 256
            if not self.push:
                # a fetch of 500 is read in one go rather than 256 + 244
                want = self._last_batch = max(want, min(self.waiting[0].batch, READ_AHEAD_MAX))
            elif self.ack == "none" and (to := self._run_receiver()) is not None:
                # a push consumer with nothing to track per message to a leafnode (a hub's source or mirror
                # draining a backlog): a gapless run is delivered whole by `_send_run`, as many as half a
                # hand-over holds at the stream's mean size (1 KB messages: ~120; large ones go one by one)
                fit = (BATCH_FLUSH // 2) * st.msgs // max(st.bytes + 64 * st.msgs, 1)
                if fit >= 16:
                    run = st.read_run(sseq + 1, self.flt, min(want, budget, fit))
            if run is None:
                buf.extend(st.read_rows(sseq + 1, self.flt, want))
                if not buf:
                    self._eof_at = st.last_seq
                    return 0
        if run is not None and to is not None:
            sent = self._send_run(run, to)
            if sent:
                return sent
            # the run is not one piece: the loop below takes it message by message
            buf.extend((q, s.decode("utf-8", "surrogateescape"), h, d, ts)
                       for q, (s, h, d, ts) in enumerate(run, sseq + 1))
        limit = min(budget, len(buf))
        pending = self.pending if self.ack != "none" else None
        if pending is not None and self.max_ack_pending:
            limit = min(limit, self.max_ack_pending - len(pending))
        req: PullRequest | None = None
        if self.push:
            dest = self.deliver_subject
        else:
            req = self.waiting[0]
            dest = req.reply
            # several requests waiting take turns, a message each (nats-server's waiting queue)
            limit = min(limit, max(req.batch, 1)) if len(self.waiting) == 1 else 1
        if limit <= 0:
            return 0
        # (a request with max_bytes is served by `_send`, which sizes each message as nats-server does)
        # one lookup of who gets `dest` for the whole run: the usual case is one client inbox, written
        # to directly; anything else (queue group, several subscribers, auto-unsubscribe) is routed
        acc = self.stream.account
        psubs, qgroups = acc.sublist.match(dest)
        direct = psubs[0] if len(psubs) == 1 and not qgroups and not psubs[0].max else None
        deliver: Any = None
        # a receiver that needs the subject a message was routed by (a leafnode) gets it through
        # deliver_routed; the others, clients above all, through deliver or a batch as ever
        routed: Any = None
        dest_b = dest.encode("utf-8", "surrogateescape")
        # a connection that takes batches with no per-message check is handed the messages in one call
        # per WRITE_AT bytes, each written at once: no deliver() call per message; a leafnode takes them
        # per BATCH_FLUSH bytes with the subject they were routed by (deliver_routed_batch)
        batch: list[Message] | None = None
        conn: Any = None
        routed_batch = False
        if direct is not None:
            conn = direct.conn
            if type(conn).deliver_routed is not Receiver.deliver_routed:
                if conn.takes_routed_batch(direct):
                    batch = []
                    routed_batch = True
                else:
                    routed = conn.deliver_routed
            else:
                deliver = conn.deliver
                if conn.takes_batch(direct):
                    batch = []
        route_as = acc.route_as
        ic = self.ic
        prefix = self._ack_prefix
        subj_cache = self._subj_b
        now = time.time_ns()
        self.num_pending()  # makes sure _np is counted from the current position
        popleft = buf.popleft
        sent = fsize = fbytes = 0
        seq = dseq = 0
        # flow control (a push consumer with flow_control, such as a mirror's or a source's): counted per
        # message as `_fc_account` does; a run ends with the message after which a request is due or the
        # window is full, and the request follows what was handed over
        fc = self.fc and req is None
        fcb, fc_sz, window, asking = self.fc_bytes, self.fc_sz, self.fc_window, self.fc_pending is None
        fc_due = False
        dlen = len(dest_b)
        if batch is not None:
            # nothing runs between two messages (they are only built): the position stays in locals
            # and is written back before the batch is handed over
            append = batch.append
            dseq = self.dseq
            np: int = self._np or 0
            last = st.last_seq
            chunk = BATCH_FLUSH if routed_batch else WRITE_AT
            hand = (lambda b, nb: conn.deliver_routed_batch(direct, dest_b, b, nb)) if routed_batch else \
                (lambda b, nb: conn.deliver_batch(direct, b, nb))
            while sent < limit and buf:  # a receiver's re-entrant ack may have emptied it
                m = popleft()
                seq = m[0]
                dseq += 1
                np = np - 1 if np > 0 else 0
                if pending is not None:
                    pending[seq] = [dseq, now]
                hdr = m[2]
                data = m[3]
                reply_b = b"%s%d.%d.%d.%d" % (prefix, seq, dseq, m[4], np if seq < last else 0)
                if hdr:
                    append((subj_cache[m[1]], reply_b, hdr, data))
                    size = len(hdr) + len(data)
                else:
                    append((subj_cache[m[1]], reply_b, None, data))
                    size = len(data)
                fsize += size
                sent += 1
                fbytes += 64
                if fc:
                    size += dlen + len(reply_b)
                    fcb += size
                    if asking:
                        fc_due = fcb > window // 2
                    elif fcb - fc_sz >= window:
                        fc_sz += size
                    if fc_due or fcb > window:
                        break
                if fsize + fbytes >= chunk:
                    self.dseq, self.sseq, self._np = dseq, seq, np
                    hand(batch, fsize)
                    if not routed_batch:
                        conn.flush()  # the client starts on these while the rest are built
                    batch = []
                    append = batch.append
                    fsize = fbytes = 0
            self.dseq, self.sseq, self._np = dseq, seq, np
            if batch:
                hand(batch, fsize)
            if fc:
                self.fc_bytes, self.fc_sz = fcb, fc_sz
                if fc_due:
                    self._send_flow_control()
                self.fc_stalled = self.fc_bytes > self.fc_window
        else:
            while sent < limit and buf:  # a receiver's re-entrant ack may have emptied it
                m = popleft()
                seq = m[0]
                dseq = self.dseq + 1
                self.dseq = dseq
                self.sseq = seq
                np = self._np - 1 if self._np else 0
                self._np = np
                if seq >= st.last_seq:
                    np = 0
                if pending is not None:
                    pending[seq] = [dseq, now]
                subj_b = subj_cache[m[1]]
                hdr = m[2] or None
                data = m[3]
                reply_b = b"%s%d.%d.%d.%d" % (prefix, seq, dseq, m[4], np)
                if direct is None or direct.closed:
                    route_as(dest, dest_b, subj_b, reply_b, hdr, data, ic)
                elif routed is None:
                    deliver(direct, subj_b, reply_b, hdr, data)
                else:
                    routed(direct, dest_b, subj_b, reply_b, hdr, data)
                sent += 1
                if fc:
                    self._fc_account(dlen + len(reply_b) + len(hdr or b"") + len(data))
                    if self.fc_stalled:
                        break
        if pending is None:
            self.afloor_c, self.afloor_s = dseq, seq
            if sent and self.stream.retention == "interest":
                self._acked_on_delivery(sseq + 1, seq)
        if req is not None:
            req.batch -= sent
            req.sent_at = now
            if req.batch <= 0:
                self._end_request(self.waiting.popleft())
            elif len(self.waiting) > 1:
                self.waiting.rotate(-1)
        return sent

    def _run_receiver(self) -> Subscription | None:
        """The one subscription of the deliver subject when it is a leafnode's that takes runs with the
        subject they were routed by (`deliver_routed_batch`), the receiver `_send_run` serves."""
        psubs, qgroups = self.stream.account.sublist.match(self.deliver_subject)
        if len(psubs) != 1 or qgroups or psubs[0].max:
            return None
        sub = psubs[0]
        conn = sub.conn
        if type(conn).deliver_routed is Receiver.deliver_routed or not conn.takes_routed_batch(sub):
            return None
        return sub

    def _send_run(self, run: list[tuple[bytes, bytes, bytes, int]], direct: Subscription) -> int:
        """Deliver a gapless run (`read_run`: the messages after `sseq`) to a leafnode in one hand-over and
        without a per-message loop, when what `_send_new`'s loop decides per message is decided for the
        whole run at once: the pending count is exact (each message's is last_seq minus its sequence, its
        delivery sequence its stream sequence plus a constant), the run fits in one hand-over, and flow
        control's window does not fill inside it (that run goes through the loop, which stops at that very
        message). A run inside which a flow-control request falls due ends with the message after which it
        does, and the request follows, as in the loop. Returns how many were sent; 0, with nothing
        changed, when the loop must do it."""
        last = self.stream.store.last_seq
        sseq = self.sseq
        if self.num_pending() != last - sseq:
            return 0
        dest = self.deliver_subject
        n = len(run)
        nbytes = sum(map(len, map(_RUN_HDR, run))) + sum(map(len, map(_RUN_DATA, run)))
        if nbytes + 64 * n >= BATCH_FLUSH:
            return 0
        prefix = self._ack_prefix
        doff = self.dseq - sseq
        if not any(map(_RUN_HDR, run)) and self._send_numbered(run, direct, prefix, doff, last, nbytes):
            return n
        msgs: list[Message] = [(s, b"%s%d.%d.%d.%d" % (prefix, q, q + doff, ts, last - q), h or None, d)
                               for q, (s, h, d, ts) in enumerate(run, sseq + 1)]
        ask = False
        if self.fc:
            dlen = len(dest)
            end = self.fc_bytes + n * dlen + sum(map(len, map(_REPLY, msgs))) + nbytes
            window = self.fc_window
            if self.fc_pending is not None:
                if end > window or end - self.fc_sz >= window:
                    return 0
            elif end > window // 2:
                # the request falls due inside the run: the first message past half the window ends it
                sizes = itertools.accumulate(dlen + len(r) + len(h or b"") + len(d) for _, r, h, d in msgs)
                due = window // 2 - self.fc_bytes
                n, total = next((i, t) for i, t in enumerate(sizes, 1) if t > due)
                msgs = msgs[:n]
                nbytes = sum(len(h or b"") + len(d) for _, _, h, d in msgs)
                end = self.fc_bytes + total
                ask = True
            self.fc_bytes = end
        self.sseq = q = sseq + n
        self.dseq = q + doff
        self._np = last - q
        self.afloor_c, self.afloor_s = self.dseq, q
        direct.conn.deliver_routed_batch(direct, self._dsubj_b, msgs, nbytes)
        if ask:
            self._send_flow_control()
            self.fc_stalled = self.fc_bytes > self.fc_window
        if self.stream.retention == "interest":
            self._acked_on_delivery(sseq + 1, q)
        return n

    def _send_numbered(self, run: list[tuple[bytes, bytes, bytes, int]], direct: Subscription, prefix: bytes,
                       doff: int, last: int, nbytes: int) -> bool:
        """`_send_run` of a header-less run inside which no flow-control request falls due: the ack replies
        handed as their numbers (`Receiver.deliver_numbered_run`), so a leafnode makes each LMSG with one
        formatting; flow control counts the replies' bytes from the numbers' digits. False, with nothing
        changed, for a run `_send_run` must build message by message."""
        n = len(run)
        a = self.sseq + 1
        z = a + n - 1
        tss = list(map(_RUN_TS, run))
        if self.fc:
            lo, hi = min(tss), max(tss)
            ts_digits = 19 * n if 10**18 <= lo and hi < 10**19 else sum(map(len, map(str, tss)))
            replies = (len(prefix) + 3) * n + _digits(a, z) + _digits(a + doff, z + doff) + ts_digits + \
                _digits(last - z, last - a)
            end = self.fc_bytes + n * len(self.deliver_subject) + replies + nbytes
            window = self.fc_window
            if self.fc_pending is not None:
                if end > window or end - self.fc_sz >= window:
                    return False
            elif end > window // 2:
                return False  # the request falls due inside the run: _send_run ends the run there
            self.fc_bytes = end
        self.sseq = z
        self.dseq = z + doff
        self._np = last - z
        self.afloor_c, self.afloor_s = self.dseq, z
        direct.conn.deliver_numbered_run(direct, self._dsubj_b, list(map(_RUN_SUBJECT, run)), list(map(_RUN_DATA, run)),
                                         prefix.replace(b"%", b"%%") + b"%d.%d.%d.%d",
                                         (range(a, z + 1), range(a + doff, z + doff + 1), tss,
                                          range(last - a, last - z - 1, -1)), nbytes)
        if self.stream.retention == "interest":
            self._acked_on_delivery(a, z)
        return True

    def _acked_on_delivery(self, lo: int, hi: int) -> None:
        """ack_policy none on an interest stream: a delivered message is acked for this consumer, so it
        goes once no other consumer wants it (nats-server does this as it delivers)."""
        self.stream.ack_msgs([m.seq for m in self.stream.store.metas(lo, hi, self.flt)], self, True)

    def _pace_delay(self, m: Any) -> float:
        """Seconds to wait before `m`: replay_policy original keeps the gaps between the messages'
        timestamps, rate_limit_bps holds a message until the token bucket has room for its size."""
        now = time.monotonic()
        want = 0.0
        if self.replay_original and self._pace_last_ts and self._pace_sent_at:
            want = (m.ts - self._pace_last_ts) / NS - (now - self._pace_sent_at)
        if self.rate_bps > 0:
            rate = self.rate_bps / 8
            tokens = min(self._rl_burst, self._rl_tokens + (now - self._rl_at) * rate)
            short = self._rate_size(m) - tokens
            if short > 0:
                want = max(want, short / rate)
        return want

    def _rate_size(self, m: Any) -> float:
        """What a delivery costs the rate limiter, as nats-server counts it: subject, ack reply (its
        length estimated), headers and payload; capped at the burst, which nats-server never fills past
        (a larger message would wait there forever)."""
        sz = len(m.subject) + len(self._ack_prefix) + 2 * len(str(m.seq)) + 24 + len(m.hdr or b"") + len(m.data)
        return min(sz, self._rl_burst)

    def _paced(self) -> None:
        self._pace_handle = None
        self._deliver_loop()

    def _send(self, m: Any, redelivery: bool) -> bool:
        """Deliver `m`. False, with nothing sent, when `m` does not fit in what is left of the first pull
        request's max_bytes: that request is ended with a 409, as nats-server does."""
        seq = m.seq
        dseq = self.dseq + 1
        prev_sseq, prev_np = self.sseq, self._np
        if redelivery:
            count = self.rdc.get(seq, 1) + 1
        else:
            count = 1
            if self._np is not None:
                self._np = max(0, self._np - 1)
            self.sseq = seq
        remaining = self.num_pending()
        ack_reply = f"$JS.ACK.{self.stream.name}.{self.name}.{count}.{seq}.{dseq}.{m.ts}.{remaining}"
        hdr = m.hdr or None
        data = m.data
        if self.headers_only:
            extra = f"Nats-Msg-Size: {len(data)}\r\n".encode()
            hdr = (hdr[:-2] if hdr else b"NATS/1.0\r\n") + extra + b"\r\n"
            data = b""
        req: PullRequest | None = None
        if not self.push:
            req = self.waiting[0]
            if req.max_bytes:
                # counted as nats-server counts it: subject, ack reply, headers and payload
                sz = len(m.subject) + len(ack_reply) + len(hdr or b"") + len(data)
                if req.sent_bytes + sz > req.max_bytes:
                    self.sseq, self._np = prev_sseq, prev_np
                    if self._pin_fresh is req:  # pinned for this message only: the pin is given back
                        self._drop_pin()
                    self._end_request(self.waiting.popleft())
                    self._status(req.reply, 409, "Message Size Exceeds MaxBytes", req)
                    return False
                req.sent_bytes += sz
            self._pin_fresh = None
            if self.policy == "pinned_client":
                hdr = (hdr[:-2] if hdr else b"NATS/1.0\r\n") + b"Nats-Pin-Id: %s\r\n\r\n" % self.pin_id.encode()
        self.dseq = dseq
        if redelivery:
            self.rdc[seq] = count
            p = self.pending.get(seq)
            if p is not None:
                p[1] = time.time_ns()  # keeps the first delivery's sequence: the ack floor goes by it
            else:
                self.pending[seq] = [dseq, time.time_ns()]
        elif self.ack != "none":
            self.pending[seq] = [dseq, time.time_ns()]
        else:
            self.afloor_c, self.afloor_s = dseq, seq
        # delivered under the message's own subject, routed by the deliver subject / request inbox, as
        # nats-server does (clients read the subject of what they consume, e.g. the KV key; a leafnode
        # passes both on)
        route_as = self.stream.account.route_as
        subj_b = m.subject.encode("utf-8", "surrogateescape")
        reply_b = ack_reply.encode()
        if req is None:
            route_as(self.deliver_subject, self._dsubj_b, subj_b, reply_b, hdr, data, self.ic)
            if self.fc:
                self._fc_account(len(self.deliver_subject) + len(ack_reply) + len(hdr or b"") + len(data))
        else:
            route_as(req.reply, req.reply.encode("utf-8", "surrogateescape"), subj_b, reply_b, hdr, data, self.ic)
            req.batch -= 1
            req.sent_at = time.time_ns()
            if req.batch <= 0 or (req.max_bytes and req.sent_bytes >= req.max_bytes):
                self._end_request(self.waiting.popleft())
                if req.max_bytes and req.sent_bytes < req.max_bytes:
                    self._status(req.reply, 409, "Batch Completed", req)  # bytes to spare: say so
            elif len(self.waiting) > 1:
                self._enqueue(self.waiting.popleft())  # the others' turn, as nats-server's waiting queue
        if self.ack == "none" and self.stream.retention == "interest":
            self._acked_on_delivery(seq, seq)
        # max_deliver: the advisory goes out when the last delivery's ack_wait ends unacked (_max_delivered)
        return True

    def _send_to_next(self, m: Any, redelivery: bool) -> bool:
        """`m` to the next waiting pull requests after one it did not fit (max_bytes); False if none took it."""
        while self.waiting:
            if self.policy and not self._priority_head():
                return False
            if self._send(m, redelivery):
                return True
        return False

    def _unget(self, m: Any, redelivery: bool) -> None:
        """Put back a message taken by `_next_msg` and not sent: it is the next one taken again."""
        if redelivery:
            self.redeliver.appendleft(m.seq)
            self._redeliver_set.add(m.seq)
        elif self._lps is not None:
            self._lps.insert(0, m.seq)
        else:
            # only `m` is kept: what the read-ahead holds behind it is read again after it, in order
            self._buf.clear()
            self._buf.append(m)

    # ------------------------------------------------------------------ flow control and heartbeats

    def _fc_account(self, sz: int) -> None:
        """nats-server's flow control window: `sz` bytes more delivered (deliver subject, ack reply, headers,
        payload); past half the window a request goes out, past the whole window delivery stalls."""
        self.fc_bytes += sz
        if self.fc_pending is None:
            if self.fc_bytes > self.fc_window // 2:
                self._send_flow_control()
            elif self.ack == "flow_control" and 0 < self.max_ack_pending <= len(self.pending):
                self._send_flow_control()  # its answer is the ack that makes room
        elif self.fc_bytes - self.fc_sz >= self.fc_window:
            self.fc_sz += sz  # the outstanding answer will cover this one too
        self.fc_stalled = self.fc_bytes > self.fc_window

    def _last_stream(self) -> int:
        """Nats-Last-Stream of a heartbeat: the last stream sequence delivered or looked at."""
        return max(self.sseq, self._eof_at)

    def _send_flow_control(self) -> None:
        subj = f"$JS.FC.{self.stream.name}.{self.name}.{''.join(_FC_DIGITS[b % 62] for b in os.urandom(4))}"
        self.fc_pending = subj
        self.fc_sz = self.fc_bytes
        if self._fc_sub is None:
            self._fc_sub = self.ic.subscribe(f"$JS.FC.{self.stream.name}.{self.name}.*", self._on_fc)
        self.ic.publish(self.deliver_subject, b"", subj, make_headers(status=100, description="FlowControl Request"))

    def _on_fc(self, sub: Any, subject: str, reply: str, hdr: bytes | None, payload: bytes) -> None:
        if subject != self.fc_pending:
            return  # only the latest request counts
        self.fc_window = min(self.fc_window * 2, FC_MAX_PENDING)  # slow start
        self.fc_bytes = max(0, self.fc_bytes - self.fc_sz)
        self.fc_pending = None
        self.fc_sz = 0
        self.fc_stalled = self.fc_bytes > self.fc_window
        if self.ack == "flow_control" and hdr:
            # the answer says what the other side has stored: everything up to it is acked (as AckAll)
            sseq = _header_int(hdr, "Nats-Last-Stream")
            if sseq > 0:
                self._ack(sseq, max(_header_int(hdr, "Nats-Last-Consumer"), 0))
        self.kick()

    def _heartbeat(self) -> None:
        if self.closed:
            return
        idle = time.time_ns() - self.last_active >= self.hb * 0.9
        if idle and self._has_push_interest():
            items = [("Nats-Last-Consumer", str(self.dseq)), ("Nats-Last-Stream", str(self._last_stream()))]
            reply = ""
            if self.fc_pending is not None:
                items.append(("Nats-Consumer-Stalled", self.fc_pending))
            self.ic.publish(self.deliver_subject, b"", reply, make_headers(items, status=100,
                                                                           description="Idle Heartbeat"))
        if (self.ack == "flow_control" and self.pending and self.fc_pending is None
                and self._has_push_interest()):
            self._send_flow_control()  # what is delivered gets acked even when nothing more goes out
        self._hb_handle = self.loop.call_later(self.hb / NS, self._heartbeat)

    # ------------------------------------------------------------------ pull requests

    def next_request(self, reply: str, data: bytes) -> None:
        """CONSUMER.MSG.NEXT: queue a pull request (or answer it with a status)."""
        if self.push:
            self._status(reply, 409, "Consumer is push based")
            return
        batch, max_bytes, expires, no_wait, hb = 1, 0, 0, False, 0
        group: dict[str, Any] | None = None  # a JSON request's priority group fields
        body = data.strip()
        if body:
            if body.isdigit():
                batch = int(body)
            elif body[:1] == b"{":
                r = _pull_fields(body)
                if isinstance(r, str):
                    self._status(reply, 400, f"Bad Request - {r}")
                    return
                batch = int(r.get("batch") or 1)
                max_bytes = int(r.get("max_bytes") or 0)
                expires = int(r.get("expires") or 0)
                no_wait = bool(r.get("no_wait"))
                hb = max(int(r.get("idle_heartbeat") or 0), 0)  # nats-server ignores one that is not positive
                group = r
                if hb and hb * 2 > expires:  # no expiry at all is too short as well
                    self._status(reply, 400, "Bad Request - heartbeat value too large")
                    return
            # anything else that is not a number asks for one message, as on nats-server
        if self.max_batch and batch > self.max_batch:
            self._status(reply, 409, f"Exceeded MaxRequestBatch of {self.max_batch}")
            return
        if self.max_expires and expires > self.max_expires:
            self._status(reply, 409, f"Exceeded MaxRequestExpires of {go_duration(self.max_expires)}")
            return
        if self.max_bytes_req and max_bytes > self.max_bytes_req:
            self._status(reply, 409, f"Exceeded MaxRequestMaxBytes of {self.max_bytes_req}")
            return
        if group is not None:
            if (group.get("min_pending") or group.get("min_ack_pending")) and self.policy != "overflow":
                self._status(reply, 400, "Bad Request - Not a Overflow Priority consumer")
                return
            if group.get("id") and self.policy != "pinned_client":
                self._status(reply, 400, "Bad Request - Not a Pinned Client Priority consumer")
                return
            if not 0 <= group.get("priority", 0) <= 9:
                self._status(reply, 400, "Bad Request - Priority must be between 0 and 9")
                return
            if self.policy:
                if not group.get("group"):
                    self._status(reply, 400, "Bad Request - Priority Group missing")
                    return
                if group["group"] not in self.groups:
                    self._status(reply, 400, "Bad Request - Invalid Priority Group")
                    return
                if self.pin_id:
                    if group.get("id") == self.pin_id:
                        self._set_pin_timer()  # the pinned client is still there
                    elif group.get("id"):
                        self._status(reply, 423, "Nats-Pin-Id mismatch")
                        return
        self.last_active = time.time_ns()
        self._arm_inactive()
        if no_wait:
            # as nats-server: 404 at once only when nothing is there and the request would not wait; with
            # messages there it is served (at max_ack_pending too, once acks make room) and ends at the end
            if self._ackq and self.redeliver:
                self._drain_acks()  # an acked message is not counted as one to redeliver
            there = self.num_pending() + len(self.redeliver)
            if not there and not expires:
                self._status(reply, 404, "No Messages")
                return
            if there and there < sum(r.batch for r in self.waiting):
                self._status(reply, 408, "Requests Pending")
                return
        if len(self.waiting) >= self.max_waiting:
            if not hb:  # a client with heartbeats waits for the missing ones rather than asking again at once
                self._status(reply, 409, "Exceeded MaxWaiting")
            return
        deadline = time.monotonic() + expires / NS if expires else 0.0
        req = PullRequest(reply, batch, max_bytes, deadline, no_wait, hb)
        if group is not None:
            req.group = group.get("group") or ""
            req.pin = group.get("id") or ""
            req.min_pending = group.get("min_pending") or 0
            req.min_ack_pending = group.get("min_ack_pending") or 0
            req.priority = group.get("priority") or 0
        self._enqueue(req)
        if expires:
            self._arm_expiry(self.loop.time() + expires / NS, 0.0)
        if hb:
            req.hb_handle = self.loop.call_later(hb / NS, self._pull_heartbeat, req)
        self._deliver_loop()

    def _enqueue(self, req: PullRequest) -> None:
        """A request to the end of the waiting queue; with the prioritized policy, behind every request of
        the same or a more urgent priority (nats-server's addPrioritized)."""
        waiting = self.waiting
        if self.policy == "prioritized":
            def urgency(r: PullRequest) -> int:  # a request with no group (a plain number) comes last
                return r.priority if r.group is not None else 1 << 31

            mine = urgency(req)
            at = len(waiting)
            while at and urgency(waiting[at - 1]) > mine:
                at -= 1
            waiting.insert(at, req)
        else:
            waiting.append(req)

    def _priority_head(self) -> bool:
        """A priority group consumer: bring the request the next message goes to to the front of `waiting`
        (nats-server's nextWaiting). pinned_client: the pinned client's requests, the first request with
        a group pinning it when nobody is pinned, a request with another pin id ended with 423; overflow:
        a request with thresholds only once the consumer is that far behind. False: none may have it now."""
        waiting = self.waiting
        cycled = 0
        while waiting:
            r = waiting[0]
            if r is not self._head_ok and not self._head_interest():
                return False  # (it dropped what nobody listens for any more)
            r = waiting[0]
            if self.policy == "pinned_client":
                if r.pin and r.pin != self.pin_id:
                    # an old pin id (or, with a pin, another one): the client must ask again without it
                    self._end_request(waiting.popleft())
                    self._status(r.reply, 423, "Nats-Wrong-Pin-Id", r)
                    continue
                if not self.pin_id:
                    if r.group:
                        self._assign_pin(r.group)
                        self._pin_fresh = r
                elif not r.pin:  # not the pinned client: it waits for the pin to go
                    waiting.rotate(-1)
                    cycled += 1
                    if cycled >= len(waiting):
                        return False
                    continue
            elif self.policy == "overflow" and (r.min_pending > 0 or r.min_ack_pending > 0):
                if not ((0 < r.min_pending <= self.num_pending())
                        or (0 < r.min_ack_pending <= len(self.pending))):
                    waiting.rotate(-1)
                    cycled += 1
                    if cycled >= len(waiting):
                        return False
                    continue
            return True
        return False

    def _assign_pin(self, group: str) -> None:
        self.pin_id = "".join(_FC_DIGITS[b % 62] for b in os.urandom(22))
        self.pinned_ts = time.time_ns()
        self._set_pin_timer()
        self.js.advisory(self.stream.jsa, f"CONSUMER.PINNED.{self.stream.name}.{self.name}", {
            "type": "io.nats.jetstream.advisory.v1.consumer_group_pinned", "account": self.stream.account.name,
            "stream": self.stream.name, "consumer": self.name, "group": group, "pinned_id": self.pin_id})

    def _set_pin_timer(self) -> None:
        if self._pin_timer is not None:
            self._pin_timer.cancel()
        self._pin_timer = self.loop.call_later(self.pinned_ttl / NS, self._pin_timed_out)

    def _pin_timed_out(self) -> None:
        self._pin_timer = None
        if self.pin_id and not self.closed and self.groups:
            self.unpin(self.groups[0], "timeout")

    def unpin(self, group: str, reason: str) -> None:
        """The pinned client loses its pin (the unpin API: "admin", its TTL ran out: "timeout"); the next
        request of the group gets a new one."""
        self._drop_pin()
        self.js.advisory(self.stream.jsa, f"CONSUMER.UNPINNED.{self.stream.name}.{self.name}", {
            "type": "io.nats.jetstream.advisory.v1.consumer_group_unpinned", "account": self.stream.account.name,
            "stream": self.stream.name, "consumer": self.name, "group": group, "reason": reason})
        self.kick()

    def _drop_pin(self) -> None:
        self.pin_id = ""
        self.pinned_ts = 0
        self._pin_fresh = None
        if self._pin_timer is not None:
            self._pin_timer.cancel()
            self._pin_timer = None

    def _head_interest(self) -> bool:
        """Drop waiting requests at the head whose reply inbox nobody listens on any more (as nats-server:
        no status, the next request gets the message); False when none is left. Checked once per delivery
        run and request, not per message."""
        waiting = self.waiting
        has_interest = self.stream.account.sublist.has_interest
        # over a leafnode the inbox's interest may not have arrived yet: young requests are kept
        grace = time.time_ns() - 2 * NS if self.js.server.opts.leafnodes is not None else None
        while waiting:
            r = waiting[0]
            if has_interest(r.reply) or (grace is not None and r.received > grace):
                self._head_ok = r
                return True
            self._end_request(waiting.popleft())
        return False

    def _no_more_for(self, req: PullRequest) -> bool:
        if self._ackq and (self.redeliver or (self.max_ack_pending and len(self.pending) >= self.max_ack_pending)):
            self._drain_acks()  # only where queued acks could change the answer
        if self.redeliver:
            return False
        if self.ack != "none" and self.max_ack_pending and len(self.pending) >= self.max_ack_pending:
            return False  # held back by acks, not at the end: nats-server keeps the request
        buf = self._buf
        if buf and buf[-1][0] > self.sseq:
            return False  # the read-ahead has the next one (removals clear it)
        return self.stream.store.load_next(self.sseq + 1, self.flt) is None and self._lps is None

    def _finish_no_wait(self, passed_over: bool = False) -> None:
        keep: deque[PullRequest] = deque()
        while self.waiting:
            r = self.waiting.popleft()
            # at the end (or passed over by the priority policy): a no_wait request with an expiry waits on
            # until it has had something
            if r.no_wait and (not r.expires or r.batch < r.asked) and (passed_over or self._no_more_for(r)):
                self._end_request(r)
                self._status(r.reply, 404, "No Messages", r)
            else:
                keep.append(r)
        self.waiting = keep

    def _expire_waiting(self) -> None:
        if not self.waiting:
            return
        # loop timers may fire a little early: allow for it, and re-arm for what is still waiting
        now = time.monotonic() + 0.005
        keep: deque[PullRequest] = deque()
        expired: list[PullRequest] = []
        soonest = 0.0
        for r in self.waiting:
            if r.expires and now >= r.expires:
                expired.append(r)
            else:
                keep.append(r)
                if r.expires and (not soonest or r.expires < soonest):
                    soonest = r.expires
        self.waiting = keep
        # the 408s go out after the queue is settled: an in-process requester may pull again from its
        # handler, which appends to the queue
        for r in expired:
            self._end_request(r)
            self._status(r.reply, 408, "Request Timeout", r)
        if soonest and not self.closed:
            self._arm_expiry(self.loop.time() + max(0.001, soonest - time.monotonic()), 0.01)

    def _arm_expiry(self, at: float, slack: float) -> None:
        """Have `_expire_waiting` run at loop time `at`, unless it is already due before then (or less
        than `slack` after). The time is kept apart: uvloop hands out a plain Handle, without when(), for
        a time already past."""
        h = self._expire_handle
        if h is None or h.cancelled() or self._expire_at <= self.loop.time() or self._expire_at > at + slack:
            if h is not None:
                h.cancel()
            self._expire_at = at
            self._expire_handle = self.loop.call_at(at, self._expire_waiting)

    def _pull_heartbeat(self, req: PullRequest) -> None:
        """A waiting request's idle heartbeat; as nats-server, each message sent to it restarts the
        period, so the timer checks when the last one went out rather than being reset per message."""
        if self.closed or req not in self.waiting:
            return
        idle = time.time_ns() - req.sent_at
        if idle < req.heartbeat:
            req.hb_handle = self.loop.call_later((req.heartbeat - idle) / NS, self._pull_heartbeat, req)
            return
        if req.no_wait and (not req.expires or req.batch < req.asked):
            # nats-server wakes its waiting queue at a heartbeat and ends a no_wait request that had
            # something (or has no expiry) with 404, also when max_ack_pending is what holds it back
            self.waiting.remove(req)
            self._end_request(req)
            self._status(req.reply, 404, "No Messages", req)
            return
        items = [("Nats-Last-Consumer", str(self.dseq)), ("Nats-Last-Stream", str(self._last_stream()))]
        self.ic.publish(req.reply, b"", "", make_headers(items, status=100, description="Idle Heartbeat"))
        req.hb_handle = self.loop.call_later(req.heartbeat / NS, self._pull_heartbeat, req)

    def _end_request(self, req: PullRequest) -> None:
        if req.hb_handle is not None:
            req.hb_handle.cancel()
            req.hb_handle = None

    def _status(self, reply: str, code: int, desc: str, req: PullRequest | None = None) -> None:
        items = []
        if req is not None and code in (408, 409, 423):
            items = [("Nats-Pending-Messages", str(req.batch)), ("Nats-Pending-Bytes", str(req.max_bytes and
                                                                                          req.max_bytes - req.sent_bytes
                                                                                          or 0))]
        self.ic.publish(reply, b"", "", make_headers(items, status=code, description=desc))

    # ------------------------------------------------------------------ acks

    def _on_ack(self, sub: Any, subject: str, reply: str, hdr: bytes | None, payload: bytes) -> None:
        if not payload and not reply and self.reading.active:
            # a plain ack inside a client read: kept until the read's output is written, so that a
            # pull request right behind a batch of acks is answered without waiting for them
            q = self._ackq
            if not q:
                self.reading.defer(self._drain_acks)
            q.append(subject)
            return
        if self._ackq:
            self._drain_acks()
        held = len(self.pending)  # at max_ack_pending before this ack: delivery resumes if it freed a slot
        toks = subject.split(".")
        seqs = _ack_seqs(toks)
        if seqs is None:
            if reply:
                self._wrong_shape(subject, reply)
            return
        sseq, dseq = seqs
        # the kinds as nats-server tells them apart: exact `+ACK`, `+OK`, `+WPI`; prefixes `+NXT`, `-NAK`,
        # `+TERM`; anything else (`+ACK ` too) is only answered
        # nats-server answers a synchronous ack only where it took it: not one past what was delivered,
        # nor (but on a limits stream) one for stream sequence 0; the other kinds whenever sseq is set
        beyond = sseq > self.sseq and not self.fc
        if not payload or payload == b"+ACK" or payload == b"+OK":
            if beyond or (not sseq and self.stream.retention != "limits"):
                reply = ""
            else:
                self._ack(sseq, dseq)
        elif payload.startswith(b"+NXT"):
            if not beyond:
                self._ack(sseq, dseq)
            if reply:
                self.next_request(reply, payload[4:].strip())
                reply = ""
        elif payload.startswith(b"+TERM"):
            if beyond or (not sseq and self.stream.retention != "limits"):
                reply = ""
            else:
                self._ack(sseq, dseq, sample=False)  # never redelivered; ack_policy all: what is below, too
            # the advisory goes out for any terminate, even of a message no longer pending
            self._terminated(dseq, sseq, _ack_num(toks[4]), payload[5:].strip().decode(errors="replace"))
        elif not sseq:
            reply = ""
        elif payload.startswith(b"-NAK"):
            self._nak(sseq, dseq, toks[4], payload[4:].strip())
        elif payload == b"+WPI":
            p = self.pending.get(sseq)
            if p is not None:
                p[1] = time.time_ns()
        if reply:
            # a synchronous ack is confirmed only once the new state is committed: acked stays acked
            if self.persist and self._dirty:
                self._flush_state()
                fut = self.stream.store.durable()
                if hasattr(fut, "add_done_callback"):
                    ic = self.ic
                    fut.add_done_callback(lambda f: ic.publish(reply, b""))
                else:
                    self.ic.publish(reply, b"")
            else:
                self.ic.publish(reply, b"")
        self.last_active = self.last_ack = time.time_ns()
        # an ack can only unblock delivery when acks were what held it back (ack_policy all: one ack may
        # free many slots)
        if self.redeliver or self.waiting or (self.push and self.max_ack_pending
                                             and held >= self.max_ack_pending > len(self.pending)):
            self.kick()

    def _on_plain_acks(self, sub: Any, subjects: list[bytes]) -> None:
        """`_on_ack` for a run of plain acks (empty, no reply) routed together."""
        if self.reading.active:
            q = self._ackq
            if not q:
                self.reading.defer(self._drain_acks)
            q.extend(map(_decode, subjects))
            return
        on_ack = self._on_ack
        for s in subjects:
            on_ack(sub, _decode(s), "", None, b"")

    def _terminated(self, dseq: int, sseq: int, deliveries: int, reason: str) -> None:
        """The MSG_TERMINATED advisory (an empty reason is left out, as nats-server does)."""
        adv: dict[str, Any] = {"type": "io.nats.jetstream.advisory.v1.terminated", "stream": self.stream.name,
                               "consumer": self.name, "consumer_seq": dseq, "stream_seq": sseq,
                               "deliveries": deliveries}
        if reason:
            adv["reason"] = reason
        self.js.advisory(self.stream.jsa, f"CONSUMER.MSG_TERMINATED.{self.stream.name}.{self.name}", adv)

    def _wrong_shape(self, subject: str, reply: str) -> None:
        """A request on an ack subject of another shape than nine tokens: nats-server has no subscription
        for it, so its publisher gets "no responders" unless someone else took it (see ReadContext.decline)."""
        psubs, qgroups = self.ic.account.sublist.match(subject)
        if not qgroups and all(s is self._ack_sub for s in psubs):
            self.reading.decline(subject, reply)

    def _drain_acks(self) -> None:
        """Process the queued plain acks, in order; whatever looks at pending state calls this first."""
        q = self._ackq
        if not q:
            return
        self._ackq = []
        if self.closed:
            return
        held = len(self.pending)
        if self.ack != "explicit" or self.sample:
            ack = self._ack
            for subject in q:
                seqs = _ack_seqs(subject.split("."))
                if seqs is not None:
                    ack(*seqs)
        else:
            # _ack's explicit path for the lot: the floor depends only on what is left pending (and on
            # whether it is stuck, which acks do not change), so moving it once at the end ends where
            # moving it after every ack would
            pend = self.pending
            rdc = self.rdc
            acked = []
            move = self._move_floor
            for subject in q:
                toks = subject.split(".")
                if len(toks) != 9:  # `_ack_seqs`, inline
                    continue
                try:
                    sseq = int(toks[5])
                    int(toks[6])
                except ValueError:
                    sseq = _ack_num(toks[5])
                p = pend.pop(sseq, None)
                if p is not None:
                    acked.append(sseq)
                    if rdc:
                        rdc.pop(sseq, None)
                    if p[0] == self.afloor_c + 1 and (nxt := pend.get(sseq + 1)) is not None:
                        # _move_floor's common case inline: acks in order, the next one pending
                        self.afloor_c, self.afloor_s = nxt[0] - 1, sseq
                    else:
                        move(p[0], sseq)
            if acked:
                if not self._dirty:
                    self._save()
                if self.stream.retention != "limits":
                    self.stream.ack_msgs(acked, self, True)
        self.last_active = self.last_ack = time.time_ns()
        # held back at the limit before these acks, and they freed a slot (one or many)
        if self.redeliver or self.waiting or (self.push and self.max_ack_pending
                                             and held >= self.max_ack_pending > len(self.pending)):
            self.kick()

    def _ack(self, sseq: int, dseq: int, sample: bool = True) -> None:
        ack = self.ack
        if ack == "explicit":
            # the common case, kept short: one pending entry, no list of acked sequences
            p = self.pending.pop(sseq, None)
            if p is None:
                if self.rdc:
                    self.rdc.pop(sseq, None)  # e.g. past max_deliver and acked after all: not counted any more
                return
            rdc = self.rdc
            deliveries = rdc.pop(sseq, 1) if rdc else 1
            if sample and self.sample:
                self._sample_ack(sseq, dseq, p, deliveries)
            self._move_floor(p[0], sseq)
            if not self._dirty:
                self._save()
            if self.stream.retention != "limits":
                self.stream.ack_msg(sseq)
            return
        if ack != "all" and ack != "flow_control":
            return  # ack_policy none takes no acks
        # as nats-server: an ack at or below the floor (or past what was delivered) changes nothing, and
        # the floor becomes the acked delivery itself, whatever was delivered after it
        if dseq <= self.afloor_c or sseq <= self.afloor_s or sseq > self.sseq:
            return
        acked = [s for s in self.pending if s <= sseq]
        for s in acked:
            del self.pending[s]
            self.rdc.pop(s, None)
        self.afloor_c, self.afloor_s = dseq, sseq
        self._save()
        if self.stream.retention != "limits":
            self.stream.ack_msgs(acked, self)

    def _sample_ack(self, sseq: int, dseq: int, p: list[int], deliveries: int) -> None:
        """sample_freq: the ack metric advisory for this share of acks."""
        if self.sample >= 1 or int.from_bytes(os.urandom(2), "big") < self.sample * 65536:
            self.js.advisory(self.stream.jsa, f"CONSUMER.ACK.{self.stream.name}.{self.name}", {
                "type": "io.nats.jetstream.metric.v1.consumer_ack", "stream": self.stream.name,
                "consumer": self.name, "consumer_seq": dseq, "stream_seq": sseq,
                "ack_time": time.time_ns() - p[1], "deliveries": deliveries}, kind="METRIC")

    def _move_floor(self, dseq: int, sseq: int) -> None:
        """nats-server's moveAckFloor, once `sseq` (delivered as `dseq`) has left pending by an ack, a
        terminate or its removal from the stream. With nothing pending the floor is what was delivered;
        otherwise it moves only if that was the delivery right above it, and then to just below the next
        pending message after it. So a floor below a gap (a filtered consumer's first match further on)
        or below a message that left unacked (max_deliver) stays put until such an ack."""
        pend = self.pending
        if not pend:
            self.afloor_s = self.sseq
            self.afloor_c = self.dseq
        elif dseq == self.afloor_c + 1:
            self.afloor_c, self.afloor_s = dseq, sseq
            last = self.sseq
            s = 0
            if len(pend) > 16:  # in order, the next one is usually right after
                s = next((k for k in range(sseq + 1, min(last, sseq + 16) + 1) if k in pend), 0)
            if not s:
                s = min((k for k in pend if sseq < k <= last), default=0)
            if s:
                self.afloor_c, self.afloor_s = pend[s][0] - 1, s - 1

    def _nak(self, sseq: int, dseq: int, dc: str, arg: bytes) -> None:
        """-NAK: redeliver now or, with `{"delay": ns}` or a Go duration ("1.5s"), not before that delay.
        A NAK of a delivery at or below the ack floor, or of a message no longer pending, is ignored."""
        if dseq <= self.afloor_c or dseq > self.dseq + 1:
            return
        p = self.pending.get(sseq)
        if p is None:
            return
        self.js.advisory(self.stream.jsa, f"CONSUMER.MSG_NAKED.{self.stream.name}.{self.name}", {
            "type": "io.nats.jetstream.advisory.v1.nak", "stream": self.stream.name, "consumer": self.name,
            "consumer_seq": dseq, "stream_seq": sseq, "deliveries": _ack_num(dc)})
        delay: int | None = None
        if arg:
            try:
                if arg[:1] == b"{":
                    d = _dec.decode(arg)
                    v = d.get("delay", 0) if isinstance(d, dict) else None
                    delay = v if type(v) is int else None  # anything else: a plain NAK, as nats-server
                else:
                    delay = int(parse_duration(arg.decode()) * NS)
            except (msgspec.DecodeError, ValueError, UnicodeDecodeError):
                delay = None
        if delay is not None:
            # due `delay` from now: pending since now - ack_wait + delay, and checked right then
            if sseq in self._redeliver_set:
                self._redeliver_set.discard(sseq)
                self.redeliver.remove(sseq)
            p[1] = time.time_ns() - self.ack_wait + delay
            self._save()  # the delay outlives a restart, as on nats-server
            self.loop.call_later(max(0.0, delay / NS) + 0.002, self._scan_pending)
            return
        if sseq not in self._redeliver_set:
            self.redeliver.append(sseq)
            self._redeliver_set.add(sseq)

    def _ack_check_interval(self) -> float:
        return max(0.05, min(1.0, self.ack_wait / NS / 4))

    def _check_acks(self) -> None:
        if self.closed:
            return
        self._scan_pending()
        self._ack_timer = self.loop.call_later(self._ack_check_interval(), self._check_acks)

    def _scan_pending(self) -> None:
        """Queue for redelivery what has waited ack_wait (or its backoff) unacked. A message delivered
        max_deliver times leaves pending when its redelivery comes up (see `_next_msg`), as in
        nats-server; with max_deliver 1 right here."""
        if self.closed:
            return
        if self._ackq:
            self._drain_acks()
        if self.pending and self.ack != "none" and self.ack != "flow_control":  # flow_control: no ack wait
            now = time.time_ns()
            due = []
            wait_for = self._wait_for
            for s, (_, t) in self.pending.items():
                if now - t >= wait_for(s) and s not in self._redeliver_set:
                    due.append(s)
            for s in sorted(due):
                if self.max_deliver == 1:
                    self._max_delivered(s, 1)
                    continue
                self.redeliver.append(s)
                self._redeliver_set.add(s)
            if due:
                self.kick()

    def _wait_for(self, sseq: int) -> int:
        """How long a delivery of `sseq` waits for its ack: ack_wait, or the backoff step of its count."""
        if not self.backoff:
            return self.ack_wait
        return self.backoff[min(self.rdc.get(sseq, 1) - 1, len(self.backoff) - 1)]

    def _max_delivered(self, sseq: int, deliveries: int) -> None:
        """A message delivered max_deliver times and not acked: out of pending, never sent again, still
        counted as redelivered; the ack floor stays (nats-server moves it only with a later ack, and not
        past this one while anything is pending)."""
        p = self.pending.pop(sseq, None)
        if p is None:
            return
        self.rdc[sseq] = deliveries
        self._save()
        self.js.advisory(self.stream.jsa, f"CONSUMER.MAX_DELIVERIES.{self.stream.name}.{self.name}", {
            "type": "io.nats.jetstream.advisory.v1.max_deliver", "stream": self.stream.name,
            "consumer": self.name, "stream_seq": sseq, "deliveries": deliveries})

    # ------------------------------------------------------------------ life cycle

    def _arm_inactive(self, delay_ns: int = 0) -> None:
        if not self.inactive:
            return
        if self._inactive_handle is not None:
            self._inactive_handle.cancel()
        self._inactive_handle = self.loop.call_later((delay_ns or self.inactive) / NS, self._inactive_check)

    def _inactive_check(self) -> None:
        if self.closed:
            return
        if self.push and self._has_push_interest():
            self._arm_inactive()
            return
        if not self.push and self.waiting:
            self._arm_inactive()
            return
        if not self.push and self.pending and self.ack != "none":
            # a pull client may still be working on what it has: as nats-server, the threshold counts
            # from the last ack deadline of what is pending
            if self._ackq:
                self._drain_acks()
            now = time.time_ns()
            last = 0
            for s, (_, t) in self.pending.items():
                last = max(last, t + self._wait_for(s))
            if last + self.inactive > now:
                self._arm_inactive(last + self.inactive - now)
                return
        self.js.loop_task(self.delete())

    async def delete(self) -> None:
        """Delete this consumer (the API's delete, or removal for inactivity): stopped, out of its stream,
        the advisory sent."""
        if self.closed:
            return
        await self.stop(deleted=True)
        self.stream.remove_consumer(self.name)
        self.delete_advisory()

    def delete_advisory(self) -> None:
        self.js.advisory(self.stream.jsa, f"CONSUMER.DELETED.{self.stream.name}.{self.name}", {
            "type": "io.nats.jetstream.advisory.v1.consumer_action", "stream": self.stream.name,
            "consumer": self.name, "action": "delete"})

    def signal_shutdown(self) -> int:
        """The server is going down: each waiting pull request gets nats-server's `409 Server Shutdown`
        with what it still expected, so a client asks again once reconnected (and, its consumer gone,
        is told so) instead of waiting for a request the next server never heard of. Returns how many."""
        if self.closed:
            return 0
        for r in self.waiting:
            self._status(r.reply, 409, "Server Shutdown", r)
        return len(self.waiting)

    async def stop(self, deleted: bool = False) -> None:
        if self.closed:
            return
        if self._ackq:
            self._drain_acks()
        if not deleted:
            self._flush_state()
        self.closed = True
        for h in (self._ack_timer, self._hb_handle, self._inactive_handle, self._expire_handle, self._pace_handle,
                  self._pin_timer):
            if h is not None:
                h.cancel()
        for r in self.waiting:
            self._end_request(r)
            if deleted:
                self._status(r.reply, 409, "Consumer Deleted")
        self.waiting.clear()
        if self._ack_sub is not None:
            self.ic.unsubscribe(self._ack_sub)
            self.ic.account.sublist.remove_prefix(f"$JS.ACK.{self.stream.name}.{self.name}")
        if self._fc_sub is not None:
            self.ic.unsubscribe(self._fc_sub)

    # ------------------------------------------------------------------ info

    def num_pending(self) -> int:
        st = self.stream.store
        if self._lps is not None:
            return len([s for s in self._lps if s > self.sseq])
        if self.sseq >= st.last_seq:
            return 0
        if self._np is None:
            self._np = st.count(self.sseq + 1, self.flt)
        return self._np

    def info(self) -> dict[str, Any]:
        if self._ackq:
            self._drain_acks()
        delivered: dict[str, Any] = {"consumer_seq": self.dseq, "stream_seq": self.sseq}
        if self.last_delivered and self.dseq:
            delivered["last_active"] = rfc3339ns(self.last_delivered)
        floor: dict[str, Any] = {"consumer_seq": self.afloor_c, "stream_seq": self.afloor_s}
        if self.last_ack:
            floor["last_active"] = rfc3339ns(self.last_ack)
        out: dict[str, Any] = {
            "stream_name": self.stream.name, "name": self.name, "created": rfc3339ns(self.created),
            "config": self.config, "delivered": delivered, "ack_floor": floor,
            "num_ack_pending": len(self.pending),
            # max_deliver 1 never redelivers: nats-server reports none
            "num_redelivered": len(self.rdc) if self.max_deliver != 1 else 0,
            "num_waiting": len(self.waiting), "num_pending": self.num_pending(),
        }
        # nats-server reports `cluster` only for clustered consumers, `push_bound` only when true
        if self.push and self._has_push_interest():
            out["push_bound"] = True
        if self.paused_until and time.time_ns() < self.paused_until:
            out["paused"] = True
            out["pause_remaining"] = self.paused_until - time.time_ns()
        out["ts"] = rfc3339ns(time.time_ns())
        if self.groups:  # the first group's state (nats-server keeps one pin per consumer)
            pg: dict[str, Any] = {"group": self.groups[0]}
            if self.pin_id:
                pg["pinned_client_id"] = self.pin_id
            pg["pinned_ts"] = rfc3339ns(self.pinned_ts) if self.pinned_ts else ZERO_TIME
            out["priority_groups"] = [pg]
        return out

