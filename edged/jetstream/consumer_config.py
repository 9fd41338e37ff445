"""Consumer configs as nats-server reads them: the request decoded with Go's JSON rules (strict fields,
typed values, enum and time texts), defaults filled and checks run in nats-server's order
(setConsumerConfigDefaults, then checkConsumerCfg), and the rules for what an update may change.

The order matters: clients see only the first fault of a request with several, and match on its
err_code and text, so both follow server/consumer.go.
"""

from __future__ import annotations

import calendar
import json
import re
from typing import TYPE_CHECKING, Any

import msgspec

from edged.goformat import go_duration
from edged.jetstream.errors import JSApiError, api_error
from edged.jetstream.gojson import go_kind, go_quote
from edged.jetstream.stream import format_time, valid_asset_name
from edged.protocol import is_valid_subject
from edged.sublist import subject_matches

if TYPE_CHECKING:
    from edged.jetstream.stream import Stream

NS = 1_000_000_000
DEFAULT_ACK_WAIT = 30 * NS
DEFAULT_MAX_ACK_PENDING = 1000
DEFAULT_MAX_WAITING = 512
EPHEMERAL_INACTIVE = 5 * NS
MAX_DESCRIPTION = 4096
MAX_METADATA = 128 * 1024
MAX_NAME = 255

_ENUMS = {
    "deliver_policy": ("all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject"),
    "ack_policy": ("none", "all", "explicit"),
    "replay_policy": ("instant", "original"),
    "priority_policy": ("none", "overflow", "pinned_client", "prioritized"),
}
# ConsumerConfig's fields and their Go types (the type names appear in Go's JSON error texts)
_FIELDS: dict[str, str] = {
    "durable_name": "string", "name": "string", "description": "string", "deliver_policy": "enum",
    "opt_start_seq": "uint64", "opt_start_time": "time", "ack_policy": "enum", "ack_wait": "time.Duration",
    "max_deliver": "int", "backoff": "[]time.Duration", "filter_subject": "string", "filter_subjects": "[]string",
    "replay_policy": "enum", "rate_limit_bps": "uint64", "sample_freq": "string", "max_waiting": "int",
    "max_ack_pending": "int", "flow_control": "bool", "headers_only": "bool", "max_batch": "int",
    "max_expires": "time.Duration", "max_bytes": "int", "deliver_subject": "string", "deliver_group": "string",
    "idle_heartbeat": "time.Duration", "inactive_threshold": "time.Duration", "num_replicas": "int",
    "mem_storage": "bool", "direct": "bool", "sourcing": "bool", "metadata": "map[string]string",
    "pause_until": "time", "priority_groups": "[]string", "priority_policy": "enum",
    "priority_timeout": "time.Duration",
}
CREATE_REQUEST = {"stream_name": "string", "config": "config", "action": "action", "pedantic": "bool"}
_RANGES = {"int": (-(1 << 63), (1 << 63) - 1), "time.Duration": (-(1 << 63), (1 << 63) - 1),
           "uint64": (0, (1 << 64) - 1), "int64": (-(1 << 63), (1 << 63) - 1), "int32": (-(1 << 31), (1 << 31) - 1)}
# StreamConfig's policies (their UnmarshalJSON: discard ignores case; null is refused)
_STREAM_ENUMS = {"retention": ("limits", "interest", "workqueue"), "storage": ("memory", "file"),
                 "discard": ("old", "new"), "persist_mode": ("default", "async", "")}
# A Go type a field holds, for _GoDecoder: one of the names it knows ("string", "int64", "[]string",
# "time", "any" for a type whose own rules come later, ...), or a struct: ("struct", its Go name, its
# fields), or a slice of structs: ("[]", the slice's Go name, the element's struct).
GoType = Any
# the order nats-server marshals ConsumerConfig in
_ORDER = ("durable_name", "name", "description", "deliver_policy", "opt_start_seq", "opt_start_time", "ack_policy",
          "ack_wait", "max_deliver", "backoff", "filter_subject", "filter_subjects", "replay_policy",
          "rate_limit_bps", "sample_freq", "max_waiting", "max_ack_pending", "flow_control", "headers_only",
          "max_batch", "max_expires", "max_bytes", "deliver_subject", "deliver_group", "idle_heartbeat",
          "inactive_threshold", "num_replicas", "mem_storage", "metadata", "pause_until")


def _invalid_json(err: str) -> JSApiError:
    return api_error("JSInvalidJSONErr", err=err)


def _raw(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"))


class _GoDecoder:
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
            if (isinstance(gotype, str) and gotype in _STREAM_ENUMS) or (gotype == "enum" and field != "priority_policy"):
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
        if gotype in _STREAM_ENUMS:
            ok = v.lower() if gotype == "discard" and isinstance(v, str) else v
            if ok not in _STREAM_ENUMS[gotype]:
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
        if gotype == "enum":
            if not isinstance(v, str) or v not in _ENUMS[field]:
                if field == "priority_policy" and v == "":
                    return None
                return self._save(f"can not unmarshal {go_quote(_raw(v))}")
            return v
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
            if gotype == "config":
                if v is None:
                    continue
                if not isinstance(v, dict):
                    self._type_err(v, prefix + k, "server.ConsumerConfig")
                    continue
                out[name] = self.struct_fields(v, _FIELDS, prefix + k + ".")
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
    d = _GoDecoder(struct, strict, raw)
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
    return secs * NS + frac, format_time(secs * NS + frac, offset)


def time_ns(text: str) -> int:
    return go_time(text)[0]


# ------------------------------------------------------------------ defaults and checks


def _filters(c: dict[str, Any]) -> list[str]:
    return list(c.get("filter_subjects") or ([c["filter_subject"]] if c.get("filter_subject") else []))


def _subset(a: str, b: str) -> bool:
    """nats-server's subjectIsSubsetMatch: every subject `a` matches is matched by `b`."""
    return subject_matches(b, a)


def _atoi_err(s: str) -> str | None:
    if not re.fullmatch(r"[+-]?\d+", s):
        return f'strconv.Atoi: parsing {go_quote(s)}: invalid syntax'
    if not -(1 << 63) <= int(s) < (1 << 63):
        return f'strconv.Atoi: parsing {go_quote(s)}: value out of range'
    return None


def normalize(req: dict[str, Any], stream: Stream, acc_max_ack_pending: int = -1) -> dict[str, Any]:
    """The consumer config nats-server would keep (defaults filled), or its JSApiError."""
    c = dict(req)
    push = bool(c.get("deliver_subject"))
    # setConsumerConfigDefaults
    if c.get("max_deliver", 0) == 0 or c["max_deliver"] < -1:
        c["max_deliver"] = -1
    if c.get("max_ack_pending", 0) < -1:
        c["max_ack_pending"] = -1
    for k in ("max_waiting", "max_batch", "max_expires", "max_bytes", "idle_heartbeat", "inactive_threshold",
              "priority_timeout"):
        if c.get(k, 0) < 0:
            c[k] = 0
    ap = c.get("ack_policy") or "none"
    c["ack_policy"] = ap
    c["deliver_policy"] = c.get("deliver_policy") or "all"
    c["replay_policy"] = c.get("replay_policy") or "instant"
    if not push and not c.get("max_waiting"):
        c["max_waiting"] = DEFAULT_MAX_WAITING
    if not c.get("ack_wait") and ap != "none":
        c["ack_wait"] = DEFAULT_ACK_WAIT
    if c.get("backoff"):
        c["ack_wait"] = c["backoff"][0]
    cl = stream.config.get("consumer_limits") or {}
    if not c.get("max_ack_pending"):
        c["max_ack_pending"] = int(cl.get("max_ack_pending") or 0)
    if not c.get("inactive_threshold"):
        c["inactive_threshold"] = int(cl.get("inactive_threshold") or 0)
    if not c.get("max_ack_pending") and ap != "none":
        map_ = DEFAULT_MAX_ACK_PENDING
        if 0 < acc_max_ack_pending < map_:
            map_ = acc_max_ack_pending
        c["max_ack_pending"] = map_
    _check(c, stream, acc_max_ack_pending)
    c.setdefault("num_replicas", 0)
    return {k: c[k] for k in _ORDER if k in c and (c[k] or k in ("num_replicas", "max_deliver"))}


def _check(c: dict[str, Any], stream: Stream, acc_max_ack_pending: int) -> None:
    """checkConsumerCfg, in its order."""
    if c.get("name") and not valid_asset_name(c["name"]):
        raise api_error("JSStreamInvalidConfigF", err="consumer name can not contain '.', '*', '>', '\\', '/'")
    if c.get("durable_name") and not valid_asset_name(c["durable_name"]):
        raise api_error("JSStreamInvalidConfigF",
                        err="consumer durable name can not contain '.', '*', '>', '\\', '/'")
    replicas = c.get("num_replicas", 0)
    if replicas > 0 and replicas > stream.config.get("num_replicas", 1):
        raise api_error("JSConsumerReplicasExceedsStream")
    if replicas < 0:
        raise api_error("JSReplicasCountCannotBeNegative")
    if any(b < 0 for b in c.get("backoff") or []):
        raise api_error("JSConsumerBackOffNegativeErr")
    if c.get("ack_wait", 0) < 0:
        raise api_error("JSConsumerAckWaitNegativeErr")
    lbo = len(c.get("backoff") or [])
    if lbo and c["max_deliver"] != -1 and lbo > c["max_deliver"]:
        raise api_error("JSConsumerMaxDeliverBackoffErr")
    if len((c.get("description") or "").encode()) > MAX_DESCRIPTION:
        raise api_error("JSConsumerDescriptionTooLongErrF", max=MAX_DESCRIPTION)
    ds = c.get("deliver_subject") or ""
    hb = c.get("idle_heartbeat") or 0
    if ds:
        if "*" in ds.split(".") or ">" in ds.split("."):
            raise api_error("JSConsumerDeliverToWildcardsErr")
        if not is_valid_subject(ds):
            raise api_error("JSConsumerInvalidDeliverSubject")
        if any(_subset(ds, s) for s in stream.config.get("subjects") or []):
            raise api_error("JSConsumerDeliverCycleErr")
        if c.get("max_waiting"):
            raise api_error("JSConsumerPushMaxWaitingErr")
        if c.get("max_ack_pending", 0) > 0 and c["ack_policy"] == "none":
            raise api_error("JSConsumerMaxPendingAckPolicyRequiredErr")
        if 0 < hb < NS // 10:
            raise api_error("JSConsumerSmallHeartbeatErr")
    else:
        if c["ack_policy"] == "none" and stream.config.get("retention") == "workqueue":
            raise api_error("JSConsumerPullRequiresAckErr")
        if c.get("rate_limit_bps"):
            raise api_error("JSConsumerPullWithRateLimitErr")
        if hb > 0:
            raise api_error("JSConsumerHBRequiresPushErr")
        if c.get("flow_control"):
            raise api_error("JSConsumerFCRequiresPushErr")
        if 0 < c.get("max_expires", 0) < 1_000_000:
            raise api_error("JSConsumerMaxRequestExpiresTooSmall")
    map_ = c.get("max_ack_pending", 0)
    if 0 < acc_max_ack_pending < map_:
        raise api_error("JSConsumerMaxPendingAckExcessErrF", limit=acc_max_ack_pending)
    cl = stream.config.get("consumer_limits") or {}
    if 0 < int(cl.get("max_ack_pending") or 0) < map_:
        raise api_error("JSConsumerMaxPendingAckExcessErrF", limit=cl["max_ack_pending"])
    if 0 < int(cl.get("inactive_threshold") or 0) < c.get("inactive_threshold", 0):
        raise api_error("JSConsumerInactiveThresholdExcess", limit=go_duration(int(cl["inactive_threshold"])))
    flt = c.get("filter_subject") or ""
    if flt and c.get("filter_subjects"):
        raise api_error("JSConsumerDuplicateFilterSubjects")
    if flt and not is_valid_subject(flt):
        raise api_error("JSStreamInvalidConfigF", err="invalid subject")
    if any(f == "" for f in c.get("filter_subjects") or []):
        raise api_error("JSConsumerEmptyFilter")
    filters = _filters(c)
    for i, f in enumerate(filters):
        if not is_valid_subject(f):
            raise api_error("JSStreamInvalidConfigF", err="invalid subject")
        for j, g in enumerate(filters):
            if i != j and _subset(f, g):
                raise api_error("JSConsumerOverlappingSubjectFilters")
    _check_start(c)
    sf = c.get("sample_freq") or ""
    if sf:
        s = sf[:-1] if sf.endswith("%") else sf
        e = _atoi_err(s)
        if e is not None:
            raise api_error("JSConsumerInvalidSamplingErrF", err=e)
    if c.get("flow_control") and not hb:
        raise api_error("JSConsumerWithFlowControlNeedsHeartbeats")
    if c.get("durable_name") and c.get("name") and c["name"] != c["durable_name"]:
        raise api_error("JSConsumerCreateDurableAndNameMismatch")
    if sum(len(k) + len(v) for k, v in (c.get("metadata") or {}).items()) > MAX_METADATA:
        raise api_error("JSConsumerMetadataLengthErrF", limit=f"{MAX_METADATA // 1024}KB")
    if (c.get("priority_policy") or "none") == "none":
        if c.get("priority_groups"):
            raise api_error("JSConsumerPriorityGroupWithPolicyNone")
        if c.get("priority_timeout", 0) > 0:
            raise api_error("JSConsumerPinnedTTLWithoutPriorityPolicyNone")
    else:
        # nats-server 2.11's pull priority groups (overflow, pinned client) are not built: refused, not ignored
        raise api_error("JSConsumerCreateErrF", err="priority groups are not supported by edged")


def _check_start(c: dict[str, Any]) -> None:
    dp = c["deliver_policy"]
    seq = c.get("opt_start_seq", 0)
    has_time = bool(c.get("opt_start_time"))
    words = {"all": "all", "last": "last", "last_per_subject": "last per subject", "new": "new",
             "by_start_sequence": "by start sequence", "by_start_time": "by start time"}[dp]

    def bad(start: str) -> JSApiError:
        return api_error("JSConsumerInvalidPolicyErrF",
                         err=f"consumer delivery policy is deliver {words}, but optional start {start} is also set")

    def not_set(what: str) -> JSApiError:
        return api_error("JSConsumerInvalidPolicyErrF",
                         err=f"consumer delivery policy is deliver {words}, but optional {what} is not set")

    if dp in ("all", "last", "last_per_subject", "new"):
        if seq > 0:
            raise bad("sequence")
        if has_time:
            raise bad("time")
        if dp == "last_per_subject" and not _filters(c):
            raise not_set("filter subject")
    elif dp == "by_start_sequence":
        if seq == 0:
            raise not_set("start sequence")
        if has_time:
            raise bad("time")
    else:
        if not has_time:
            raise not_set("start time")
        if seq != 0:
            raise bad("start sequence")


def check_update(old: dict[str, Any], new: dict[str, Any], bound: bool) -> None:
    """nats-server's checkNewConsumerConfig: what an update may not change. `bound`: the push consumer's
    deliver subject has a subscriber now."""
    if old == new:
        return

    def refuse(what: str) -> JSApiError:
        return api_error("JSConsumerCreateErrF", err=what)

    if old["deliver_policy"] != new["deliver_policy"]:
        raise refuse("deliver policy can not be updated")
    if bool(old.get("mem_storage")) != bool(new.get("mem_storage")):
        raise refuse("storage type can not be updated")
    if old.get("opt_start_seq", 0) != new.get("opt_start_seq", 0):
        raise refuse("start sequence can not be updated")
    ot, nt = old.get("opt_start_time"), new.get("opt_start_time")
    if (ot is None) != (nt is None) or (ot is not None and nt is not None and time_ns(ot) != time_ns(nt)):
        raise refuse("start time can not be updated")
    if old["ack_policy"] != new["ack_policy"]:
        raise refuse("ack policy can not be updated")
    if old["replay_policy"] != new["replay_policy"]:
        raise refuse("replay policy can not be updated")
    if old.get("idle_heartbeat", 0) != new.get("idle_heartbeat", 0):
        raise refuse("heart beats can not be updated")
    if bool(old.get("flow_control")) != bool(new.get("flow_control")):
        raise refuse("flow control can not be updated")
    ods, nds = old.get("deliver_subject") or "", new.get("deliver_subject") or ""
    if ods != nds:
        if not ods:
            raise refuse("can not update pull consumer to push based")
        if not nds:
            raise refuse("can not update push consumer to pull based")
        if bound:
            raise api_error("JSConsumerNameExistErr")
    if old.get("max_waiting", 0) != new.get("max_waiting", 0):
        raise refuse("max waiting can not be updated")
    lbo = len(new.get("backoff") or [])
    if lbo and new["max_deliver"] != -1 and lbo > new["max_deliver"]:
        raise api_error("JSConsumerMaxDeliverBackoffErr")
