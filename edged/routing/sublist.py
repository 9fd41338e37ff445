"""Subject interest: a token trie with `*` / `>` wildcards, queue groups and a match cache.

The cache is what makes the hot path cheap: a publish to a subject seen before is one dict lookup.
Entries that a subscription change could affect are dropped on insert/remove; the cache is bounded.
"""

from __future__ import annotations

from typing import Any

from edged.routing.subjects import subject_matches

CACHE_MAX = 4096
PARENTS_MAX = 1024  # parents of missed subjects followed at once (see Sublist.match)
PARENT_MISSES = 4  # different subjects under one parent missed before its memo is tried
_EMPTY: tuple[tuple, tuple] = ((), ())


class _Node:
    __slots__ = ("next", "psubs", "qsubs")

    def __init__(self) -> None:
        self.next: _Level | None = None
        self.psubs: dict[Any, None] = {}  # insertion-ordered set
        self.qsubs: dict[str, dict[Any, None]] = {}

    def empty(self) -> bool:
        return not self.psubs and not self.qsubs and (self.next is None or self.next.empty())


class _Level:
    __slots__ = ("nodes", "pwc", "fwc")

    def __init__(self) -> None:
        self.nodes: dict[str, _Node] = {}
        self.pwc: _Node | None = None
        self.fwc: _Node | None = None

    def empty(self) -> bool:
        return not self.nodes and self.pwc is None and self.fwc is None


class Sublist:
    """Subscriptions are any objects with `.subject` (str) and `.queue` (str | None)."""

    __slots__ = ("_root", "_cache", "count", "matches", "cache_hits", "inserts", "removes", "cache_enabled",
                 "_prefixes", "_prefix_lens", "_last_prefix", "_parents")

    def __init__(self, cache: bool = True) -> None:
        self._root = _Level()
        self._cache: dict[str, tuple[tuple, tuple]] = {}
        # prefix -> [refs, generation, result or None]; see add_prefix
        self._prefixes: dict[str, list[Any]] = {}
        self._prefix_lens: dict[int, int] = {}  # token count of registered prefixes -> how many
        self._last_prefix: tuple[str, list[Any]] | None = None  # ("prefix.", entry) of the last memo hit
        # parent of cache-missed subjects -> [misses, generation, result or None]: see match
        self._parents: dict[str, list[Any]] = {}
        self.count = 0
        self.matches = 0
        self.cache_hits = 0
        self.inserts = 0
        self.removes = 0
        self.cache_enabled = cache

    def insert(self, sub: Any) -> None:
        level = self._root
        node: _Node | None = None
        for tok in sub.subject.split("."):
            if tok == "*":
                if level.pwc is None:
                    level.pwc = _Node()
                node = level.pwc
            elif tok == ">":
                if level.fwc is None:
                    level.fwc = _Node()
                node = level.fwc
            else:
                node = level.nodes.get(tok)
                if node is None:
                    node = level.nodes[tok] = _Node()
            if node.next is None:
                node.next = _Level()
            level = node.next
        assert node is not None
        if sub.queue:
            g = node.qsubs.get(sub.queue)
            if g is None:
                g = node.qsubs[sub.queue] = {}
            g[sub] = None
        else:
            node.psubs[sub] = None
        self.count += 1
        self.inserts += 1
        self._invalidate(sub.subject)

    def remove(self, sub: Any) -> bool:
        level: _Level | None = self._root
        path: list[tuple[_Level, str, _Node]] = []
        node: _Node | None = None
        for tok in sub.subject.split("."):
            if level is None:
                return False
            if tok == "*":
                node = level.pwc
            elif tok == ">":
                node = level.fwc
            else:
                node = level.nodes.get(tok)
            if node is None:
                return False
            path.append((level, tok, node))
            level = node.next
        if node is None:
            return False
        if sub.queue:
            g = node.qsubs.get(sub.queue)
            if g is None or sub not in g:
                return False
            del g[sub]
            if not g:
                del node.qsubs[sub.queue]
        else:
            if sub not in node.psubs:
                return False
            del node.psubs[sub]
        # prune empty nodes bottom-up
        for lvl, tok, nd in reversed(path):
            if not nd.empty():
                break
            if tok == "*":
                lvl.pwc = None
            elif tok == ">":
                lvl.fwc = None
            else:
                del lvl.nodes[tok]
        self.count -= 1
        self.removes += 1
        self._invalidate(sub.subject)
        return True

    def _invalidate(self, pattern: str) -> None:
        cache = self._cache
        if not cache:
            return
        if "*" not in pattern and ">" not in pattern:
            cache.pop(pattern, None)
            return
        for key in [k for k in cache if subject_matches(pattern, k)]:
            del cache[key]

    def add_prefix(self, prefix: str) -> None:
        """Declare that many distinct subjects will be published under the literal `prefix.>` (each
        JetStream ack subject is new): their matches are then answered by one memo entry per prefix,
        as long as no subscription tells those subjects apart, instead of a trie walk and a cache
        entry each (which would also push the reused subjects out of the cache)."""
        e = self._prefixes.get(prefix)
        if e is not None:
            e[0] += 1
            return
        self._prefixes[prefix] = [1, -1, None]
        k = prefix.count(".") + 1
        self._prefix_lens[k] = self._prefix_lens.get(k, 0) + 1

    def remove_prefix(self, prefix: str) -> None:
        e = self._prefixes.get(prefix)
        if e is None:
            return
        e[0] -= 1
        if e[0] > 0:
            return
        del self._prefixes[prefix]
        self._last_prefix = None
        k = prefix.count(".") + 1
        left = self._prefix_lens.get(k, 0) - 1
        if left > 0:
            self._prefix_lens[k] = left
        else:
            self._prefix_lens.pop(k, None)

    def _prefix_match(self, toks: list[str]) -> tuple[tuple, tuple] | None:
        """The memoized match of a subject under a registered prefix, or None (walk the trie)."""
        n = len(toks)
        for k in self._prefix_lens:
            if n <= k:
                continue
            key = ".".join(toks[:k])
            e = self._prefixes.get(key)
            if e is None:
                continue
            self._last_prefix = (key + ".", e)
            gen = self.inserts + self.removes
            if e[1] != gen:
                e[1] = gen
                e[2] = None
                ptoks = toks[:k]
                if _uniform(self._root, ptoks, k, True):
                    psubs: list = []
                    qgroups: dict[str, list] = {}
                    # every subject under the prefix matches the same subscriptions: any one will do
                    _match_level(self._root, [*ptoks, ""], 0, psubs, qgroups)
                    e[2] = _result(psubs, qgroups)
            return e[2]  # type: ignore[no-any-return]
        return None

    def match(self, subject: str) -> tuple[tuple, tuple]:
        """Return (plain subs, queue groups) for a literal subject; each group is a tuple of subs."""
        self.matches += 1
        r = self._cache.get(subject)
        if r is not None:
            self.cache_hits += 1
            return r
        if self._prefix_lens:
            last = self._last_prefix
            if last is not None and subject.startswith(last[0]):
                # a run of acks to one consumer: no split, no join
                e = last[1]
                if e[1] == self.inserts + self.removes and e[2] is not None:
                    return e[2]  # type: ignore[no-any-return]
            toks = subject.split(".")
            r = self._prefix_match(toks)
            if r is not None:
                return r
        else:
            toks = subject.split(".")
        # Request replies: every one goes to a new subject under one parent (`_INBOX.<id>.<n>`). Once
        # several children of a parent have missed, and no subscription tells its children apart
        # (`_INBOX.<id>.*` does not), one memo per parent answers them all, and they stay out of the
        # cache, where they would only push out the subjects that do repeat.
        parent, dot, _ = subject.rpartition(".")
        pe = None
        gen = 0
        if dot:
            pe = self._parents.get(parent)
            if pe is not None:
                gen = self.inserts + self.removes
                if pe[1] == gen and pe[2] is not None:
                    return pe[2]  # type: ignore[no-any-return]
        psubs: list = []
        qgroups: dict[str, list] = {}
        _match_level(self._root, toks, 0, psubs, qgroups)
        r = _result(psubs, qgroups)
        if dot:
            if pe is None:
                parents = self._parents
                if len(parents) >= PARENTS_MAX:
                    parents.clear()
                parents[parent] = [1, -1, None]
            else:
                pe[0] += 1
                if pe[0] >= PARENT_MISSES and pe[1] != gen:
                    pe[1] = gen
                    pe[2] = r if _uniform(self._root, toks, len(toks) - 1, False) else None
                if pe[2] is not None:
                    return r
        if self.cache_enabled:
            cache = self._cache
            if len(cache) >= CACHE_MAX:
                # drop an arbitrary quarter: cheap and keeps hot entries likely enough
                for k in list(cache)[: CACHE_MAX // 4]:
                    del cache[k]
            cache[subject] = r
        return r

    def memo_prefix(self, subject: str) -> str | None:
        """The registered prefix (with its trailing dot) whose memo answered the match of `subject` just
        made, when it did: every subject under it matches the same subscriptions until they change."""
        last = self._last_prefix
        if last is None or not subject.startswith(last[0]):
            return None
        e = last[1]
        return last[0] if e[1] == self.inserts + self.removes and e[2] is not None else None

    def memo_parent(self, subject: str) -> str | None:
        """The parent of `subject` (all but its last token) when the parent's memo holds (see `match`):
        every subject of one token more under it matches the same subscriptions until they change."""
        parent = subject.rpartition(".")[0]
        pe = self._parents.get(parent)
        if pe is None or pe[1] != self.inserts + self.removes or pe[2] is None:
            return None
        return parent

    def count_repeats(self, k: int) -> None:
        """k further matches of a subject just matched (a run of messages routed with one match): the
        statistics read as if each message had been matched."""
        self.matches += k
        if self.cache_enabled:
            self.cache_hits += k

    def has_interest(self, subject: str) -> bool:
        r = self.match(subject)
        return bool(r[0] or r[1])

    def all_subs(self) -> list[Any]:
        out: list[Any] = []
        _collect(self._root, out)
        return out

    def cache_size(self) -> int:
        return len(self._cache)

    def cache_fanout(self) -> tuple[int, int, int]:
        """(cached results, their total fanout, the largest): nats-server's SublistStats fanout figures."""
        tot = mx = 0
        for psubs, qsubs in list(self._cache.values()):
            n = len(psubs) + len(qsubs)
            tot += n
            if n > mx:
                mx = n
        return len(self._cache), tot, mx


def _result(psubs: list, qgroups: dict[str, list]) -> tuple[tuple, tuple]:
    if qgroups:
        return tuple(psubs), tuple([tuple(g) for g in qgroups.values()])
    return (tuple(psubs), ()) if psubs else _EMPTY


def _uniform(level: _Level, toks: list[str], end: int, deeper: bool, i: int = 0) -> bool:
    """Does every subscription match either all subjects under the literal `toks[:end]` or none of them?
    `deeper`: subjects of any length under it (`prefix.>`), which a pattern with a token other than `>`
    past it tells apart (`p.*`, `p.x.>`); else those of exactly one token more, which only a literal
    last token (`p.x`) tells apart."""
    if i == end:
        return not level.nodes and (not deeper or level.pwc is None or level.pwc.empty())
    pwc = level.pwc
    if pwc is not None and pwc.next is not None and not _uniform(pwc.next, toks, end, deeper, i + 1):
        return False
    node = level.nodes.get(toks[i])
    return node is None or node.next is None or _uniform(node.next, toks, end, deeper, i + 1)


def _add_node(node: _Node, psubs: list, qgroups: dict[str, list]) -> None:
    if node.psubs:
        psubs.extend(node.psubs)
    if node.qsubs:
        for q, g in node.qsubs.items():
            lst = qgroups.get(q)
            if lst is None:
                qgroups[q] = list(g)
            else:
                lst.extend(g)


def _match_level(level: _Level, toks: list[str], i: int, psubs: list, qgroups: dict[str, list]) -> None:
    last = len(toks) - 1
    while True:
        if level.fwc is not None:
            _add_node(level.fwc, psubs, qgroups)
        pwc = level.pwc
        if pwc is not None:
            if i == last:
                _add_node(pwc, psubs, qgroups)
            elif pwc.next is not None:
                _match_level(pwc.next, toks, i + 1, psubs, qgroups)
        node = level.nodes.get(toks[i])
        if node is None:
            return
        if i == last:
            _add_node(node, psubs, qgroups)
            return
        if node.next is None:
            return
        level = node.next
        i += 1


def _collect(level: _Level, out: list[Any]) -> None:
    nodes = list(level.nodes.values())
    if level.pwc is not None:
        nodes.append(level.pwc)
    if level.fwc is not None:
        nodes.append(level.fwc)
    for n in nodes:
        out.extend(n.psubs)
        for g in n.qsubs.values():
            out.extend(g)
        if n.next is not None:
            _collect(n.next, out)
