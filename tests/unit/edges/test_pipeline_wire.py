"""The pipeline's message-frame splitter (pipeline/wire.py): every complete MSG/HMSG frame out, in runs per
sid, for any buffer, any cut of it and any payload bytes; other ops and incomplete frames left for the
caller; malformed frames a WireError. Pure: no sockets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.wire import WireError, split_msgs

TOKEN = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=12).map(str.encode)
HDR = st.one_of(st.just(b""), st.builds(lambda k, v: b"NATS/1.0\r\n%s: %s\r\n\r\n" % (k, v), TOKEN, TOKEN))
# payloads may hold anything, frame look-alikes included
PAYLOAD = st.one_of(st.binary(max_size=300), st.sampled_from([b"MSG a 1 2\r\nxy\r\n", b"\r\n", b"PING\r\n", b""]))
MSG = st.tuples(TOKEN, st.sampled_from([b"1", b"2", b"17"]), st.one_of(st.just(b""), TOKEN), HDR, PAYLOAD)


def frame(subject: bytes, sid: bytes, reply: bytes, hdr: bytes, data: bytes) -> bytes:
    r = b" " + reply if reply else b""
    if hdr:
        return b"HMSG %s %s%s %d %d\r\n%s%s\r\n" % (subject, sid, r, len(hdr), len(hdr) + len(data), hdr, data)
    return b"MSG %s %s%s %d\r\n%s\r\n" % (subject, sid, r, len(data), data)


def flat(runs: list[tuple[bytes, list[tuple[bytes, bytes, bytes, bytes]]]]) -> list[tuple[bytes, ...]]:
    return [(subject, sid, reply, hdr, data) for sid, msgs in runs for subject, reply, hdr, data in msgs]


def test_frames_and_runs() -> None:
    buf = (frame(b"a.b", b"1", b"$JS.ACK.S.C.1.5.5.99.0", b"", b"hello")
           + frame(b"a.c", b"1", b"", b"NATS/1.0\r\nK: 1\r\nK: 2\r\n\r\n", b"x")
           + frame(b"z", b"2", b"", b"", b"") + b"PING\r\n")
    runs, pos, need = split_msgs(buf)
    assert [(sid, len(msgs)) for sid, msgs in runs] == [(b"1", 2), (b"2", 1)]
    assert runs[0][1][0] == (b"a.b", b"$JS.ACK.S.C.1.5.5.99.0", b"", b"hello")
    assert runs[0][1][1] == (b"a.c", b"", b"NATS/1.0\r\nK: 1\r\nK: 2\r\n\r\n", b"x")
    assert buf[pos:] == b"PING\r\n" and need == 0


@given(st.lists(MSG, max_size=20))
@settings(max_examples=300)
def test_any_messages_come_out_as_sent(msgs: list[tuple[bytes, ...]]) -> None:
    buf = b"".join(frame(*m) for m in msgs)
    runs, pos, need = split_msgs(buf)
    assert pos == len(buf) and need == 0
    assert flat(runs) == [(s, sid, r, h, d) for s, sid, r, h, d in msgs]
    assert all(a[0] != b[0] for a, b in zip(runs, runs[1:], strict=False))  # a run per change of sid


@given(st.lists(MSG, min_size=1, max_size=12), st.data())
@settings(max_examples=300)
def test_a_cut_buffer_gives_the_complete_frames_and_what_the_next_needs(msgs: list[tuple[bytes, ...]],
                                                                         data: st.DataObject) -> None:
    frames = [frame(*m) for m in msgs]
    buf = b"".join(frames)
    cut = data.draw(st.integers(0, len(buf)))
    runs, pos, need = split_msgs(buf[:cut])
    ends = [sum(len(f) for f in frames[:i]) for i in range(len(frames) + 1)]
    whole = max(i for i, e in enumerate(ends) if e <= cut)
    assert pos == ends[whole]
    assert flat(runs) == [(s, sid, r, h, d) for s, sid, r, h, d in msgs[:whole]]
    if whole < len(frames):
        head_done = b"\r\n" in frames[whole][:cut - pos]
        assert need == (len(frames[whole]) if head_done else 0)
        # and from where it stopped, the rest of the buffer finishes the job
        more, end, _ = split_msgs(buf, pos)
        assert flat(runs) + flat(more) == [(s, sid, r, h, d) for s, sid, r, h, d in msgs] and end == len(buf)


@given(st.binary(max_size=200), st.integers(0, 5))
@settings(max_examples=500)
def test_random_input_is_frames_or_a_wire_error(junk: bytes, prefix: int) -> None:
    buf = [b"", b"MSG ", b"HMSG ", b"MSG a 1 ", b"HMSG a 1 3 ", b"MSG a b c d e "][prefix] + junk
    try:
        runs, pos, need = split_msgs(buf)
    except WireError:
        return
    assert 0 <= pos <= len(buf) and need >= 0
    assert need == 0 or need > len(buf) - pos


@pytest.mark.parametrize("bad", [
    b"MSG a 1 x\r\n",                # size not a number
    b"MSG a\r\n",                    # too few arguments
    b"HMSG a 1 9 3\r\nabc\r\n",      # header larger than the whole
    b"MSG a 1 3\r\nabcXY",           # payload not followed by CRLF
    b"HMSG a 1 r 1 2 3\r\n",         # too many arguments
])
def test_malformed_frames_are_wire_errors(bad: bytes) -> None:
    with pytest.raises(WireError):
        split_msgs(bad)
