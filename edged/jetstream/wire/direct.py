"""`$JS.API.DIRECT.GET.<stream>[.<subject>]`: stored messages returned as themselves (not JSON), with
`Nats-Stream/Subject/Sequence/Time-Stamp` headers, as nats-server's processDirectGetRequest does;
batches and `multi_last` end with a `204 EOB` status message; failures are status messages
(`408 Bad Request`, `404 Message Not Found`, ...). Also the message lookup shared with STREAM.MSG.GET.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from edged.goformat import parse_rfc3339, rfc3339ns
from edged.jetstream.wire.dispatch import handler
from edged.jetstream.wire.errors import JSApiError, api_error
from edged.jetstream.wire.gojson import decode_fields
from edged.routing.headers import make_headers

if TYPE_CHECKING:
    from edged.jetstream.stream import Stream
    from edged.jetstream.wire.dispatch import ApiRequest

MAX_MULTI_RESULTS = 1024
# JSApiMsgGetRequest's fields and Go types (STREAM.MSG.GET and DIRECT.GET read it)
MSG_GET_REQUEST = {"seq": "uint64", "last_by_subj": "string", "next_by_subj": "string", "batch": "int",
                   "max_bytes": "int", "start_time": "time", "multi_last": "[]string", "up_to_seq": "uint64",
                   "up_to_time": "time", "no_hdr": "bool"}
_decode = msgspec.json.Decoder().decode


def int_field(body: dict[str, Any], key: str) -> int:
    """An integer request field (absent = 0); another type is nats-server's "invalid JSON"."""
    v = body.get(key)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int):
        kind = "string" if isinstance(v, str) else "array" if isinstance(v, list) else \
            "object" if isinstance(v, dict) else "number"
        raise api_error("JSInvalidJSONErr", err=f"json: cannot unmarshal {kind} into Go struct field .{key} "
                                                f"of type uint64")
    return v


def _time_field(body: dict[str, Any], key: str) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    try:
        return parse_rfc3339(str(v))
    except ValueError:
        raise api_error("JSInvalidJSONErr", err=f"parsing time {str(v)!r} as RFC 3339") from None


def seq_from_time(stream: Stream, ns: int) -> int:
    """The first sequence stored at or after `ns`, or last + 1 (nats-server's GetSeqFromTime). Stored
    times do not go backwards, so "the first live message at/after s is at/after ns" is monotonic in s:
    bisect on it."""
    st = stream.store
    if not st.msgs:
        return st.last_seq + 1
    lo, hi = st.first_seq, st.last_seq + 1
    while lo < hi:
        mid = (lo + hi) // 2
        m = st.load_next(mid)
        if m is None or m.ts >= ns:
            hi = mid
        else:
            lo = m.seq + 1
    m = st.load_next(lo) if lo <= st.last_seq else None
    return m.seq if m is not None else st.last_seq + 1


def lookup(stream: Stream, body: dict[str, Any]) -> Any:
    """The message a STREAM.MSG.GET request names: by sequence; the first at/after a sequence or a
    start time (of a subject filter with `next_by_subj`); or the last of a subject filter."""
    st = stream.store
    seq = int_field(body, "seq")
    next_by = body.get("next_by_subj") or ""
    start = _time_field(body, "start_time")
    if start is not None:
        seq = seq_from_time(stream, start)
    if seq > 0 and not next_by:
        return st.load(seq)
    if next_by:
        return st.load_next(max(seq, 1), next_by)
    return st.load_last(body.get("last_by_subj") or None)


def _status(ic: Any, reply: str, code: int, text: str) -> None:
    ic.publish(reply, b"", "", make_headers(status=code, description=text))


def _get_request(data: bytes) -> dict[str, Any]:
    """A direct get body as nats-server reads it (json.Unmarshal: one value, Go's types for the fields it
    has, other keys ignored); any fault is its "Malformed Request"."""
    body = _decode(data)
    if not isinstance(body, dict):
        raise ValueError
    return {**body, **decode_fields(body, MSG_GET_REQUEST, "JSApiMsgGetRequest", strict=False)}


@handler("DIRECT.GET", arity=(1, 1 << 20), count_ok=False)  # DIRECT.GET.<stream>[.<subject...>]
def direct_get(req: ApiRequest) -> None:
    """Answer a direct get; the stream only listens when `allow_direct` is on (else no responders)."""
    assert req.jsa is not None
    stream = req.jsa.direct_stream(req.tokens[0])
    if stream is None:
        return None
    ic = req.jsa.internal
    reply = req.reply
    max_pending = getattr(req.js.server.opts, "max_pending", 64 * 1024 * 1024)
    data = req.data
    if len(req.tokens) > 1:
        # DIRECT.GET.<stream>.<subject>: the last message of that subject; a body may not ask for more
        body: dict[str, Any] = {}
        if data:
            try:
                body = _get_request(data)
            except (msgspec.DecodeError, ValueError, JSApiError):
                return _status(ic, reply, 408, "Malformed Request")
        if any(body.get(k) for k in ("last_by_subj", "next_by_subj", "multi_last", "seq", "batch", "start_time",
                                     "up_to_seq", "up_to_time")):
            return _status(ic, reply, 408, "Bad Request")
        body["last_by_subj"] = ".".join(req.tokens[1:])
    else:
        if not data:
            return _status(ic, reply, 408, "Empty Request")
        try:
            body = _get_request(data)
            seq, batch = int_field(body, "seq"), int_field(body, "batch")
            up_to_seq, max_bytes = int_field(body, "up_to_seq"), int_field(body, "max_bytes")
            start, up_to_time = _time_field(body, "start_time"), _time_field(body, "up_to_time")
        except Exception:
            return _status(ic, reply, 408, "Malformed Request")
        last_by, next_by = body.get("last_by_subj") or "", body.get("next_by_subj") or ""
        multi = body.get("multi_last") or []
        if not seq and not last_by and not next_by and not multi and start is None:
            return _status(ic, reply, 408, "Empty Request")
        if ((seq > 0 and last_by) or (seq > 0 and start is not None) or (start is not None and last_by)
                or (last_by and next_by) or (last_by and batch > 0) or (last_by and multi) or (next_by and multi)
                or (up_to_seq > 0 and up_to_time is not None)):
            return _status(ic, reply, 408, "Bad Request")
        if multi:
            return _multi_last(ic, reply, stream, multi, seq, batch, up_to_seq, up_to_time,
                               max_bytes or max_pending)
    _single_or_batch(ic, reply, stream, body, max_pending)
    req.js.pubacks.spin()
    return None


def _headers(stream: Stream, m: Any, pending: int = -1, last: int = 0) -> bytes:
    extra = (f"Nats-Stream: {stream.name}\r\nNats-Subject: {m.subject}\r\nNats-Sequence: {m.seq}\r\n"
             f"Nats-Time-Stamp: {rfc3339ns(m.ts)}\r\n")
    if pending >= 0:
        extra += f"Nats-Num-Pending: {pending}\r\nNats-Last-Sequence: {last}\r\n"
    base = m.hdr[:-2] if m.hdr and m.hdr.endswith(b"\r\n\r\n") else b"NATS/1.0\r\n"
    return base + extra.encode() + b"\r\n"


def _single_or_batch(ic: Any, reply: str, stream: Stream, body: dict[str, Any], max_pending: int) -> None:
    st = stream.store
    start = _time_field(body, "start_time")
    seq = seq_from_time(stream, start) if start is not None else int_field(body, "seq")
    next_by = body.get("next_by_subj") or ""
    last_by = body.get("last_by_subj") or ""
    batch = int_field(body, "batch")
    is_batch = batch > 0
    batch = batch or 1
    pending = st.count(seq, next_by or None) if is_batch else 0
    max_bytes = int_field(body, "max_bytes") or max_pending
    no_hdr = bool(body.get("no_hdr"))
    sent_bytes = 0
    last = 0
    for i in range(batch):
        if seq > 0 and not next_by:
            m = st.load(seq) if i == 0 and not is_batch else st.load_next(seq)
        elif next_by:
            m = st.load_next(max(seq, 1), next_by)
        else:
            m = st.load_last(last_by)
        if m is None:
            if batch > 1 and i > 0:
                break
            return _status(ic, reply, 404, "Message Not Found")
        seq = m.seq + 1
        hdr: bytes | None = None
        if not no_hdr:
            if is_batch:
                pending = max(pending - 1, 0)
                hdr = _headers(stream, m, pending, last)
            else:
                hdr = _headers(stream, m)
        last = m.seq
        ic.publish(reply, m.data, "", hdr)
        sent_bytes += len(m.subject) + len(m.hdr) + len(m.data)
        if sent_bytes >= max_bytes:
            break
    if is_batch:
        ic.publish(reply, b"", "", make_headers([("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(last))],
                                                status=204, description="EOB"))
    return None


def _multi_last(ic: Any, reply: str, stream: Stream, filters: list[str], min_seq: int,
                batch: int, up_to_seq: int, up_to_time: int | None, max_bytes: int) -> None:
    """The last message of every subject matching the filters, at or below `up_to_seq`, in sequence order."""
    st = stream.store
    if up_to_time is not None:
        up_to_seq = seq_from_time(stream, up_to_time)
        if up_to_seq <= st.first_seq:
            return _status(ic, reply, 404, "No Results")
        up_to_seq -= 1
    if up_to_seq == 0:
        up_to_seq = st.last_seq
    seqs: set[int] = set()
    for flt in filters:
        for subj in st.subject_counts(flt):
            m = st.load_prev(up_to_seq, subj)
            if m is not None:
                seqs.add(m.seq)
        if len(seqs) > MAX_MULTI_RESULTS:
            return _status(ic, reply, 413, "Too Many Results")
    if not seqs:
        return _status(ic, reply, 404, "No Results")
    pending = len(seqs)
    last = 0
    sent = sent_bytes = 0
    for seq in sorted(seqs):
        pending = max(pending - 1, 0)
        if seq < min_seq:
            continue
        m = st.load(seq)
        if m is None:
            return _status(ic, reply, 404, "Message Not Found")
        ic.publish(reply, m.data, "", _headers(stream, m, pending, last))
        last = m.seq
        sent_bytes += len(m.subject) + len(m.hdr) + len(m.data)
        if sent_bytes >= max_bytes:
            break
        sent += 1
        if batch > 0 and sent >= batch:
            break
    ic.publish(reply, b"", "", make_headers([("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(last)),
                                             ("Nats-UpTo-Sequence", str(up_to_seq))], status=204, description="EOB"))
    return None
