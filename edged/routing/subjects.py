"""The NATS subject grammar in one place: validation, matching and set relations, filters, transforms.

Subjects are `.`-separated tokens; `*` as a whole token matches one token, `>` as the last token one or
more; inside a longer token both are plain characters (as in nats-server). Pure functions with no
dependency on the daemon, so the store (storage/) uses them too. The sublist keeps its own trie walk;
the per-message helpers here (subject_matches, CompiledFilter.matches, SubjectTransform) are kept to a
split and a loop, with a literal fast path, because consumers and streams call them for every message.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

# ---------------------------------------------------------------------------------------------------------
# validation


def is_valid_subject(subject: str) -> bool:
    """A subscription subject: no whitespace, non-empty tokens, `>` only as the last token."""
    if not subject or " " in subject or "\t" in subject or "\r" in subject or "\n" in subject:
        return False
    tokens = subject.split(".")
    last = len(tokens) - 1
    for i, t in enumerate(tokens):
        if not t:
            return False
        if t == ">" and i != last:
            return False
    return True


def is_literal(subject: str) -> bool:
    """No wildcard token (`a*b` is a literal token)."""
    for tok in subject.split("."):
        if tok == "*" or tok == ">":
            return False
    return True


def is_valid_literal_subject(subject: str) -> bool:
    """A publish subject: valid and without wildcard tokens."""
    return is_valid_subject(subject) and is_literal(subject)


def is_valid_queue(queue: str) -> bool:
    """A queue group name: non-empty, no whitespace (it is one protocol argument)."""
    return bool(queue) and not any(c in queue for c in " \t\r\n")


# ---------------------------------------------------------------------------------------------------------
# matching and set relations


def tokens_match(ptoks: Sequence[str], subject: str) -> bool:
    """subject_matches for a pattern split once by the caller (a compiled filter)."""
    stoks = subject.split(".")
    ns = len(stoks)
    for i, p in enumerate(ptoks):
        if p == ">":
            return ns > i
        if i >= ns:
            return False
        if p != "*" and p != stoks[i]:
            return False
    return ns == len(ptoks)


def subject_matches(pattern: str, subject: str) -> bool:
    """Does literal `subject` match `pattern` (which may hold wildcards)?"""
    if pattern == subject:
        return True
    if "*" not in pattern and ">" not in pattern:
        return False  # a literal pattern matches only itself
    pt = pattern.split(".")
    st = subject.split(".")
    for i, p in enumerate(pt):  # tokens_match inlined: a call costs as much as the loop
        if p == ">":
            return len(st) > i
        if i >= len(st):
            return False
        if p != "*" and p != st[i]:
            return False
    return len(pt) == len(st)


def subjects_overlap(a: str, b: str) -> bool:
    """Could some literal subject match both patterns?"""
    at = a.split(".")
    bt = b.split(".")
    for i in range(max(len(at), len(bt))):
        x = at[i] if i < len(at) else None
        y = bt[i] if i < len(bt) else None
        if x == ">" or y == ">":
            return x is not None and y is not None
        if x is None or y is None:
            return False
        if x != y and x != "*" and y != "*":
            return False
    return True


def subject_is_subset(sub: str, of: str) -> bool:
    """Is every subject matched by `sub` also matched by `of`?"""
    st = sub.split(".")
    ot = of.split(".")
    for i, o in enumerate(ot):
        if o == ">":
            return len(st) > i
        if i >= len(st):
            return False
        s = st[i]
        if s == ">":
            return False
        if o == "*":
            continue
        if s != o:
            return False
    return len(st) == len(ot)


# ---------------------------------------------------------------------------------------------------------
# filters


class AllowDenyFilter:
    """Allow/deny lists as nats-server applies them to a leaf link (allow None = everything)."""

    __slots__ = ("allow", "deny", "_cache")

    def __init__(self, allow: list[str] | None = None, deny: list[str] | None = None) -> None:
        self.allow = list(allow) if allow is not None else None
        self.deny = list(deny or ())
        self._cache: dict[str, bool] = {}

    @property
    def empty(self) -> bool:
        return self.allow is None and not self.deny

    def allows(self, subject: str) -> bool:
        """For a literal subject (a message); cached, since a link sees the same subjects again and again."""
        r = self._cache.get(subject)
        if r is None:
            r = (self.allow is None or any(subject_matches(a, subject) for a in self.allow)) and not any(
                subject_matches(d, subject) for d in self.deny
            )
            if len(self._cache) > 8192:
                self._cache.clear()
            self._cache[subject] = r
        return r

    def allows_interest(self, subject: str) -> bool:
        """For a subscription subject, which may hold wildcards: literal ones must be allowed outright,
        wildcard ones only need to overlap the allow list (deliveries are filtered per message)."""
        if any(subject_is_subset(subject, d) for d in self.deny):
            return False
        if self.allow is None:
            return True
        if "*" in subject.split(".") or subject.endswith(">"):
            return any(subjects_overlap(subject, a) for a in self.allow)
        return any(subject_matches(a, subject) for a in self.allow)


FilterArg = str | Sequence[str] | None


class CompiledFilter:
    """A stored-message filter: one subject or a list (JetStream filter_subject(s)); `all` = no filtering.

    Split once and cached by compile_filter, because consumers pass the same filter on every load."""

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
            if tokens_match(w, subject):
                return True
        return False

    def __repr__(self) -> str:
        return f"CompiledFilter({list(self.subjects)!r})"


@lru_cache(maxsize=1024)
def _compile(subjects: tuple[str, ...]) -> CompiledFilter:
    return CompiledFilter(subjects)


MATCH_ALL = _compile(())


def compile_filter(f: FilterArg | CompiledFilter) -> CompiledFilter:
    """Accepts None / "" / ">" (everything), one subject, or a list of subjects."""
    if f is None:
        return MATCH_ALL
    if isinstance(f, CompiledFilter):
        return f
    if isinstance(f, str):
        return _compile((f,)) if f not in ("", ">") else MATCH_ALL
    return _compile(tuple(f))


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


# ---------------------------------------------------------------------------------------------------------
# transforms


class SubjectTransform:
    """A subject mapping `src` -> `dest` with nats-server's `{{wildcard(n)}}` / `$n` placeholders and `>` tail
    (JetStream subject_transform and republish; account mappings next).

    A subject that does not match `src` passes unchanged. The destination is parsed on the first match
    and kept, so the per-message cost is one match, one split and one join."""

    __slots__ = ("src", "dest", "_wild", "_plan")

    def __init__(self, src: str, dest: str) -> None:
        self.src = src
        self.dest = dest
        # (token index, is `>`) of each wildcard in src, in order: placeholder n is the n-th of them
        self._wild = tuple((i, t == ">") for i, t in enumerate(src.split(".")) if t == "*" or t == ">")
        self._plan: tuple[str | int, ...] | None = None

    def _compile(self) -> tuple[str | int, ...]:
        """Each dest token as literal text or the index of the wildcard it takes; a placeholder out of range
        stays as written. A malformed `{{wildcard(x)}}` raises ValueError."""
        nw = len(self._wild)
        src_fwc = self.src.split(".")[-1] == ">"  # then `>` in dest takes the tail
        plan: list[str | int] = []
        for t in self.dest.split("."):
            tt = t.replace(" ", "")
            if tt.startswith("{{wildcard(") and tt.endswith(")}}"):
                n = int(tt[11:-3])
                plan.append(n - 1 if 0 < n <= nw else t)
            elif tt.startswith("$") and tt[1:].isdigit():
                n = int(tt[1:])
                plan.append(n - 1 if 0 < n <= nw else t)
            elif t == ">":
                plan.append(nw - 1 if src_fwc else ">")
            elif t == "*":
                plan.append(0 if nw else "*")
            else:
                plan.append(t)
        self._plan = tuple(plan)
        return self._plan

    def __call__(self, subject: str) -> str:
        if not subject_matches(self.src, subject):
            return subject
        plan = self._plan if self._plan is not None else self._compile()
        toks = subject.split(".")
        wild = [".".join(toks[i:]) if fwc else toks[i] for i, fwc in self._wild]
        return ".".join([p if type(p) is str else wild[p] for p in plan])  # type: ignore[index]

    def __repr__(self) -> str:
        return f"SubjectTransform({self.src!r}, {self.dest!r})"


@lru_cache(maxsize=256)
def _transform(src: str, dest: str) -> SubjectTransform:
    return SubjectTransform(src, dest)


def transform_subject(rule: tuple[str, str], subject: str) -> str:
    """One-off form of SubjectTransform for a (src, dest) rule; the compiled transform is cached."""
    return _transform(rule[0], rule[1])(subject)
