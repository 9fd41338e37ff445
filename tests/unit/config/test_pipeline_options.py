"""The pipeline's pure pieces: header blocks with repeated keys, options, and how a range is split."""

from __future__ import annotations

import pytest

from pipeline.headers import encode_headers, parse_headers, without_direct_get
from pipeline.options import PipelineError, ReadOptions, split_range, write_options


def test_header_block_keeps_every_value_in_order() -> None:
    block = b"NATS/1.0\r\nA: 1\r\nB:two words \r\nA: 2\r\nEmpty:\r\nA:3\r\n\r\n"
    assert parse_headers(block) == {"A": ["1", "2", "3"], "B": ["two words"], "Empty": [""]}
    assert parse_headers(b"") is None and parse_headers(None) is None
    assert parse_headers(b"NATS/1.0\r\n\r\n") == {}
    assert parse_headers(encode_headers({"A": ["1", "2"], "B": "x"})) == {"A": ["1", "2"], "B": ["x"]}
    with pytest.raises(ValueError):
        parse_headers(b"HTTP/1.1 200\r\n\r\n")
    with pytest.raises(ValueError):
        encode_headers({"A": "line\r\nbreak"})
    with pytest.raises(ValueError):
        encode_headers({"Bad Key": "x"})


def test_direct_get_metadata_is_dropped() -> None:
    got = {"Nats-Stream": ["S"], "Nats-Sequence": ["4"], "Nats-Time-Stamp": ["t"], "Nats-Subject": ["a"], "K": ["v"]}
    assert without_direct_get(got) == {"K": ["v"]}


@pytest.mark.parametrize("lo,hi,n", [(1, 10, 3), (5, 5, 4), (1, 0, 2), (7, 1_000_003, 4), (1, 2, 1)])
def test_split_range_exactly_n_contiguous(lo: int, hi: int, n: int) -> None:
    parts = split_range(lo, hi, n)
    assert len(parts) == n
    seqs = [s for a, b in parts for s in range(a, b + 1)] if hi - lo < 100 else None
    if seqs is not None:
        assert seqs == list(range(lo, hi + 1))
    assert parts[0][0] == lo and all(b + 1 == c for (_, b), (c, _) in zip(parts, parts[1:], strict=False))
    sizes = [b - a + 1 for a, b in parts]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("opts,needle", [
    ({"stream": "S"}, "servers is required"),
    ({"servers": "http://x:1", "stream": "S"}, "not a NATS URL"),
    ({"servers": "nats://h:1", "stream": ""}, "want a stream name"),
    ({"servers": "nats://h:1", "stream": "S", "user": "u"}, "user and password go together"),
    ({"servers": "nats://h:1", "stream": "S", "creds": "/no/such.creds"}, "no such file"),
    ({"servers": "nats://h:1", "stream": "S", "start_seq": "0"}, "start_seq: must be >= 1"),
    ({"servers": "nats://h:1", "stream": "S", "start_time": "yesterday"}, "start_time: want ISO-8601"),
    ({"servers": "nats://h:1", "stream": "S", "max_msgs_per_trigger": "x"}, "want an integer"),
])
def test_bad_read_options(opts: dict[str, str], needle: str) -> None:
    with pytest.raises(PipelineError, match=needle):
        ReadOptions.from_options(opts)


def test_read_and_write_options() -> None:
    o = ReadOptions.from_options({"servers": "nats://a:1, tls://b:2", "stream": "S", "partitions": "3",
                                  "start_time": "1700000000", "DOMAIN": "hub"})
    assert o.conn.servers == ("nats://a:1", "tls://b:2") and o.partitions == 3 and o.conn.domain == "hub"
    assert o.start_time is not None and o.start_time.timestamp() == 1700000000
    conn, inflight, subject = write_options({"servers": "nats://a:1", "max_in_flight": "8"})
    assert inflight == 8 and subject is None
    with pytest.raises(PipelineError, match="unknown option"):
        write_options({"servers": "nats://a:1", "stream": "S"})
