"""The NATS encoders: a batch framed in one pass is byte for byte the frames of one message at a time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edged.connections import protocol as P

token = st.text(alphabet="abcxyz019_-", min_size=1, max_size=6)
subject = st.lists(token, min_size=1, max_size=4).map(lambda t: ".".join(t).encode())
message = st.tuples(subject, st.one_of(st.just(b""), subject), st.one_of(st.none(), st.binary(max_size=30).map(
    lambda b: b"NATS/1.0\r\nX: " + b.hex().encode() + b"\r\n\r\n")), st.binary(max_size=40))


def one_by_one(sid: bytes, msgs: list, headers: bool) -> bytes:
    out = b""
    for subj, reply, hdr, data in msgs:
        if hdr and headers:
            out += P.hmsg_head(subj, sid, reply, len(hdr), len(data)) + hdr + data + P.CRLF
        else:
            out += P.msg_head(subj, sid, reply, len(data)) + data + P.CRLF
    return out


@given(st.lists(message, max_size=20), st.booleans(), token.map(str.encode))
def test_frame_batch_is_the_frames_of_each_message(msgs: list, headers: bool, sid: bytes) -> None:
    frames = P.frame_batch(sid, msgs, headers)
    assert len(frames) == len(msgs)
    assert b"".join(frames) == one_by_one(sid, msgs, headers)


def test_frame_batch_headers() -> None:
    msgs = [(b"a", b"r", b"NATS/1.0\r\n\r\n", b"xy"), (b"b", b"", None, b"")]
    assert P.frame_batch(b"7", msgs, True) == [b"HMSG a 7 r 12 14\r\nNATS/1.0\r\n\r\nxy\r\n", b"MSG b 7 0\r\n\r\n"]
    assert P.frame_batch(b"7", msgs, False) == [b"MSG a 7 r 2\r\nxy\r\n", b"MSG b 7 0\r\n\r\n"]


def test_no_responders_status() -> None:
    hdr = b"NATS/1.0 503\r\nNats-Subject: svc.x\r\n\r\n"
    assert P.no_responders_msg(b"_INBOX.1", b"3", b"svc.x") == b"HMSG _INBOX.1 3 %d %d\r\n%s\r\n" % (
        len(hdr), len(hdr), hdr)


def test_msg_prefix_then_size_is_the_head() -> None:
    assert P.msg_prefix(b"a", b"1", b"r") + b"5\r\n" == P.msg_head(b"a", b"1", b"r", 5)
    assert P.msg_prefix(b"a", b"1", b"") + b"5\r\n" == P.msg_head(b"a", b"1", b"", 5)
