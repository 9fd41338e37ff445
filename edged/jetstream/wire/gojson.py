"""The text of the syntax error Go's encoding/json reports for a malformed document.

nats-server puts it in status descriptions (a pull request's "Bad Request - invalid character 'b' looking
for beginning of object key string"). It is only worked out once the document failed to parse, so the
parsing itself stays msgspec's: this walks the bytes the way Go's scanner does until the first error,
with the texts of the Go release nats-server 2.15 is built with (checked against it: any fault in a number
is "in numeric literal", a bad escape is "invalid escape sequence", an incomplete document of any kind is
"unexpected end of JSON input", the character is shown as the UTF-8 rune it starts).

Also how nats-server reads a JetStream API request body in its default strict mode (unmarshalRequest):
every JSON value in the body, one after another, decoded into the request struct with unknown fields
refused; the first fault is the answer. The decoding itself (`decode_fields`) follows Go's rules for
each field's type, nats-server's own types with an UnmarshalJSON included (its policies, the consumer
action, compression, `time.Time`), for stream, consumer and every other request struct alike.
"""

from __future__ import annotations

import calendar
import json
from typing import Any

import msgspec

from edged.jetstream.wire.errors import JSApiError, api_error

_SPACE = b" \t\r\n"
_DIGITS = b"0123456789"
_HEX = b"0123456789abcdefABCDEF"
_ESCAPES = b'bfnrt\\/"'
_GO_ESC = {7: "\\a", 8: "\\b", 12: "\\f", 10: "\\n", 13: "\\r", 9: "\\t", 11: "\\v"}


def _quote_char(c: int, data: bytes = b"", i: int = -1) -> str:
    """Go's quoteChar: the character at data[i] (byte `c`) as a single-quoted Go character literal; a
    UTF-8 sequence is shown as its rune, a byte that starts none as \\xNN."""
    if c >= 0x80 and i >= 0:
        for n in (2, 3, 4):
            try:
                ch = data[i:i + n].decode()
            except UnicodeDecodeError:
                continue
            return f"'{ch}'" if ch.isprintable() else f"'\\u{ord(ch):04x}'"
        return f"'\\x{c:02x}'"
    if c == 0x27:
        return "'\\''"
    if c == 0x22:
        return "'\"'"
    if c in _GO_ESC:
        return f"'{_GO_ESC[c]}'"
    if c < 0x20 or c == 0x7F:
        return f"'\\x{c:02x}'"
    ch = chr(c)
    if c >= 0x80 and not ch.isprintable():
        return f"'\\u{c:04x}'"
    return f"'{ch}'"


def syntax_error(data: bytes) -> str | None:
    """Go's SyntaxError text for `data`, or None when Go's scanner finds the document well-formed."""
    r = syntax_error_at(data)
    return None if r is None else r[0]


def syntax_error_at(data: bytes) -> tuple[str, int] | None:
    """Go's SyntaxError for `data` as (text, offset): the offset counts the bytes read up to and including
    the offending one, 0 for an incomplete document. None when the document is well-formed."""
    stack: list[str] = []  # "key" (object, expecting a key), "val" (object value), "arr" (array)
    state = "value"
    literal = b""  # the rest of true / false / null still expected
    lit_name = ""
    esc_u = 0
    esc_at = 0
    for i, c in enumerate(data):
        while True:  # a state may hand the same byte on to the next one
            if state == "value" or state == "value_or_empty" or state == "key_or_empty":
                if c in _SPACE:
                    break
                if state == "value_or_empty" and c == 0x5D:  # ]
                    stack.pop()
                    state = "end"
                    break
                if state == "key_or_empty":
                    if c == 0x7D:  # }
                        stack.pop()
                        state = "end"
                        break
                    state = "key"
                    continue
                if c == 0x7B:
                    stack.append("key")
                    state = "key_or_empty"
                elif c == 0x5B:
                    stack.append("arr")
                    state = "value_or_empty"
                elif c == 0x22:
                    state = "str"
                elif c == 0x2D:
                    state = "neg"
                elif c == 0x30:
                    state = "zero"
                elif 0x31 <= c <= 0x39:
                    state = "int"
                elif c in b"tfn":
                    lit_name = {0x74: "true", 0x66: "false", 0x6E: "null"}[c]
                    literal = lit_name[1:].encode()
                    state = "lit"
                else:
                    return _invalid(data, i, "looking for beginning of value")
                break
            if state == "key":
                if c in _SPACE:
                    break
                if c != 0x22:
                    return _invalid(data, i, "looking for beginning of object key string")
                state = "str"
                break
            if state == "str":
                if c == 0x22:
                    state = "end"
                elif c == 0x5C:
                    state, esc_at = "esc", i
                elif c < 0x20:
                    return _invalid(data, i, "in string")
                break
            if state == "esc":
                if c in _ESCAPES:
                    state = "str"
                elif c == 0x75:
                    state, esc_u = "escu", 0
                else:
                    return (_bad_escape(data, esc_at, i), i + 1)
                break
            if state == "escu":
                if c not in _HEX:
                    return (_bad_escape(data, esc_at, i), i + 1)
                esc_u += 1
                if esc_u == 4:
                    state = "str"
                break
            if state == "lit":
                if c != literal[0]:
                    want = chr(literal[0])
                    return _invalid(data, i, f"in literal {lit_name} (expecting '{want}')")
                literal = literal[1:]
                if not literal:
                    state = "end"
                break
            if state == "neg":
                if c == 0x30:
                    state = "zero"
                elif 0x31 <= c <= 0x39:
                    state = "int"
                else:
                    return _invalid(data, i, "in numeric literal")
                break
            if state == "int" and c in _DIGITS:
                break
            if state in ("int", "zero"):
                if c == 0x2E:
                    state = "dot"
                    break
                if c in b"eE":
                    state = "exp"
                    break
                state = "end"
                continue
            if state == "dot":
                if c not in _DIGITS:
                    return _invalid(data, i, "in numeric literal")
                state = "frac"
                break
            if state == "frac":
                if c in _DIGITS:
                    break
                if c in b"eE":
                    state = "exp"
                    break
                state = "end"
                continue
            if state == "exp":
                state = "exp_sign"
                if c in b"+-":
                    break
                continue
            if state == "exp_sign":
                if c not in _DIGITS:
                    return _invalid(data, i, "in numeric literal")
                state = "exp_digits"
                break
            if state == "exp_digits":
                if c in _DIGITS:
                    break
                state = "end"
                continue
            # state "end": a value is complete
            if c in _SPACE:
                break
            if not stack:
                return _invalid(data, i, "after top-level value")
            top = stack[-1]
            if top == "key":
                if c != 0x3A:
                    return _invalid(data, i, "after object key")
                stack[-1] = "val"
                state = "value"
            elif top == "val":
                if c == 0x2C:
                    stack[-1] = "key"
                    state = "key"
                elif c == 0x7D:
                    stack.pop()
                else:
                    return _invalid(data, i, "after object key:value pair")
            else:
                if c == 0x2C:
                    state = "value"
                elif c == 0x5D:
                    stack.pop()
                else:
                    return _invalid(data, i, "after array element")
            break
    # end of input: complete only after a whole top-level value (a number ends there too)
    if state in ("int", "zero", "frac", "exp_digits", "end") and not stack:
        return None
    return ("unexpected end of JSON input", 0)


def _invalid(data: bytes, i: int, context: str) -> tuple[str, int]:
    """Go's error for the character at data[i] (as its scanner words it: "invalid character 'x' " and
    what it was looking for), with the offset just past it."""
    return (f"invalid character {_quote_char(data[i], data, i)} {context}", i + 1)


def _bad_escape(data: bytes, start: int, i: int) -> str:
    """A backslash escape that is none: its text up to the offending character (a \\u escape: all six)."""
    end = start + 6 if data[start + 1:start + 2] == b"u" else i + 1
    text = data[start:end].decode(errors="replace")
    return f"invalid escape sequence `{text}` in string"


def go_quote(s: str) -> str:
    """Go's %q of a plain string."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def go_kind(v: Any) -> str:
    """How Go's encoding/json names a JSON value's kind in its type errors."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def body_values(data: bytes) -> list[bytes | str]:
    """The JSON values of a request body, one after another, as nats-server's strict decoding reads them
    (a streaming decoder, until the end of the body): each value's bytes and, in place of the first
    malformed one, the error text it gets, its offset counted from the start of the body."""
    out: list[bytes | str] = []
    pos = 0
    while pos < len(data):
        chunk = data[pos:]
        if not chunk.strip(_SPACE):
            break
        r = syntax_error_at(chunk)
        if r is None:
            out.append(chunk)
            break
        text, offset = r
        if text.endswith(" after top-level value"):
            out.append(chunk[:offset - 1])
            pos += offset - 1
            continue
        out.append("unexpected EOF" if offset == 0 else f"{text} at offset {pos + offset}")
        break
    return out


def merge(into: dict[str, Any], doc: dict[str, Any]) -> None:
    """A later value of the body decoded over the earlier ones, as Go decodes into the same struct:
    nested objects merge, anything else is replaced."""
    for k, v in doc.items():
        old = into.get(k)
        if isinstance(old, dict) and isinstance(v, dict):
            merge(old, v)
        else:
            into[k] = v


# ------------------------------------------------------------------ decoding into nats-server's structs

NS = 1_000_000_000
_RANGES = {"int": (-(1 << 63), (1 << 63) - 1), "time.Duration": (-(1 << 63), (1 << 63) - 1),
           "uint64": (0, (1 << 64) - 1), "int64": (-(1 << 63), (1 << 63) - 1), "int32": (-(1 << 31), (1 << 31) - 1)}
# nats-server's policy types and the texts their UnmarshalJSON takes (discard ignores case; null is refused
# but by priority_policy, which also takes "")
_ENUMS = {
    "retention": ("limits", "interest", "workqueue"), "storage": ("memory", "file"), "discard": ("old", "new"),
    "persist_mode": ("default", "async", ""),
    "deliver_policy": ("all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject"),
    "ack_policy": ("none", "all", "explicit", "flow_control"), "replay_policy": ("instant", "original"),
    "priority_policy": ("none", "overflow", "pinned_client", "prioritized"),
}
# A Go type a field holds, for GoDecoder: one of the names it knows ("string", "int64", "[]string",
# "time", a policy of _ENUMS, "action", "compression", "any" for a type whose own rules come later, ...),
# or a struct: ("struct", its Go name, its fields), or a slice of structs: ("[]", the slice's Go name, the
# element's struct).
GoType = Any


def _invalid_json(err: str) -> JSApiError:
    return api_error("JSInvalidJSONErr", err=err)


def _raw(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"))


class GoDecoder:
    """Go's encoding/json (as nats-server's Go build has it), with DisallowUnknownFields when `strict`:
    every fault is remembered and the first one in document order is reported."""

    def __init__(self, struct: str, strict: bool = True, raw: bytes | None = None) -> None:
        self.struct = struct
        self.strict = strict
        self.saved: JSApiError | None = None
        self._raw = raw  # the JSON value decoded, for the top-level fields whose UnmarshalJSON sees raw bytes
        self._raw_fields: dict[str, msgspec.Raw] | None = None

    def raw_field(self, key: str) -> bytes | None:
        """The bytes of top-level key `key`'s value as written in the body (None if unknown)."""
        if self._raw is None:
            return None
        if self._raw_fields is None:
            try:
                self._raw_fields = _raw_fields(self._raw)
            except msgspec.DecodeError:
                self._raw_fields = {}
        r = self._raw_fields.get(key)
        return bytes(r) if r is not None else None

    def _save(self, err: str) -> None:
        if self.saved is None:
            self.saved = _invalid_json(err)

    def _type_err(self, v: Any, path: str, gotype: str, literal: bool = False, elem: bool = False) -> None:
        what = f"number {_raw(v)}" if literal else go_kind(v)
        into = "" if elem else "Go struct field "
        self._save(f"json: cannot unmarshal {what} into {into}{self.struct}.{path} of type {gotype}")

    def value(self, v: Any, gotype: GoType, path: str, field: str, elem: bool = False) -> Any:
        """The value as the Go field would hold it, or None (left at its zero value). `elem`: a slice
        element, whose errors Go words without "Go struct field"."""
        if v is None:
            if gotype == "action":  # ConsumerAction's UnmarshalJSON gets null too, and refuses it
                return self._save("unknown consumer action: null")
            if isinstance(gotype, str) and gotype in _ENUMS and gotype != "priority_policy":
                return self._save('can not unmarshal "null"')  # their UnmarshalJSON gets null too
            if gotype == "compression":
                return self._save("unknown compression algorithm")
            return None
        if isinstance(gotype, tuple):
            if gotype[0] == "struct":
                if not isinstance(v, dict):
                    return self._type_err(v, path, gotype[1], elem=elem)
                return self.struct_fields(v, gotype[2], path + ".")
            if not isinstance(v, list):
                return self._type_err(v, path, gotype[1])
            return [self.value(x, gotype[2], f"{path}.{i}", field, elem=True) or {} for i, x in enumerate(v)]
        if gotype == "any":
            return v
        # types with an UnmarshalJSON of their own, whose texts these are
        if gotype == "compression":  # it reads a Go string first
            if not isinstance(v, str):
                return self._save(f"json: cannot unmarshal {go_kind(v)} into Go value of type string")
            return v
        if gotype in _ENUMS:
            ok = v.lower() if gotype == "discard" and isinstance(v, str) else v
            if ok not in _ENUMS[gotype]:
                if gotype == "priority_policy" and v == "":
                    return None
                return self._save(f"can not unmarshal {go_quote(_raw(v))}")
            return ok
        if gotype == "string":
            if not isinstance(v, str):
                return self._type_err(v, path, "string", elem=elem)
            return v
        if gotype == "bool":
            if not isinstance(v, bool):
                return self._type_err(v, path, "bool", elem=elem)
            return v
        if gotype in _RANGES:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                return self._type_err(v, path, gotype, elem=elem)
            lo, hi = _RANGES[gotype]
            if isinstance(v, float) or not lo <= v <= hi:
                return self._type_err(v, path, gotype, literal=True, elem=elem)
            return v
        if gotype.startswith("[]"):
            if not isinstance(v, list):
                return self._type_err(v, path, gotype)
            out = [self.value(x, gotype[2:], f"{path}.{i}", field, elem=True) for i, x in enumerate(v)]
            return [x if x is not None else (0 if gotype[2:] != "string" else "") for x in out]
        if gotype == "map[string]string":
            if not isinstance(v, dict):
                return self._type_err(v, path, gotype)
            return {k: self.value(x, "string", f"{path}.{k}", field) or "" for k, x in v.items()}
        if gotype == "time":
            if not isinstance(v, str):
                return self._type_err(v, path, "time.Time")
            try:
                return go_time(v)[1]
            except JSApiError as e:
                if self.saved is None:
                    self.saved = e
                return None
        if gotype == "action":
            # ConsumerAction's UnmarshalJSON compares the value's bytes as written (an escaped letter is
            # another action) and quotes them so in its error
            raw = self.raw_field(path)
            if raw is not None:
                if raw not in (b'"create"', b'"update"', b'""'):
                    return self._save(f"unknown consumer action: {raw.decode('utf-8', 'replace')}")
                return raw[1:-1].decode()
            if v not in ("create", "update", ""):
                return self._save(f"unknown consumer action: {_raw(v)}")
            return v
        return v

    def struct_fields(self, doc: dict[str, Any], fields: dict[str, GoType], prefix: str) -> dict[str, Any]:
        """The fields of a struct, by their names; Go matches keys to fields ignoring case, and its errors
        name the key as written."""
        out: dict[str, Any] = {}
        for k, v in doc.items():
            name = k
            gotype = fields.get(k)
            if gotype is None:
                folded = k.casefold()
                name = next((n for n in fields if n.casefold() == folded), k)
                gotype = fields.get(name)
            if gotype is None:
                if self.strict:
                    self._save(f"json: unknown field {json.dumps(k)}")
                continue
            x = self.value(v, gotype, prefix + k, name)
            if x is not None:
                out[name] = x
        return out


_raw_fields = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode


def decode_fields(doc: dict[str, Any], fields: dict[str, GoType], struct: str, strict: bool = True,
                  raw: bytes | None = None) -> dict[str, Any]:
    """A request struct's fields (their JSON names and Go types in `fields`) as nats-server's decoder reads
    them, or its JSInvalidJSONErr: the first fault in document order. Not `strict` (json.Unmarshal, which
    a few requests are read with): keys the struct has no field for are ignored. `raw`: the JSON text
    `doc` was decoded from, for fields that Go reads from their bytes as written."""
    d = GoDecoder(struct, strict, raw)
    out = d.struct_fields(doc, fields, "")
    if d.saved is not None:
        raise d.saved
    return out


# ------------------------------------------------------------------ Go times

_LAYOUT = "2006-01-02T15:04:05Z07:00"


def _time_err(value: str, elem_value: str, elem: str) -> JSApiError:
    return _invalid_json(f"parsing time {go_quote(value)} as {go_quote(_LAYOUT)}: cannot parse "
                         f"{go_quote(elem_value)} as {go_quote(elem)}")


def _range_err(value: str, what: str) -> JSApiError:
    return _invalid_json(f"parsing time {go_quote(value)}: {what} out of range")


def go_time(value: str) -> tuple[int, str]:
    """(ns since the epoch, Go's RFC3339Nano rendering) of a JSON time, or Go's parse error: Go walks the
    layout element by element and names the first that does not fit."""
    rest = value
    nums: list[int] = []
    for prefix, elem in (("", "2006"), ("-", "01"), ("-", "02"), ("T", "15"), (":", "04"), (":", "05")):
        if not rest.startswith(prefix):
            raise _time_err(value, rest, prefix)
        rest = rest[len(prefix):]
        width = 4 if elem == "2006" else 2
        digits = rest[:width]
        if elem == "15" and len(digits) == 2 and not digits[1].isdigit():
            digits = digits[:1]  # Go's hour takes one or two digits
        if not digits or not digits.isdigit() or (elem != "15" and len(digits) != width):
            raise _time_err(value, rest, elem)
        n = int(digits)
        rest = rest[len(digits):]
        for e, hi, what in (("01", 12, "month"), ("02", 31, "day"), ("15", 23, "hour"), ("04", 59, "minute"),
                            ("05", 59, "second")):
            if elem == e and (n > hi or (e == "01" and n < 1)):
                raise _range_err(value, what)
        nums.append(n)
    frac = 0
    if len(rest) >= 2 and rest[0] in ".," and rest[1].isdigit():
        n = 1
        while n < len(rest) and rest[n].isdigit():
            n += 1
        frac = int(rest[1:n][:9].ljust(9, "0"))
        rest = rest[n:]
    offset = 0
    if rest.startswith("Z"):
        rest = rest[1:]
    else:
        if len(rest) < 6 or rest[3] != ":" or rest[0] not in "+-" or not (rest[1:3] + rest[4:6]).isdigit():
            raise _time_err(value, rest, "Z07:00")
        offset = (int(rest[1:3]) * 3600 + int(rest[4:6]) * 60) * (1 if rest[0] == "+" else -1)
        rest = rest[6:]
    if rest:
        raise _invalid_json(f"parsing time {go_quote(value)}: extra text: {go_quote(rest)}")
    y, mo, d, h, mi, s = nums
    if d < 1 or d > calendar.monthrange(y, mo)[1]:
        raise _range_err(value, "day")
    secs = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) - offset
    # Go keeps the zone it parsed and prints the time in it (RFC3339Nano: the fraction's trailing zeros
    # dropped, a zero offset as `Z`)
    digits = f"{frac:09d}".rstrip("0")
    a = abs(offset)
    zone = "Z" if offset == 0 else f"{'+' if offset > 0 else '-'}{a // 3600:02d}:{a % 3600 // 60:02d}"
    text = f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}" + (f".{digits}" if digits else "") + zone
    return secs * NS + frac, text


def time_ns(text: str) -> int:
    return go_time(text)[0]
