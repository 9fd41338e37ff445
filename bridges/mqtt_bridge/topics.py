"""Subjects <-> upstream topics for the bridge's rules: pure functions, no I/O.

A rule names its source (a subject filter for `out`, a topic filter for `in`) and, optionally, a template for
the destination in which `{{wildcard(n)}}` or `$n` stands for the n-th wildcard of the source (`*` / `+`
take one token, a trailing `>` / `#` takes the rest). Without a template a subject's tokens become topic
levels one for one (`a.b` <-> `a/b`). A topic that cannot be a subject (an empty level, a level with `.`,
a space or a wildcard character) is refused by `topic_to_subject` rather than guessed at.
"""

from __future__ import annotations

import re

_PLACEHOLDER = re.compile(r"\{\{\s*wildcard\s*\(\s*(\d+)\s*\)\s*\}\}|\$(\d+)")
_BAD_TOKEN = re.compile(r"[\s.*>]")


class TopicError(ValueError):
    """A topic or subject the bridge cannot translate."""


def valid_topic_filter(f: str) -> bool:
    """MQTT 3.1.1 §4.7: `#` alone as the last level, `+` alone as a level, no NUL, not empty."""
    if not f or "\x00" in f:
        return False
    levels = f.split("/")
    for i, lv in enumerate(levels):
        if "#" in lv and (lv != "#" or i != len(levels) - 1):
            return False
        if "+" in lv and lv != "+":
            return False
    return True


def valid_topic_name(t: str) -> bool:
    """A topic to publish to: no wildcards, no NUL, not empty."""
    return bool(t) and not any(c in t for c in "+#\x00")


def placeholders(template: str) -> list[int]:
    """The wildcard numbers a template refers to (to check them against the source when configured)."""
    return [int(a or b) for a, b in _PLACEHOLDER.findall(template)]


def expand_tail(template: str, source: str, sep: str, tail: str, src_sep: str, src_tail: str) -> str:
    """A template ending in the destination's multi-level wildcard (`.>` for a subject, `/#` for a topic)
    takes the source's trailing one: `cfg/#` -> `cfg.>` maps `cfg/a/b` to `cfg.a.b`."""
    if template != tail and not template.endswith(sep + tail):
        return template
    stoks = source.split(src_sep)
    if not source or stoks[-1] != src_tail:
        return template
    n = sum(1 for t in stoks if t in ("*", "+", ">", "#"))
    return template[: len(template) - len(tail)] + f"${n}"


def _fill(template: str, values: list[str]) -> str:
    def sub(m: re.Match[str]) -> str:
        n = int(m.group(1) or m.group(2))
        if not 0 < n <= len(values):
            raise TopicError(f"placeholder {m.group(0)} has no wildcard {n} in the source")
        return values[n - 1]

    return _PLACEHOLDER.sub(sub, template)


def _wildcards(pattern: list[str], tokens: list[str], one: str, rest: str, join: str) -> list[str] | None:
    """The values of `pattern`'s wildcards in `tokens` (None when they do not match)."""
    out: list[str] = []
    for i, p in enumerate(pattern):
        if p == rest:
            if i >= len(tokens):
                return None
            out.append(join.join(tokens[i:]))
            return out
        if i >= len(tokens):
            return None
        if p == one:
            out.append(tokens[i])
        elif p != tokens[i]:
            return None
    return out if len(tokens) == len(pattern) else None


def subject_to_topic(subject: str, source: str = "", template: str = "") -> str:
    """The upstream topic for `subject`, which matched the rule's `source` filter."""
    tokens = subject.split(".")
    if not template:
        return "/".join(tokens)
    values = _wildcards(source.split("."), tokens, "*", ">", "/") if source else []
    if values is None:
        raise TopicError(f"subject {subject!r} does not match {source!r}")
    topic = _fill(expand_tail(template, source, "/", "#", ".", ">"), values)
    if not valid_topic_name(topic):
        raise TopicError(f"{topic!r} is not a topic to publish to")
    return topic


def topic_to_subject(topic: str, source: str = "", template: str = "") -> str:
    """The local subject for an upstream `topic`, which matched the rule's `source` topic filter."""
    levels = topic.split("/")
    for lv in levels:
        if not lv or _BAD_TOKEN.search(lv):
            raise TopicError(f"topic {topic!r} has a level that cannot be a subject token: {lv!r}")
    if not template:
        return ".".join(levels)
    values = _wildcards(source.split("/"), levels, "+", "#", ".") if source else []
    if values is None:
        raise TopicError(f"topic {topic!r} does not match {source!r}")
    return _fill(expand_tail(template, source, ".", ">", "/", "#"), values)
