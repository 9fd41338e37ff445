"""The leafnode codec (pure): LS+/LS-/LMSG/HMSG/INFO/-ERR parsing, encoders, `@` JetStream reply
decoding, URL parsing, link subject filters, creds and nonce signing, WebSocket frames and proxy heads."""

from __future__ import annotations

import base64
import os
import tempfile

import nacl.signing
import nkeys
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edged.jetstream.wire.domain import decode_ack_reply as decode_js_ack_reply
from edged.leafnode import codec
from edged.leafnode.codec import (
    OP_ERR,
    OP_ERROR,
    OP_INFO,
    OP_LMSG,
    OP_LMSGR,
    OP_LMSGS,
    OP_LSUB,
    OP_LUNSUB,
    OP_OK,
    OP_PING,
    OP_PONG,
    LeafParser,
    connect_line,
    ls_minus,
    ls_plus,
    msg_head,
)
from edged.leafnode.dialing import parse_leaf_url, sign_nonce
from edged.leafnode.proxy import connect_request, parse_response_head
from edged.routing.subjects import AllowDenyFilter
from edged.security.creds import read_creds_file
from tests.support.leaf import creds_text, new_kp

INFO = (b'INFO {"server_id":"N","server_name":"hub1","version":"2.15.1","proto":3,"client_id":6,'
        b'"nonce":"XsDmym9xAAt_mGM","leafnode_urls":["127.0.0.1:37422"],"domain":"hub"} \r\n')


def test_parse_observed_hub_stream() -> None:
    data = (INFO + b"LS+ $JS.API.>\r\nLS+ work.> qq 2\r\nLS- work.> qq\r\nLS- foo\r\nPING\r\nPONG\r\n+OK\r\n"
            b"LMSG work.a + rep.1 grp 1\r\nx\r\nLMSG work.a | grp g2 2\r\nab\r\nLMSG s 0\r\n\r\n"
            b"LMSG s r 3\r\nabc\r\nHMSG work.b 18 19\r\nNATS/1.0\r\nH: 1\r\n\r\nz\r\n"
            b"HMSG a + r q 12 12\r\nNATS/1.0\r\n\r\n\r\n"
            b"-ERR 'Authorization Violation'\r\n")
    ev = LeafParser().feed(data)
    assert ev[0][0] == OP_INFO and ev[0][1]["nonce"] == "XsDmym9xAAt_mGM"
    assert ev[1:9] == [
        (OP_LSUB, "$JS.API.>", None, 1),
        (OP_LSUB, "work.>", "qq", 2),
        (OP_LUNSUB, "work.>", "qq"),
        (OP_LUNSUB, "foo", None),
        (OP_PING,),
        (OP_PONG,),
        (OP_OK,),
        (OP_LMSG, b"work.a", b"rep.1", (b"grp",), None, b"x"),
    ]
    assert ev[9] == (OP_LMSG, b"work.a", b"", (b"grp", b"g2"), None, b"ab")
    assert ev[10] == (OP_LMSG, b"s", b"", (), None, b"")
    assert ev[11] == (OP_LMSG, b"s", b"r", (), None, b"abc")
    assert ev[12] == (OP_LMSG, b"work.b", b"", (), b"NATS/1.0\r\nH: 1\r\n\r\n", b"z")
    assert ev[13] == (OP_LMSG, b"a", b"r", (b"q",), b"NATS/1.0\r\n\r\n", b"")
    assert ev[14] == (OP_ERR, "Authorization Violation")


@pytest.mark.parametrize("bad", [
    b"LMSG a b c 3\r\nabc\r\n",  # 3 args need + or |
    b"LMSG a + r 3\r\nabc\r\n",  # + without queues
    b"HMSG a 5 3\r\nabc\r\n",  # hdr > total
    b"LMSG a -1\r\n",
    b"LMSG a 3\r\nabcd\r\n",  # payload longer than announced
    b"LS+\r\n",
    b"LS+ a b\r\n",
    b"BOGUS x\r\n",
    b"INFO {nope\r\n",
])
def test_parse_errors(bad: bytes) -> None:
    ev = LeafParser().feed(bad)
    assert ev and ev[-1][0] == OP_ERROR


def test_max_payload_and_control_line() -> None:
    assert LeafParser(max_payload=10).feed(b"LMSG a 11\r\n")[-1] == (OP_ERROR, "Maximum Payload Violation")
    assert LeafParser(max_control_line=16).feed(b"LS+ " + b"a" * 40)[-1][0] == OP_ERROR


def _msg(subject: bytes, reply: bytes, queues: tuple[bytes, ...], hdr: bytes | None, payload: bytes) -> bytes:
    head = msg_head(subject, reply, queues, len(hdr) if hdr is not None else -1, len(payload))
    return head + (hdr or b"") + payload + b"\r\n"


tok = st.text(alphabet="abcXYZ09-_$", min_size=1, max_size=8).map(str.encode)
subj = st.lists(tok, min_size=1, max_size=4).map(b".".join)


@settings(max_examples=200, deadline=None)
@given(
    msgs=st.lists(st.tuples(subj, st.one_of(st.just(b""), subj), st.lists(tok, max_size=3).map(tuple),
                            st.one_of(st.none(), st.binary(max_size=20).map(lambda b: b"NATS/1.0\r\n" + b.replace(
                                b"\n", b"") + b"\r\n\r\n")), st.binary(max_size=300)), min_size=1, max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=6),
)
def test_roundtrip_any_split(msgs: list, cuts: list[int]) -> None:
    """Encoder output parses back identically however the stream is split into reads."""
    data = b"".join(_msg(*m) for m in msgs)
    p = LeafParser()
    events = []
    prev = 0
    for c in sorted(set(min(c, len(data)) for c in cuts)) + [len(data)]:
        events += p.feed(data[prev:c])
        prev = c
    assert [e[1:] for e in events] == [m for m in msgs]
    assert all(e[0] == OP_LMSG for e in events)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_input_never_raises(data: bytes) -> None:
    p = LeafParser(max_control_line=128, max_payload=64)
    for i in range(0, len(data), 7):
        for ev in p.feed(data[i:i + 7]):
            assert isinstance(ev, tuple)
    assert p.feed(b"") == [] or p.dead is False


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=120))
def test_truncated_valid_stream_waits(data: bytes) -> None:
    full = INFO + b"LS+ a.b q 3\r\n" + _msg(b"x", b"r", (b"q",), b"NATS/1.0\r\n\r\n", data)
    for cut in range(0, len(full), max(1, len(full) // 9)):
        evs = LeafParser().feed(full[:cut])
        assert all(e[0] != OP_ERROR for e in evs)


def test_encoders() -> None:
    assert ls_plus("foo.>") == b"LS+ foo.>\r\n"
    assert ls_plus("foo", "q", 3) == b"LS+ foo q 3\r\n"
    assert ls_plus("foo", "q", 0) == b"LS+ foo q 1\r\n"  # never weight 0
    assert ls_minus("foo") == b"LS- foo\r\n" and ls_minus("foo", "q") == b"LS- foo q\r\n"
    assert msg_head(b"s", b"", (), -1, 2) == b"LMSG s 2\r\n"
    assert msg_head(b"s", b"r", (), -1, 2) == b"LMSG s r 2\r\n"
    assert msg_head(b"s", b"r", (b"q1", b"q2"), -1, 2) == b"LMSG s + r q1 q2 2\r\n"
    assert msg_head(b"s", b"", (b"q",), -1, 2) == b"LMSG s | q 2\r\n"
    assert msg_head(b"s", b"", (), 12, 2) == b"HMSG s 12 14\r\n"
    assert msg_head(b"s", b"r", (b"q",), 12, 2) == b"HMSG s + r q 12 14\r\n"
    assert connect_line({"a": 1}) == b'CONNECT {"a":1}\r\n'


def test_js_ack_reply_decoding() -> None:
    r = b"$JS.ACK.ORDERS.pbd5nHeY.1.1.1.1795345574312431914.2@orders.0"
    assert decode_js_ack_reply(b"$JS.M.def456", r) == (b"orders.0", r.split(b"@")[0])
    assert decode_js_ack_reply(b"s", b"_INBOX.a@b") == (b"s", b"_INBOX.a@b")
    assert decode_js_ack_reply(b"s", b"$JS.ACK.a@b.c") == (b"s", b"$JS.ACK.a@b.c")  # too few dots
    assert decode_js_ack_reply(b"s", b"$JS.ACK.S.C.1.2.3.4.5") == (b"s", b"$JS.ACK.S.C.1.2.3.4.5")


def test_url_parsing() -> None:
    u = parse_leaf_url("nats://acc:p%40ss@0.0.0.0:7422")
    assert (u.scheme, u.host, u.port, u.user, u.password) == ("nats", "0.0.0.0", 7422, "acc", "p@ss")
    assert parse_leaf_url("nats-leaf://h").port == 7422
    assert parse_leaf_url("tls://tok@h:1").password is None
    assert parse_leaf_url("ws://h").port == 80 and parse_leaf_url("wss://h/pre/").path == "/pre"
    assert parse_leaf_url("h:9").scheme == "nats-leaf"
    assert "xxxxx" in parse_leaf_url("nats://a:secret@h:1").redacted()
    with pytest.raises(ValueError, match="not supported"):
        parse_leaf_url("http://h:1")


def test_subject_filter() -> None:
    f = AllowDenyFilter(["up.>", "_INBOX.>"], ["up.secret"])
    assert f.allows("up.a") and f.allows("_INBOX.x.y")
    assert not f.allows("up.secret") and not f.allows("down")
    assert f.allows_interest("up.*") and f.allows_interest(">")  # wildcards only need to overlap
    assert not f.allows_interest("down.x") and not f.allows_interest("up.secret")
    assert AllowDenyFilter().empty and AllowDenyFilter().allows("anything")


def test_creds_and_signature() -> None:
    kp = new_kp(nkeys.PREFIX_BYTE_USER)
    with tempfile.NamedTemporaryFile("w", suffix=".creds", delete=False) as f:
        f.write(creds_text("eyJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.c2ln", kp.seed).replace("\n", "\r\n"))
    jwt, seed = read_creds_file(f.name)
    os.unlink(f.name)
    assert jwt == "eyJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.c2ln" and seed == kp.seed
    pub, sig = sign_nonce(seed, "XsDmym9xAAt_mGM")
    assert pub == kp.public_key.decode() and "=" not in sig
    raw = base64.urlsafe_b64decode(sig + "==")
    _, raw_seed = nkeys.decode_seed(bytearray(seed))
    nacl.signing.SigningKey(bytes(raw_seed)).verify_key.verify(b"XsDmym9xAAt_mGM", raw)  # over the ASCII nonce
    with tempfile.NamedTemporaryFile("w", delete=False) as f:
        f.write("no creds here")
    with pytest.raises(ValueError, match="malformed"):
        read_creds_file(f.name)
    os.unlink(f.name)


def test_proxy_heads() -> None:
    req = connect_request("hub.example", 7422, "u", "p")
    assert req.startswith(b"CONNECT hub.example:7422 HTTP/1.1\r\nHost: hub.example:7422\r\n")
    assert b"Proxy-Authorization: Basic dTpw" in req and req.endswith(b"\r\n\r\n")
    assert connect_request("::1", 1).startswith(b"CONNECT [::1]:1 ")
    assert parse_response_head(b"HTTP/1.1 200 Connection established\r\n") == (200, "Connection established")
    assert parse_response_head(b"HTTP/1.0 407 Proxy Authentication Required")[0] == 407
    with pytest.raises(ValueError):
        parse_response_head(b"SSH-2.0-OpenSSH")


# ------------------------------------------------------------------ runs=True: LMSGs grouped by subject


def _feed_runs(data: bytes, cuts: list[int]) -> list[tuple]:
    """runs=True parsing, each OP_LMSGS and OP_LMSGR spread back into the OP_LMSG events it stands for."""
    p = LeafParser(runs=True, max_payload=50)
    evs: list[tuple] = []
    prev = 0
    for c in sorted({min(c, len(data)) for c in cuts}) + [len(data)]:
        evs += p.feed(data[prev:c])
        prev = c
    out: list[tuple] = []
    for ev in evs:
        if ev[0] == OP_LMSGS:
            assert ev[3]
            out += [(OP_LMSG, ev[1], ev[2], (), None, pl) for pl in ev[3]]
        elif ev[0] == OP_LMSGR:
            assert len(ev[2]) == len(ev[3]) >= 2 and all(ev[2])
            out += [(OP_LMSG, ev[1], r, (), None, pl) for r, pl in zip(ev[2], ev[3], strict=True)]
        else:
            out.append(ev)
    return out


def _feed_plain(data: bytes, cuts: list[int]) -> list[tuple]:
    p = LeafParser(max_payload=50)
    evs: list[tuple] = []
    prev = 0
    for c in sorted({min(c, len(data)) for c in cuts}) + [len(data)]:
        evs += p.feed(data[prev:c])
        prev = c
    return evs


def test_runs_group_plain_lmsgs() -> None:
    data = (b"LMSG a 1\r\nx\r\n" * 3 + b"LMSG a 2\r\nxy\r\nLMSG a r 1\r\nz\r\nLMSG a | q 1\r\nq\r\n"
            b"HMSG a 12 12\r\nNATS/1.0\r\n\r\n\r\nLMSG a 1\r\nx\r\nLMSG a 1\r\nxy\r\n")
    assert LeafParser(runs=True).feed(data) == [
        (OP_LMSGS, b"a", b"", [b"x", b"x", b"x", b"xy"]),
        (OP_LMSG, b"a", b"r", (), None, b"z"),  # a message alone stays one plain event
        (OP_LMSG, b"a", b"", (b"q",), None, b"q"),
        (OP_LMSG, b"a", b"", (), b"NATS/1.0\r\n\r\n", b""),
        (OP_LMSG, b"a", b"", (), None, b"x"),
        (OP_ERROR, "Unknown Protocol Operation"),
    ]


_lpieces = st.sampled_from([
    b"LMSG a 1\r\nx\r\n", b"LMSG a 1\r\ny\r\n", b"LMSG a 2\r\nxy\r\n", b"LMSG a r 1\r\nx\r\n", b"LMSG b 0\r\n\r\n",
    b"LMSG a | q 1\r\nx\r\n", b"LMSG a 1\nx\r\n", b"lmsg a 1\r\nx\r\n", b"HMSG a 12 13\r\nNATS/1.0\r\n\r\nx\r\n",
    b"PING\r\n", b"LS+ a\r\n", b"LMSG a 1\r\nxy\r\n", b"LMSG a 1\r\nx\n", b"LMSG a 99\r\n", b"\r\n",
    b"LMSG a s 1\r\nx\r\n", b"LMSG a $JS.ACK.s.c.1.1.1.1.0@b 1\r\nx\r\n", b"LMSG a $JS.ACK.s.c.1.2.2.1.0@b 2\r\nxy\r\n",
    b"LMSG b $JS.ACK.s.c.1.3.3.1.0@b 0\r\n\r\n", b"LMSG a $JS.ACK.x 1\r\n\r\n", b"LMSG a t 1\r\nx\n",
    b"LMSG a  u 1\r\nx\r\n", b"LMSG a u\t1\r\nx\r\n", b"LMSG a v 77\r\n", b"LMSG a | q 1\r\nx\r\n", b"LMSG a w 1 \r\nx\r\n",
    b"LMSG a + r q 1\r\nx\r\n", b"LMSG a x 51\r\n" + b"y" * 51 + b"\r\n",
])


@settings(max_examples=500, deadline=None)
@given(st.lists(_lpieces, max_size=30), st.lists(st.integers(0, 400), max_size=12))
def test_runs_give_the_same_messages_however_split(pieces: list[bytes], cuts: list[int]) -> None:
    data = b"".join(pieces)
    assert _feed_runs(data, cuts) == _feed_plain(data, cuts)


def test_runs_of_replies() -> None:
    """Plain LMSGs to one subject, each with a reply of its own (a JetStream consumer's deliveries): one
    OP_LMSGR event, in order; a message without a reply, with headers or to another subject ends it."""
    acks = [b"$JS.ACK.s.c.1.%d.%d.1.0@cmd.%d" % (i, i, i) for i in range(1, 5)]
    data = b"".join(b"LMSG d %s 2\r\nm%d\r\n" % (a, i) for i, a in enumerate(acks))
    data += b"LMSG d 1\r\nz\r\nLMSG d r1 1\r\na\r\nLMSG d r2 1\r\nb\r\nHMSG d r3 12 12\r\nNATS/1.0\r\n\r\n\r\n"
    data += b"LMSG e r4 1\r\nc\r\nLMSG e r4 1\r\nd\r\n"
    assert LeafParser(runs=True).feed(data) == [
        (OP_LMSGR, b"d", acks, [b"m0", b"m1", b"m2", b"m3"]),
        (OP_LMSG, b"d", b"", (), None, b"z"),
        (OP_LMSGR, b"d", [b"r1", b"r2"], [b"a", b"b"]),
        (OP_LMSG, b"d", b"r3", (), b"NATS/1.0\r\n\r\n", b""),
        (OP_LMSGS, b"e", b"r4", [b"c", b"d"]),
    ]


# a run of replies to `a` taken a read at a time (LeafParser._split_run), among lines it must not take as the
# line-by-line parse would not: payloads holding a run's line, replies with CR or LF, other sizes, too big
_rgood = st.builds(lambda i, pl: b"LMSG a $JS.ACK.s.c.1.%d.%d.1.0@b %d\r\n%s\r\n" % (i, i, len(pl), pl),
                   st.integers(0, 99), st.sampled_from([b"x", b"xy", b"", b"\r\n", b"q" * 50]))
_rpieces = st.one_of(
    _rgood, _rgood, _rgood,
    st.sampled_from([
        b"LMSG a r 15\r\nz\r\nLMSG a s 1\r\n\r\n", b"LMSG a r 16\r\nz\r\nLMSG a s 1\r\nzz\r\n", b"LMSG a x\ry 1\r\nx\r\n",
        b"LMSG a x\ny 1\r\nx\r\n", b"LMSG a r 1\nx\r\n", b"LMSG a r 01\r\nx\r\n", b"LMSG a r 51\r\n" + b"y" * 51 + b"\r\n",
        b"LMSG a r 2\r\nx\r\n", b"LMSG a r 1\r\nxy\r\n", b"LMSG a r\t1\r\nx\r\n", b"LMSG a  r 1\r\nx\r\n",
        b"LMSG a r 1\r\nx\n", b"LMSG a r 11111111111\r\nx\r\n", b"LMSG b r 1\r\nx\r\n", b"PING\r\n",
        b"HMSG a r 12 12\r\nNATS/1.0\r\n\r\n\r\n", b"LMSG a 1\r\nx\r\n", b"LMSG a + r q 1\r\nx\r\n",
    ]),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_rpieces, min_size=4, max_size=60), st.lists(st.integers(0, 2000), max_size=6), st.sampled_from([0, 40, 100, 300]))
def test_runs_of_replies_taken_a_read_at_a_time_parse_as_line_by_line(pieces: list[bytes], cuts: list[int],
                                                                      window: int) -> None:
    """However the run is split into windows (0: the module's own, else that many bytes first)."""
    data = b"".join(pieces)
    saved = codec.SPLIT_WINDOW
    codec.SPLIT_WINDOW = window or saved
    try:
        assert _feed_runs(data, cuts) == _feed_plain(data, cuts)
    finally:
        codec.SPLIT_WINDOW = saved


def test_runs_of_replies_whole_read() -> None:
    """A consumer's backlog in one read: one event for all of it, in order, the payloads as sent."""
    acks = [b"$JS.ACK.s.c.1.%d.%d.1.%d@cmd.%d" % (i, i, 500 - i, i % 3) for i in range(1, 501)]
    pls = [b"p%d" % i * (i % 7) for i in range(1, 501)]
    data = b"".join(b"LMSG $JS.M.d %s %d\r\n%s\r\n" % (a, len(pl), pl) for a, pl in zip(acks, pls, strict=True))
    p = LeafParser(runs=True)
    assert p.feed(data[:-1]) == [(OP_LMSGR, b"$JS.M.d", acks[:-1], pls[:-1])]
    assert p.feed(data[-1:] + b"PING\r\n") == [(OP_LMSG, b"$JS.M.d", acks[-1], (), None, pls[-1]), (OP_PING,)]
    run = (OP_LMSGR, b"$JS.M.d", acks, pls)
    assert LeafParser(runs=True).feed(data + b"PING\r\n" + data) == [run, (OP_PING,), run]


def test_runs_remembered_lines_are_not_confused() -> None:
    """Plain LMSG lines are remembered per parser: the same line again parses the same, others do not
    borrow from it, more lines than are kept still parse, and max_payload still holds."""
    p = LeafParser(runs=True, max_payload=64)
    lines = [b"LMSG s.%d r.%d %d\r\n" % (i % 300, i % 7, i % 5) for i in range(900)]
    data = b"".join(ln + b"z" * (i % 5) + b"\r\n" for i, ln in enumerate(lines))
    got = []
    for e in p.feed(data):
        got += [(e[1], e[2], pl) for pl in e[3]] if e[0] == OP_LMSGS else [(e[1], e[2], e[5])]
    assert got == [(b"s.%d" % (i % 300), b"r.%d" % (i % 7), b"z" * (i % 5)) for i in range(900)]
    assert p.feed(b"LMSG s.1 r.1 65\r\n") == [(OP_ERROR, "Maximum Payload Violation")]


# the same with fixed-size records (the split's one-size check): every good payload 5 bytes, and lines that
# claim 5 bytes but hold another count, or hold 5 with a run's line inside
_rsame = st.builds(lambda i: b"LMSG a $JS.ACK.s.c.1.%d.%d.1.0@b 5\r\nabcde\r\n" % (i, i), st.integers(0, 99))
_rsame_pieces = st.one_of(
    _rsame, _rsame, _rsame, _rsame,
    st.sampled_from([
        b"LMSG a r 5\r\nabcd\r\n", b"LMSG a r 5\r\nabcdef\r\n", b"LMSG a r 5\r\n\r\nLMS\r\n", b"LMSG a r 05\r\nabcde\r\n",
        b"LMSG a r 5\r\nab\r\nLMSG a s 5\r\nabcde\r\n", b"LMSG a r 4\r\nabcd\r\n", b"PING\r\n",
    ]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_rsame_pieces, min_size=4, max_size=60), st.lists(st.integers(0, 2000), max_size=6),
       st.sampled_from([0, 40, 100, 300]))
def test_runs_of_one_size_taken_a_read_at_a_time_parse_as_line_by_line(pieces: list[bytes], cuts: list[int],
                                                                       window: int) -> None:
    data = b"".join(pieces)
    saved = codec.SPLIT_WINDOW
    codec.SPLIT_WINDOW = window or saved
    try:
        assert _feed_runs(data, cuts) == _feed_plain(data, cuts)
    finally:
        codec.SPLIT_WINDOW = saved
