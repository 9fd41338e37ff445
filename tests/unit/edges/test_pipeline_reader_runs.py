"""The range reader's delivery handler (pipeline/jsread.py, `RangeReader._on_msgs`) on runs of deliveries
as the frame splitter hands them out: whatever the cut into runs, with heartbeats between deliveries, a
dropped delivery, interior deletes and the end of the range, it keeps exactly the rows that reading the
deliveries one by one keeps (in order, each once), and stops or flags a gap where that does. The
deliveries are made as a server frames them, in both ack reply forms; no sockets."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from pipeline.jsread import Columns, RangeReader, columns_to_batch
from pipeline.options import ReadOptions

CONN = ReadOptions.from_options({"servers": "nats://127.0.0.1:4222", "stream": "S"}).conn
HB = (b"_INBOX.x", b"", b"NATS/1.0 100 Idle Heartbeat\r\n\r\n", b"")


def ack(v2: bool, sseq: int, dseq: int, pending: int) -> bytes:
    if v2:
        return b"$JS.ACK.hub.ACCHASH.S.C.1.%d.%d.%d.%d.tok" % (sseq, dseq, 1_700_000_000_000_000_000 + sseq, pending)
    return b"$JS.ACK.S.C.1.%d.%d.%d.%d" % (sseq, dseq, 1_700_000_000_000_000_000 + sseq, pending)


def one_by_one(msgs: list[tuple[bytes, ...]], hi: int) -> tuple[list[int], bool, bool]:
    """What reading each delivery in turn keeps: the sequences, whether it ended, whether it hit a gap."""
    kept: list[int] = []
    dseq = 0
    for _subject, reply, _hdr, _data in msgs:
        if not reply.startswith(b"$JS.ACK."):
            continue
        t = reply.split(b".")
        i = 5 if len(t) == 9 else 7
        sseq, d, pending = int(t[i]), int(t[i + 1]), int(t[i + 3])
        if d != dseq + 1:
            return kept, False, True
        dseq = d
        if sseq > hi:
            return kept, True, False
        kept.append(sseq)
        if sseq >= hi or pending == 0:
            return kept, True, False
    return kept, False, False


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[list[tuple[bytes, ...]], int, list[int]]:
    n = draw(st.integers(1, 60))
    seqs, s = [], 0
    for _ in range(n):
        s += draw(st.integers(1, 3))  # interior deletes skip sequences
        seqs.append(s)
    v2 = draw(st.booleans())
    drop = draw(st.one_of(st.none(), st.integers(0, n - 1)))  # a delivery the server dropped
    msgs: list[tuple[bytes, ...]] = []
    dseq = 0
    for k, sseq in enumerate(seqs):
        dseq += 1
        if k == drop:
            continue
        if draw(st.integers(0, 9)) == 0:
            msgs.append(HB)
        msgs.append((b"s.%d" % (sseq % 3), ack(v2, sseq, dseq, len(seqs) - 1 - k), b"", b"d%d" % sseq))
    hi = draw(st.integers(1, s + 2))
    cuts = sorted(draw(st.lists(st.integers(0, len(msgs)), max_size=8)))
    return msgs, hi, cuts


def collected(reader: RangeReader) -> tuple[list[int], list[bytes]]:
    seqs: list[int] = []
    datas: list[bytes] = []
    chunks: list[Columns] = []
    while not reader._ready.empty():
        c = reader._ready.get_nowait()
        if c:
            chunks.append(c)
    if reader._rows:
        chunks.append(reader._rows)
    for c in chunks:
        b = columns_to_batch("S", c)
        seqs += b.column("seq").to_pylist()
        datas += b.column("data").to_pylist()
        assert [t.value for t in b.column("time")] == [
            (1_700_000_000_000_000_000 + q) // 1000 for q in b.column("seq").to_pylist()]
    return seqs, datas


# a heartbeat where a dropped delivery was: the run's first and last delivery sequences look complete
HB_FOR_DROP = ([(b"s", ack(False, 1, 1, 3), b"", b"d1"), HB, (b"s", ack(False, 3, 3, 1), b"", b"d3"),
                (b"s", ack(False, 4, 4, 0), b"", b"d4")], 9, [])


@given(deliveries(), st.integers(1, 7))
@example(HB_FOR_DROP, 7)
@settings(max_examples=400, deadline=None)
def test_runs_keep_what_one_by_one_keeps(case: tuple[list[tuple[bytes, ...]], int, list[int]], chunk: int) -> None:
    msgs, hi, cuts = case
    reader = RangeReader(Any, CONN, "S", 1, hi, None, chunk=chunk)  # type: ignore[arg-type]
    bounds = [0, *cuts, len(msgs)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        if b > a:
            reader._on_msgs(msgs[a:b])  # type: ignore[arg-type]
    want, ended, gap = one_by_one(msgs, hi)
    seqs, datas = collected(reader)
    assert seqs == want
    assert datas == [b"d%d" % q for q in want]
    assert reader._done == ended and reader._gap == gap
    if want:
        assert reader.last_sseq == want[-1]
