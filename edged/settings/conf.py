"""Parser for nats-server's configuration syntax.

The grammar follows nats-server's ``conf`` package (lex.go / parse.go) so that configs written for
nats-server load unchanged: ``k: v`` / ``k = v`` / ``k v``, ``{}`` maps, ``[]`` arrays separated by
commas or new lines, ``#`` and ``//`` comments, ``include`` relative to the including file,
``$VAR`` references to earlier keys in enclosing blocks or to the environment, size suffixes
(``k``=1000, ``kb``/``ki``=1024, ... as nats-server does), booleans ``true/false/yes/no/on/off``.

The parser does no I/O except reading ``include``d files (and ``parse_file``). It returns plain
``dict``/``list`` values; the containers are :class:`ConfMap` / :class:`ConfList`, which also carry
the source position (and raw token text) of every entry so the mapping layer can name
``file:line:col`` for a bad value or an unknown key.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import os
from dataclasses import dataclass
from typing import Any

__all__ = ["ConfigError", "ConfList", "ConfMap", "Pos", "parse", "parse_file"]

_MAX_DEPTH = 100
_MAX_INCLUDE_DEPTH = 16
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

_SUFFIX_MULT = {
    "k": 1000,
    "m": 1000**2,
    "g": 1000**3,
    "t": 1000**4,
    "p": 1000**5,
    "e": 1000**6,
}
_SUFFIX_LETTERS = set("kKmMgGtTpPeE")
_BOOLS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}
# bcrypt hashes are commonly written unquoted ("$2a$11$..."); nats-server treats them as strings.
_BCRYPT_PREFIXES = ("2a$", "2b$", "2y$")


def _digit(c: str) -> bool:
    """An ASCII digit, as nats-server's lexer takes it: str.isdigit() also accepts '²' and other Unicode
    digits, which int() then rejects."""
    return c.isascii() and c.isdigit()


@dataclass(frozen=True)
class Pos:
    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class ConfigError(ValueError):
    """A config file that cannot be used; the message names file:line:col."""

    def __init__(self, reason: str, pos: Pos | None = None) -> None:
        self.reason = reason
        self.pos = pos
        self.errors: list[ConfigError] = [self]
        super().__init__(f"{pos}: {reason}" if pos is not None else reason)

    @classmethod
    def combined(cls, errors: list[ConfigError]) -> ConfigError:
        """All of a file's errors in one exception (one per line), as nats-server reports them together."""
        if len(errors) == 1:
            return errors[0]
        e = cls("\n".join(str(x) for x in errors))
        e.pos, e.errors = errors[0].pos, list(errors)
        return e


class ConfMap(dict):  # type: ignore[type-arg]
    """A parsed ``{}`` block: a dict that remembers where each key was written."""

    def __init__(self) -> None:
        super().__init__()
        self.pos: dict[str, Pos] = {}
        self.raw: dict[str, str] = {}  # source text of scalar values (e.g. "2m" that lexed as an int)
        self.used_vars: set[str] = set()  # keys referenced elsewhere as $VAR
        self.start: Pos | None = None


class ConfList(list):  # type: ignore[type-arg]
    """A parsed ``[]`` array: a list that remembers where each item was written."""

    def __init__(self) -> None:
        super().__init__()
        self.pos: list[Pos] = []
        self.raw: list[str | None] = []
        self.start: Pos | None = None


def parse(text: str, filename: str = "<string>") -> ConfMap:
    """Parse config text; ``include`` paths are relative to ``filename``'s directory."""
    return _Parser(text, filename, include_depth=0, env_refs=set()).parse_document()


def parse_file(path: str | os.PathLike[str]) -> ConfMap:
    p = os.fspath(path)
    return _parse_file(p, Pos(p, 0, 0), include_depth=0, env_refs=set())


def _parse_file(path: str, where: Pos, include_depth: int, env_refs: set[str]) -> ConfMap:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {path!r}: {e}", where if where.line else None) from e
    return _Parser(text, path, include_depth=include_depth, env_refs=env_refs).parse_document()


_WS = " \t"
_NL = "\n\r"


class _Parser:
    def __init__(self, text: str, filename: str, include_depth: int, env_refs: set[str]) -> None:
        self.s = text
        self.n = len(text)
        self.i = 0
        self.file = filename
        self.include_depth = include_depth
        self.env_refs = env_refs
        self.stack: list[ConfMap] = []  # enclosing maps, for $VAR lookup
        self.depth = 0
        self._line_starts = [0] + [k + 1 for k, c in enumerate(text) if c == "\n"]

    # ---------------------------------------------------------------- helpers
    def pos(self, i: int | None = None) -> Pos:
        k = self.i if i is None else i
        line = bisect.bisect_right(self._line_starts, k)
        return Pos(self.file, line, k - self._line_starts[line - 1] + 1)

    def err(self, msg: str, i: int | None = None) -> ConfigError:
        return ConfigError(msg, self.pos(i))

    def peek(self, off: int = 0) -> str:
        k = self.i + off
        return self.s[k] if k < self.n else ""

    def at_comment(self) -> bool:
        c = self.peek()
        return c == "#" or (c == "/" and self.peek(1) == "/")

    def skip_comment(self) -> None:
        while self.i < self.n and self.s[self.i] not in _NL:
            self.i += 1

    def skip_ws(self) -> None:
        while self.i < self.n and self.s[self.i] in _WS:
            self.i += 1

    def skip_blank(self) -> None:
        """Skip spaces, new lines and comments."""
        while self.i < self.n:
            c = self.s[self.i]
            if c.isspace():
                self.i += 1
            elif self.at_comment():
                self.skip_comment()
            else:
                return

    def describe(self, c: str) -> str:
        return "end of file" if c == "" else repr(c)

    # ---------------------------------------------------------------- document
    def parse_document(self) -> ConfMap:
        top = ConfMap()
        top.start = self.pos(0)
        self.stack.append(top)
        try:
            self.parse_body(top, closing=None)
        except RecursionError as e:
            raise self.err("configuration nested too deeply") from e
        return top

    def parse_body(self, m: ConfMap, closing: str | None) -> None:
        """Entries of the top level (closing=None) or of a `{` block wrapping the top level."""
        while True:
            self.skip_blank()
            c = self.peek()
            if c == "":
                if closing is not None:
                    raise self.err("unexpected end of file, expected '}'")
                return
            if c == "}":
                if closing == "}":
                    self.i += 1
                    return
                raise self.err("unexpected '}' with no matching '{'")
            if c in ",;":
                self.i += 1
                continue
            if c == "{":  # JSON-like document: `{ port: 4222 }`
                self.i += 1
                self.enter()
                self.parse_body(m, closing="}")
                self.depth -= 1
                self.value_end(m_closing="}" if closing else None, top=True)
                continue
            self.parse_entry(m, in_map=False)
            self.value_end(m_closing=closing, top=True)

    def enter(self) -> None:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self.err("configuration nested too deeply")

    def value_end(self, m_closing: str | None, top: bool) -> None:
        """After a value: only blanks, a comment, or a separator may follow on the line."""
        self.skip_ws()
        c = self.peek()
        if self.at_comment():
            self.skip_comment()
            return
        if c == "" or c in _NL or c in ",;":
            if c:
                self.i += 1
            return
        if c == "}" and (m_closing == "}" or not top):
            return  # closing brace handled by the caller
        raise self.err(f"expected a new line, ',' or ';' after a value, found {self.describe(c)}")

    # ---------------------------------------------------------------- entries
    def read_key(self, in_map: bool) -> tuple[str, bool, int]:
        """Returns (key, was_quoted, start index)."""
        start = self.i
        c = self.peek()
        if c in ":=":
            raise self.err(f"unexpected key separator {c!r}")
        if c in "\"'":
            q = c
            self.i += 1
            j = self.s.find(q, self.i)
            if j < 0:
                raise self.err("unexpected end of file in quoted key", start)
            key = self.s[self.i : j]
            self.i = j + 1
            return key, True, start
        while self.i < self.n and not self.s[self.i].isspace() and self.s[self.i] not in ":=":
            self.i += 1
        return self.s[start : self.i], False, start

    def parse_entry(self, m: ConfMap, in_map: bool) -> None:
        key, quoted, kstart = self.read_key(in_map)
        if not quoted and key.lower() == "include" and self.peek() in _WS and self.peek() != "":
            self.parse_include(m, kstart)
            return
        # separator is optional; new lines may sit between key and separator
        self.skip_blank_nocomment()
        c = self.peek()
        if c in ":=" and c:
            self.i += 1
        if in_map:
            self.skip_blank_nocomment()
        else:
            self.skip_ws()
        c = self.peek()
        if c == "":
            raise self.err(f"expected a value for key {key!r} but found end of file")
        if c in _NL:
            raise self.err(f"expected a value for key {key!r} but found new line")
        if c in ",;}":
            raise self.err(f"expected a value for key {key!r} but found {c!r}")
        vstart = self.i
        val = self.parse_value()
        self.set(m, key, val, self.pos(kstart), self.s[vstart : self.i])

    def skip_blank_nocomment(self) -> None:
        while self.i < self.n and self.s[self.i].isspace():
            self.i += 1

    def set(self, m: ConfMap, key: str, val: Any, pos: Pos, raw: str) -> None:
        m[key] = val
        m.pos[key] = pos
        m.raw[key] = raw

    def parse_include(self, m: ConfMap, kstart: int) -> None:
        self.skip_ws()
        where = self.pos()
        c = self.peek()
        if c in "\"'" and c:
            j = self.s.find(c, self.i + 1)
            nl = min((k for k in (self.s.find("\n", self.i + 1),) if k >= 0), default=self.n)
            if j < 0 or j > nl:
                raise self.err("unexpected end of line in quoted include")
            name = self.s[self.i + 1 : j]
            self.i = j + 1
        elif c == "" or c in _NL:
            raise self.err("expected include file name but found end of line")
        elif c in "[{(" or _digit(c) or c in "-\\":
            raise self.err(f"expected include file name but found {c!r}")
        else:
            start = self.i
            while self.i < self.n and self.s[self.i] not in " \t\n\r;}'":
                self.i += 1
            name = self.s[start : self.i]
        if self.include_depth >= _MAX_INCLUDE_DEPTH:
            raise ConfigError(f"includes nested too deeply (include cycle?) at {name!r}", where)
        base = os.path.dirname(self.file) if not self.file.startswith("<") else ""
        path = os.path.join(base, name)
        try:
            sub = _parse_file(path, where, self.include_depth + 1, self.env_refs)
        except ConfigError as e:
            raise ConfigError(f"error parsing include file {name!r}: {e}", where) from e
        for k, v in sub.items():
            m[k] = v
            m.pos[k] = sub.pos.get(k, where)
            m.raw[k] = sub.raw.get(k, "")
        m.used_vars |= sub.used_vars

    # ---------------------------------------------------------------- values
    def parse_value(self) -> Any:
        c = self.peek()
        if c == "[":
            return self.parse_array()
        if c == "{":
            return self.parse_map()
        if c == "'":
            return self.parse_sq()
        if c == '"':
            return self.parse_dq()
        if c == "(":
            return self.parse_block()
        if c == "-" or _digit(c):
            return self.parse_number()
        if c == ".":
            raise self.err("floats must start with a digit")
        return self.parse_bare(self.i)

    def parse_array(self) -> ConfList:
        lst = ConfList()
        lst.start = self.pos()
        self.i += 1
        self.enter()
        while True:
            self.skip_blank()
            c = self.peek()
            if c == "":
                raise self.err("unexpected end of file in array, expected ']'")
            if c == "]":
                self.i += 1
                break
            if c == ",":
                raise self.err("unexpected ',' in array")
            vstart = self.i
            val = self.parse_value()
            lst.append(val)
            lst.pos.append(self.pos(vstart))
            lst.raw.append(self.s[vstart : self.i])
            self.skip_ws()
            if self.at_comment():
                self.skip_comment()
                continue
            c = self.peek()
            if c == "]":
                self.i += 1
                break
            if c and (c == "," or c in _NL):
                self.i += 1
                continue
            raise self.err(f"expected ',' or ']' in array, found {self.describe(c)}")
        self.depth -= 1
        return lst

    def parse_map(self) -> ConfMap:
        m = ConfMap()
        m.start = self.pos()
        self.i += 1
        self.enter()
        self.stack.append(m)
        while True:
            self.skip_blank()
            c = self.peek()
            if c == "":
                raise self.err("unexpected end of file in block, expected '}'")
            if c == "}":
                self.i += 1
                break
            if c == "]":
                raise self.err("unexpected ']' in block")
            if c in ",;":
                raise self.err(f"unexpected {c!r} in block")
            self.parse_entry(m, in_map=True)
            self.skip_ws()
            if self.at_comment():
                self.skip_comment()
                continue
            c = self.peek()
            if c == "}":
                self.i += 1
                break
            if c and (c in ",;" or c in _NL):
                self.i += 1
                continue
            raise self.err(f"expected ',' or '}}' in block, found {self.describe(c)}")
        self.stack.pop()
        self.depth -= 1
        return m

    def parse_sq(self) -> str:
        start = self.i
        j = self.s.find("'", self.i + 1)
        if j < 0:
            raise self.err("unexpected end of file in quoted string", start)
        self.i = j + 1
        return self.s[start + 1 : j]

    def read_escape(self, out: list[str]) -> None:
        """At a backslash: append the escaped character."""
        self.i += 1
        c = self.peek()
        simple = {"t": "\t", "n": "\n", "r": "\r", '"': '"', "\\": "\\"}
        if c in simple and c:
            out.append(simple[c])
            self.i += 1
            return
        if c == "x":
            h = self.s[self.i + 1 : self.i + 3]
            if len(h) == 2 and all(ch in "0123456789abcdefABCDEF" for ch in h):
                out.append(chr(int(h, 16)))
                self.i += 3
                return
            raise self.err(f"expected two hexadecimal digits after '\\x', got {h!r}")
        raise self.err(
            f"invalid escape character {self.describe(c)}; allowed: \\xXX, \\t, \\n, \\r, \\\", \\\\"
        )

    def parse_dq(self) -> str:
        start = self.i
        self.i += 1
        out: list[str] = []
        while True:
            if self.i >= self.n:
                raise self.err("unexpected end of file in quoted string", start)
            c = self.s[self.i]
            if c == '"':
                self.i += 1
                return "".join(out)
            if c == "\\":
                self.read_escape(out)
                continue
            out.append(c)
            self.i += 1

    def parse_block(self) -> str:
        """`( ... )` raw block, ended by a `)` alone on its line."""
        start = self.i
        k = self.i + 1
        while True:
            j = self.s.find("\n)", k)
            if j < 0:
                raise self.err("unexpected end of file in '(' block", start)
            after = j + 2
            if after >= self.n or self.s[after] in "\n\r":
                self.i = after
                return self.s[start + 1 : j]
            k = j + 1

    def _terminates_number(self, c: str) -> bool:
        return c == "" or c in " \t\n\r,;}]"

    def parse_number(self) -> Any:
        start = self.i
        if self.peek() == "-":
            self.i += 1
            if not _digit(self.peek()):
                raise self.err("expected a digit after '-'")
        d0 = self.i
        while _digit(self.peek()):
            self.i += 1
        ndig = self.i - d0
        c = self.peek()
        if c == "-" and ndig == 4 and start == d0:
            return self.parse_datetime(start)
        if c == ".":
            if not _digit(self.peek(1)):
                raise self.err("floats must have a digit after the '.'", self.i + 1)
            self.i += 1
            while _digit(self.peek()):
                self.i += 1
            if self.peek() == ".":  # an IP address, maybe with :port
                while self.i < self.n and (_digit(self.s[self.i]) or self.s[self.i] in ".:-"):
                    self.i += 1
                if self._terminates_number(self.peek()):
                    return self.s[start : self.i]
                return self.parse_bare(start)
            if self._terminates_number(self.peek()):
                txt = self.s[start : self.i]
                try:
                    return float(txt)
                except ValueError as e:  # pragma: no cover - digits only
                    raise self.err(f"invalid float {txt!r}", start) from e
            return self.parse_bare(start)
        if c and c in _SUFFIX_LETTERS:
            k = self.i + 1
            while k < self.n and self.s[k] in "bBiI":
                k += 1
            if k >= self.n or self._terminates_number(self.s[k]):
                self.i = k
                return self.make_int(self.s[start:d0] + self.s[d0 : d0 + ndig], self.s[d0 + ndig : k], start)
            return self.parse_bare(start)
        if self._terminates_number(c):
            return self.make_int(self.s[start : self.i], "", start)
        return self.parse_bare(start)

    def make_int(self, digits: str, suffix: str, start: int) -> int:
        num = int(digits)
        suf = suffix.lower()
        if suf:
            base = _SUFFIX_MULT.get(suf[0])
            if base is None:  # pragma: no cover - guarded by _SUFFIX_LETTERS
                raise self.err(f"invalid size suffix {suffix!r}", start)
            if suf[1:] in ("b", "i", "ib"):
                exp = {1000: 1, 1000**2: 2, 1000**3: 3, 1000**4: 4, 1000**5: 5, 1000**6: 6}[base]
                base = 1024**exp
            elif suf[1:] != "":
                raise self.err(f"invalid size suffix {suffix!r}", start)
            num *= base
        if not (_INT64_MIN <= num <= _INT64_MAX):
            raise self.err(f"integer {digits + suffix!r} is out of range", start)
        return num

    def parse_datetime(self, start: int) -> _dt.datetime:
        txt = self.s[start : start + 20]
        try:
            if len(txt) != 20 or txt[-1] != "Z":
                raise ValueError(txt)
            val = _dt.datetime.strptime(txt, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.UTC)
        except ValueError as e:
            raise self.err("dates must be in full ISO8601 Zulu form (YYYY-MM-DDTHH:MM:SSZ)", start) from e
        self.i = start + 20
        return val

    def parse_bare(self, start: int) -> Any:
        """An unquoted string; may turn out to be a boolean or a $variable reference."""
        self.i = start
        out: list[str] = []
        escaped = False
        braces = 0  # allow `{{wildcard(1)}}` inside mapping destinations
        while self.i < self.n:
            c = self.s[self.i]
            if c == "\\":
                self.read_escape(out)
                escaped = True
                continue
            if c == "{":
                braces += 1
            elif c == "}":
                if braces == 0:
                    break
                braces -= 1
            elif c in " \t\n\r;,]":
                break
            out.append(c)
            self.i += 1
        txt = "".join(out)
        if not txt:
            raise self.err(f"expected a value, found {self.describe(self.peek())}", start)
        if escaped:
            return txt
        b = _BOOLS.get(txt.lower())
        if b is not None:
            return b
        if txt.startswith("$") and len(txt) > 1:
            return self.lookup_variable(txt[1:], start)
        return txt

    def lookup_variable(self, name: str, start: int) -> Any:
        if name.startswith(_BCRYPT_PREFIXES):
            return "$" + name
        for m in reversed(self.stack):
            if name in m:
                m.used_vars.add(name)
                return m[name]
        if name in self.env_refs:
            raise self.err(f"variable reference cycle for {name!r}", start)
        env = os.environ.get(name)
        if env is None:
            raise self.err(f"variable reference for {name!r} can not be found", start)
        self.env_refs.add(name)
        try:
            sub = _Parser(f"pk={env}", f"${name}", self.include_depth, self.env_refs).parse_document()
        except ConfigError as e:
            raise self.err(f"variable reference for {name!r} could not be parsed: {e.reason}", start) from e
        finally:
            self.env_refs.discard(name)
        if "pk" not in sub:
            raise self.err(f"variable reference for {name!r} is empty", start)
        return sub["pk"]
