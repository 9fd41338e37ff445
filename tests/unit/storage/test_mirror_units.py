"""The pure parts of mirrors and sources: ack reply parsing (v1 and v2), the headers a mirror or source
drops, a source's index name and nats-server's hash in it, and the store keeping a mirror's sequences
(`skip_to`) on both backends, across a reopen of the SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest

from edged.jetstream.mirror import _strip, parse_ack_reply
from edged.jetstream.stream import go_hash, index_name
from storage import MemoryStore, SQLiteStore


def test_ack_reply_v1_v2_and_junk() -> None:
    assert parse_ack_reply("$JS.ACK.ORDERS.pbd5nHeY.1.2.3.1795345574312431914.7") == (
        "pbd5nHeY", 1, 2, 3, 1795345574312431914, 7)
    assert parse_ack_reply("$JS.ACK.hub.ACCHASH1.ORDERS.c1.1.9.4.100.0.tok") == ("c1", 1, 9, 4, 100, 0)
    for junk in ("", "$JS.ACK.a.b.c", "$JS.ACK.S.C.x.2.3.4.5", "_INBOX.a.b.c.d.e.f.g.h", "$JS.ACK.a.b.1.2.3.4.5.6"):
        assert parse_ack_reply(junk) is None, junk


def test_hash_and_index_name_as_nats_server() -> None:
    # verified against a 2.15 hub's header (leafnode-protocol.md §8.7)
    assert go_hash("$JS.edge.API") == "n1VdnVvB"
    ext = {"api": "$JS.edge.API", "deliver": ""}
    assert index_name({"name": "ESTREAM", "external": ext, "filter_subject": "e.>"}) == "ESTREAM:n1VdnVvB e.> >"
    assert index_name({"name": "S"}) == "S > >"
    trs = [{"src": "a.*", "dest": "b.{{wildcard(1)}}"}, {"src": "", "dest": ""}]
    assert index_name({"name": "S", "subject_transforms": trs}) == "S a.*\f> b.{{wildcard(1)}}\f>"


def test_headers_dropped_when_mirrored_or_sourced() -> None:
    hdr = (b"NATS/1.0\r\nNats-Expected-Last-Sequence: 4\r\nKeep: 1\r\nNats-Stream-Source: X 1 > >\r\n"
           b"Nats-Batch-Id: b\r\n\r\n")
    assert _strip(hdr, False) == b"NATS/1.0\r\nKeep: 1\r\nNats-Stream-Source: X 1 > >\r\n\r\n"
    assert _strip(hdr, True) == b"NATS/1.0\r\nKeep: 1\r\n\r\n"
    plain = b"NATS/1.0\r\nKeep: 1\r\n\r\n"
    assert _strip(plain, True) is plain
    assert _strip(b"NATS/1.0\r\nNats-Expected-Stream: S\r\n\r\n", False) == b""
    assert _strip(None, True) == b""
    # as nats-server: case-sensitive, everything else byte for byte (order, repeats, spacing)
    odd = b"NATS/1.0\r\nB:2\r\nnats-expected-stream: S\r\nA: 1\r\nB:  3\r\nNats-Batch-Seq: 1\r\n\r\n"
    assert _strip(odd, False) == b"NATS/1.0\r\nB:2\r\nnats-expected-stream: S\r\nA: 1\r\nB:  3\r\n\r\n"


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_skip_to_keeps_origin_sequences(kind: str, tmp_path: Path) -> None:
    store = MemoryStore() if kind == "memory" else SQLiteStore(str(tmp_path), "always")
    await store.open()
    st = store.create_stream("M", b'{"name":"M"}')
    st.skip_to(5)  # empty: the front moves, as a purge to 5
    assert (st.first_seq, st.last_seq, st.msgs) == (5, 4, 0)
    st.append("a", b"", b"5", 111)
    st.skip_to(8)  # past a message: 6 and 7 become interior deletes
    seq, ts, _ = st.append("a", b"", b"8", 222)
    assert (seq, ts) == (8, 222)
    st.skip_to(3)  # not past the last: nothing
    assert st.state(deleted=True).deleted == [6, 7]
    st.skip_to(12)  # a gap at the end, kept across a reopen
    assert st.last_seq == 11
    await store.flush() if kind == "sqlite" else None
    await store.close()
    if kind == "memory":
        return
    store = SQLiteStore(str(tmp_path), "always")
    await store.open()
    st = store.get_stream("M")
    assert st is not None
    assert (st.first_seq, st.last_seq, st.msgs) == (5, 11, 2)
    assert st.append("a", b"", b"12")[0] == 12
    await store.close()
