"""MSG and HMSG frames of the NATS client protocol, split out of a read buffer (sans-I/O).

A read of a 200k-message stream spends most of its client CPU finding frames: nats-py's parser tries
a regular expression or two and awaits a coroutine per message. This splits every complete frame in
a buffer in one plain loop and hands them out in runs per subscription id, so a reader takes a whole
run in one call. It stops at the first op that is not a message (PING, INFO, -ERR...: the caller's
parser takes those) or at a frame not yet complete.
"""

from __future__ import annotations

# (subject, reply, header block (b"" for MSG), payload)
Msg = tuple[bytes, bytes, bytes, bytes]


class WireError(ValueError):
    """A message frame the server cannot have sent: bad arguments or sizes."""


def split_msgs(buf: bytes, pos: int = 0) -> tuple[list[tuple[bytes, list[Msg]]], int, int]:
    """The complete MSG/HMSG frames of `buf` from `pos` on, as runs `(sid, [msg, ...])` of consecutive
    frames for one sid; where they end; and the length a frame started there needs to be complete
    (0 when `buf[end:]` starts with something else or with a frame whose size line is not all here)."""
    runs: list[tuple[bytes, list[Msg]]] = []
    cur: list[Msg] = []
    cur_sid = b""
    n = len(buf)
    find, starts = buf.find, buf.startswith
    while True:
        if starts(b"MSG ", pos):
            head = 4
        elif starts(b"HMSG ", pos):
            head = 5
        else:
            return runs, pos, 0
        e = find(b"\r\n", pos)
        if e < 0:
            return runs, pos, 0
        args = buf[pos + head:e].split()
        try:
            if head == 4:
                if len(args) == 4:
                    subject, sid, reply, size = args
                else:
                    (subject, sid, size), reply = args, b""
                hsize, tsize = 0, int(size)
            else:
                if len(args) == 5:
                    subject, sid, reply, hs, size = args
                else:
                    (subject, sid, hs, size), reply = args, b""
                hsize, tsize = int(hs), int(size)
        except ValueError:
            raise WireError(f"malformed message frame {buf[pos:e][:200]!r}") from None
        if not 0 <= hsize <= tsize:
            raise WireError(f"bad sizes in message frame {buf[pos:e][:200]!r}")
        start = e + 2
        end = start + tsize
        if end + 2 > n:
            return runs, pos, end + 2 - pos
        if buf[end:end + 2] != b"\r\n":
            raise WireError(f"message payload not followed by CRLF in frame {buf[pos:e][:200]!r}")
        if sid != cur_sid:
            cur = []
            runs.append((sid, cur))
            cur_sid = sid
        if hsize:
            cur.append((subject, reply, buf[start:start + hsize], buf[start + hsize:end]))
        else:
            cur.append((subject, reply, b"", buf[start:end]))
        pos = end + 2
