"""NATS message headers (`NATS/1.0[ status[ description]]\r\nKey: Value\r\n...\r\n`): a pure codec.

`get_header` finds a header the way nats-server's own lookup does (server/client.go sliceHeader): the
name matched exactly, case-sensitively, right after a CRLF and right before the colon; spaces after
the colon skipped; the value runs to the next CRLF. So a header nats-server would not see (say
`nats-msg-id`) has no effect on edged either.
"""

from __future__ import annotations

HDR_LINE = b"NATS/1.0"
CRLF = b"\r\n"


def parse_headers(hdr: bytes | None) -> tuple[int, str, dict[str, list[str]]]:
    """(status or 0, description, headers) of a header block; malformed lines are skipped."""
    if not hdr:
        return 0, "", {}
    text = hdr.decode("utf-8", "replace")
    lines = text.split("\r\n")
    first = lines[0]
    status, desc = 0, ""
    if first.startswith("NATS/1.0"):
        rest = first[8:].strip()
        if rest:
            code, _, desc = rest.partition(" ")
            if code.isdigit():
                status = int(code)
            else:
                desc = rest
    out: dict[str, list[str]] = {}
    for line in lines[1:]:
        if not line:
            continue
        k, sep, v = line.partition(":")
        if not sep or not k:
            continue
        out.setdefault(k.strip(), []).append(v.strip())
    return status, desc.strip(), out


def get_header(hdr: bytes | None, name: str) -> str | None:
    """The first value of one header (None if absent), without building the whole map: the publish
    path's lookup."""
    if not hdr:
        return None
    key = b"\r\n" + name.encode() + b":"
    i = hdr.find(key)
    if i < 0:
        return None
    start = i + len(key)
    n = len(hdr)
    while start < n and hdr[start] == 0x20:
        start += 1
    end = hdr.find(b"\r\n", start)
    if end < 0:
        end = n
    return hdr[start:end].decode("utf-8", "replace")


def make_headers(items: list[tuple[str, str]] | dict[str, str] | None = None, status: int = 0,
                 description: str = "") -> bytes:
    """A header block; with `status` the first line carries it, as in `NATS/1.0 404 No Messages`."""
    first = HDR_LINE
    if status:
        first += b" %d" % status
        if description:
            first += b" " + description.encode()
    parts = [first]
    pairs = items.items() if isinstance(items, dict) else (items or [])
    for k, v in pairs:
        parts.append(f"{k}: {v}".encode())
    return CRLF.join(parts) + CRLF + CRLF


def remove_headers(hdr: bytes, names: set[str]) -> bytes:
    """The same block without the named headers (e.g. Nats-Expected-* before a republish)."""
    status, desc, h = parse_headers(hdr)
    lower = {n.lower() for n in names}
    items = [(k, v) for k, vs in h.items() if k.lower() not in lower for v in vs]
    if not items and not status:
        return b""
    return make_headers(items, status, desc)
