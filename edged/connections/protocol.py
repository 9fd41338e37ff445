"""Sans-I/O codec for the NATS client protocol, server side.

Bytes go in through `ClientParser.feed`, events come out as tuples whose first item is an op code
(tuples, not objects, because this is the hot path: one allocation per message). The encoder half
builds the server-to-client lines.

Error behaviour follows nats-server's parser.go/client.go:
- unknown op or malformed framing -> -ERR 'Unknown Protocol Operation', close;
- argument line longer than max_control_line -> -ERR 'maximum control line exceeded', close;
- PUB/HPUB size over max_payload -> -ERR 'Maximum Payload Violation', close;
- unparseable PUB/HPUB/SUB/UNSUB arguments -> close without -ERR (nats-server logs and closes).
An error is delivered as the last event of a batch: `(OP_ERROR, text_or_None)`; the parser is dead after it.
"""

from __future__ import annotations

import json
import re

# event op codes
OP_PUB = 1  # (OP_PUB, subject, reply, hdr|None, payload)
OP_SUB = 2  # (OP_SUB, subject, queue|None, sid)
OP_UNSUB = 3  # (OP_UNSUB, sid, max|0)
OP_PING = 4  # (OP_PING,)
OP_PONG = 5  # (OP_PONG,)
OP_CONNECT = 6  # (OP_CONNECT, dict)
OP_INFO = 7  # (OP_INFO, bytes)
OP_OK = 8  # (OP_OK,)
OP_ERR = 9  # (OP_ERR, text)
OP_ERROR = 10  # (OP_ERROR, err_text | None): protocol violation, close after sending err_text
# (OP_PUBS, subject, reply, subject_b, reply_b, [payload, ...]): consecutive header-less PUBs with one subject
# and reply, only from a parser made with runs=True; lets the router match and check once per run
OP_PUBS = 11
# (OP_ACKS, [subject_b, ...]): consecutive PUBs under the parser's `empty_runs` prefix with no reply, no headers
# and an empty payload (a JetStream client's plain acks, each to a subject of its own), only from a parser made
# with runs=True
OP_ACKS = 12
# (OP_PUBR, subject, subject_b, [reply_b, ...], [payload, ...]): consecutive header-less PUBs with one subject,
# each with a reply of its own (a JetStream publisher's requests), only from a parser made with runs=True
OP_PUBR = 13

ERR_UNKNOWN_OP = "Unknown Protocol Operation"
ERR_MAX_CONTROL_LINE = "maximum control line exceeded"
ERR_MAX_PAYLOAD = "Maximum Payload Violation"

_PING_EV = (OP_PING,)
_PONG_EV = (OP_PONG,)
_OK_EV = (OP_OK,)

# op word (upper case) -> code; lines are matched case-insensitively like nats-server
_OPS = {
    b"PUB": OP_PUB,
    b"HPUB": -OP_PUB,
    b"SUB": OP_SUB,
    b"UNSUB": OP_UNSUB,
    b"PING": OP_PING,
    b"PONG": OP_PONG,
    b"CONNECT": OP_CONNECT,
    b"INFO": OP_INFO,
    b"+OK": OP_OK,
    b"-ERR": OP_ERR,
}


# sizes as they are written, for the common small ones: one dict lookup instead of isdigit + int
_SMALL_SIZES = {str(i).encode(): i for i in range(1024)}


def _size(b: bytes) -> int:
    """nats-server's parseSize: decimal digits only, else -1."""
    if not b or not b.isdigit() or len(b) > 9:
        return -1
    return int(b)


CRLF = b"\r\n"


def more_of_run(buf: bytes, stop: int, nxt: bytes, size: int, payloads: list[bytes]) -> int:
    """The messages right behind one that end its run: each repeats its control line (`nxt` is CRLF +
    that line), so one startswith checks the previous payload's CRLF and the next line together. Appends
    their payloads and returns where the last one ends, or -1 when a payload is not followed by CRLF
    (a protocol error; the bad payload is not kept). The caller has seen `nxt` at `stop`."""
    skip = len(nxt)
    n = len(buf)
    find_at = buf.startswith
    while find_at(nxt, stop):
        a = stop + skip
        e = a + size
        if e + 2 > n:
            break
        payloads.append(buf[a:e])
        stop = e
    if buf[stop] != 13 or buf[stop + 1] != 10:
        payloads.pop()  # (never a run's first payload: its CRLF was checked before)
        return -1
    return stop


def frame_run(out: list[bytes], payloads: list[bytes], prefix: bytes) -> tuple[int, int]:
    """Append the frames of header-less messages that share a control line up to the size (`prefix`:
    `MSG <subject> <sid> [reply] ` or `LMSG <subject> [reply] `): the line is built once per payload
    size, equal-sized payloads are joined at once. Returns (payload bytes, bytes appended)."""
    n = len(payloads)
    size = len(payloads[0])
    total = sum(map(len, payloads))
    if total == size * n and max(map(len, payloads)) == size:
        head = prefix + b"%d\r\n" % size
        out += (head, (CRLF + head).join(payloads), CRLF)
        return total, total + n * (len(head) + 2)
    last = -1
    head = b""
    extra = 0
    for payload in payloads:
        size = len(payload)
        if size != last:
            last = size
            head = prefix + b"%d\r\n" % size
        out += (head, payload, CRLF)
        extra += len(head) + 2
    return total, total + extra


class Framer:
    """The buffering shared by the line-oriented NATS parsers (client and leafnode): a partial line is
    kept, and while a large payload is arriving its chunks are kept in a list until enough bytes are
    there, so a big message is joined once rather than once per read."""

    __slots__ = ("max_control_line", "max_payload", "_buf", "_chunks", "_have", "_need", "dead")

    def __init__(self, max_control_line: int, max_payload: int) -> None:
        self.max_control_line = max_control_line
        self.max_payload = max_payload
        self._buf = b""
        self._chunks: list[bytes] = []
        self._have = 0
        self._need = 0
        self.dead = False

    def _join(self, data: bytes) -> bytes | None:
        """The bytes to parse now, or None while a payload is still incomplete."""
        if self._need:
            self._chunks.append(data)
            self._have += len(data)
            if self._have < self._need:
                return None
            buf = b"".join(self._chunks)
            self._chunks.clear()
            self._have = self._need = 0
            return buf
        if self._buf:
            return self._buf + data
        return data


# what lies between two subjects of a run of empty PUBs, by the frames' spacing (nats-py writes an empty
# reply as a second space): one space, two spaces
_EMPTY_SEPS = (b" 0\r\n\r\nPUB ", b"  0\r\n\r\nPUB ")
_EMPTY_RUNS: dict[tuple[bytes, int], tuple[re.Pattern[bytes], ...]] = {}


def _empty_runs(prefix: bytes, mcl: int) -> tuple[re.Pattern[bytes], ...] | None:
    """The patterns of a run of empty, reply-less PUB frames to subjects under `prefix`, one per spacing
    (`_EMPTY_SEPS`), for subjects that keep the control line within max_control_line: printable ASCII
    without spaces. Any other frame (another case, tabs, a reply, a payload, a subject too long) ends the
    run and is parsed the usual way."""
    room = mcl - 3 - len(prefix)  # "subject  0" at most mcl bytes, with either spacing
    if room < 1:
        return None
    pats = _EMPTY_RUNS.get((prefix, room))
    if pats is None:
        pats = _EMPTY_RUNS[(prefix, room)] = tuple(
            re.compile(rb"(?:PUB %s[!-~]{1,%d}%s0\r\n\r\n)+" % (re.escape(prefix), room, sp)) for sp in (b" ", b"  "))
    return pats


class ClientParser(Framer):
    """Incremental parser for what a client sends. One per connection.

    With `runs`, header-less PUBs that follow one another with the same subject and reply come out as one
    OP_PUBS event (a device publishing a stream of readings is the common case): one event, one subject
    decode and, in the router, one match per run instead of per message. With `empty_runs` too (a subject
    prefix, which the server takes from the services that receive such messages: JetStream's acks),
    empty, reply-less PUBs under that prefix come out as one OP_ACKS event per run."""

    __slots__ = ("runs", "_lines", "_hits", "_cold", "_acks", "_empty_prefix")

    def __init__(self, max_control_line: int = 4096, max_payload: int = 1024 * 1024, runs: bool = False,
                 empty_runs: bytes = b"") -> None:
        super().__init__(max_control_line, max_payload)
        self.runs = runs
        self._empty_prefix = b"PUB " + empty_runs
        self._acks = _empty_runs(empty_runs, max_control_line) if runs and empty_runs else None
        # runs mode: PUB control lines seen before (a publisher repeats a few) -> their parsed fields
        self._lines: dict[bytes, tuple] = {}
        # how often a line was found since the memo was last started over, and how many more new lines
        # go unremembered: a client whose lines never repeat (every ack subject is new) fills the memo
        # with lines nobody asks for again, so for a while new lines are only parsed
        self._hits = 0
        self._cold = 0

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
        hits = 0
        cold = self._cold
        small = _SMALL_SIZES
        acks = self._acks
        while pos < n:
            if acks is not None and find_at(self._empty_prefix, pos):
                # e.g. a consumer client's plain acks, frames of one shape: one regex pass and one split for
                # the run instead of a line parse each (every ack subject is new, so no memo helps)
                k = 0
                m = acks[0].match(buf, pos)
                if m is None:
                    k = 1
                    m = acks[1].match(buf, pos)
                if m is not None:
                    stop = m.end()
                    append((OP_ACKS, buf[pos + 4 : stop - 6 - k].split(_EMPTY_SEPS[k])))
                    pos = stop
                    continue
            nl = find(b"\n", pos)
            if nl < 0:
                if n - pos > mcl + 8:
                    return self._fail(events, ERR_MAX_CONTROL_LINE)
                break
            if runs and not cold and find_at(b"PUB ", pos):
                # runs mode: every header-less PUB goes into a run (one message alone is a run of one)
                line = buf[pos : nl + 1]
                ent = lines.get(line)
                if ent is None:
                    ent = self._pub_line(line)
                    if len(ent) == 1:
                        return self._fail(events, ent[0])
                    cold = self._cold
                else:
                    hits += 1
                subject_b = ent[2]
                reply_b = ent[3]
                size = ent[4]
                start = nl + 1
                stop = start + size
                if stop + 2 > n:
                    self._hits += hits
                    self._cold = cold
                    self._keep(buf, pos, stop + 2 - pos)
                    return events
                if buf[stop] != 13 or buf[stop + 1] != 10:
                    return self._fail(events, ERR_UNKNOWN_OP)
                if events and events[-1] is run and run[3] == subject_b and run[4] == reply_b:
                    payloads = run[5]
                    payloads.append(buf[start:stop])
                else:
                    payloads = [buf[start:stop]]
                    run = (OP_PUBS, ent[0], ent[1], subject_b, reply_b, payloads)
                    append(run)
                # the messages right behind with the very same control line need no parsing: one
                # startswith checks this payload's CRLF and the next line together
                nxt = ent[5]
                if find_at(nxt, stop):
                    stop = more_of_run(buf, stop, nxt, size, payloads)
                    if stop < 0:
                        return self._fail(events, ERR_UNKNOWN_OP)
                pos = stop + 2
                continue
            end = nl - 1 if nl > pos and buf[nl - 1] == 13 else nl
            if buf.startswith(b"PUB ", pos):
                # fast path for the most common line: no op lookup, no intermediate slices
                if cold:
                    # runs mode, but the memo is not worth it for this client now: a while of plain parsing
                    cold -= 1
                    if not cold:
                        lines.clear()
                        self._hits = hits = self._cold = 0
                if end - pos - 4 > mcl:
                    return self._fail(events, ERR_MAX_CONTROL_LINE)
                args = buf[pos + 4 : end].split()
                na = len(args)
                if na == 2:
                    sz = args[1]
                elif na == 3:
                    sz = args[2]
                else:
                    return self._fail(events, None)
                size = small.get(sz)
                if size is None:
                    if not sz.isdigit() or len(sz) > 9:
                        return self._fail(events, None)
                    size = int(sz)
                if size > self.max_payload:
                    return self._fail(events, ERR_MAX_PAYLOAD)
                start = nl + 1
                stop = start + size
                if stop + 2 > n:
                    self._cold = cold
                    self._keep(buf, pos, stop + 2 - pos)
                    return events
                if buf[stop] != 13 or buf[stop + 1] != 10:
                    return self._fail(events, ERR_UNKNOWN_OP)
                if runs and na == 3:
                    # lines that never repeat (each request its own reply): a run keyed on the subject
                    subject_b = args[0]
                    if events and events[-1] is run and run[0] == OP_PUBR and run[2] == subject_b:
                        run[3].append(args[1])
                        run[4].append(buf[start:stop])
                    else:
                        run = (OP_PUBR, subject_b.decode("utf-8", "surrogateescape"), subject_b, [args[1]],
                               [buf[start:stop]])
                        append(run)
                    pos = stop + 2
                    continue
                append((OP_PUB, args[0].decode("utf-8", "surrogateescape"),
                        args[1].decode("utf-8", "surrogateescape") if na == 3 else "", None, buf[start:stop]))
                pos = stop + 2
                continue
            line = buf[pos:end]
            sp = line.find(b" ")
            tab = line.find(b"\t")
            if sp < 0 or (0 <= tab < sp):
                sp = tab
            if sp < 0:
                word = line
                arg = b""
            else:
                word = line[:sp]
                arg = line[sp + 1 :]
            code = _OPS.get(word)
            if code is None:
                code = _OPS.get(word.upper())
                if code is None:
                    return self._fail(events, ERR_UNKNOWN_OP)
            if len(arg) > mcl:
                return self._fail(events, ERR_MAX_CONTROL_LINE)
            if code == OP_PUB or code == -OP_PUB:
                args = arg.split()
                na = len(args)
                if code == OP_PUB:
                    if na == 2:
                        reply = ""
                        size = _size(args[1])
                    elif na == 3:
                        reply = args[1].decode("utf-8", "surrogateescape")
                        size = _size(args[2])
                    else:
                        return self._fail(events, None)
                    hsize = 0
                    if size < 0:
                        return self._fail(events, None)
                else:
                    if na == 3:
                        reply = ""
                        hsize = _size(args[1])
                        size = _size(args[2])
                    elif na == 4:
                        reply = args[1].decode("utf-8", "surrogateescape")
                        hsize = _size(args[2])
                        size = _size(args[3])
                    else:
                        return self._fail(events, None)
                    if hsize < 0 or size < 0 or hsize > size:
                        return self._fail(events, None)
                if size > self.max_payload:
                    return self._fail(events, ERR_MAX_PAYLOAD)
                start = nl + 1
                stop = start + size
                if stop + 2 > n:
                    # payload not all here yet: keep from the start of this line
                    self._keep(buf, pos, stop + 2 - pos)
                    return events
                if buf[stop] != 13 or buf[stop + 1] != 10:
                    return self._fail(events, ERR_UNKNOWN_OP)
                subject = args[0].decode("utf-8", "surrogateescape")
                if code == OP_PUB:
                    append((OP_PUB, subject, reply, None, buf[start:stop]))
                else:
                    append((OP_PUB, subject, reply, buf[start : start + hsize], buf[start + hsize : stop]))
                pos = stop + 2
                continue
            pos = nl + 1
            if code == OP_PING:
                append(_PING_EV)
            elif code == OP_PONG:
                append(_PONG_EV)
            elif code == OP_SUB:
                args = arg.split()
                if len(args) == 2:
                    append((OP_SUB, args[0].decode("utf-8", "surrogateescape"), None, args[1].decode()))
                elif len(args) == 3:
                    append(
                        (
                            OP_SUB,
                            args[0].decode("utf-8", "surrogateescape"),
                            args[1].decode("utf-8", "surrogateescape"),
                            args[2].decode("utf-8", "surrogateescape"),
                        )
                    )
                else:
                    return self._fail(events, None)
            elif code == OP_UNSUB:
                args = arg.split()
                if len(args) == 1:
                    append((OP_UNSUB, args[0].decode("utf-8", "surrogateescape"), 0))
                elif len(args) == 2:
                    mx = _size(args[1])
                    if mx < 0:
                        return self._fail(events, None)
                    append((OP_UNSUB, args[0].decode("utf-8", "surrogateescape"), mx))
                else:
                    return self._fail(events, None)
            elif code == OP_CONNECT:
                try:
                    opts = json.loads(arg)
                except ValueError:
                    return self._fail(events, None)
                if not isinstance(opts, dict):
                    return self._fail(events, None)
                append((OP_CONNECT, opts))
            elif code == OP_INFO:
                append((OP_INFO, bytes(arg)))
            elif code == OP_OK:
                append(_OK_EV)
            else:  # -ERR
                append((OP_ERR, arg.decode("utf-8", "replace").strip().strip("'")))
        self._buf = buf[pos:] if pos < n else b""
        if hits:
            self._hits += hits
        self._cold = cold
        return events

    def _pub_line(self, line: bytes) -> tuple:
        """Parse a `PUB <subject> [reply] <size>` line (with its line end) and remember it: (subject, reply,
        subject_b, reply_b, size, CRLF + line), or (error text or None,) when the line is bad."""
        body = line[4:-2] if line.endswith(b"\r\n") else line[4:-1]
        if len(body) > self.max_control_line:
            return (ERR_MAX_CONTROL_LINE,)
        args = body.split()
        na = len(args)
        if na == 2:
            reply_b = b""
            sz = args[1]
        elif na == 3:
            reply_b = args[1]
            sz = args[2]
        else:
            return (None,)
        if not sz.isdigit() or len(sz) > 9:
            return (None,)
        size = int(sz)
        if size > self.max_payload:
            return (ERR_MAX_PAYLOAD,)
        ent = (args[0].decode("utf-8", "surrogateescape"), reply_b.decode("utf-8", "surrogateescape") if na == 3
               else "", args[0], reply_b, size, b"\r\n" + line)
        lines = self._lines
        if len(lines) >= 256:
            if self._hits < 256:
                # fewer finds than lines remembered: new lines go unremembered for a while (the lines
                # that did repeat stay)
                self._cold = 4096
                return ent
            lines.clear()
            self._hits = 0
        lines[line] = ent
        return ent

    def _keep(self, buf: bytes, pos: int, need: int) -> None:
        rest = buf[pos:]
        if len(rest) >= 65536:
            # large payload in flight: collect chunks instead of re-concatenating on every read
            self._chunks = [rest]
            self._have = len(rest)
            self._need = need
            self._buf = b""
        else:
            self._buf = rest

    def _fail(self, events: list[tuple], text: str | None) -> list[tuple]:
        self.dead = True
        self._buf = b""
        self._chunks.clear()
        events.append((OP_ERROR, text))
        return events


# ---------------------------------------------------------------------------------------------
# encoder: server -> client


def info_line(info: dict) -> bytes:
    # nats-server writes "INFO <json> \r\n" (single spaces around the JSON)
    return b"INFO " + json.dumps(info, separators=(",", ":")).encode() + b" \r\n"


def err_line(text: str) -> bytes:
    return b"-ERR '" + text.encode() + b"'\r\n"


PING = b"PING\r\n"
PONG = b"PONG\r\n"
OK = b"+OK\r\n"


def msg_prefix(subject: bytes, sid: bytes, reply: bytes) -> bytes:
    """A MSG control line up to its size, for `frame_run`."""
    return b"MSG %s %s %s " % (subject, sid, reply) if reply else b"MSG %s %s " % (subject, sid)


def msg_head(subject: bytes, sid: bytes, reply: bytes, size: int) -> bytes:
    if reply:
        return b"MSG %s %s %s %d\r\n" % (subject, sid, reply, size)
    return b"MSG %s %s %d\r\n" % (subject, sid, size)


def hmsg_head(subject: bytes, sid: bytes, reply: bytes, hsize: int, size: int) -> bytes:
    if reply:
        return b"HMSG %s %s %s %d %d\r\n" % (subject, sid, reply, hsize, hsize + size)
    return b"HMSG %s %s %d %d\r\n" % (subject, sid, hsize, hsize + size)


def frame_batch(sid: bytes, msgs: list[tuple[bytes, bytes, bytes | None, bytes]], headers: bool) -> list[bytes]:
    """Whole MSG/HMSG frames, one per (subject, reply, header block or None, payload) message, for one
    subscription; header blocks are left out for a client that did not ask for headers. One format per
    message: a consumer's batch of deliveries is the hot path."""
    frames = []
    append = frames.append
    if headers:
        for subject, reply, hdr, data in msgs:
            if hdr:
                hl = len(hdr)
                if reply:
                    append(b"HMSG %s %s %s %d %d\r\n%s%s\r\n" % (subject, sid, reply, hl, hl + len(data), hdr, data))
                else:
                    append(b"HMSG %s %s %d %d\r\n%s%s\r\n" % (subject, sid, hl, hl + len(data), hdr, data))
            elif reply:
                append(b"MSG %s %s %s %d\r\n%s\r\n" % (subject, sid, reply, len(data), data))
            else:
                append(b"MSG %s %s %d\r\n%s\r\n" % (subject, sid, len(data), data))
    else:
        for subject, reply, _, data in msgs:
            if reply:
                append(b"MSG %s %s %s %d\r\n%s\r\n" % (subject, sid, reply, len(data), data))
            else:
                append(b"MSG %s %s %d\r\n%s\r\n" % (subject, sid, len(data), data))
    return frames


def no_responders_msg(reply: bytes, sid: bytes, subject: bytes) -> bytes:
    """The 503 status a requester with `no_responders` gets when nobody took its request."""
    hdr = b"NATS/1.0 503\r\nNats-Subject: " + subject + b"\r\n\r\n"
    return hmsg_head(reply, sid, b"", len(hdr), 0) + hdr + CRLF
