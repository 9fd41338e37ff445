"""The NATS client-protocol codec: unit and property tests, no sockets."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edged.connections import protocol as P
from edged.routing.subjects import is_valid_literal_subject, is_valid_subject

# the prefix JetStream asks the client parser to take empty PUBs in runs under (Server.empty_run_prefix)
JS_ACK = b"$JS.ACK."


def feed_all(data: bytes, chunks: list[int] | None = None, **kw) -> list[tuple]:
    p = P.ClientParser(**kw)
    if not chunks:
        return p.feed(data)
    out: list[tuple] = []
    pos = 0
    for n in chunks:
        out += p.feed(data[pos : pos + n])
        pos += n
    out += p.feed(data[pos:])
    return out


def test_basic_ops():
    evs = feed_all(
        b'CONNECT {"verbose":false,"headers":true}\r\nPING\r\nPONG\r\nSUB foo 1\r\nSUB foo q 2\r\n'
        b"UNSUB 1\r\nUNSUB 2 5\r\nPUB foo 5\r\nhello\r\nPUB foo bar 0\r\n\r\n"
        b"HPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
    )
    assert evs == [
        (P.OP_CONNECT, {"verbose": False, "headers": True}),
        (P.OP_PING,),
        (P.OP_PONG,),
        (P.OP_SUB, "foo", None, "1"),
        (P.OP_SUB, "foo", "q", "2"),
        (P.OP_UNSUB, "1", 0),
        (P.OP_UNSUB, "2", 5),
        (P.OP_PUB, "foo", "", None, b"hello"),
        (P.OP_PUB, "foo", "bar", None, b""),
        (P.OP_PUB, "foo", "", b"NATS/1.0\r\n\r\n", b"hi"),
    ]


def test_case_insensitive_and_tabs_and_bare_newline():
    evs = feed_all(b"pub\tfoo  3\r\nabc\r\nping\nSuB x 9\r\n")
    assert evs == [(P.OP_PUB, "foo", "", None, b"abc"), (P.OP_PING,), (P.OP_SUB, "x", None, "9")]


def test_unknown_op_is_an_error():
    assert feed_all(b"FOO bar\r\n") == [(P.OP_ERROR, P.ERR_UNKNOWN_OP)]
    assert feed_all(b"PING\r\nXX\r\nPING\r\n") == [(P.OP_PING,), (P.OP_ERROR, P.ERR_UNKNOWN_OP)]


def test_payload_not_followed_by_crlf():
    assert feed_all(b"PUB foo 3\r\nabcd\r\n") == [(P.OP_ERROR, P.ERR_UNKNOWN_OP)]


def test_max_payload():
    assert feed_all(b"PUB foo 11\r\n", max_payload=10) == [(P.OP_ERROR, P.ERR_MAX_PAYLOAD)]
    assert feed_all(b"HPUB foo 2 11\r\n", max_payload=10) == [(P.OP_ERROR, P.ERR_MAX_PAYLOAD)]


def test_max_control_line():
    line = b"SUB " + b"a" * 5000 + b" 1\r\n"
    assert feed_all(line) == [(P.OP_ERROR, P.ERR_MAX_CONTROL_LINE)]
    # split across reads with no newline yet
    p = P.ClientParser(max_control_line=100)
    assert p.feed(b"SUB " + b"a" * 200) == [(P.OP_ERROR, P.ERR_MAX_CONTROL_LINE)]


def test_bad_args_close_silently():
    for bad in (b"PUB foo\r\n", b"PUB foo x\r\n", b"PUB a b c d\r\n", b"SUB foo\r\n", b"UNSUB\r\n",
                b"UNSUB 1 x\r\n", b"HPUB foo 5 2\r\n", b"CONNECT {bad\r\n", b"CONNECT [1]\r\n"):
        assert feed_all(bad) == [(P.OP_ERROR, None)], bad


def test_dead_after_error():
    p = P.ClientParser()
    p.feed(b"BOGUS\r\n")
    assert p.feed(b"PING\r\n") == []


def test_large_payload_in_many_chunks():
    payload = bytes(range(256)) * 1024  # 256 KiB
    data = b"PUB big 262144\r\n" + payload + b"\r\nPING\r\n"
    evs = feed_all(data, chunks=[7] + [4096] * 70)
    assert evs == [(P.OP_PUB, "big", "", None, payload), (P.OP_PING,)]


def test_encoders():
    assert P.err_line("Stale Connection") == b"-ERR 'Stale Connection'\r\n"
    line = P.info_line({"server_id": "X", "max_payload": 5})
    assert line.startswith(b"INFO {") and line.endswith(b"} \r\n")
    assert json.loads(line[5:-3]) == {"server_id": "X", "max_payload": 5}
    assert P.msg_head(b"a", b"1", b"", 3) == b"MSG a 1 3\r\n"
    assert P.hmsg_head(b"a", b"1", b"r", 4, 3) == b"HMSG a 1 r 4 7\r\n"


def test_subject_validation():
    assert is_valid_subject("foo.*.>")
    assert not is_valid_subject("foo..bar")
    assert not is_valid_subject("foo.>.bar")
    assert not is_valid_subject("")
    assert not is_valid_subject(".foo")
    assert is_valid_literal_subject("foo.bar")
    assert not is_valid_literal_subject("foo.*")


msgs = st.lists(
    st.one_of(
        st.tuples(st.just("PUB"), st.from_regex(r"[a-z]{1,5}(\.[a-z]{1,5}){0,3}", fullmatch=True),
                  st.binary(max_size=300)),
        st.tuples(st.just("SUB"), st.from_regex(r"[a-z]{1,5}(\.[a-z*]{1,5}){0,3}", fullmatch=True),
                  st.integers(1, 999)),
        st.just(("PING",)),
    ),
    max_size=20,
)


def encode(items) -> bytes:
    out = b""
    for it in items:
        if it[0] == "PUB":
            out += b"PUB %s %d\r\n%s\r\n" % (it[1].encode(), len(it[2]), it[2])
        elif it[0] == "SUB":
            out += b"SUB %s %d\r\n" % (it[1].encode(), it[2])
        else:
            out += b"PING\r\n"
    return out


def expect(items) -> list[tuple]:
    out = []
    for it in items:
        if it[0] == "PUB":
            out.append((P.OP_PUB, it[1], "", None, it[2]))
        elif it[0] == "SUB":
            out.append((P.OP_SUB, it[1], None, str(it[2])))
        else:
            out.append((P.OP_PING,))
    return out


@settings(max_examples=300, deadline=None)
@given(msgs, st.lists(st.integers(1, 64), max_size=40))
def test_any_split_gives_same_events(items, chunks):
    data = encode(items)
    assert feed_all(data, chunks) == expect(items)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=2000), st.lists(st.integers(1, 300), max_size=10))
def test_random_bytes_never_raise(data, chunks):
    evs = feed_all(data, chunks, max_control_line=256, max_payload=512)
    for ev in evs[:-1]:
        assert ev[0] != P.OP_ERROR
    assert all(isinstance(ev, tuple) and ev for ev in evs)


@settings(max_examples=200, deadline=None)
@given(msgs, st.data())
def test_truncated_input_yields_prefix(items, data):
    enc = encode(items)
    cut = data.draw(st.integers(0, len(enc)))
    evs = feed_all(enc[:cut])
    assert evs == expect(items)[: len(evs)]


# ---------------------------------------------------------------- runs=True: PUBs grouped by subject


def spread(evs: list[tuple]) -> list[tuple]:
    """Each OP_PUBS, OP_PUBR and OP_ACKS event spread back into the OP_PUB events it stands for."""
    out: list[tuple] = []
    for ev in evs:
        if ev[0] == P.OP_PUBS:
            _, subject, reply, subject_b, reply_b, payloads = ev
            assert payloads and subject_b == subject.encode() and reply_b == reply.encode()
            out += [(P.OP_PUB, subject, reply, None, pl) for pl in payloads]
        elif ev[0] == P.OP_PUBR:
            _, subject, subject_b, replies, payloads = ev
            assert payloads and len(replies) == len(payloads) and subject_b == subject.encode()
            out += [(P.OP_PUB, subject, rb.decode(), None, pl) for rb, pl in zip(replies, payloads, strict=True)]
        elif ev[0] == P.OP_ACKS:
            assert ev[1]
            out += [(P.OP_PUB, sb.decode(), "", None, b"") for sb in ev[1]]
        else:
            out.append(ev)
    return out


def feed_runs(data: bytes, chunks: list[int], parser: P.ClientParser | None = None, **kw) -> list[tuple]:
    """runs=True parsing (by `parser` if given), spread back into plain events."""
    p = parser or P.ClientParser(runs=True, empty_runs=JS_ACK, **kw)
    evs: list[tuple] = []
    pos = 0
    for n in [*chunks, len(data)]:
        evs += p.feed(data[pos : pos + n])
        pos += n
    return spread(evs)


def test_runs_group_consecutive_pubs_with_one_subject_and_reply():
    data = (b"PUB a 1\r\nx\r\n" * 3 + b"PUB a 2\r\nyy\r\nPUB a r 1\r\nz\r\nPUB b 0\r\n\r\nPING\r\n"
            b"PUB b 0\r\n\r\npub b 1\r\nw\r\nHPUB b 12 12\r\nNATS/1.0\r\n\r\n\r\n")
    assert P.ClientParser(runs=True, empty_runs=JS_ACK).feed(data) == [
        (P.OP_PUBS, "a", "", b"a", b"", [b"x", b"x", b"x", b"yy"]),
        (P.OP_PUBS, "a", "r", b"a", b"r", [b"z"]),  # a message alone is a run of one
        (P.OP_PUBS, "b", "", b"b", b"", [b""]),
        (P.OP_PING,),
        (P.OP_PUBS, "b", "", b"b", b"", [b""]),
        (P.OP_PUB, "b", "", None, b"w"),  # not the fast path: never part of a run
        (P.OP_PUB, "b", "", b"NATS/1.0\r\n\r\n", b""),
    ]


def test_runs_remembered_lines_are_not_confused():
    """Control lines are remembered per parser: the same line again parses the same, others do not
    borrow from it, and more lines than are kept still parse."""
    lines = [b"PUB s.%d r.%d %d\r\n" % (i % 300, i % 7, i % 5) for i in range(900)]
    data = b"".join(ln + b"z" * (i % 5) + b"\r\n" for i, ln in enumerate(lines))
    got = [(e[1], e[2], e[4]) for e in feed_runs(data, [], max_payload=64)]
    assert got == [(f"s.{i % 300}", f"r.{i % 7}", b"z" * (i % 5)) for i in range(900)]
    p = P.ClientParser(runs=True, empty_runs=JS_ACK, max_payload=64)
    p.feed(data)
    assert p.feed(b"PUB s.1 r.1 65\r\n") == [(P.OP_ERROR, P.ERR_MAX_PAYLOAD)]


def test_runs_lines_that_never_repeat_are_not_remembered_for_a_while():
    """A client whose every line is new (acks with a reply, say: each names its own sequences) would
    only fill the memo: after a memo's worth of lines found less often than remembered, new lines are
    parsed plainly (OP_PUB events, the same messages; with a reply, OP_PUBR runs by subject) for a while,
    then remembered again."""
    p = P.ClientParser(runs=True, empty_runs=JS_ACK)
    acks = [b"PUB $JS.ACK.S.C.1.%d.%d.1700000000000000000.0 r 0\r\n\r\n" % (i, i) for i in range(6000)]
    evs = p.feed(b"".join(acks[:300]) + b"PUB hot 1\r\nx\r\nPUB hot 1\r\nx\r\n")
    assert [e[0] for e in evs[:257]] == [P.OP_PUBS] * 257  # the one that finds the memo full, too
    assert {e[0] for e in evs[257:300]} == {P.OP_PUBR}  # one subject each: runs of one
    assert evs[300:] == [(P.OP_PUB, "hot", "", None, b"x")] * 2  # no runs meanwhile, the same messages
    raw = p.feed(b"".join(acks[300:6000]))
    evs = spread(raw)
    assert [e[1] for e in evs] == [f"$JS.ACK.S.C.1.{i}.{i}.1700000000000000000.0" for i in range(300, 6000)]
    assert {e[2] for e in evs} == {"r"}
    assert P.OP_PUBS in {e[0] for e in raw[4000:]}  # remembered again, to see whether they repeat now
    # a client whose lines repeat keeps its memo
    q = P.ClientParser(runs=True, empty_runs=JS_ACK)
    for _ in range(40):
        assert {e[0] for e in q.feed(b"".join(b"PUB s.%d 1\r\nx\r\n" % i for i in range(200)))} == {P.OP_PUBS}


def test_runs_plain_acks_come_as_one_event():
    """Empty PUBs under `$JS.ACK.` with no reply (a consumer client's plain acks), with one space before
    the size or two (nats-py), follow one another as one OP_ACKS event per spacing; anything else about
    such a frame (a reply, a payload, lower case, a tab) is parsed the usual way."""
    one = b"PUB $JS.ACK.S.C.1.%d.%d.17.0 0\r\n\r\n"
    two = b"PUB $JS.ACK.S.C.1.%d.%d.17.0  0\r\n\r\n"
    data = (b"".join(one % (i, i) for i in range(3)) + b"".join(two % (i, i) for i in range(3, 5)) + one % (5, 5)
            + b"PUB $JS.ACK.S.C.1.6.6.17.0 r 0\r\n\r\nPUB $JS.ACK.x 1\r\n+\r\npub $JS.ACK.y 0\r\n\r\n"
            + b"PUB $JS.ACK.z\t0\r\n\r\nPUB $JS.ACKS 0\r\n\r\nPING\r\n" + one % (7, 7))
    evs = P.ClientParser(runs=True, empty_runs=JS_ACK).feed(data)
    subj = [b"$JS.ACK.S.C.1.%d.%d.17.0" % (i, i) for i in range(8)]
    assert evs[:3] == [(P.OP_ACKS, subj[:3]), (P.OP_ACKS, subj[3:5]), (P.OP_ACKS, subj[5:6])]
    assert [e[0] for e in evs[3:]] == [P.OP_PUBS, P.OP_PUBS, P.OP_PUB, P.OP_PUBS, P.OP_PUBS, P.OP_PING, P.OP_ACKS]
    assert evs[-1] == (P.OP_ACKS, subj[7:])
    assert P.ClientParser().feed(data)[0][0] == P.OP_PUB  # only in runs mode


@pytest.mark.parametrize("mcl", [12, 19, 20, 64])
def test_runs_plain_acks_keep_max_control_line(mcl):
    # a subject one byte too long for the limit is refused as by the plain parser, with either spacing
    for n in range(1, mcl):
        for sp in (b" ", b"  "):
            f = b"PUB $JS.ACK." + b"a" * n + sp + b"0\r\n\r\n"
            assert feed_runs(f * 2, [], max_control_line=mcl) == P.ClientParser(max_control_line=mcl).feed(f * 2)


def test_runs_error_mid_run_keeps_the_messages_before():
    data = b"PUB a 1\r\nx\r\n" * 3 + b"PUB a 1\r\nxy\r\n"
    assert P.ClientParser(runs=True, empty_runs=JS_ACK).feed(data) == [
        (P.OP_PUBS, "a", "", b"a", b"", [b"x", b"x", b"x"]),
        (P.OP_ERROR, P.ERR_UNKNOWN_OP),
    ]


_pieces = st.sampled_from([
    b"PUB a 1\r\nx\r\n", b"PUB a 1\r\ny\r\n", b"PUB a 2\r\nxy\r\n", b"PUB a r 1\r\nx\r\n", b"PUB b 0\r\n\r\n",
    b"PUB  a\t1\r\nx\r\n", b"PUB a 1\nx\r\n", b"pub a 1\r\nx\r\n", b"HPUB a 12 13\r\nNATS/1.0\r\n\r\nx\r\n",
    b"PING\r\n", b"SUB a 1\r\n", b"PUB a 1\r\nxy\r\n", b"PUB a 1\r\nx\n", b"PUB a 99\r\n", b"\r\n",
    b"PUB $JS.ACK.s.c.1 0\r\n\r\n", b"PUB $JS.ACK.s.c.2  0\r\n\r\n", b"PUB $JS.ACK.s.d.1 0\r\n\r\n",
    b"PUB $JS.ACK.s.c.3 r 0\r\n\r\n", b"PUB $JS.ACK.s 1\r\n+\r\n", b"PUB $JS.ACK.s.c.1 0\r\n\n",
    b"PUB $JS.ACK.s.c.1 0\r\n", b"PUB $JS.ACK. 0\r\n\r\n", b"PUB $JS.ACK.\xc3\xa9 0\r\n\r\n",
])


@settings(max_examples=500, deadline=None)
@given(st.lists(_pieces, max_size=30), st.lists(st.integers(1, 40), max_size=12))
def test_runs_give_the_same_messages_however_split(pieces, chunks):
    data = b"".join(pieces)
    assert feed_runs(data, chunks, max_payload=50) == feed_all(data, chunks, max_payload=50)


def _cold_parser(**kw) -> P.ClientParser:
    """A runs parser that has seen a memo's worth of lines that never repeat (a JetStream publisher's
    requests): it parses plainly for a while, grouping requests to one subject into OP_PUBR runs."""
    p = P.ClientParser(runs=True, empty_runs=JS_ACK, **kw)
    p.feed(b"".join(b"PUB w.%d r 0\r\n\r\n" % i for i in range(300)))
    return p


def test_runs_of_requests_group_by_subject():
    data = (b"PUB s _I.1 1\r\na\r\nPUB s _I.2 2\r\nbb\r\nPUB s\t_I.3  0\r\n\r\nPUB t _I.4 1\r\nc\r\n"
            b"PUB t 1\r\nd\r\nPUB t _I.5 1\r\ne\r\nHPUB t _I.6 12 12\r\nNATS/1.0\r\n\r\n\r\nPUB t _I.7 0\r\n\r\n"
            b"PING\r\nPUB t _I.8 0\r\n\r\n")
    assert _cold_parser().feed(data) == [
        (P.OP_PUBR, "s", b"s", [b"_I.1", b"_I.2", b"_I.3"], [b"a", b"bb", b""]),
        (P.OP_PUBR, "t", b"t", [b"_I.4"], [b"c"]),
        (P.OP_PUB, "t", "", None, b"d"),  # no reply: never part of a run of requests
        (P.OP_PUBR, "t", b"t", [b"_I.5"], [b"e"]),
        (P.OP_PUB, "t", "_I.6", b"NATS/1.0\r\n\r\n", b""),
        (P.OP_PUBR, "t", b"t", [b"_I.7"], [b""]),
        (P.OP_PING,),
        (P.OP_PUBR, "t", b"t", [b"_I.8"], [b""]),
    ]
    assert [e[0] for e in P.ClientParser().feed(data)].count(P.OP_PUBR) == 0  # only in runs mode


_requests = st.sampled_from([
    b"PUB a r1 1\r\nx\r\n", b"PUB a r2 1\r\ny\r\n", b"PUB a r3 0\r\n\r\n", b"PUB b r1 1\r\nx\r\n",
    b"PUB a\tr4 1\r\nx\r\n", b"PUB a r5 2\r\nx\r\n", b"PUB a r 1 x\r\n", b"PUB a 1\r\nx\r\n",
    b"HPUB a r6 12 13\r\nNATS/1.0\r\n\r\nx\r\n", b"PING\r\n", b"PUB a r7 99\r\n", b"PUB \xc3\xa9 r\xc3\xa9 1\r\nx\r\n",
    b"PUB $JS.ACK.s.c.1 0\r\n\r\n", b"PUB a r8 1\r\nx\n",
])


@settings(max_examples=500, deadline=None)
@given(st.lists(_requests, max_size=30), st.lists(st.integers(1, 40), max_size=12))
def test_runs_of_requests_give_the_same_messages_however_split(pieces, chunks):
    data = b"".join(pieces)
    got = feed_runs(data, chunks, parser=_cold_parser(max_payload=50))
    assert got == feed_all(data, chunks, max_payload=50)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600), st.lists(st.integers(1, 100), max_size=8))
def test_runs_random_bytes_same_as_per_message(data, chunks):
    assert feed_runs(data, chunks, max_control_line=64, max_payload=128) == feed_all(
        data, chunks, max_control_line=64, max_payload=128)


def test_empty_runs_only_under_the_prefix_the_parser_was_given() -> None:
    """The codec knows no JetStream: without a prefix, or under another one, ack frames are plain PUBs."""
    data = b"PUB $JS.ACK.S.C.1.1.1.17.0 0\r\n\r\nPUB $JS.ACK.S.C.1.2.2.17.0 0\r\n\r\n"
    assert all(e[0] != P.OP_ACKS for e in P.ClientParser(runs=True).feed(data))
    assert all(e[0] != P.OP_ACKS for e in P.ClientParser(runs=True, empty_runs=b"$X.").feed(data))
    evs = P.ClientParser(runs=True, empty_runs=b"$X.").feed(b"PUB $X.a 0\r\n\r\nPUB $X.b  0\r\n\r\nPUB $X.c 0\r\n\r\n")
    assert evs == [(P.OP_ACKS, [b"$X.a"]), (P.OP_ACKS, [b"$X.b"]), (P.OP_ACKS, [b"$X.c"])]
