"""The fast batch reply-subject grammar (edged/jetstream/publish/fastbatch.parse_reply), as nats-server's
getFastBatch reads it: examples, then random and truncated input (never an exception)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edged.jetstream.publish.fastbatch import INVALID, BatchRef, parse_reply


def test_examples() -> None:
    assert parse_reply("_INBOX.x.b1.5.fail.1.0.$FI") == BatchRef("b1", 1, 5, False)
    assert parse_reply("p.b1.0.ok.7.1.$FI") == BatchRef("b1", 7, 10, True)  # flow 0: the default 10
    assert parse_reply("p.b1.99999.ok.7.2.$FI") == BatchRef("b1", 7, 0xFFFF, True, commit=True)
    assert parse_reply("p.b1.1.fail.3.3.$FI") == BatchRef("b1", 3, 1, False, commit=True, commit_eob=True)
    assert parse_reply("p.b1.1.fail.3.4.$FI") == BatchRef("b1", 3, 1, False, ping=True)
    assert parse_reply("_INBOX.abc") is None and parse_reply("$FI") is None and parse_reply("") is None


def test_invalid_forms() -> None:
    for reply in ("x.$FI", "b1.1.fail.1.0.$FI",  # no prefix
                  "p.b1.1.fail.2.0.$FI",  # a start is sequence 1
                  "p.b1.1.fail.1.1.$FI",  # an append comes after 1
                  "p.b1.1.fail.1.3.$FI",  # an end-of-batch marker cannot be the first
                  "p.b1.1.fail.0.2.$FI", "p.b1.1.fail.-1.2.$FI", f"p.b1.1.fail.{(1 << 64) - 1}.2.$FI",
                  "p.b1.1.maybe.1.0.$FI", "p.b1.1.fail.1.5.$FI", "p.b1.1.fail.1.x.$FI"):
        assert parse_reply(reply) is INVALID, reply


_tok = st.one_of(st.text(alphabet="0123456789", min_size=0, max_size=3), st.sampled_from(["ok", "fail", "x", "-1"]),
                 st.text(max_size=4))


@given(st.lists(_tok, min_size=0, max_size=8), st.booleans())
def test_random_never_raises(tokens: list[str], suffix: bool) -> None:
    reply = ".".join(tokens) + (".$FI" if suffix else "")
    r = parse_reply(reply)
    if not reply.endswith(".$FI") or len(reply) <= 4:
        assert r is None
    else:
        assert r is not None
        if r is not INVALID:
            assert r.seq >= 1 and 1 <= r.flow <= 0xFFFF


@given(st.text(max_size=40))
def test_truncations(reply: str) -> None:
    full = f"_INBOX.{reply}.b.3.ok.2.1.$FI"
    for i in range(len(full) + 1):
        parse_reply(full[:i])  # never raises
