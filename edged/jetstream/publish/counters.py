"""Counter streams (`allow_msg_counter`, nats-server 2.12): a publish carries `Nats-Incr: <big int>` and
no payload; the stream stores the subject's new total as `{"val":"<n>"}` and the PubAck carries it. A
counter sourced from other streams keeps, per origin stream and subject, the last total it took in the
`Nats-Counter-Sources` header, so it adds only the difference. Rules and texts from nats-server's
processJetStreamMsg (stream.go) and checkMsgHeadersPreClusteredProposal (jetstream_batching.go)."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from edged.jetstream.wire.errors import api_error
from edged.routing.headers import get_header

BIG_INT = re.compile(r"[+-]?[0-9]+")  # what Go's big.Int SetString(s, 10) takes

# headers an increment may not carry: an expectation or a rollup would make the total depend on them
_INCOMPATIBLE = ("Nats-Rollup", "Nats-Expected-Stream", "Nats-Expected-Last-Msg-Id",
                 "Nats-Expected-Last-Subject-Sequence-Subject", "Nats-Expected-Last-Sequence",
                 "Nats-Expected-Last-Subject-Sequence")

_decode_val = msgspec.json.Decoder(dict[str, Any]).decode
_decode_sources = msgspec.json.Decoder(dict[str, dict[str, str]]).decode
_encode = msgspec.json.Encoder(order="sorted").encode


def check_incr(incr: str, allowed: bool, hdr: bytes, payload: bytes) -> None:
    """A `Nats-Incr` a client published, before the other header checks (nats-server's order)."""
    if not BIG_INT.fullmatch(incr):
        raise api_error("JSMessageIncrInvalidErr")
    if not allowed:
        raise api_error("JSMessageIncrDisabledErr")
    if payload:
        raise api_error("JSMessageIncrPayloadErr")
    if (b"Nats-Expected-" in hdr or b"Nats-Rollup:" in hdr) and any(get_header(hdr, h) for h in _INCOMPATIBLE):
        raise api_error("JSMessageIncrInvalidErr")


def _total(payload: bytes) -> int:
    """The total a stored counter message holds; a payload that is no counter is a broken counter."""
    try:
        val = _decode_val(payload).get("val", "")
    except msgspec.DecodeError:
        raise api_error("JSMessageCounterBrokenErr") from None
    if not isinstance(val, str):
        raise api_error("JSMessageCounterBrokenErr")
    return int(val) if BIG_INT.fullmatch(val) else 0


def _set_header(hdr: bytes, name: str, value: str) -> bytes:
    """nats-server's setHeader: the value of an existing header replaced in place, else one appended."""
    line = f"{name}: {value}\r\n".encode()
    key = b"\r\n" + name.encode() + b":"
    i = hdr.find(key)
    if i < 0:
        base = hdr[:-2] if hdr.endswith(b"\r\n\r\n") else b"NATS/1.0\r\n"
        return base + line + b"\r\n"
    end = hdr.find(b"\r\n", i + 2)
    return hdr[:i + 2] + line[:-2] + hdr[end:]


def apply_incr(last: Any, subject: str, hdr: bytes, payload: bytes) -> tuple[bytes, bytes, str]:
    """The message a counter stream stores for an increment (or a sourced total), given the subject's
    last stored message `last` (None for a new counter): (headers, payload, the new total)."""
    incr_text = get_header(hdr, "Nats-Incr") if hdr else None
    if not incr_text:
        raise api_error("JSMessageIncrMissingErr")
    if not BIG_INT.fullmatch(incr_text):
        raise api_error("JSMessageIncrInvalidErr")
    incr = int(incr_text)
    total = 0
    sources: dict[str, dict[str, str]] = {}
    if last is not None:
        total = _total(last.data)
        ncs = get_header(last.hdr, "Nats-Counter-Sources") if last.hdr and b"Nats-Counter-Sources:" in last.hdr \
            else None
        if ncs:
            try:
                sources = _decode_sources(ncs.encode())
            except msgspec.DecodeError:
                raise api_error("JSMessageCounterBrokenErr") from None
    src = get_header(hdr, "Nats-Stream-Source") if b"Nats-Stream-Source:" in hdr else None
    if src:
        # a total from a source: add what changed since the last total taken from that stream's subject
        fields = src.split(" ")
        origin = fields[0]
        orig_subject = fields[4] if len(fields) >= 5 else subject
        sourced = _total(payload)
        prev = sources.setdefault(origin, {}).get(orig_subject, "")
        sources[origin][orig_subject] = str(sourced)
        incr = sourced - (int(prev) if BIG_INT.fullmatch(prev) else 0)
        hdr = _set_header(hdr, "Nats-Incr", str(incr))
    total += incr
    if sources:
        hdr = _set_header(hdr, "Nats-Counter-Sources", _encode(sources).decode())
    value = str(total)
    return hdr, b'{"val":"%s"}' % value.encode(), value


class LastTotals:
    """Each counter's last message by sequence, so an increment need not search the store for it (a
    subject's last message is a scan; a message by sequence is a lookup). Sound because every message a
    counter stream stores passes `stored` (an increment, or a sourced total) or `forget` (a sourced
    message stored verbatim): the remembered one, while still there, is the subject's last."""

    MAX = 100_000

    def __init__(self) -> None:
        self.seqs: dict[str, int] = {}
        self.epoch = -1

    def last(self, store: Any, subject: str) -> Any:
        if self.epoch != store.epoch:  # state reloaded after a failed commit: sequences are used again
            self.seqs.clear()
            self.epoch = store.epoch
        seq = self.seqs.get(subject)
        if seq is not None:
            m = store.load(seq)
            if m is not None:
                return m
        return store.load_last(subject)

    def stored(self, subject: str, seq: int) -> None:
        if len(self.seqs) >= self.MAX:
            self.seqs.clear()
        self.seqs[subject] = seq

    def forget(self, subject: str) -> None:
        self.seqs.pop(subject, None)
