"""One stream's sequence range [lo, hi] read over NATS, as Arrow record batches in the pipeline's schema.

Each range gets an ephemeral push consumer (ack none, flow control, memory storage: what nats-py's
ordered consumer asks for) starting at `lo`, on a raw subscription: the reply subject carries the
stream sequence, the time and the count still pending, and the header block comes as stored. The
read ends at the first message past `hi`, at `hi` itself, or when nothing matching is pending;
consumer sequences must follow on from each other, and a gap (a message the server dropped) starts
a new consumer just past the last message kept, so a range is read with nothing missing or twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from pipeline import natsconn
from pipeline.headers import parse_headers
from pipeline.natsconn import RawClient, connect, js_api_prefix, stream_info
from pipeline.options import Conn, PipelineError
from pipeline.schema import ARROW_SCHEMA
from pipeline.wire import Msg

CHUNK = 8192
_TIME = pa.timestamp("us", tz="UTC")
HEARTBEAT = 1.0


class _Gap(Exception):
    pass


class Columns:
    """Rows kept column by column as they arrive: no tuple per row, and no transposing for Arrow.

    Sequence and time are either `seqs` and `times` (ns), or left in each delivery's ack reply
    (`acks`, split `cut` times from the right: [1] the stream sequence, [3] the time), for Arrow to
    take apart a batch at a time.
    """

    __slots__ = ("seqs", "times", "acks", "cut", "subjects", "hdrs", "datas")

    def __init__(self, cut: int = 0) -> None:
        self.seqs: list[int] = []
        self.times: list[int] = []
        self.acks: list[bytes] = []
        self.cut = cut
        self.subjects: list[bytes | str] = []
        self.hdrs: list[bytes | None] = []
        self.datas: list[bytes] = []

    def __len__(self) -> int:
        return len(self.datas)


class RangeReader:
    """Reads [lo, hi] of a stream; `next_chunk()` hands out the rows (`Columns`) as they arrive."""

    def __init__(self, nc: RawClient, conn: Conn, stream: str, lo: int, hi: int, filter_subject: str | None,
                 chunk: int = CHUNK) -> None:
        self.nc, self.conn, self.stream = nc, conn, stream
        self.lo, self.hi, self.filter = lo, hi, filter_subject
        self.chunk = chunk
        self.last_sseq = lo - 1
        self._rows = Columns()
        self._ready: asyncio.Queue[Columns | None] = asyncio.Queue()
        self._done = False
        self._gap = False
        self._dseq = 0
        self._cut = 0  # how far an ack reply is split from the right (its form is fixed per consumer)
        self._consumer: str | None = None
        self._sub: Any = None
        self._idle = asyncio.Event()
        self._api = js_api_prefix(conn.domain)

    # the raw handler: one call per run of deliveries, on the client's read loop
    def _on_msgs(self, msgs: list[Msg]) -> None:
        if self._done or self._gap:
            return
        hi, chunk, dseq, cut = self.hi, self.chunk, self._dseq, self._cut
        cols = self._rows
        cols.cut = cut
        n = len(msgs)
        if cut and n > 1 and self._whole_run(msgs, n, dseq, hi):
            cols.acks += [m[1] for m in msgs]
            cols.subjects += [m[0] for m in msgs]
            cols.hdrs += [m[2] for m in msgs]
            cols.datas += [m[3] for m in msgs]
            if len(cols) >= chunk:
                self._ready.put_nowait(cols)
                self._rows = Columns(cut)
            return
        last = self.last_sseq
        acks, subjects, hdrs, datas = cols.acks, cols.subjects, cols.hdrs, cols.datas
        end = False
        for subject, reply, hdr, data in msgs:
            if not reply.startswith(b"$JS.ACK."):
                if reply:  # flow control request: answer so the server goes on
                    asyncio.ensure_future(self.nc.publish(reply.decode()))
                else:
                    self._idle.set()
                continue
            if not cut:
                # v1 $JS.ACK.<stream>.<consumer>.<n>.<sseq>.<dseq>.<time>.<pending> (9 tokens); v2 has
                # <domain>.<account hash> before the stream and maybe a token after pending: split from
                # the right just far enough that [1:5] are sseq, dseq, time and pending
                dots = reply.count(b".")
                cut = self._cut = cols.cut = 4 if dots == 8 else dots - 6
            t = reply.rsplit(b".", cut)
            if int(t[2]) != dseq + 1:
                self._gap = True
                self._ready.put_nowait(Columns())
                break
            dseq += 1
            sseq = int(t[1])
            if sseq > hi:
                end = True
                break
            acks.append(reply)
            subjects.append(subject)
            hdrs.append(hdr)
            datas.append(data)
            last = sseq
            if sseq >= hi or t[4] == b"0":
                end = True
                break
            if len(datas) >= chunk:
                self._ready.put_nowait(cols)
                cols = self._rows = Columns(cut)
                acks, subjects, hdrs, datas = cols.acks, cols.subjects, cols.hdrs, cols.datas
        self._dseq, self.last_sseq = dseq, last
        if end:
            self._finish()

    def _whole_run(self, msgs: list[Msg], n: int, dseq: int, hi: int) -> bool:
        """Whether the run can be kept whole without a look at each message: all deliveries (no flow
        control or heartbeat), the first just after the last kept and the last n on (delivery sequences
        only rise, so none is missing), the last still short of `hi` and with more to come."""
        first, last = msgs[0][1], msgs[-1][1]
        if not (first.startswith(b"$JS.ACK.") and last.startswith(b"$JS.ACK.")):
            return False
        a, b = first.rsplit(b".", self._cut), last.rsplit(b".", self._cut)
        if int(a[2]) != dseq + 1 or int(b[2]) != dseq + n or b[4] == b"0":
            return False
        sseq = int(b[1])
        if sseq >= hi or b"".join([m[1] for m in msgs]).count(b"$JS.ACK.") != n:
            return False
        self._dseq, self.last_sseq = dseq + n, sseq
        return True

    def _finish(self) -> None:
        self._done = True
        if self._rows:
            self._ready.put_nowait(self._rows)
            self._rows = Columns(self._cut)
        self._ready.put_nowait(None)

    async def _start_consumer(self, start: int) -> None:
        inbox = self.nc.new_inbox()
        self._sub = await self.nc.raw_subscribe(inbox, self._on_msgs)
        cfg = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=max(1, start),
                             ack_policy=AckPolicy.NONE, max_deliver=1, flow_control=True,
                             idle_heartbeat=HEARTBEAT, deliver_subject=inbox, filter_subject=self.filter,
                             mem_storage=True, num_replicas=1, inactive_threshold=30.0)
        jsm = natsconn.jsm(self.nc, self.conn)
        try:
            info = await jsm.add_consumer(self.stream, config=cfg)
        except Exception as e:
            raise PipelineError(f"stream {self.stream!r}: cannot create a consumer to read it: {e}") from None
        self._consumer = info.name
        if not info.num_pending:
            self._finish()

    async def _stop_consumer(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self.nc.raw_unsubscribe(self._sub)
            self._sub = None
        if self._consumer is not None:
            name, self._consumer = self._consumer, None
            with contextlib.suppress(Exception):
                await self.nc.request(f"{self._api}.CONSUMER.DELETE.{self.stream}.{name}", b"", timeout=2)

    async def start(self) -> None:
        if self.lo > self.hi:
            self._finish()
        else:
            await self._start_consumer(self.lo)

    async def next_chunk(self) -> Columns | None:
        """The next rows (at least one), or None at the end of the range."""
        while True:
            if self._gap:
                # the rows kept so far follow on from each other: keep them, start again just after
                await self._stop_consumer()
                if self._rows:
                    self._ready.put_nowait(self._rows)
                    self._rows = Columns(self._cut)
                self._gap, self._dseq, self._cut = False, 0, 0
                await self._start_consumer(self.last_sseq + 1)
            try:
                rows = self._ready.get_nowait()
            except asyncio.QueueEmpty:
                rows = await self._wait()
                if rows is False:
                    continue
            if rows is None:
                await self._stop_consumer()
                return None
            if rows:
                return rows

    async def _wait(self) -> Any:
        """A chunk, or False after an idle heartbeat (a partial chunk is handed out; the end is checked)."""
        get = asyncio.ensure_future(self._ready.get())
        self._idle.clear()
        idle = asyncio.ensure_future(self._idle.wait())
        done, _ = await asyncio.wait({get, idle}, timeout=self.conn.timeout + 3 * HEARTBEAT,
                                     return_when=asyncio.FIRST_COMPLETED)
        if get in done:
            idle.cancel()
            return get.result()
        get.cancel()
        idle.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await get
        if not done:
            raise PipelineError(f"stream {self.stream!r}: no delivery or heartbeat for {self.conn.timeout}s "
                                f"reading sequences {self.lo}..{self.hi}")
        # idle: hand out what has come, and end if the stream holds nothing more for this range
        if self._rows:
            self._ready.put_nowait(self._rows)
            self._rows = Columns(self._cut)
        elif not self._done and await self._nothing_pending():
            self._finish()
        return False

    async def _nothing_pending(self) -> bool:
        jsm = natsconn.jsm(self.nc, self.conn)
        try:
            info = await jsm.consumer_info(self.stream, self._consumer or "")
        except Exception:
            return False
        if info.num_pending == 0 and info.delivered.consumer_seq == self._dseq:
            return True
        return info.delivered.consumer_seq != self._dseq and self._mark_gap()

    def _mark_gap(self) -> bool:
        self._gap = True
        return False


def rows_to_batch(stream: str, rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    """(seq, subject, time ns, header block, data) rows as one record batch of the pipeline's schema."""
    cols = Columns()
    cols.seqs, cols.subjects, cols.times = [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
    cols.hdrs, cols.datas = [r[3] for r in rows], [r[4] for r in rows]
    return columns_to_batch(stream, cols)


def columns_to_batch(stream: str, cols: Columns) -> pa.RecordBatch:
    """Rows as one record batch of the pipeline's schema (Arrow converts each column in one call)."""
    headers = [None if not h else list(parse_headers(h).items()) for h in cols.hdrs]  # type: ignore[union-attr]
    if cols.acks:
        parts = pc.split_pattern(pa.array(cols.acks, pa.string()), ".", max_splits=cols.cut, reverse=True)
        seqs, times = pc.list_element(parts, 1).cast(pa.int64()), pc.list_element(parts, 3).cast(pa.int64())
    else:
        seqs, times = pa.array(cols.seqs, pa.int64()), pa.array(cols.times, pa.int64())
    return pa.RecordBatch.from_arrays([
        pa.repeat(pa.scalar(stream, pa.string()), len(cols)),
        seqs,
        pa.array(cols.subjects, pa.string()),  # bytes or str: Arrow checks the UTF-8 itself
        pc.divide(times, 1000).cast(_TIME),
        pa.array(headers, ARROW_SCHEMA.field("headers").type),
        pa.array(cols.datas, pa.binary()),
    ], schema=ARROW_SCHEMA)


def read_range(conn: Conn, stream: str, lo: int, hi: int, filter_subject: str | None) -> Iterator[pa.RecordBatch]:
    """[lo, hi] as record batches, on an event loop of this (executor) thread's own."""
    if lo > hi:
        return
    loop = asyncio.new_event_loop()
    try:
        nc = loop.run_until_complete(connect(conn))
        try:
            reader = RangeReader(nc, conn, stream, lo, hi, filter_subject)
            loop.run_until_complete(reader.start())
            while (cols := loop.run_until_complete(reader.next_chunk())) is not None:
                yield columns_to_batch(stream, cols)
        finally:
            loop.run_until_complete(nc.close())
    finally:
        loop.close()


async def resolve_range(nc: RawClient, conn: Conn, stream: str, start_seq: int | None, end_seq: int | None,
                        start_time: datetime | None) -> tuple[int, int]:
    """The stream's [lo, hi] to read now: options first, then the stream's first and last sequence."""
    info = await stream_info(nc, conn, stream)
    first, last = info.state.first_seq, info.state.last_seq
    lo = start_seq if start_seq is not None else max(first, 1)
    if start_time is not None:
        lo = await seq_at_time(nc, conn, stream, start_time, last)
    hi = last if end_seq is None else min(end_seq, last)
    return lo, hi


async def seq_at_time(nc: RawClient, conn: Conn, stream: str, t: datetime, last: int) -> int:
    """The first sequence stored at or after `t` (last + 1 if none): where a consumer started by time begins."""
    inbox = nc.new_inbox()
    first: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def on_msgs(msgs: list[Msg]) -> None:
        for _subject, reply, _hdr, _data in msgs:
            if reply.startswith(b"$JS.ACK.") and not first.done():
                toks = reply.split(b".")
                first.set_result(int(toks[5 if len(toks) == 9 else 7]))

    sub = await nc.raw_subscribe(inbox, on_msgs)
    cfg = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=t.isoformat(),
                         ack_policy=AckPolicy.NONE, max_deliver=1, deliver_subject=inbox, mem_storage=True,
                         num_replicas=1, inactive_threshold=10.0, flow_control=True, idle_heartbeat=HEARTBEAT)
    jsm = natsconn.jsm(nc, conn)
    info = await jsm.add_consumer(stream, config=cfg)
    try:
        if not info.num_pending:
            return last + 1
        deadline = time.monotonic() + conn.timeout
        return await asyncio.wait_for(first, max(0.1, deadline - time.monotonic()))
    finally:
        await nc.raw_unsubscribe(sub)
        with contextlib.suppress(Exception):
            await jsm.delete_consumer(stream, info.name)
