"""The subject grammar (edged/routing/subjects.py) against brute force over a small universe, regexes and SQLite.

Set relations (subset, overlap) are checked by enumerating every literal subject of up to four tokens
over {a, b, z}: with patterns of at most three tokens over {a, b, *, >}, any counterexample has a witness
there. Malformed subjects (empty tokens, whitespace, `>` not last, wildcards inside tokens) are mixed in.
"""

from __future__ import annotations

import itertools
import re
import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edged.routing.subjects import (
    MATCH_ALL,
    AllowDenyFilter,
    CompiledFilter,
    SubjectTransform,
    compile_filter,
    is_literal,
    is_valid_literal_subject,
    is_valid_queue,
    is_valid_subject,
    subject_is_subset,
    subject_matches,
    subjects_overlap,
    to_glob,
    transform_subject,
)

UNIVERSE = [".".join(t) for n in range(1, 5) for t in itertools.product("abz", repeat=n)]

pattern_tokens = st.sampled_from(["a", "b", "*", ">"])
patterns = st.lists(pattern_tokens, min_size=1, max_size=3).map(".".join).filter(is_valid_subject)
literals = st.lists(st.sampled_from(["a", "b", "z"]), min_size=1, max_size=4).map(".".join)
# anything a client might send: wildcards inside tokens, empty tokens, whitespace, non-ASCII
messy_tokens = st.sampled_from(["a", "b", "*", ">", "a*", ">b", "", " ", "a b", "\t", "é", "$JS", "\r\n"])
messy = st.lists(messy_tokens, min_size=0, max_size=5).map(".".join)


def regex_for(pattern: str) -> re.Pattern[str]:
    """An independent reading of the wildcard rules, as a regex over the whole subject."""
    parts = []
    toks = pattern.split(".")
    for i, t in enumerate(toks):
        if t == ">" and i == len(toks) - 1:
            parts.append(r"[^.]+(?:\.[^.]+)*")
        elif t == "*":
            parts.append(r"[^.]+")
        else:
            parts.append(re.escape(t))
    return re.compile(r"\.".join(parts))


def matched(pattern: str) -> set[str]:
    return {s for s in UNIVERSE if subject_matches(pattern, s)}


# ---------------------------------------------------------------------------------------------------------
# matching and set relations


@given(patterns, literals)
def test_matches_agrees_with_regex(p, s):
    assert subject_matches(p, s) == bool(regex_for(p).fullmatch(s))


@given(messy, messy)
def test_matches_never_raises_and_literal_patterns_match_only_themselves(p, s):
    r = subject_matches(p, s)
    if is_literal(p):
        assert r == (p == s)
    assert subject_matches(p, p) if p else True


@given(patterns, patterns)
@settings(max_examples=300)
def test_subset_is_set_inclusion(p, q):
    assert subject_is_subset(p, q) == (matched(p) <= matched(q))


@given(patterns, patterns)
@settings(max_examples=300)
def test_overlap_is_a_common_subject(p, q):
    assert subjects_overlap(p, q) == bool(matched(p) & matched(q))
    assert subjects_overlap(p, q) == subjects_overlap(q, p)


@given(messy, messy)
def test_relations_never_raise_on_malformed_subjects(p, q):
    subject_is_subset(p, q)
    subjects_overlap(p, q)
    is_valid_subject(p)
    is_valid_literal_subject(p)


# ---------------------------------------------------------------------------------------------------------
# validation


def valid_by_rules(s: str) -> bool:
    """The rules spelled out independently: no whitespace, no empty token, `>` alone only as the last token."""
    if not s or re.search(r"[ \t\r\n]", s):
        return False
    toks = s.split(".")
    return all(toks) and ">" not in toks[:-1]


@given(messy)
def test_validation_rules(s):
    assert is_valid_subject(s) == valid_by_rules(s)
    assert is_valid_literal_subject(s) == (valid_by_rules(s) and "*" not in s.split(".") and ">" not in s.split("."))
    assert is_literal(s) == (not {"*", ">"} & set(s.split(".")))


@pytest.mark.parametrize("s", ["foo", "foo.bar", "foo.*", "foo.>", ">", "*", "*.*.>", "a*b.c>d", "$JS.API.>", "é.ü"])
def test_valid_subjects(s):
    assert is_valid_subject(s)


@pytest.mark.parametrize("s", ["", ".", "foo.", ".foo", "foo..bar", "foo.>.bar", ">.a", "foo bar", "foo\tbar",
                               "a.\r\n", "\n"])
def test_invalid_subjects(s):
    assert not is_valid_subject(s)
    assert not is_valid_literal_subject(s)


def test_literal_subjects():
    assert is_valid_literal_subject("a.b") and is_valid_literal_subject("a*.>b")
    assert not is_valid_literal_subject("a.*") and not is_valid_literal_subject("a.>")


@pytest.mark.parametrize("q,ok", [("workers", True), ("w.x", True), ("", False), ("a b", False), ("a\tb", False),
                                  ("a\r", False), ("a\n", False)])
def test_queue_names(q, ok):
    assert is_valid_queue(q) == ok


# ---------------------------------------------------------------------------------------------------------
# filters


@given(st.lists(patterns, min_size=1, max_size=4), literals)
def test_compiled_filter_is_any_of_its_subjects(fs, s):
    f = compile_filter(fs)
    assert f.matches(s) == any(subject_matches(x, s) for x in fs)
    assert f.literal_only == (not f.all and all(is_literal(x) for x in fs))
    assert compile_filter(fs) is f and compile_filter(f) is f  # compiled once


@pytest.mark.parametrize("arg", [None, "", ">", [], [">", "a"], ["a", ""]])
def test_compiled_filter_everything(arg):
    f = compile_filter(arg)
    assert f.all and f.matches("anything.at.all")
    if arg in (None, "", ">"):
        assert f is MATCH_ALL


def test_compiled_filter_literals_deduplicated():
    f = CompiledFilter(("a.b", "a.b", "c.*"))
    assert f.literals == ("a.b",) and f.wilds == (("c", "*"),)
    assert "CompiledFilter" in repr(f)


@given(patterns, literals)
@settings(max_examples=200)
def test_glob_is_a_superset_in_real_sqlite(p, s):
    """The store's GLOB prefilter never drops a subject the filter matches."""
    db = sqlite3.connect(":memory:")
    try:
        hit = db.execute("SELECT ? GLOB ?", (s, to_glob(p))).fetchone()[0]
    finally:
        db.close()
    if subject_matches(p, s):
        assert hit == 1


def test_glob_escapes_glob_characters():
    db = sqlite3.connect(":memory:")
    try:
        g = to_glob("a[1]?.*")
        assert db.execute("SELECT ? GLOB ?", ("a[1]?.x", g)).fetchone()[0] == 1
        assert db.execute("SELECT ? GLOB ?", ("a1x.x", g)).fetchone()[0] == 0
    finally:
        db.close()


@given(st.none() | st.lists(patterns, max_size=3), st.lists(patterns, max_size=3), literals)
def test_allow_deny_filter_for_messages(allow, deny, s):
    f = AllowDenyFilter(allow, deny)
    want = (allow is None or any(subject_matches(a, s) for a in allow)) and not any(subject_matches(d, s) for d in deny)
    assert f.allows(s) == want
    assert f.allows(s) == want  # the cached answer too
    assert f.empty == (allow is None and not deny)


@given(st.none() | st.lists(patterns, max_size=3), st.lists(patterns, max_size=3), patterns)
def test_allow_deny_filter_for_interest(allow, deny, sub):
    f = AllowDenyFilter(allow, deny)
    r = f.allows_interest(sub)
    if any(subject_is_subset(sub, d) for d in deny):
        assert not r
    elif allow is None:
        assert r
    elif is_literal(sub):
        assert r == any(subject_matches(a, sub) for a in allow)
    else:
        assert r == any(subjects_overlap(sub, a) for a in allow)


# ---------------------------------------------------------------------------------------------------------
# transforms


@pytest.mark.parametrize("src,dest,subject,out", [
    ("foo.*.*", "bar.$2.$1", "foo.A.B", "bar.B.A"),
    ("foo.*.*", "bar.{{wildcard(2)}}.{{ wildcard(1) }}", "foo.A.B", "bar.B.A"),
    ("foo.>", "bar.>", "foo.a.b.c", "bar.a.b.c"),
    (">", "edge.>", "x.y", "edge.x.y"),
    ("orders.*", "orders.*.v2", "orders.7", "orders.7.v2"),
    ("foo.*", "bar.$3", "foo.A", "bar.$3"),  # a placeholder out of range stays as written
    ("foo.bar", "baz", "foo.bar", "baz"),
    ("foo.*", "bar.$1", "other.A", "other.A"),  # no match: unchanged
    ("foo.*", "bar.>", "foo.A", "bar.>"),  # `>` takes a tail only when src ends with one
])
def test_transform_examples(src, dest, subject, out):
    assert SubjectTransform(src, dest)(subject) == out
    assert transform_subject((src, dest), subject) == out


@given(st.lists(pattern_tokens, min_size=1, max_size=4).map(".".join).filter(is_valid_subject), literals)
def test_transform_to_own_placeholders_is_identity(src, s):
    n = 0
    dest = []
    for t in src.split("."):
        if t in ("*", ">"):
            n += 1
            dest.append(f"${n}")
        else:
            dest.append(t)
    assert SubjectTransform(src, ".".join(dest))(s) == s


def test_transform_bad_placeholder_raises_only_on_a_match():
    t = SubjectTransform("foo.*", "bar.{{wildcard(x)}}")
    assert t("other.A") == "other.A"
    with pytest.raises(ValueError):
        t("foo.A")
