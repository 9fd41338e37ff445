"""The text of the syntax error Go's encoding/json reports for a malformed document.

nats-server puts it in status descriptions (a pull request's "Bad Request - invalid character 'b' looking
for beginning of object key string"). It is only worked out once the document failed to parse, so the
parsing itself stays msgspec's: this walks the bytes the way Go's scanner does until the first error,
with the texts of the Go release nats-server 2.15 is built with (checked against it: any fault in a number
is "in numeric literal", a bad escape is "invalid escape sequence", an incomplete document of any kind is
"unexpected end of JSON input", the character is shown as the UTF-8 rune it starts).

Also how nats-server reads a JetStream API request body in its default strict mode (unmarshalRequest):
every JSON value in the body, one after another, decoded into the request struct with unknown fields
refused; the first fault is the answer.
"""

from __future__ import annotations

from typing import Any

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

