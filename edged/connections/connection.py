"""The one base of every connection kind: socket reads, output buffering, flushing, slow consumers,
ping/RTT, timers, stats and close.

A connection kind (NATS client, leafnode, later MQTT) subclasses `Connection`, gives it a sans-I/O
`parser` whose `feed(bytes)` returns events, and implements `process(events)` and the `Receiver`
delivery methods, framing messages in its own protocol. Everything else is here, once.

asyncio Protocols are used instead of stream objects because the hot path must not await per message:
a read is parsed whole, every message routed synchronously, and each receiving connection's output is
coalesced into one socket write per read (`Server.flush_soon` / `flush_now`).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from edged.connections.listener import peer_address
from edged.connections.protocol import frame_run
from edged.connections.reads import SlicedReads
from edged.log import log
from edged.routing.receiver import KIND_LEAF, Receiver, Subscription

if TYPE_CHECKING:
    from edged.server import Server


class Connection(SlicedReads, Receiver):
    """State and behaviour shared by every connection kind. Subclasses set `parser` and implement
    `process`, `deliver`, and the hooks `_release` (drop subscriptions and registrations on close) and
    `_stale` (what to say when pings go unanswered)."""

    parser: Any
    ping_word = b"PING\r\n"
    pong_word = b"PONG\r\n"

    def __init__(self, server: Server) -> None:
        self.server = server
        self.opts = server.opts
        self.cid = server.next_cid()
        self.transport: Any = None
        self.out: list[bytes] = []
        self.pending = 0
        self.flush_queued = False
        self.closed = False
        self.close_reason = ""
        self.subs: dict[str, Subscription] = {}
        self.start = time.time()
        self.last_activity = self.start
        self.in_msgs = 0
        self.in_bytes = 0
        self.out_msgs = 0
        self.out_bytes = 0
        self.pings_out = 0
        self.rtt = 0.0
        self.rtt_start = 0.0
        self.host = ""
        self.port = 0
        self._timers: list[asyncio.TimerHandle] = []
        self._ping_handle: asyncio.TimerHandle | None = None
        self._stall_since = 0.0
        # True while a TLS upgrade is in flight: output waits for the new transport
        self._upgrading = False

    # ------------------------------------------------------------------ the read path

    def connection_made(self, transport: Any) -> None:
        if self.transport is not None:
            # start_tls hands the protocol a new transport; nothing else to set up
            self.transport = transport
            return
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if peer:
            self.host, self.port = peer_address(peer)
        self._connected(transport)

    def _connected(self, transport: Any) -> None:
        """The socket is up (called once, not again after a TLS upgrade): greet the peer, start timers."""

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.last_activity = time.time()
        events = self.parser.feed(data)
        if events:
            srv = self.server
            ctx = srv.reading
            ctx.begin(self)
            try:
                self.process(events)
                # flush what this read produced now rather than a loop turn later: lower request latency,
                # and the whole read is still coalesced into one write per receiving connection
                for hook in ctx.hooks:
                    hook()
                if srv._flushq:
                    srv.flush_now()
            finally:
                # what could wait for the output (a consumer's acks) is done while the peer reads it
                ctx.end()

    def process(self, events: list[Any]) -> None:
        raise NotImplementedError

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.close(self._lost_reason(exc), flush=False)

    def _lost_reason(self, exc: Exception | None) -> str:
        return "Client Closed"

    def pause_writing(self) -> None:
        self._stall_since = time.monotonic()

    def resume_writing(self) -> None:
        self._stall_since = 0.0

    def _on_pong(self) -> None:
        self.pings_out = 0
        if self.rtt_start:
            self.rtt = time.monotonic() - self.rtt_start
            self.rtt_start = 0.0

    # ------------------------------------------------------------------ output

    def queued(self, n: int) -> None:
        """`n` bytes were appended to `out`: count them and make sure a flush follows this read."""
        self.pending += n
        if not self.flush_queued:
            self.flush_queued = True
            self.server.flush_soon(self)

    def _queue_run(self, sub: Subscription, payloads: list[bytes], prefix: bytes) -> None:
        """Header-less messages framed as `<prefix><size>` CRLF `<payload>` CRLF each (NATS MSG and leaf
        LMSG share that shape), equal sizes with one join (`frame_run`), with deliver()'s bookkeeping."""
        n = len(payloads)
        sub.delivered += n
        total, added = frame_run(self.out, payloads, prefix)
        self.out_msgs += n
        self.out_bytes += total
        self.queued(added)

    def send_raw(self, data: bytes) -> None:
        if self.closed:
            return
        self.out.append(data)
        self.pending += len(data)
        if not self.flush_queued:
            self.flush_queued = True
            self.server.flush_soon(self)

    def flush(self) -> None:
        self.flush_queued = False
        out = self.out
        t = self.transport
        if not out or t is None or self._upgrading:
            return
        if t.is_closing():
            out.clear()
            self.pending = 0
            return
        data = b"".join(out) if len(out) > 1 else out[0]
        out.clear()
        self.pending = 0
        t.write(data)
        if t.get_write_buffer_size() > self.opts.max_pending:
            self._slow_consumer()
        elif self._stall_since and time.monotonic() - self._stall_since > self.opts.write_deadline:
            self._slow_consumer()

    def _slow_consumer(self) -> None:
        """The peer does not read what it is sent: nats-server closes it, counting a slow consumer."""
        if self.closed:
            return
        self.server.slow_consumers += 1
        self._log_slow_consumer(self.pending + (self.transport.get_write_buffer_size() if self.transport else 0))
        self.out.clear()
        self.pending = 0
        self.close("Slow Consumer (Pending Bytes)", flush=False, abort=True)

    def _log_slow_consumer(self, pending: int) -> None:
        log.info("%s:%d - cid:%d - Slow Consumer Detected: pending bytes %d", self.host, self.port, self.cid,
                 pending)

    # ------------------------------------------------------------------ pings and timers

    def ping_interval(self) -> float:
        return self.opts.ping_interval

    def _schedule_ping(self, first: float | None = None) -> None:
        iv = self.ping_interval()
        if iv > 0:
            if first is None:
                # nats-server adds jitter to the first ping so connections do not ping in lockstep
                first = iv * (1.0 - 0.2 * random.random()) if iv > 1 else iv
            self._ping_handle = self.server.loop.call_later(first, self._ping_tick)

    def _ping_tick(self) -> None:
        if self.closed:
            return
        if self.pings_out + 1 > self.opts.ping_max:
            self._stale()
            return
        self.pings_out += 1
        self.rtt_start = time.monotonic()
        self.send_raw(self.ping_word)
        self._ping_handle = self.server.loop.call_later(self.ping_interval(), self._ping_tick)

    def _stale(self) -> None:
        """Pings went unanswered."""
        self.send_raw(b"-ERR 'Stale Connection'\r\n")
        self.close("Stale Connection")

    def _later(self, delay: float, fn: Callable[[], None]) -> asyncio.TimerHandle:
        h = self.server.loop.call_later(delay, fn)
        self._timers.append(h)
        return h

    def _cancel_timers(self) -> None:
        for t in self._timers:
            t.cancel()
        self._timers.clear()

    # ------------------------------------------------------------------ closing

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
        if reason == "Stale Connection":  # /varz stale_connections, as nats-server counts them
            self.server.stale_connections += 1
            if self.kind == KIND_LEAF:
                self.server.stale_leafs += 1
        self._cancel_timers()
        if self._ping_handle is not None:
            self._ping_handle.cancel()
        self._release()
        t = self.transport
        if t is not None:
            if abort:
                t.abort()
            else:
                t.close()
        self._closed()

    def _release(self) -> None:
        """Drop this connection's subscriptions and registrations (the connection is closed)."""

    def _closed(self) -> None:
        """After the transport is closed: tell whoever waits for it."""

    def auto_unsubscribe(self, sub: Subscription) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ server events (clients)

    def enter_lame_duck(self) -> None:
        """The server is going away (lame duck mode): tell the peer, in its protocol, if it can be told."""

    def reauthorize(self) -> None:
        """The auth configuration was reloaded: apply it to this connection (close it if no longer allowed)."""

    def info(self) -> dict[str, Any]:
        """Identity for monitoring (/connz) and the closed-connections ring; kinds add their own fields."""
        return {
            "cid": self.cid,
            "kind": self.kind,
            "ip": self.host,
            "port": self.port,
            "start": self.start,
            "last_activity": self.last_activity,
            "rtt": self.rtt,
            "pending_bytes": self.pending,
            **self.stats(),
        }

    def stats(self) -> dict[str, Any]:
        """The counters every kind reports in monitoring."""
        return {
            "in_msgs": self.in_msgs,
            "out_msgs": self.out_msgs,
            "in_bytes": self.in_bytes,
            "out_bytes": self.out_bytes,
            "subscriptions": len(self.subs),
        }
