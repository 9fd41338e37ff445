"""Subject filters with NATS semantics (`*` = one token, `>` = one or more trailing tokens).

Kept here (not in the router) so the store has no dependency on the daemon; filters are compiled once
and cached because consumers pass the same filter on every `load_next`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

FilterArg = str | Sequence[str] | None


def is_literal(subject: str) -> bool:
    """True when the subject has no wildcard token."""
    for tok in subject.split("."):
        if tok == "*" or tok == ">":
            return False
    return True


def _tokens_match(ftoks: tuple[str, ...], subject: str) -> bool:
    stoks = subject.split(".")
    ns = len(stoks)
    for i, ft in enumerate(ftoks):
        if ft == ">":
            return ns > i
        if i >= ns:
            return False
        if ft != "*" and ft != stoks[i]:
            return False
    return ns == len(ftoks)


def subject_matches(filter_subject: str, subject: str) -> bool:
    """Does literal `subject` match `filter_subject` (which may contain wildcards)?"""
    if filter_subject == ">" or filter_subject == "":
        return True
    if "*" not in filter_subject and ">" not in filter_subject:
        return filter_subject == subject
    return _tokens_match(tuple(filter_subject.split(".")), subject)


def _glob_escape(tok: str) -> str:
    return tok.replace("[", "[[]").replace("*", "[*]").replace("?", "[?]")


def to_glob(filter_subject: str) -> str:
    """A SQLite GLOB pattern matching a superset of the filter (GLOB `*` also crosses dots),
    used as a cheap C-level prefilter before the exact Python check."""
    out: list[str] = []
    for tok in filter_subject.split("."):
        if tok == "*":
            out.append("*")
        elif tok == ">":
            out.append("?*")
        else:
            out.append(_glob_escape(tok))
    return ".".join(out)


class SubjectFilter:
    """A compiled filter or list of filters. `all` means no filtering at all."""

    __slots__ = ("all", "literals", "wilds", "subjects")

    def __init__(self, subjects: tuple[str, ...]) -> None:
        self.subjects = subjects
        self.all = len(subjects) == 0 or any(s in (">", "") for s in subjects)
        lits: list[str] = []
        wilds: list[tuple[str, ...]] = []
        if not self.all:
            for s in subjects:
                if is_literal(s):
                    if s not in lits:
                        lits.append(s)
                else:
                    wilds.append(tuple(s.split(".")))
        self.literals: tuple[str, ...] = tuple(lits)
        self.wilds: tuple[tuple[str, ...], ...] = tuple(wilds)

    @property
    def literal_only(self) -> bool:
        return not self.all and not self.wilds

    def matches(self, subject: str) -> bool:
        if self.all:
            return True
        if subject in self.literals:
            return True
        for w in self.wilds:
            if _tokens_match(w, subject):
                return True
        return False

    def __repr__(self) -> str:
        return f"SubjectFilter({list(self.subjects)!r})"


@lru_cache(maxsize=1024)
def _compile(subjects: tuple[str, ...]) -> SubjectFilter:
    return SubjectFilter(subjects)


MATCH_ALL = _compile(())


def compile_filter(f: FilterArg | SubjectFilter) -> SubjectFilter:
    """Accepts None / "" / ">" (everything), one subject, or a list of subjects."""
    if f is None:
        return MATCH_ALL
    if isinstance(f, SubjectFilter):
        return f
    if isinstance(f, str):
        return _compile((f,)) if f not in ("", ">") else MATCH_ALL
    return _compile(tuple(f))
