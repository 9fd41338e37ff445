"""The leafnode wire protocol, sans-I/O: `LeafParser` turns bytes from the hub into events, the encoders
build what edged sends. Wire facts: ../shared/docs/leafnode-protocol.md (nats-server leafnode.go)."""

from __future__ import annotations

import json
import re
from typing import Any

from edged.connections.protocol import CRLF, Framer, more_of_run

MAX_LEAF_CONTROL_LINE = 64 * 1024
MAX_LEAF_PAYLOAD = 64 * 1024 * 1024
LDS_PREFIX = "$LDS."
SPLIT_WINDOW = 8192  # bytes a run of replies is first split over (LeafParser._split_run)

OP_INFO = 1  # (OP_INFO, dict)
OP_PING = 2  # (OP_PING,)
OP_PONG = 3  # (OP_PONG,)
OP_OK = 4  # (OP_OK,)
OP_ERR = 5  # (OP_ERR, text)
OP_LSUB = 6  # (OP_LSUB, subject, queue|None, weight)
OP_LUNSUB = 7  # (OP_LUNSUB, subject, queue|None)
OP_LMSG = 8  # (OP_LMSG, subject: bytes, reply: bytes, queues: tuple[bytes, ...], hdr|None, payload)
OP_ERROR = 9  # (OP_ERROR, text): protocol violation, the parser is dead
# (OP_LMSGS, subject, reply, [payload, ...]): consecutive plain LMSGs (no queues, no headers) with one subject
# and reply, only from a parser made with runs=True; the connection matches and checks once per run
OP_LMSGS = 10
OP_CONNECT = 11  # (OP_CONNECT, dict): what a soliciting leaf sends to edged's leafnode port
# (OP_LMSGR, subject, [reply, ...], [payload, ...]): consecutive plain LMSGs with one subject, each with a reply
# of its own (a JetStream consumer's deliveries, whose ack replies are unique), only with runs=True
OP_LMSGR = 12

_PING_EV = (OP_PING,)
_PONG_EV = (OP_PONG,)
_OK_EV = (OP_OK,)


def _size(b: bytes) -> int:
    if not b or not b.isdigit() or len(b) > 10:
        return -1
    return int(b)


class LeafParser(Framer):
    """Incremental parser for what the peer sends on a leafnode connection (a hub, or a leaf that
    connects to edged: then CONNECT too). With `runs`, plain LMSGs that follow one another with the same
    subject and reply come out as one OP_LMSGS event, with the same subject and each its own reply as one
    OP_LMSGR event."""

    __slots__ = ("runs", "_lines", "_split", "_split_for")

    def __init__(self, max_control_line: int = MAX_LEAF_CONTROL_LINE, max_payload: int = MAX_LEAF_PAYLOAD,
                 runs: bool = False) -> None:
        super().__init__(max_control_line, max_payload)
        self.runs = runs
        # runs mode: plain LMSG control lines seen before -> (subject, reply, size, CRLF + line)
        self._lines: dict[bytes, tuple[bytes, bytes, int, bytes]] = {}
        # runs mode: the splitter of a run of replies' lines (see _split_run), for the run's `LMSG <subject> `
        self._split: re.Pattern[bytes] | None = None
        self._split_for = b""

    def feed(self, data: bytes) -> list[tuple]:
        if self.dead:
            return []
        buf = self._join(data)
        if buf is None:
            return []
        events: list[tuple] = []
        append = events.append
        n = len(buf)
        pos = 0
        mcl = self.max_control_line
        find = buf.find
        find_at = buf.startswith
        runs = self.runs
        lines = self._lines
        run: tuple = ()
        single: tuple = ()
        vrun: tuple = ()
        vprefix = b""
        while pos < n:
            nl = find(b"\n", pos)
            if nl < 0:
                if n - pos > mcl:
                    return self._fail(events, "maximum control line exceeded")
                break
            if nl - pos > mcl:
                return self._fail(events, "maximum control line exceeded")
            if vrun and find_at(vprefix, pos) and events[-1] is vrun:
                # the next ones of a run of replies: `LMSG <its subject> <reply> <size>`, most of a read's at
                # once (_split_run), the rest each read with two finds; a line that does not read so is left to
                # the general path below
                pos = self._split_run(buf, pos, vprefix, vrun)
                nl = find(b"\n", pos)
                if nl < 0 or nl - pos > mcl or not find_at(vprefix, pos):
                    continue
                add_reply = vrun[2].append
                add_payload = vrun[3].append
                vlen = len(vprefix)
                max_payload = self.max_payload
                while True:
                    a = pos + vlen
                    sp = find(b" ", a, nl)
                    if sp <= a:
                        break
                    szb = buf[sp + 1 : nl - 1 if buf[nl - 1] == 13 else nl]
                    if not szb.isdigit() or len(szb) > 10:
                        break
                    size = int(szb)
                    stop = nl + 1 + size
                    if stop + 2 > n or size > max_payload or buf[stop] != 13 or buf[stop + 1] != 10:
                        break
                    rep = buf[a:sp]
                    if len(rep.split()) != 1:  # other white space: not a reply, as the general path reads it
                        break
                    add_reply(rep)
                    add_payload(buf[nl + 1 : stop])
                    pos = stop + 2
                    nl = find(b"\n", pos) if find_at(vprefix, pos) else -1
                    if nl < 0 or nl - pos > mcl:
                        nl = -1
                        break
                if nl < 0:
                    continue  # the next line is another kind (or not all here yet): the outer loop reads it
            # runs mode: a plain LMSG line seen before needs no parsing; the line of a JetStream delivery
            # (an ack reply is unique to its message) is never seen again: neither looked up nor kept
            ent = None
            memo = False
            if runs and find_at(b"LMSG ", pos) and find(b" $JS.ACK.", pos, nl) < 0:
                memo = True
                ent = lines.get(buf[pos : nl + 1])
            if ent is not None:
                word = b"LMSG"
                args = [word]
            else:
                end = nl - 1 if nl > pos and buf[nl - 1] == 13 else nl
                line = buf[pos:end]
                args = line.split()
                if not args:
                    pos = nl + 1
                    continue
                word = args[0]
                if word != b"LMSG" and word != b"HMSG":
                    word = word.upper()
            if word == b"LMSG" or word == b"HMSG":
                na = len(args)
                queues: tuple[bytes, ...] = ()
                if ent is not None:
                    subject, reply, size = ent[0], ent[1], ent[2]
                    hsize = -1
                elif word == b"LMSG" and 3 <= na <= 4 and args[-1].isdigit() and len(args[-1]) < 11:
                    # hot path: plain LMSG without a queue list
                    subject = args[1]
                    reply = args[2] if na == 4 else b""
                    hsize = -1
                    size = int(args[-1])
                    if memo and size <= self.max_payload:
                        if len(lines) >= 256:
                            lines.clear()
                        ln = buf[pos : nl + 1]
                        ent = lines[ln] = (subject, reply, size, b"\r\n" + ln)
                else:
                    ev = _msg_args(args, word == b"HMSG")
                    if ev is None:
                        return self._fail(events, "Unknown Protocol Operation")
                    subject, reply, queues, hsize, size = ev
                if size > self.max_payload:
                    return self._fail(events, "Maximum Payload Violation")
                start = nl + 1
                stop = start + size
                if stop + 2 > n:
                    self._keep(buf, pos, stop + 2 - pos)
                    return events
                if buf[stop] != 13 or buf[stop + 1] != 10:
                    return self._fail(events, "Unknown Protocol Operation")
                if hsize < 0 and runs and not queues:
                    last = events[-1] if events else None
                    if last is vrun and vrun[1] == subject and reply:
                        vrun[2].append(reply)
                        vrun[3].append(buf[start:stop])
                        pos = stop + 2
                        continue
                    if last is run and run[1] == subject and run[2] == reply:
                        payloads = run[3]
                        payloads.append(buf[start:stop])
                    elif last is single and single[1] == subject and single[2] == reply:
                        # a second message on the subject: the single event becomes a run
                        payloads = [single[5], buf[start:stop]]
                        run = events[-1] = (OP_LMSGS, subject, reply, payloads)
                    elif last is single and single[1] == subject and reply and single[2]:
                        # the same subject with another reply: a run of replies
                        vrun = events[-1] = (OP_LMSGR, subject, [single[2], reply], [single[5], buf[start:stop]])
                        vprefix = b"LMSG " + subject + b" "
                        pos = stop + 2
                        continue
                    else:
                        # alone until the next message says otherwise: a run of one costs more than an event
                        single = (OP_LMSG, subject, reply, queues, None, buf[start:stop])
                        append(single)
                        pos = stop + 2
                        continue
                    # the messages right behind with the very same control line need no parsing: one
                    # startswith checks this payload's CRLF and the next line together
                    nxt = ent[3] if ent is not None else b"\r\n" + buf[pos:start]
                    if find_at(nxt, stop):
                        stop = more_of_run(buf, stop, nxt, size, payloads)
                        if stop < 0:
                            return self._fail(events, "Unknown Protocol Operation")
                elif hsize < 0:
                    append((OP_LMSG, subject, reply, queues, None, buf[start:stop]))
                else:
                    append((OP_LMSG, subject, reply, queues, buf[start:start + hsize], buf[start + hsize:stop]))
                pos = stop + 2
                continue
            pos = nl + 1
            if word == b"PING":
                append(_PING_EV)
            elif word == b"PONG":
                append(_PONG_EV)
            elif word == b"LS+":
                na = len(args)
                if na == 2:
                    append((OP_LSUB, args[1].decode("utf-8", "surrogateescape"), None, 1))
                elif na == 4:
                    w = _size(args[3])
                    append((OP_LSUB, args[1].decode("utf-8", "surrogateescape"),
                            args[2].decode("utf-8", "surrogateescape"), w if w > 0 else 1))
                else:
                    return self._fail(events, "Unknown Protocol Operation")
            elif word == b"LS-":
                na = len(args)
                if na == 2:
                    append((OP_LUNSUB, args[1].decode("utf-8", "surrogateescape"), None))
                elif na == 3:
                    append((OP_LUNSUB, args[1].decode("utf-8", "surrogateescape"),
                            args[2].decode("utf-8", "surrogateescape")))
                else:
                    return self._fail(events, "Unknown Protocol Operation")
            elif word == b"INFO":
                sp = line.find(b" ")
                try:
                    info = json.loads(line[sp + 1:]) if sp > 0 else None
                except ValueError:
                    info = None
                if not isinstance(info, dict):
                    return self._fail(events, "Unknown Protocol Operation")
                append((OP_INFO, info))
            elif word == b"-ERR":
                sp = line.find(b" ")
                text = line[sp + 1:].decode("utf-8", "replace").strip() if sp > 0 else ""
                if len(text) >= 2 and text[0] == "'" and text[-1] == "'":
                    text = text[1:-1]
                append((OP_ERR, text))
            elif word == b"+OK":
                append(_OK_EV)
            elif word == b"CONNECT":
                sp = line.find(b" ")
                try:
                    connect = json.loads(line[sp + 1:]) if sp > 0 else None
                except ValueError:
                    connect = None
                if not isinstance(connect, dict):
                    return self._fail(events, "Unknown Protocol Operation")
                append((OP_CONNECT, connect))
            else:
                return self._fail(events, "Unknown Protocol Operation")
        self._buf = buf[pos:] if pos < n else b""
        return events

    def _split_run(self, buf: bytes, pos: int, vprefix: bytes, vrun: tuple) -> int:
        """The messages of a run of replies from `pos` (a line starting with `vprefix`, right after a CRLF) up
        to the last whole one of the read, taken a window at a time: one regex split on `CRLF <vprefix><reply>
        <size> CRLF` gives every reply, size and the bytes up to the next such line, and where each of those
        holds exactly its size the parse is the one line by line would give (a payload that holds such a line,
        or anything else between two, makes its piece longer or shorter than its size: taken up to there).
        Half the Python work per message of the line-by-line loop, which a mirror's drain spends on its loop
        thread. The window starts at SPLIT_WINDOW bytes and doubles while the run goes on, so a short run
        among other traffic scans little past its end. Returns where the messages not taken begin (at least
        the read's last one is left to the caller)."""
        if self._split_for != vprefix:
            if len(vprefix) + 1040 > self.max_control_line:
                return pos
            self._split = re.compile(b"\r\n" + re.escape(vprefix) + rb"([^ ]{1,1024}) ([0-9]{1,10})\r\n")
            self._split_for = vprefix
        assert self._split is not None
        split = self._split.split
        window = SPLIT_WINDOW
        n = len(buf)
        while True:
            end = pos - 2 + window
            parts = split(buf[pos - 2 : end])
            m = (len(parts) - 1) // 3 - 1  # the whole pieces: all but the last match's
            if m < 2 or parts[0]:
                return pos
            sizes = parts[2 : 3 * m : 3]
            payloads = parts[3 : 3 * m + 1 : 3]
            lens = list(map(len, payloads))
            s0 = sizes[0]
            if sizes.count(s0) == m and lens.count(int(s0)) == m:  # one size (fixed-size records): two C counts
                whole = int(s0) <= self.max_payload
            else:
                whole = list(map(int, sizes)) == lens and max(lens) <= self.max_payload
            if not whole:
                k = 0
                for size, got in zip(sizes, lens, strict=True):
                    if int(size) != got or got > self.max_payload:
                        break
                    k += 1
                if k < 2:
                    return pos
                m = k
                sizes = sizes[:k]
                del payloads[k:], lens[k:]
            replies = parts[1 : 3 * m : 3]
            joined = b"".join(replies)
            if len(joined.split()) != 1:  # other white space in a reply (`[^ ]` is the fastest class to match)
                return pos
            vrun[2].extend(replies)
            vrun[3].extend(payloads)
            pos += m * (len(vprefix) + 5) + len(joined) + sum(map(len, sizes)) + sum(lens)
            if not whole or end >= n:
                return pos
            window *= 2

    def _keep(self, buf: bytes, pos: int, need: int) -> None:
        rest = buf[pos:]
        if len(rest) >= 65536:
            self._chunks = [rest]
            self._have = len(rest)
            self._need = need
            self._buf = b""
        else:
            self._buf = rest

    def _fail(self, events: list[tuple], text: str) -> list[tuple]:
        self.dead = True
        self._buf = b""
        self._chunks.clear()
        events.append((OP_ERROR, text))
        return events


def _msg_args(args: list[bytes], hdr: bool) -> tuple[bytes, bytes, tuple[bytes, ...], int, int] | None:
    """LMSG/HMSG arguments: the count disambiguates, ≥ 4 (5 for HMSG) needs the `+`/`|` indicator."""
    na = len(args) - 1
    nsz = 2 if hdr else 1
    if na < 1 + nsz:
        return None
    subject = args[1]
    reply = b""
    queues: tuple[bytes, ...] = ()
    if na == 1 + nsz:
        pass
    elif na == 2 + nsz:
        reply = args[2]
    else:
        ind = args[2]
        if ind == b"+":
            reply = args[3]
            queues = tuple(args[4:len(args) - nsz])
        elif ind == b"|":
            queues = tuple(args[3:len(args) - nsz])
        else:
            return None
        if not queues:
            return None
    if hdr:
        hsize = _size(args[-2])
        size = _size(args[-1])
        if hsize < 0 or size < 0 or hsize > size:
            return None
    else:
        hsize = -1
        size = _size(args[-1])
        if size < 0:
            return None
    return subject, reply, queues, hsize, size


def connect_line(opts: dict[str, Any]) -> bytes:
    return b"CONNECT " + json.dumps(opts, separators=(",", ":")).encode() + CRLF


def ls_plus(subject: str, queue: str | None = None, weight: int = 1) -> bytes:
    if queue:
        return f"LS+ {subject} {queue} {max(1, weight)}\r\n".encode("utf-8", "surrogateescape")
    return f"LS+ {subject}\r\n".encode("utf-8", "surrogateescape")


def ls_minus(subject: str, queue: str | None = None) -> bytes:
    if queue:
        return f"LS- {subject} {queue}\r\n".encode("utf-8", "surrogateescape")
    return f"LS- {subject}\r\n".encode("utf-8", "surrogateescape")


def msg_head(subject: bytes, reply: bytes, queues: list[bytes] | tuple[bytes, ...], hsize: int, size: int) -> bytes:
    """LMSG (hsize < 0) or HMSG control line; `size` is the payload length without headers."""
    parts = [b"HMSG" if hsize >= 0 else b"LMSG", subject]
    if queues:
        if reply:
            parts += (b"+", reply)
        else:
            parts.append(b"|")
        parts.extend(queues)
    elif reply:
        parts.append(reply)
    if hsize >= 0:
        parts += (b"%d" % hsize, b"%d" % (hsize + size))
    else:
        parts.append(b"%d" % size)
    return b" ".join(parts) + CRLF
