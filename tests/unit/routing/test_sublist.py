"""Sublist against a naive matcher, with hypothesis."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from edged.routing.subjects import subject_is_subset, subject_matches, subjects_overlap
from edged.routing.sublist import Sublist


@dataclass(eq=False)
class S:
    subject: str
    queue: str | None = None
    n: int = field(default=0)


def naive_match(pattern: str, subject: str) -> bool:
    pt, stoks = pattern.split("."), subject.split(".")
    for i, p in enumerate(pt):
        if p == ">":
            return i < len(stoks)
        if i >= len(stoks):
            return False
        if p not in ("*", stoks[i]):
            return False
    return len(pt) == len(stoks)


TOKENS = st.sampled_from(["a", "b", "c", "foo", "bar"])
PAT_TOKENS = st.sampled_from(["a", "b", "c", "foo", "bar", "*"])


@st.composite
def patterns(draw):
    toks = draw(st.lists(PAT_TOKENS, min_size=1, max_size=4))
    if draw(st.booleans()) and len(toks) < 4:
        toks.append(">")
    return ".".join(toks)


subjects = st.lists(TOKENS, min_size=1, max_size=5).map(".".join)


def test_literal_and_wildcards():
    sl = Sublist()
    a, b, c, d = S("foo.bar"), S("foo.*"), S("foo.>"), S(">")
    for s in (a, b, c, d):
        sl.insert(s)
    p, q = sl.match("foo.bar")
    assert set(p) == {a, b, c, d} and q == ()
    p, _ = sl.match("foo.bar.baz")
    assert set(p) == {c, d}
    p, _ = sl.match("foo")
    assert set(p) == {d}
    assert sl.remove(c)
    p, _ = sl.match("foo.bar.baz")
    assert set(p) == {d}
    assert not sl.remove(c)


def test_queue_groups_merge_across_nodes():
    sl = Sublist()
    q1, q2, q3 = S("foo.bar", "g"), S("foo.*", "g"), S("foo.*", "h")
    for s in (q1, q2, q3):
        sl.insert(s)
    _, q = sl.match("foo.bar")
    groups = sorted((set(g) for g in q), key=len)
    assert groups == [{q3}, {q1, q2}]


def test_cache_invalidated_on_insert_and_remove():
    sl = Sublist()
    assert sl.match("x.y") == ((), ())
    s = S("x.*")
    sl.insert(s)
    assert sl.match("x.y")[0] == (s,)
    sl.remove(s)
    assert sl.match("x.y") == ((), ())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(patterns(), st.sampled_from([None, "q1", "q2"])), max_size=25), st.lists(subjects, max_size=10),
       st.data())
def test_matches_naive(subs, subjs, data):
    sl = Sublist()
    objs = [S(p, q) for p, q in subs]
    for o in objs:
        sl.insert(o)
    # remove a random subset, interleaved with matches so the cache is exercised
    for subj in subjs:
        sl.match(subj)
    removed = data.draw(st.sets(st.integers(0, max(0, len(objs) - 1)))) if objs else set()
    for i in removed:
        assert sl.remove(objs[i])
    live = [o for i, o in enumerate(objs) if i not in removed]
    assert sl.count == len(live)
    for subj in subjs:
        p, q = sl.match(subj)
        want_p = {o for o in live if o.queue is None and naive_match(o.subject, subj)}
        want_q: dict[str, set] = {}
        for o in live:
            if o.queue and naive_match(o.subject, subj):
                want_q.setdefault(o.queue, set()).add(o)
        assert set(p) == want_p
        assert {frozenset(g) for g in q} == {frozenset(g) for g in want_q.values()}
        assert sum(len(g) for g in q) == sum(len(g) for g in want_q.values())
    assert set(sl.all_subs()) == set(live)


@given(patterns(), subjects)
def test_subject_matches(p, s):
    assert subject_matches(p, s) == naive_match(p, s)


@given(patterns(), patterns(), st.lists(subjects, min_size=1, max_size=30))
def test_overlap_and_subset_consistent(a, b, samples):
    for s in samples:
        if naive_match(a, s) and naive_match(b, s):
            assert subjects_overlap(a, b)
        if naive_match(a, s) and subject_is_subset(a, b):
            assert naive_match(b, s)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(patterns(), st.sampled_from([None, "q1"])), max_size=20),
       st.lists(st.lists(TOKENS, min_size=1, max_size=3).map(".".join), min_size=1, max_size=3),
       st.lists(subjects, max_size=12), st.data())
def test_prefix_memo_matches_naive(subs, prefixes, subjs, data):
    """Registered prefixes (JetStream ack subjects) give the same answers as the trie walk, before and after
    subscription changes."""
    sl = Sublist()
    for p in prefixes:
        sl.add_prefix(p)
    objs = [S(p, q) for p, q in subs]
    for o in objs:
        sl.insert(o)
    removed = data.draw(st.sets(st.integers(0, max(0, len(objs) - 1)))) if objs else set()
    for rnd in range(2):
        if rnd:
            for i in removed:
                sl.remove(objs[i])
        live = [o for i, o in enumerate(objs) if not (rnd and i in removed)]
        for subj in subjs + [p + ".x.y" for p in prefixes] + [p + ".z" for p in prefixes]:
            p, q = sl.match(subj)
            assert set(p) == {o for o in live if o.queue is None and naive_match(o.subject, subj)}
            assert {o for g in q for o in g} == {o for o in live if o.queue and naive_match(o.subject, subj)}
            mp = sl.memo_prefix(subj)
            if mp is not None:
                # what a run of acks is routed by: every subject under it matches as this one does
                assert subj.startswith(mp) and mp[:-1] in prefixes
                for other in (mp + "a", mp + "foo.b.c", mp + "x"):
                    assert {o for o in live if naive_match(o.subject, other)} == set(p) | {o for g in q for o in g}
    for p in prefixes:
        sl.remove_prefix(p)
    assert not sl._prefix_lens and not sl._prefixes


@settings(max_examples=300)
@given(st.lists(st.tuples(patterns(), st.sampled_from([None, "q1"])), max_size=20),
       st.lists(st.lists(TOKENS, min_size=1, max_size=3).map(".".join), min_size=1, max_size=3),
       st.lists(st.tuples(patterns(), st.sampled_from([None, "q1"])), max_size=4), st.data())
def test_parent_memo_matches_naive(subs, parents, later, data):
    """Many different subjects under one parent (request replies under `_INBOX.<id>`) are answered by a memo
    per parent once no subscription tells them apart: the same answers as the trie walk, before and after
    subscriptions come and go, and for children a literal subscription does tell apart."""
    sl = Sublist()
    objs = [S(p, q) for p, q in subs]
    for o in objs:
        sl.insert(o)
    live = list(objs)
    last_toks = [f"n{i}" for i in range(12)] + ["a", "b", "foo"]
    for rnd in range(3):
        if rnd == 1:
            extra = [S(p, q) for p, q in later]
            for o in extra:
                sl.insert(o)
            live += extra
        elif rnd == 2 and live:
            gone = data.draw(st.sets(st.integers(0, len(live) - 1)))
            for i in gone:
                assert sl.remove(live[i])
            live = [o for i, o in enumerate(live) if i not in gone]
        for par in parents:
            for t in last_toks:
                subj = f"{par}.{t}"
                p, q = sl.match(subj)
                assert set(p) == {o for o in live if o.queue is None and naive_match(o.subject, subj)}, subj
                assert {o for g in q for o in g} == {o for o in live if o.queue and naive_match(o.subject, subj)}
                if sl.memo_parent(subj) is not None:
                    # what PubAcks of one commit are framed by: every child matches as this one does
                    assert sl.memo_parent(subj) == par
                    for other in (f"{par}.zz", f"{par}.n99"):
                        assert {o for o in live if naive_match(o.subject, other)} == set(p) | {o for g in q for o in g}


def test_parent_memo_keeps_reply_subjects_out_of_the_cache():
    sl = Sublist()
    inbox = S("_INBOX.abc.*")
    sl.insert(inbox)
    sl.insert(S("bench"))
    for i in range(1000):
        assert sl.match(f"_INBOX.abc.{i}") == ((inbox,), ())
    assert sl.cache_size() < 10
    assert sl.match("_INBOX.abc.x.y") == ((), ())  # one token more: not under the memo
    lit = S("_INBOX.abc.7")
    sl.insert(lit)  # now one child is told apart
    assert set(sl.match("_INBOX.abc.7")[0]) == {inbox, lit}
    assert sl.match("_INBOX.abc.8") == ((inbox,), ())
    assert sl.memo_parent("_INBOX.abc.8") is None  # until the parent is memoized again
