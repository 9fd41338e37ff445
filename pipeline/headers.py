"""NATS header blocks (`NATS/1.0\\r\\nKey: value\\r\\n...\\r\\n\\r\\n`) to and from a map of every value.

nats-py's parsed headers keep one value per key (the last); a stream may hold a key several times,
and the `headers` column must hold them all, in order, so the raw block is parsed here.
"""

from __future__ import annotations

from collections.abc import Mapping

# what a direct get adds to the stored headers; never part of the message itself
DIRECT_GET_HEADERS = frozenset({"Nats-Stream", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Subject",
                                "Nats-Last-Sequence", "Nats-Num-Pending"})


def parse_headers(block: bytes | None) -> dict[str, list[str]] | None:
    """Every `Key: value` line of a header block, values of a repeated key in order; None without a block.

    The status line's code and description (a server's `NATS/1.0 100 ...`) are not headers and are dropped.
    """
    if not block:
        return None
    text = block.decode("utf-8", "replace")
    lines = text.split("\r\n")
    if not lines[0].startswith("NATS/"):
        raise ValueError(f"not a NATS header block: {text[:40]!r}")
    out: dict[str, list[str]] = {}
    for line in lines[1:]:
        if not line:
            continue
        key, sep, value = line.partition(":")
        if not sep or not key.strip():
            continue
        key = key.strip()
        vals = out.get(key)
        if vals is None:
            out[key] = [value.strip()]
        else:
            vals.append(value.strip())
    return out


def without_direct_get(hdrs: dict[str, list[str]] | None) -> dict[str, list[str]] | None:
    """The headers a direct get reply carries, less those the server added to it."""
    if not hdrs:
        return hdrs
    return {k: v for k, v in hdrs.items() if k not in DIRECT_GET_HEADERS}


def encode_headers(hdrs: Mapping[str, object] | None) -> bytes:
    """A header block from a map whose values are strings or lists of strings (each one a line)."""
    if not hdrs:
        return b""
    parts = ["NATS/1.0\r\n"]
    for key, value in hdrs.items():
        if not key or any(c in key for c in ":\r\n \t"):
            raise ValueError(f"bad header name {key!r}")
        values = [value] if isinstance(value, str) else list(value or ())  # type: ignore[call-overload]
        for v in values:
            s = str(v)
            if "\r" in s or "\n" in s:
                raise ValueError(f"header {key!r}: a value may not hold a line break")
            parts.append(f"{key}: {s}\r\n")
    parts.append("\r\n")
    return "".join(parts).encode()
