"""The header codec (edged/routing/headers.py): blocks round-trip, status lines parse, and `get_header` finds
exactly what nats-server's lookup finds (exact-case name after a CRLF, spaces after the colon skipped,
value up to the CRLF). Pure: no sockets."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edged.routing.headers import get_header, make_headers, parse_headers, remove_headers

# header names: visible ASCII without ':'; values: printable without CR/LF, not starting/ending with spaces
NAME = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, blacklist_characters=":"), min_size=1,
               max_size=20)
VALUE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30).map(str.strip)


def test_plain_block() -> None:
    h = b"NATS/1.0\r\nNats-Msg-Id: abc\r\nK: 1\r\nK: 2\r\n\r\n"
    assert parse_headers(h) == (0, "", {"Nats-Msg-Id": ["abc"], "K": ["1", "2"]})
    assert get_header(h, "Nats-Msg-Id") == "abc"
    assert get_header(h, "K") == "1"
    assert get_header(h, "Missing") is None


def test_status_lines() -> None:
    assert parse_headers(b"NATS/1.0 503\r\n\r\n") == (503, "", {})
    assert parse_headers(b"NATS/1.0 404 No Messages\r\n\r\n") == (404, "No Messages", {})
    assert parse_headers(b"NATS/1.0 100 FlowControl Request\r\nNats-Consumer-Stalled: x\r\n\r\n") == (
        100, "FlowControl Request", {"Nats-Consumer-Stalled": ["x"]})
    assert parse_headers(b"") == (0, "", {})
    assert parse_headers(None) == (0, "", {})


def test_make_headers_bytes() -> None:
    assert make_headers() == b"NATS/1.0\r\n\r\n"
    assert make_headers(status=408, description="Request Timeout") == b"NATS/1.0 408 Request Timeout\r\n\r\n"
    assert make_headers([("A", "1"), ("B", "2")]) == b"NATS/1.0\r\nA: 1\r\nB: 2\r\n\r\n"
    assert make_headers({"A": "1"}, status=204, description="EOB") == b"NATS/1.0 204 EOB\r\nA: 1\r\n\r\n"


def test_lookup_is_exact_case_like_nats_server() -> None:
    h = b"NATS/1.0\r\nnats-msg-id: lower\r\n\r\n"
    assert get_header(h, "Nats-Msg-Id") is None
    assert get_header(h, "nats-msg-id") == "lower"


def test_lookup_needs_line_start_and_colon() -> None:
    # the name inside a value, or as the prefix of a longer name, is not the header
    h = b"NATS/1.0\r\nX: Nats-Msg-Id: fake\r\nNats-Msg-Id-Extra: no\r\nNats-Msg-Id: real\r\n\r\n"
    assert get_header(h, "Nats-Msg-Id") == "real"
    assert get_header(b"NATS/1.0\r\nNats-Msg-Id : spaced\r\n\r\n", "Nats-Msg-Id") is None


def test_value_spaces_and_empty() -> None:
    assert get_header(b"NATS/1.0\r\nK:    v \r\n\r\n", "K") == "v "  # leading spaces only are skipped
    assert get_header(b"NATS/1.0\r\nK:\r\n\r\n", "K") == ""
    assert get_header(b"NATS/1.0\r\nK: v", "K") == "v"  # unterminated block: value to the end


def test_malformed_lines_are_skipped() -> None:
    status, _, h = parse_headers(b"NATS/1.0\r\nno colon here\r\n: no name\r\nOk: yes\r\n\r\n")
    assert status == 0 and h == {"Ok": ["yes"]}


def test_remove_headers() -> None:
    h = make_headers([("Nats-Expected-Stream", "S"), ("Keep", "1"), ("nats-expected-stream", "T")])
    assert remove_headers(h, {"Nats-Expected-Stream"}) == b"NATS/1.0\r\nKeep: 1\r\n\r\n"
    assert remove_headers(make_headers([("A", "1")]), {"A"}) == b""
    assert remove_headers(make_headers([("A", "1")], status=503), {"A"}) == b"NATS/1.0 503\r\n\r\n"


@given(st.lists(st.tuples(NAME, VALUE), max_size=8), st.sampled_from([0, 100, 404, 408, 503]),
       st.sampled_from(["", "No Messages", "Idle Heartbeat"]))
def test_round_trip(items: list[tuple[str, str]], status: int, desc: str) -> None:
    block = make_headers(items, status=status, description=desc if status else "")
    got_status, got_desc, got = parse_headers(block)
    want: dict[str, list[str]] = {}
    for k, v in items:
        want.setdefault(k, []).append(v)
    assert got == want
    assert got_status == status
    assert got_desc == (desc if status else "")
    for k, vs in want.items():
        assert get_header(block, k) == vs[0]
