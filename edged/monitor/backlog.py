"""The backlog you can see: what edged still has to take from its origins (each mirror and source) and
what a hub still has to take from edged (each consumer a hub's mirror or source created here), plus the
leafnode remotes those flows ride on. nats-server has no such view; edged publishes it under its own
names in /jsz (`edged_backlog`), in /metrics (`edged_sync_*`, `edged_origin_*`, `edged_leaf_remote_*`) and
through `edged status`.

A `BacklogTracker` samples every second what each flow has taken so far, so a rate (and from it a time
to drain) is known the moment somebody asks; the arithmetic is in `RateWindow` and `drain_seconds`.
Byte figures of a backlog are estimates: the messages not yet taken are counted exactly (the origin's
`pending` for a mirror or source, the store for a hub's consumer) and valued at the stream's mean
message size, because neither side stores a byte count per range.
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from edged.goformat import rfc3339
from edged.routing.receiver import KIND_LEAF

if TYPE_CHECKING:
    from edged.server import Server

SAMPLE_S = 1.0  # how often the tracker samples
WINDOW_S = 30.0  # the rate is taken over this much recent history
MIN_SPAN_S = 1.0  # a rate needs samples at least this far apart
FORGET_S = 600.0  # a hub consumer gone for this long is no longer reported


class RateWindow:
    """A monotonic counter sampled over time, and its recent rate (per second). A counter that goes
    back (an origin recreated, a position reset) starts the window over rather than show a negative
    rate."""

    def __init__(self, window: float = WINDOW_S) -> None:
        self.window = window
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, t: float, total: int) -> None:
        if self.samples and total < self.samples[-1][1]:
            self.samples.clear()
        self.samples.append((t, total))
        while len(self.samples) > 2 and t - self.samples[1][0] >= self.window:
            self.samples.popleft()

    def rate(self) -> float | None:
        """Counts per second over the window; None while the samples span less than MIN_SPAN_S."""
        if len(self.samples) < 2:
            return None
        (t0, n0), (t1, n1) = self.samples[0], self.samples[-1]
        if t1 - t0 < MIN_SPAN_S:
            return None
        return (n1 - n0) / (t1 - t0)


def drain_seconds(behind: int, rate: float | None) -> float | None:
    """Seconds until `behind` messages are taken at `rate` per second: 0 with nothing behind, None when
    nothing is moving (or the rate is not known yet), so "never at this pace" is not shown as a number."""
    if behind <= 0:
        return 0.0
    if rate is None or rate <= 0:
        return None
    return behind / rate


def mean_size(msgs: int, nbytes: int) -> float:
    return nbytes / msgs if msgs > 0 else 0.0


@dataclass
class _OriginSeen:
    """A hub-created consumer's last known position, kept after the consumer is gone (a hub that is
    away lets it expire) so what the hub still has to take stays visible during the outage."""

    account: str
    stream: str
    consumer: str
    filters: list[str]
    deliver_subject: str
    sseq: int = 0
    last_delivery_ns: int = 0
    gone_at: float = 0.0
    rate: RateWindow = field(default_factory=RateWindow)


class BacklogTracker:
    """Per-server sampler of the flows' progress (started with the monitoring port)."""

    def __init__(self, server: Server) -> None:
        self._server = weakref.ref(server)
        self.sync_rates: dict[tuple[str, str, str, str], RateWindow] = {}
        self.origins: dict[tuple[str, str, tuple[str, ...]], _OriginSeen] = {}
        self.down_since: dict[int, float] = {}  # remote index -> when it was first seen down
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self.sample()
            self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(SAMPLE_S)
            try:
                self.sample()
            except Exception:  # a stream torn down mid-sample: the next one sees a consistent state
                pass

    # ------------------------------------------------------------------ sampling

    def sample(self) -> None:
        server = self._server()
        if server is None:
            return
        now = time.monotonic()
        lm = server.leafnodes
        if lm is not None:
            for lk in lm.links:
                if lk.is_connected:
                    self.down_since.pop(lk.index, None)
                else:
                    self.down_since.setdefault(lk.index, time.time())
        js = server.jetstream
        if js is None:
            return
        seen: set[tuple[str, str, tuple[str, ...]]] = set()
        for jsa in list(js.accounts.values()):
            for st in list(jsa.streams.values()):
                sync = st.sync
                if sync is not None:
                    for s in sync.all():
                        key = (jsa.account.name, st.name, "mirror" if s.mirror else "source", s.iname)
                        self.sync_rates.setdefault(key, RateWindow()).add(now, s.sseq)
                for c in list(st.consumers.values()):
                    if not c.direct:
                        continue
                    okey = (jsa.account.name, st.name, tuple(c.filters))
                    if okey not in self.origins and not _via_link(st, c.deliver_subject):
                        continue  # a mirror or source on this server: not the hub's
                    o = self.origins.get(okey)
                    if o is None:
                        o = self.origins[okey] = _OriginSeen(jsa.account.name, st.name, c.name,
                                                             list(okey[2]), c.deliver_subject or "")
                    o.consumer, o.deliver_subject, o.gone_at = c.name, c.deliver_subject or "", 0.0
                    o.sseq = c.sseq
                    o.last_delivery_ns = c.last_delivered or o.last_delivery_ns
                    o.rate.add(now, c.sseq)
                    seen.add(okey)
        for okey, o in list(self.origins.items()):
            if okey in seen:
                continue
            if not o.gone_at:
                o.gone_at = now
            elif now - o.gone_at > FORGET_S:
                del self.origins[okey]

    # ------------------------------------------------------------------ the document

    def document(self) -> dict[str, Any]:
        server = self._server()
        if server is None:
            return {}
        return {"leaf_remotes": self._remotes(server), "syncs": self._syncs(server),
                "origin_consumers": self._origins(server)}

    def _remotes(self, server: Server) -> list[dict[str, Any]]:
        lm = server.leafnodes
        out: list[dict[str, Any]] = []
        if lm is None:
            return out
        for lk in lm.links:
            c = lk.conn if lk.is_connected else None
            out.append({
                "account": lk.account.name,
                "url": c.url.redacted() if c is not None else "",
                "urls": [u.redacted() for u in lk.urls],
                "connected": c is not None,
                "rtt_seconds": c.rtt if c is not None else None,
                "since": rfc3339(lk.connected_since if c is not None else self.down_since.get(lk.index)),
                "connects": lk.connects,
                "last_error": lk.last_error,
            })
            if lk.creds is not None:
                out[-1]["creds"] = lk.creds.status(lm.creds_settings.expiry_warning_days)
        return out

    def _syncs(self, server: Server) -> list[dict[str, Any]]:
        js = server.jetstream
        out: list[dict[str, Any]] = []
        if js is None:
            return out
        now_ns = time.time_ns()
        for jsa in sorted(js.accounts.values(), key=lambda a: a.account.name):
            for st in sorted(jsa.streams.values(), key=lambda s: s.name):
                if st.sync is None:
                    continue
                size = mean_size(st.store.msgs, st.store.bytes)
                for s in st.sync.all():
                    kind = "mirror" if s.mirror else "source"
                    rw = self.sync_rates.get((jsa.account.name, st.name, kind, s.iname))
                    rate = rw.rate() if rw is not None else None
                    behind = max(s.lag, 0)
                    taken_ts = getattr(s, "taken_ts", 0)
                    oldest = (now_ns - taken_ts) / 1e9 if behind and taken_ts else 0.0
                    out.append({
                        "account": jsa.account.name, "stream": st.name, "kind": kind, "origin": s.name,
                        "api": s.api, "syncing": s.active(),
                        "msgs_behind": behind, "bytes_behind": int(behind * size),
                        "oldest_age_seconds": max(oldest, 0.0),
                        "last_contact": rfc3339(s.last_ns / 1e9 if s.last_ns else None),
                        "last_contact_seconds": (now_ns - s.last_ns) / 1e9 if s.last_ns else None,
                        "origin_seq": s.sseq,
                        "rate_msgs_per_second": rate,
                        "drain_seconds": drain_seconds(behind, rate),
                        "error": (s.err or {}).get("description", "") if s.err else "",
                    })
        return out

    def _origins(self, server: Server) -> list[dict[str, Any]]:
        js = server.jetstream
        out: list[dict[str, Any]] = []
        if js is None:
            return out
        for o in sorted(self.origins.values(), key=lambda o: (o.account, o.stream, o.filters)):
            jsa = js.accounts.get(o.account)
            st = jsa.streams.get(o.stream) if jsa is not None else None
            if st is None:
                continue
            c = st.consumers.get(o.consumer)
            store = st.store
            if c is not None and c.direct:
                pending = c.num_pending()
            elif o.sseq >= store.last_seq:
                pending = 0
            else:
                flt = o.filters
                pending = store.count(o.sseq + 1, flt[0] if len(flt) == 1 else (list(flt) or None))
            rate = o.rate.rate()
            out.append({
                "account": o.account, "stream": o.stream, "consumer": o.consumer, "filters": o.filters,
                "deliver_subject": o.deliver_subject, "active": c is not None,
                "pending_msgs": pending,
                "pending_bytes": int(pending * mean_size(store.msgs, store.bytes)),
                "delivered_stream_seq": o.sseq,
                "last_delivery": rfc3339(o.last_delivery_ns / 1e9 if o.last_delivery_ns else None),
                "rate_msgs_per_second": rate,
                "drain_seconds": drain_seconds(pending, rate),
            })
        return out


def _via_link(stream: Any, deliver_subject: str) -> bool:
    """Is the consumer's deliver subject wanted over a leafnode (a hub's mirror or source), rather than
    by a mirror or source of this server?"""
    if not deliver_subject:
        return False
    psubs, qgroups = stream.account.sublist.match(deliver_subject)
    return any(getattr(s.conn, "kind", "") == KIND_LEAF for s in psubs) or any(
        getattr(s.conn, "kind", "") == KIND_LEAF for g in qgroups for s in g)


_TRACKERS: weakref.WeakKeyDictionary[Server, BacklogTracker] = weakref.WeakKeyDictionary()


def tracker_of(server: Server) -> BacklogTracker:
    t = _TRACKERS.get(server)
    if t is None:
        t = _TRACKERS[server] = BacklogTracker(server)
    return t


def backlog(server: Server) -> dict[str, Any]:
    """/jsz's `edged_backlog`: the tracker's figures (sampled now too, so a first request has them)."""
    t = tracker_of(server)
    t.sample()
    return t.document()


def finite(v: float | None) -> float:
    """A figure for a Prometheus gauge: unknown is NaN."""
    return math.nan if v is None else v
