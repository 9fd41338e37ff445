"""A JetStream stream: its config rules (nats-server's defaults and checks) and the publish path.

The publish path runs synchronously on the loop for each message the router hands over: checks,
`store.append` (which assigns the sequence at once), limits; the PubAck waits only for the commit
future that the whole group-commit batch shares, so acks are sent once per SQLite transaction.
"""

from __future__ import annotations

import base64
import hashlib
import operator
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from edged.goformat import go_duration, rfc3339ns
from edged.jetstream.publish.atomic import AtomicBatches
from edged.jetstream.publish.counters import LastTotals, apply_incr, check_incr
from edged.jetstream.publish.fastbatch import SUFFIX as FAST_SUFFIX
from edged.jetstream.publish.fastbatch import FastBatches, parse_reply
from edged.jetstream.publish.features import level2_config_checks, level2_config_fields, level2_update_checks
from edged.jetstream.publish.schedules import Scheduler
from edged.jetstream.wire.errors import JSApiError, api_error
from edged.jetstream.wire.gojson import go_quote
from edged.log import log
from edged.routing.headers import get_header, make_headers, remove_headers
from edged.routing.subjects import (
    SubjectTransform,
    is_valid_literal_subject,
    is_valid_subject,
    subject_is_subset,
    subject_matches,
    subjects_overlap,
    transform_subject,
)
from edged.settings.config import parse_duration
from storage import StoreError, StoreFullError

if TYPE_CHECKING:
    from edged.jetstream.account import JSAccount
    from edged.jetstream.engine import JetStream

MAX_NAME_LEN = 255
MAX_DESCRIPTION_LEN = 4096
MAX_HDR = 64 * 1024
DEFAULT_DUPLICATE_WINDOW = 120 * 1_000_000_000
NS = 1_000_000_000

_RETENTION = ("limits", "interest", "workqueue")
_DISCARD = ("old", "new")
_STORAGE = ("file", "memory")

_json_encode = msgspec.json.Encoder().encode


def valid_asset_name(name: Any) -> bool:
    return isinstance(name, str) and bool(name) and not any(c in name for c in ".*> \t\r\n\\/")


def _invalid(msg: str) -> JSApiError:
    return api_error("JSStreamInvalidConfigF", err=msg)


def _enum(cfg: dict[str, Any], key: str, allowed: tuple[str, ...], default: str) -> str:
    """A policy field; an unknown value fails to unmarshal in nats-server (invalid JSON, not a config error)."""
    v = cfg.get(key)
    if v is None:
        return default
    if v not in allowed:
        raw = _json_encode(v).decode()
        quoted = '"' + raw.replace("\\", "\\\\").replace('"', '\\"') + '"'
        raise api_error("JSInvalidJSONErr", err=f"can not unmarshal {quoted}")
    return v  # type: ignore[no-any-return]


def _int(cfg: dict[str, Any], key: str, default: int) -> int:
    v = cfg.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise api_error("JSInvalidJSONErr", err=f"json: cannot unmarshal {type(v).__name__} into Go struct field "
                                                f"StreamConfig.{key} of type int64")
    return v


# newer nats-server stream features edged does not have: refused, rather than a stream without them
_NOT_SUPPORTED: tuple[tuple[str, str], ...] = ()  # (every stream feature up to API level 4 works)


def normalize_config(req: dict[str, Any], server_limits: dict[str, Any] | None = None) -> dict[str, Any]:
    """The config as nats-server would store and report it (defaults filled), or a JSApiError."""
    name = req.get("name")
    if not valid_asset_name(name):
        raise _invalid("stream name is required and can not contain '.', '*', '>', '\\', '/'")
    if len(name) > MAX_NAME_LEN:
        raise _invalid(f"stream name is too long, maximum allowed is {MAX_NAME_LEN}")
    desc = req.get("description") or ""
    if len(desc) > MAX_DESCRIPTION_LEN:
        raise _invalid(f"stream description is too long, maximum allowed is {MAX_DESCRIPTION_LEN}")
    retention = _enum(req, "retention", _RETENTION, "limits")
    discard = _enum(req, "discard", _DISCARD, "old")
    storage = _enum(req, "storage", _STORAGE, "file")
    compression = req.get("compression")
    if compression is None:
        compression = "none"
    elif compression not in ("none", "s2"):
        raise api_error("JSInvalidJSONErr", err="unknown compression algorithm")
    replicas = _int(req, "num_replicas", 1) or 1
    if replicas > 5:
        raise _invalid("maximum replicas is 5")
    if replicas < 0:
        raise api_error("JSReplicasCountCannotBeNegative")
    if replicas > 1:
        raise api_error("JSStreamReplicasNotSupportedErr")
    for key, what in _NOT_SUPPORTED:
        if req.get(key):
            raise _invalid(f"{what} ({key}) are not supported by edged")
    placement = {k: v for k, v in (req.get("placement") or {}).items() if v}
    if placement.get("preferred"):
        raise _invalid("preferred server not permitted in placement")

    def lim(key: str) -> int:
        v = _int(req, key, -1)
        return -1 if v == 0 or v < -1 else v

    max_age = _int(req, "max_age", 0)
    if max_age < 0:
        raise _invalid("max age can not be negative")
    if 0 < max_age < NS // 10:
        raise _invalid("max age needs to be >= 100ms")
    dup = _int(req, "duplicate_window", 0)
    if dup == 0 and not req.get("mirror") and not req.get("sources"):
        dup = min(DEFAULT_DUPLICATE_WINDOW, max_age) if max_age else DEFAULT_DUPLICATE_WINDOW
    if dup < 0:
        raise _invalid("duplicates window can not be negative")
    if max_age and dup > max_age:
        raise _invalid("duplicates window can not be larger then max age")
    if 0 < dup < NS // 10:
        raise _invalid("duplicates window needs to be >= 100ms")
    deny_purge = bool(req.get("deny_purge"))
    allow_rollup = bool(req.get("allow_rollup_hdrs"))
    if deny_purge and allow_rollup:
        raise _invalid("roll-ups require the purge permission")
    allow_rollup, deny_purge = level2_config_checks(req, retention, discard, storage, allow_rollup, deny_purge)
    max_per = lim("max_msgs_per_subject")
    dnps = bool(req.get("discard_new_per_subject"))
    if dnps:
        if discard != "new":
            raise _invalid("discard new per subject requires discard new policy to be set")
        if max_per <= 0:
            raise _invalid("discard new per subject requires max msgs per subject > 0")
    allow_ttl = bool(req.get("allow_msg_ttl"))
    sdm_ttl = _int(req, "subject_delete_marker_ttl", 0)
    if sdm_ttl > 0:
        # markers are stored with a TTL and roll up their subject: both are switched on (pedantic: refused)
        pedantic = bool(req.get("pedantic"))
        if sdm_ttl < NS:
            raise _invalid("subject delete marker TTL must be at least 1 second")
        if not allow_ttl:
            if pedantic:
                raise _invalid("subject delete marker cannot be set if message TTLs are disabled")
            allow_ttl = True
        if not allow_rollup:
            if pedantic:
                raise _invalid("subject delete marker cannot be set if roll-ups are disabled")
            allow_rollup, deny_purge = True, False
    elif sdm_ttl < 0:
        raise _invalid("subject delete marker TTL must not be negative")
    mirror, sources = _sync_config(req, name)
    subjects = req.get("subjects")
    if (subjects is None or subjects == []) and mirror is None and not sources:
        subjects = [name]
    elif subjects is None:
        subjects = []
    if not isinstance(subjects, list) or not all(isinstance(s, str) for s in subjects):
        raise api_error("JSInvalidJSONErr", err="json: cannot unmarshal subjects")
    no_ack = bool(req.get("no_ack"))
    seen: set[str] = set()
    # nats-server's checks, per subject and in its order (so the first fault reported is the same)
    for i, subj in enumerate(subjects):
        if not is_valid_subject(subj):
            raise _invalid("invalid subject")
        if subj in seen:
            raise _invalid("duplicate subjects detected")
        if subj == ">" and not no_ack:
            raise _invalid("capturing all subjects requires no-ack to be true")
        if not no_ack:
            for ns in ("$JS.>", "$JSC.>", "$NRG.>"):
                if subjects_overlap(subj, ns) and not subject_is_subset(subj, "$JS.EVENT.>"):
                    raise _invalid("subjects that overlap with jetstream api require no-ack to be true")
            if subjects_overlap(subj, "$SYS.>") and not subject_is_subset(subj, "$SYS.ACCOUNT.>"):
                raise _invalid("subjects that overlap with system api require no-ack to be true")
        for later in subjects[i + 1:]:
            if subjects_overlap(later, subj):
                raise _invalid(f'subject "{subj}" overlaps with "{later}"')
        seen.add(subj)
    first_seq = _int(req, "first_seq", 0)
    if first_seq < 0:
        raise _invalid("first sequence can not be negative")
    st = req.get("subject_transform")
    if st:
        src = st.get("src") or ""
        if src and not is_valid_subject(src):
            raise api_error("JSStreamTransformInvalidSource", err=f"invalid subject {src}")
        if not st.get("dest"):
            raise api_error("JSStreamTransformInvalidDestination", err="invalid subject")
    rp = req.get("republish")
    if rp:
        src = rp.get("src") or ">"
        dest = rp.get("dest") or ""
        if any(subjects_overlap(dest, subj) for subj in subjects):
            raise _invalid("stream configuration for republish destination forms a cycle")
        if not is_valid_subject(src) or not is_valid_subject(dest):
            raise _invalid(f"stream configuration for republish with transform from '{src}' to '{dest}' not valid")
    cfg: dict[str, Any] = {"name": name}
    if desc:
        cfg["description"] = desc
    if subjects:  # a mirror's and a sourcing stream's may be empty: then omitted, as by nats-server
        cfg["subjects"] = subjects
    cfg.update({
        "retention": retention, "max_consumers": lim("max_consumers"),
        "max_msgs": lim("max_msgs"), "max_bytes": lim("max_bytes"), "max_age": max_age,
        "max_msgs_per_subject": max_per, "max_msg_size": lim("max_msg_size"), "discard": discard,
        "storage": storage, "num_replicas": 1,
    })
    if dup:  # a mirror's or a source's stream has none unless set (nats-server leaves it 0, omitted)
        cfg["duplicate_window"] = dup
    cfg["compression"] = compression
    if mirror is not None:
        cfg["mirror"] = mirror
    if sources:
        cfg["sources"] = sources
    if first_seq:
        cfg["first_seq"] = first_seq
    if placement:
        cfg["placement"] = placement
    if st:
        cfg["subject_transform"] = {"src": st.get("src") or "", "dest": st.get("dest")}
    if rp:
        cfg["republish"] = {k: v for k, v in rp.items() if k in ("src", "dest", "headers_only") and v}
        cfg["republish"].setdefault("src", ">")
    cfg.update({
        "allow_direct": bool(req.get("allow_direct")), "mirror_direct": bool(req.get("mirror_direct")),
        "sealed": bool(req.get("sealed")), "deny_delete": bool(req.get("deny_delete")), "deny_purge": deny_purge,
        "allow_rollup_hdrs": allow_rollup,
    })
    if dnps:
        cfg["discard_new_per_subject"] = True
    if no_ack:
        cfg["no_ack"] = True
    if allow_ttl:
        cfg["allow_msg_ttl"] = True
    if sdm_ttl > 0:
        cfg["subject_delete_marker_ttl"] = sdm_ttl
    if req.get("allow_batched"):  # fast batch publishing (fastbatch.py)
        cfg["allow_batched"] = True
    if req.get("metadata"):
        md = req["metadata"]
        if not isinstance(md, dict):
            raise api_error("JSInvalidJSONErr", err="json: cannot unmarshal metadata")
        cfg["metadata"] = {str(k): str(v) for k, v in md.items()}
    level2_config_fields(req, cfg)
    cl = req.get("consumer_limits") or {}
    cfg["consumer_limits"] = {k: v for k, v in cl.items() if k in ("inactive_threshold", "max_ack_pending") and v}
    return cfg


def _sync_config(req: dict[str, Any], name: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The `mirror` and `sources` of a stream config, checked in nats-server's order (checkStreamCfg) and
    as it reports them (empty fields left out)."""
    mirror = req.get("mirror") or None
    sources = req.get("sources") or []
    if mirror is not None and not isinstance(mirror, dict) or not isinstance(sources, list):
        raise api_error("JSInvalidJSONErr", err="json: cannot unmarshal mirror or sources")
    prefixes: list[str] = []
    apis: list[str] = []
    out_mirror = None
    if mirror is not None:
        if _int(req, "first_seq", 0) > 0:
            raise api_error("JSMirrorWithFirstSeqErr")
        if req.get("subjects"):
            raise api_error("JSMirrorWithSubjectsErr")
        if sources:
            raise api_error("JSMirrorWithSourcesErr")
        if req.get("allow_batched"):
            raise api_error("JSMirrorWithBatchPublishErr")
        trs = mirror.get("subject_transforms") or []
        if mirror.get("consumer") and not _durable_ok(mirror):
            raise api_error("JSMirrorDurableConsumerCfgInvalid")
        if mirror.get("filter_subject") and trs:
            raise api_error("JSMirrorMultipleFiltersNotAllowed")
        if _int(req, "subject_delete_marker_ttl", 0) > 0:  # a marker would take a sequence the origin lacks
            raise _invalid("subject delete markers forbidden on mirrors")
        for i, tr in enumerate(trs):
            src = tr.get("src") or ""
            if src and not is_valid_subject(src):
                raise api_error("JSMirrorInvalidSubjectFilter", err=f"invalid subject {src}")
            dest = tr.get("dest") or ""
            if dest and not is_valid_subject(dest):
                raise api_error("JSMirrorInvalidTransformDestination", err="invalid subject")
            for j, other in enumerate(trs):
                if i != j and subjects_overlap(src or ">", other.get("src") or ">"):
                    raise api_error("JSMirrorOverlappingSubjectFilters")
        ext = mirror.get("external")
        if not ext:
            if not valid_asset_name(mirror.get("name")):
                raise api_error("JSMirrorInvalidStreamName")
            if mirror.get("name") == name:
                raise _invalid("detected cycle")
        else:
            prefixes.append(ext.get("deliver") or "")
            apis.append(ext.get("api") or "")
        out_mirror = source_dict(mirror)
    out_sources: list[dict[str, Any]] = []
    seen: set[str] = set()
    cnames: set[str] = set()
    for src_cfg in sources:
        if not isinstance(src_cfg, dict) or not valid_asset_name(src_cfg.get("name")):
            raise api_error("JSSourceInvalidStreamName")
        d = source_dict(src_cfg)
        iname = index_name(d)
        if iname in seen:
            raise api_error("JSSourceDuplicateDetected")
        seen.add(iname)
        trs = d.get("subject_transforms") or []
        if d.get("filter_subject") and trs:
            raise api_error("JSSourceMultipleFiltersNotAllowed")
        for tr in trs:
            if tr["src"] and not is_valid_subject(tr["src"]):
                raise api_error("JSSourceInvalidSubjectFilter", err=f"invalid subject {tr['src']}")
            if tr["dest"] and not is_valid_subject(tr["dest"]):
                raise api_error("JSSourceInvalidTransformDestination", err="invalid subject")
        for i, tr in enumerate(trs):
            for j, other in enumerate(trs):
                if i != j and subject_is_subset(tr["src"] or ">", other["src"] or ">"):
                    raise api_error("JSSourceOverlappingSubjectFilters")
        if d.get("consumer"):
            if not _durable_ok(src_cfg):
                raise api_error("JSSourceDurableConsumerCfgInvalid")
            # one origin consumer for one source only (nats-server's composeCName)
            cname = f"{iname.split(' ')[0].split(':C=')[0]} {d['consumer']['name']}"
            if cname in cnames:
                raise api_error("JSSourceDurableConsumerDuplicateDetected")
            cnames.add(cname)
        ext = d.get("external")
        if ext:
            prefixes.append(ext["deliver"])
            apis.append(ext["api"])
        elif d["name"] == name:
            raise _invalid("detected cycle")
        out_sources.append(d)
    for pfx in prefixes:
        if pfx and (not is_valid_literal_subject(pfx)):
            raise api_error("JSStreamInvalidExternalDeliverySubjErrF", prefix=pfx)
    for api in apis:
        if api and not is_valid_literal_subject(api):
            raise _invalid(f"stream external api prefix {go_quote(api)} must be a valid subject without wildcards")
        if api and subjects_overlap(api, "$JS.API"):
            raise api_error("JSStreamExternalApiOverlapErrF", prefix=api, subject="$JS.API")
    return out_mirror, out_sources


def _durable_ok(src: dict[str, Any]) -> bool:
    """A mirror's or source's own durable on the origin (nats-server 2.14): a valid consumer name, a literal
    deliver subject, and no start position or filter of the source's own (the consumer has them)."""
    c = src.get("consumer") or {}
    ds = c.get("deliver_subject") or ""
    return (valid_asset_name(c.get("name")) and is_valid_literal_subject(ds) and not src.get("opt_start_seq")
            and not src.get("opt_start_time") and not src.get("filter_subject"))


def source_dict(src: dict[str, Any]) -> dict[str, Any]:
    """A StreamSource as nats-server reports it: name, opt_start_seq, opt_start_time, filter_subject,
    subject_transforms, external {api, deliver}; empty ones left out."""
    d: dict[str, Any] = {"name": src.get("name")}
    if src.get("opt_start_seq"):
        d["opt_start_seq"] = _int(src, "opt_start_seq", 0)
    if src.get("opt_start_time"):
        d["opt_start_time"] = src["opt_start_time"]
    if src.get("filter_subject"):
        d["filter_subject"] = src["filter_subject"]
    if src.get("subject_transforms"):
        d["subject_transforms"] = [{"src": t.get("src") or "", "dest": t.get("dest") or ""}
                                   for t in src["subject_transforms"]]
    ext = src.get("external")
    if ext:
        api = (ext.get("api") or "").replace("..", ".")
        d["external"] = {"api": api, "deliver": ext.get("deliver") or ""}
    c = src.get("consumer")
    if c:
        d["consumer"] = {k: c[k] for k in ("name", "deliver_subject") if c.get(k)}
    return d


def index_name(src: dict[str, Any]) -> str:
    """nats-server's composeIName: `<stream>[:<hash of the api prefix>] <filters> <destinations>`, the key
    of a source in its `Nats-Stream-Source` header."""
    iname = src["name"]
    ext = src.get("external")
    if ext:
        iname += ":" + go_hash(ext["api"])
    c = src.get("consumer")
    if c:
        iname += ":C=" + go_hash(c.get("name") or "")
    trs = src.get("subject_transforms")
    if trs:
        filt = "\f".join(t["src"] or ">" for t in trs)
        dest = "\f".join(t["dest"] or ">" for t in trs)
    else:
        filt, dest = src.get("filter_subject") or ">", ">"
    return f"{iname} {filt} {dest}"


_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def go_hash(text: str) -> str:
    """nats-server's getHash: the first 8 bytes of SHA-256, each as a base62 digit."""
    digest = hashlib.sha256(text.encode()).digest()
    return "".join(_B62[b % 62] for b in digest[:8])


def check_update(old: dict[str, Any], new: dict[str, Any]) -> None:
    """nats-server's rules for what a STREAM.UPDATE may change."""
    if new.get("mirror") is not None and new.get("mirror") != old.get("mirror"):
        raise api_error("JSStreamMirrorNotUpdatableErr")
    if new["name"] != old["name"]:
        raise _invalid("stream configuration name must match original")
    if new["storage"] != old["storage"]:
        raise _invalid("stream configuration update can not change storage type")
    if new["retention"] != old["retention"] and "workqueue" in (new["retention"], old["retention"]):
        raise _invalid("stream configuration update can not change retention policy to/from workqueue")
    if old.get("sealed") and not new.get("sealed"):
        raise _invalid("stream configuration update can not unseal a sealed stream")
    if old.get("deny_delete") and not new.get("deny_delete"):
        raise _invalid("stream configuration update can not cancel deny message deletes")
    if old.get("deny_purge") and not new.get("deny_purge"):
        raise _invalid("stream configuration update can not cancel deny purge")
    if old.get("allow_msg_ttl") and not new.get("allow_msg_ttl"):
        raise _invalid("message TTL status can not be disabled")
    level2_update_checks(old, new)


def _check_schedule_headers(subject: str, hdr: bytes) -> None:
    """Message schedules (edged has none) as nats-server refuses them on a stream without them."""
    if get_header(hdr, "Nats-Schedule"):
        raise api_error("JSMessageSchedulesDisabledErr")
    nxt = get_header(hdr, "Nats-Schedule-Next")
    scheduler = get_header(hdr, "Nats-Scheduler")
    if nxt:
        if nxt != "purge" or not scheduler or scheduler == subject or not is_valid_literal_subject(scheduler):
            raise api_error("JSMessageSchedulesSchedulerInvalidErr")
        raise api_error("JSMessageSchedulesDisabledErr")
    if scheduler:
        raise api_error("JSMessageSchedulesSchedulerInvalidErr")
    if get_header(hdr, "Nats-Stream-Source"):
        raise api_error("JSMessageSourceHdrNotAllowedErr")


def _go_int64(text: str) -> int:
    """nats-server's parseInt64: decimal digits only (else -1), wrapping around as Go's int64 does."""
    if not text or not (text.isascii() and text.isdigit()):
        return -1
    n = 0
    for c in text.encode():
        n = (n * 10 + c - 48) & 0xFFFFFFFFFFFFFFFF
    return n - (1 << 64) if n >= 1 << 63 else n


# a TTL is kept in ns beside a ns timestamp in one int64: longer ones (over 146 years) are clamped
_TTL_MAX_S = (1 << 62) // NS


def parse_ttl(value: str) -> int:
    """A Nats-TTL header as nats-server reads it (parseMessageTTL): "never" = -1; a Go duration of at
    least a second, whole seconds kept; else a decimal count of seconds (0 = no TTL). ns; ValueError
    for what nats-server refuses."""
    if value.lower() == "never":
        return -1
    try:
        secs_f = parse_duration(value)
        if abs(secs_f) * NS >= 1 << 63:
            raise ValueError("overflow")  # Go's ParseDuration refuses it
    except ValueError:
        secs = _go_int64(value)
        if secs < 0:
            raise ValueError("ttl") from None
        return min(secs, _TTL_MAX_S) * NS
    if secs_f < 1:
        raise ValueError("ttl")
    return min(int(secs_f), _TTL_MAX_S) * NS


class Stream:
    """One stream of one account. Consumers (another module) attach through `consumers`."""

    def __init__(self, js: JetStream, jsa: JSAccount, config: dict[str, Any], store: Any, created: int) -> None:
        self.js = js
        self.space = js.space
        self.pubacks = js.pubacks
        self.jsa = jsa
        self.account = jsa.account
        self.name: str = config["name"]
        self.config = config
        self.store = store
        self.created = created
        self.consumers: dict[str, Any] = {}
        self.subs: list[Any] = []
        self.dedupe: dict[str, tuple[int, int]] = {}
        # subject -> (last seq, size) when max_msgs_per_subject is 1, and the store epoch it is from
        self._last_of: dict[str, tuple[int, int]] = {}
        self._last_of_epoch = -1
        # the store epoch the limits were last applied in: see lifecycle.tick
        self.limits_epoch = store.epoch
        self.last_msg_id = ""
        self.closed = False
        self.sync: Any = None  # mirror.StreamSync of a mirror or a stream with sources
        self.atomic: AtomicBatches | None = None  # open atomic batches, once one was published
        self.committing_batch = False  # storing a checked batch: its messages are not staged again
        self.schedules_check: Any = None  # a stream with message schedules: their header checks
        self.scheduler: Scheduler | None = None
        self.totals = LastTotals()  # a counter stream's last message per subject
        self.parse_ttl = parse_ttl
        self.fast: FastBatches | None = None  # open fast batches (`allow_batched`)
        self._apply_config()

    # ------------------------------------------------------------------ config

    def _apply_config(self) -> None:
        c = self.config
        self.retention = c["retention"]
        # its acked messages are removed soon after they are stored: the store remembers them for that
        self.store.track_recent = self.retention != "limits"
        self.file = c["storage"] == "file"
        self.max_msgs = c["max_msgs"]
        self.max_bytes = c["max_bytes"]
        self.max_age = c["max_age"]
        self.max_per = c["max_msgs_per_subject"]
        self.max_msg_size = c["max_msg_size"]
        self.discard_new = c["discard"] == "new"
        self.dnps = bool(c.get("discard_new_per_subject"))
        self.dup_window = c.get("duplicate_window", 0)
        self.sealed = bool(c.get("sealed"))
        self.no_ack = bool(c.get("no_ack"))
        self.allow_ttl = bool(c.get("allow_msg_ttl"))
        self.sdm_ttl = c.get("subject_delete_marker_ttl", 0) // NS  # whole seconds, as nats-server uses it
        self.allow_rollup = bool(c.get("allow_rollup_hdrs"))
        self.counter = bool(c.get("allow_msg_counter"))
        self.async_persist = c.get("persist_mode") == "async"
        if c.get("allow_msg_schedules") and self.scheduler is None:
            self.scheduler = Scheduler(self)
            self.schedules_check = self.scheduler.check
            self.scheduler.restore()
        st = c.get("subject_transform")
        self.transform = SubjectTransform(st.get("src") or ">", st["dest"]) if st else None
        rp = c.get("republish")
        self.republish = (rp.get("src") or ">", rp["dest"], bool(rp.get("headers_only"))) if rp else None

    def subscribe(self) -> None:
        ic = self.jsa.internal
        for s in self.config.get("subjects", []):
            self.subs.append(ic.subscribe(s, self._on_msg, replies=self._on_msgs))

    def unsubscribe(self) -> None:
        ic = self.jsa.internal
        for sub in self.subs:
            ic.unsubscribe(sub)
        self.subs.clear()

    # ------------------------------------------------------------------ publish path

    def _on_msg(self, sub: Any, subj: str, rep: str, hdr: bytes | None, payload: bytes) -> None:
        if self.closed:
            return
        try:
            self.process(subj, rep, hdr, payload)
        except JSApiError as e:
            self._refused(rep, e)

    def _on_msgs(self, sub: Any, subj: str, replies: list[bytes], payloads: list[bytes]) -> None:
        """Header-less messages to one subject, each with its own reply: `_on_msg` for each in turn."""
        process = self.process
        for i, payload in enumerate(payloads):
            if self.closed:
                return
            rep = replies[i].decode("utf-8", "surrogateescape")
            try:
                process(subj, rep, None, payload)
            except JSApiError as e:
                self._refused(rep, e)

    def _refused(self, rep: str, e: JSApiError) -> None:
        if rep and not self.no_ack:
            self.pubacks.reply_in_order(self.jsa, rep, {"error": e.to_dict(), "stream": self.name, "seq": 0},
                                   self.store.durable())

    def _discard_new(self, subject: str, size: int, rollup: bool) -> None:
        """`discard: new` as nats-server's store applies it: a subject at its per-subject limit refuses
        only with discard_new_per_subject (a rollup passes); otherwise the new message will replace that
        subject's oldest, so the stream's message limit does not refuse it, and its byte limit only if the
        message replaced is the smaller."""
        store = self.store
        at_subject_limit = self.max_per > 0 and store.subjects.get(subject, 0) >= self.max_per
        if at_subject_limit and self.dnps and not rollup:
            raise api_error("JSStreamStoreFailedF", err="maximum messages per subject exceeded")
        if self.max_msgs > 0 and store.msgs >= self.max_msgs and not at_subject_limit:
            raise api_error("JSStreamStoreFailedF", err="maximum messages exceeded")
        if self.max_bytes > 0 and store.bytes + size > self.max_bytes:
            oldest = store.load_next(store.first_seq, subject) if at_subject_limit else None
            if oldest is None or store.msg_size(oldest.subject, oldest.hdr, oldest.data) < size:
                raise api_error("JSStreamStoreFailedF", err="maximum bytes exceeded")

    def _check_room(self, size: int) -> None:
        """The disk (a full one refuses file streams) and the account's JetStream limits."""
        if self.space.store_full and self.file:
            raise api_error("JSInsufficientResourcesErr")
        self.jsa.check_store(self, size)

    def process(self, subject: str, reply: str, hdr: bytes | None, payload: bytes,
                internal: bool = False) -> tuple[int, Any] | None:
        """Check and store one published message, in nats-server's order: the subject transform, sealed,
        sizes, the headers' expectations, limits, then the store. Returns (sequence, commit future), or
        None for a duplicate or a fast batch's message (handled by fastbatch.py). `internal`: the stream's
        own (a delete marker), already on a stored subject."""
        if reply.endswith(FAST_SUFFIX):
            ref = parse_reply(reply)
            if ref is not None:
                if self.fast is None:
                    self.fast = FastBatches(self)
                self.fast.publish(ref, subject, reply, hdr, payload)
                return None
        if self.transform is not None and not internal:
            subject = self.transform(subject)
        if self.sealed:
            raise api_error("JSStreamSealedErr")
        hdr = hdr or b""
        # the sizes before the headers' checks (nats-server 2.15 answers an oversized message so whatever
        # its headers expect)
        if len(hdr) > MAX_HDR:
            raise api_error("JSStreamHeaderExceedsMaximumErr")
        if self.max_msg_size >= 0 and len(hdr) + len(payload) > self.max_msg_size:
            raise api_error("JSStreamMessageExceedsMaximumErr")
        store = self.store
        ttl = 0
        ttl_bad = False
        msg_id = ""
        rollup = ""
        # every header the checks below look up is a `Nats-` one: a message without any (an MQTT
        # message's `Nmqtt-` ones, say) skips a dozen lookups
        nats_hdrs = bool(hdr) and b"\r\nNats-" in hdr
        batch_id = get_header(hdr, "Nats-Batch-Id") if nats_hdrs and not self.committing_batch else None
        if batch_id:
            if self.atomic is None:
                self.atomic = AtomicBatches(self, parse_ttl)
            self.atomic.publish(batch_id, subject, reply, hdr, payload)
            return
        if nats_hdrs:
            incr = get_header(hdr, "Nats-Incr")
            if incr:
                check_incr(incr, self.counter, hdr, payload)
            exp = get_header(hdr, "Nats-Expected-Stream")
            if exp and exp != self.name:
                raise api_error("JSStreamNotMatchErr")
            # an empty header counts as absent, as in nats-server; a TTL that does not parse is refused
            # only after the other checks
            t = get_header(hdr, "Nats-TTL")
            if t:
                try:
                    ttl = parse_ttl(t)
                except ValueError:
                    ttl_bad = True
                if ttl and not self.allow_ttl:
                    raise api_error("JSMessageTTLDisabledErr")
            elss = get_header(hdr, "Nats-Expected-Last-Subject-Sequence")
            elss_subject = get_header(hdr, "Nats-Expected-Last-Subject-Sequence-Subject")
            if elss:
                want = _seq_header(elss)
                last = store.load_last(elss_subject or subject)
                have = last.seq if last is not None else 0
                if have != want:
                    raise api_error("JSStreamWrongLastSequenceErrF", seq=have)
            elif elss_subject:
                raise api_error("JSStreamExpectedLastSeqPerSubjectInvalid")
            els = get_header(hdr, "Nats-Expected-Last-Sequence")
            if els and _seq_header(els) != store.last_seq:
                raise api_error("JSStreamWrongLastSequenceErrF", seq=store.last_seq)
            if self.scheduler is None:
                _check_schedule_headers(subject, hdr)
            elif not self.scheduler.firing:
                hdr = self.scheduler.check(subject, hdr)
            msg_id = get_header(hdr, "Nats-Msg-Id") or ""
            if msg_id:
                prev = self.dedupe.get(msg_id)
                if prev is not None and time.time_ns() - prev[1] < self.dup_window:
                    if reply and not self.no_ack:
                        self.pubacks.reply_in_order(self.jsa, reply, self.pubacks.puback(self.name, prev[0], True),
                                               store.durable())
                    return
            elmi = get_header(hdr, "Nats-Expected-Last-Msg-Id")
            if elmi and elmi != self.last_msg_id:
                raise api_error("JSStreamWrongLastMsgIDErrF", id=self.last_msg_id)
            rollup = (get_header(hdr, "Nats-Rollup") or "").lower()
            if rollup:
                if not self.allow_rollup or self.config.get("deny_purge"):
                    raise api_error("JSStreamRollupFailedF", err="rollup not permitted")
                if rollup not in ("sub", "all"):
                    raise api_error("JSStreamRollupFailedF", err=f"rollup value invalid: {go_quote(rollup)}")
        counter_val = None
        if self.counter:
            hdr, payload, counter_val = apply_incr(self.totals.last(store, subject), subject, hdr, payload)
            if self.max_msg_size >= 0 and len(hdr) + len(payload) > self.max_msg_size:
                raise api_error("JSStreamMessageExceedsMaximumErr")  # the new total does not fit
        size = store.msg_size(subject, hdr, payload)
        self._check_room(size)
        if ttl_bad:
            raise api_error("JSMessageTTLInvalidErr")
        if ttl > 0 and self.sdm_ttl and self.max_per != 1 and ttl < self.sdm_ttl * NS:
            # a message may not expire before the marker of an earlier expiry of its subject would,
            # or that marker would be missed (nats-server raises it and rewrites the header)
            ttl = self.sdm_ttl * NS
            hdr = remove_headers(hdr, {"Nats-TTL"}) or make_headers()
            hdr = hdr[:-2] + b"Nats-TTL: %d\r\n\r\n" % self.sdm_ttl
            size = store.msg_size(subject, hdr, payload)
        if self.discard_new:
            self._discard_new(subject, size, bool(rollup))
        try:
            seq, ts, committed = store.append(subject, hdr, payload, 0, ttl if ttl > 0 else 0, size)
        except StoreFullError as e:
            raise api_error("JSStreamStoreFailedF", err=str(e) or "insufficient storage") from None
        except StoreError as e:
            raise api_error("JSStreamStoreFailedF", err=str(e)) from None
        if counter_val is not None:
            self.totals.stored(subject, seq)
        if msg_id:
            self.dedupe[msg_id] = (seq, ts)
        self.last_msg_id = msg_id  # the id of the last stored message: "" when it had none, as nats-server
        removed = gone = 0
        trimmed: list[Any] = []  # per-subject trims: from anywhere in the stream
        # the limits first, then a rollup's purge, as nats-server (its store enforces them on the write)
        if self.max_per == 1:
            # a KV bucket's common case: remember each subject's last sequence, so replacing a value
            # deletes the previous one by sequence instead of searching the subject's messages
            # and its stored size: with one message per subject, two now means the other one is that
            # previous message, still there (any removal would have left one), so nothing is read back
            last_of = self._last_of
            if len(last_of) > 2 * len(store.subjects) + 1024 or self._last_of_epoch != store.epoch:
                # subjects since removed, or state reloaded after a failed commit (whose sequences are
                # used again): forget them (it is only a shortcut)
                last_of.clear()
                self._last_of_epoch = store.epoch
            prev = last_of.get(subject)
            last_of[subject] = (seq, size)
            n = store.subjects.get(subject, 0)
            if n == 2 and prev is not None:
                store.delete_known(prev[0], subject, prev[1])
                removed += 1
                gone = prev[0]
            elif n > 1:
                removed += store.trim_subject(subject, 1)
                trimmed = store.last_removed
        elif self.max_per > 0:
            removed, trimmed = self._trim_subject(subject)
        if self.max_msgs > 0 or self.max_bytes > 0:
            removed += self._trim_totals()
        if removed:
            self.notify_removed(seq=gone, seqs=[m.seq for m in trimmed])
        if rollup:  # the consumers are told even when nothing went, as nats-server tells them
            target = subject if rollup == "sub" else None
            self.purged(target, self.purge_store(target, keep=1)[1])
        wanted = False  # by a consumer's filter (interest retention keeps only such messages)
        if self.consumers:
            # the message as a consumer's read-ahead holds it: one caught up takes it from here, not read back
            row = None if removed or rollup else (seq, subject, hdr, payload, ts)
            for c in self.consumers.values():
                if c.on_msg(seq, subject, row):
                    wanted = True
        if self.scheduler is not None:
            self.scheduler.stored(seq, subject, hdr, ts)
        if self.republish is not None:
            self._republish(subject, seq, ts, hdr, payload)
        if self.retention == "interest" and not wanted:
            store.delete(seq)  # no one is interested: nats-server keeps the sequence, not the message
        if reply and not self.no_ack:
            if self.async_persist:  # persist_mode async: acknowledged before the commit (README)
                committed = None
            if counter_val is not None:  # the PubAck carries the counter's new total
                self._ack_body(reply, committed, self.pubacks.puback_extra(self.name, seq, {"val": counter_val}))
            elif hasattr(committed, "add_done_callback"):
                self.pubacks.ack_after(committed, self.jsa, reply, self.name, seq)
            else:  # a memory stream: stored already
                self.pubacks.send_ack(self.jsa, reply, self.name, seq)
                self.pubacks.spin()
        return seq, committed

    def _ack_body(self, reply: str, committed: Any, body: bytes) -> None:
        """A PubAck other than the plain one (a counter's, a batch's), once `committed` is."""
        if hasattr(committed, "add_done_callback"):
            self.pubacks.ack_after(committed, self.jsa, reply, None, body)
        else:
            self.jsa.internal.publish(reply, body)

    def _trim_subject(self, subject: str) -> tuple[int, list[Any]]:
        """max_msgs_per_subject after a write: (how many went, which)."""
        store = self.store
        if self.max_per > 0 and store.subjects.get(subject, 0) > self.max_per:
            return store.trim_subject(subject, self.max_per), store.last_removed
        return 0, []

    def _trim_totals(self) -> int:
        """max_msgs and max_bytes after a write (with discard old): how many went."""
        if self.discard_new:
            return 0
        store = self.store
        removed = 0
        if self.max_msgs > 0 and store.msgs > self.max_msgs:
            removed += store.trim_msgs(self.max_msgs)
        if self.max_bytes > 0 and store.bytes > self.max_bytes:
            removed += store.trim_bytes(self.max_bytes)
        return removed

    def store_synced(self, subject: str, hdr: bytes, payload: bytes, ts: int, seq: int = 0, msg_id: str = "") -> None:
        """A message its mirror or source brought (mirror.py): a mirror's at the origin's sequence `seq`
        and time `ts`, the sequences between left as deleted ones; a source's under the next sequence,
        skipped when its `msg_id` was seen within the duplicate window. This stream's limits apply, no
        PubAck goes out. A mirror's sequence at or below the last one raises ValueError."""
        if self.closed:
            raise StoreError(f"stream {self.name} is closed")
        store = self.store
        if msg_id and self.dup_window:
            prev = self.dedupe.get(msg_id)
            if prev is not None and time.time_ns() - prev[1] < self.dup_window:
                return
        if seq and seq <= store.last_seq:
            raise ValueError(f"sequence {seq} is not past the last one ({store.last_seq})")
        if self.counter:
            if b"Nats-Incr:" in hdr:  # a counter's total from a source: what changed is added
                hdr, payload, _ = apply_incr(self.totals.last(store, subject), subject, hdr, payload)
            self.totals.forget(subject)
        size = store.msg_size(subject, hdr, payload)
        self._check_room(size)
        if self.discard_new:
            self._discard_new(subject, size, False)
        self._append_synced(subject, hdr, payload, ts, seq, msg_id, size)

    def store_synced_run(self, rows: list[tuple[str, bytes, bytes, int, int, str]]) -> tuple[int, Exception | None]:
        """`store_synced` of each row (subject, hdr, payload, ts, seq, msg_id) in turn, stopping at the first
        that fails: (how many were taken, that error or None). A mirror's backlog arrives in runs of hundreds;
        the disk and account limits are checked once for a run that fits whole, which is what checking
        each message would find, and message by message otherwise."""
        store = self.store
        msg_size = store.msg_size
        sizes = [msg_size(r[0], r[1], r[2]) for r in rows]
        whole = not self.closed and not self.discard_new
        if whole:
            try:
                self._check_room(sum(sizes))
            except JSApiError:
                whole = False
        if not whole:
            for i, r in enumerate(rows):
                try:
                    self.store_synced(r[0], r[1], r[2], r[3], r[4], r[5])
                except (JSApiError, StoreError, ValueError) as e:
                    return i, e
            return len(rows), None
        dedupe = self.dedupe if self.dup_window else None
        # what `_append_synced` does after the append, for the common shape of stream: only the totals
        # limits and the consumers' wake-up (no per-subject limit, rollup, republish or interest retention)
        plain = self.max_per <= 0 and not self.allow_rollup and self.republish is None and self.retention != "interest"
        limits = self.max_msgs > 0 or self.max_bytes > 0
        consumers = list(self.consumers.values())
        if plain and not limits and dedupe is None:
            return self._store_run_plain(rows, sizes, consumers)
        slow = self._append_synced
        append = store.append
        for i, (subject, hdr, payload, ts, seq, msg_id) in enumerate(rows):
            if msg_id and dedupe is not None:
                prev = dedupe.get(msg_id)
                if prev is not None and time.time_ns() - prev[1] < self.dup_window:
                    continue
            if seq:
                last = store.last_seq
                if seq <= last:
                    return i, ValueError(f"sequence {seq} is not past the last one ({last})")
            if not plain:
                try:
                    slow(subject, hdr, payload, ts, seq, msg_id, sizes[i])
                except (JSApiError, StoreError) as e:
                    return i, e
                continue
            try:
                if seq and seq > last + 1:
                    store.skip_to(seq)
                seq, ts, _ = append(subject, hdr, payload, ts, 0, sizes[i])
            except StoreFullError as e:
                return i, api_error("JSStreamStoreFailedF", err=str(e) or "insufficient storage")
            except StoreError as e:
                return i, e
            if msg_id and dedupe is not None:
                dedupe[msg_id] = (seq, ts)
            if limits and self._trim_totals():
                self.notify_removed()
            for c in consumers:
                c.on_msg(seq, subject)
        return len(rows), None

    def _store_run_plain(self, rows: list[tuple[str, bytes, bytes, int, int, str]], sizes: list[int],
                         consumers: list[Any]) -> tuple[int, Exception | None]:
        """`store_synced_run` for a stream with nothing to apply after a write but its consumers' wake-up:
        each stretch of consecutive sequences is one `append_run` of the store."""
        store = self.store
        stretch: list[tuple[str, bytes, bytes, int, int]] = []
        start = 0  # the index of the stretch's first row
        last = store.last_seq
        for i, (subject, hdr, payload, ts, seq, _) in enumerate(rows):
            if seq:
                if seq <= last:
                    err = self._append_stretch(stretch, consumers)
                    return (i, ValueError(f"sequence {seq} is not past the last one ({last})")) if err is None \
                        else (start, err)
                if seq > last + 1:
                    err = self._append_stretch(stretch, consumers)
                    if err is not None:
                        return start, err
                    stretch = []
                    start = i
                    try:
                        store.skip_to(seq)  # the origin's gap (deleted or expired there) kept as deleted
                    except StoreError as e:
                        return i, e
                last = seq
            else:
                last += 1
            stretch.append((subject, hdr, payload, ts, sizes[i]))
        err = self._append_stretch(stretch, consumers)
        return (len(rows), None) if err is None else (start, err)

    def _append_stretch(self, stretch: list[tuple[str, bytes, bytes, int, int]], consumers: list[Any]) -> Exception | None:
        if not stretch:
            return None
        subjects, hdrs, payloads, tss, sizes = zip(*stretch, strict=True)
        try:
            self.store.append_run(subjects, hdrs, payloads, tss, sizes)
        except StoreError as e:
            return e
        self._woken(subjects, consumers)
        return None

    def _woken(self, subjects: Sequence[str], consumers: list[Any]) -> None:
        """The consumers told of a run just appended (its last message is the stream's last)."""
        if consumers:
            seq = self.store.last_seq - len(subjects)
            for subject in subjects:
                seq += 1
                for c in consumers:
                    c.on_msg(seq, subject)

    def store_synced_whole(self, subjects: list[str], hdrs: list[bytes], payloads: list[bytes], tss: list[int],
                           seq: int) -> bool:
        """A run its mirror or source brought, as columns, stored with one `append_run` when this stream applies
        nothing per message (no limits, discard new, per-subject limit, rollup, republish, interest retention
        or counter) and has room for all of it; the messages carry no `Nats-Msg-Id`. `seq`: the first one's
        sequence (a mirror's, the rest following on; a gap before it kept as deleted) or 0 (a source's: the next
        ones). False, with nothing stored: take it row by row (`store_synced_run`). Raises StoreError when the
        store refuses it, with nothing stored."""
        store = self.store
        if self.closed or self.discard_new or self.counter or self.max_per > 0 or self.allow_rollup \
                or self.republish is not None or self.retention == "interest" or self.max_msgs > 0 \
                or self.max_bytes > 0 or (seq and seq <= store.last_seq):
            return False
        msg_size = store.msg_size
        if hdrs.count(b"") == len(hdrs):
            # a size is the subject's share plus the payload's length (a few subjects in a backlog)
            base = {s: msg_size(s, b"", b"") for s in dict.fromkeys(subjects)}
            sizes = list(map(operator.add, map(base.__getitem__, subjects), map(len, payloads)))
        else:
            sizes = list(map(msg_size, subjects, hdrs, payloads))
        try:
            self._check_room(sum(sizes))
        except JSApiError:
            return False  # message by message finds which one does not fit
        if seq > store.last_seq + 1:
            store.skip_to(seq)  # the origin's gap (deleted or expired there) kept as deleted
        store.append_run(subjects, hdrs, payloads, tss, sizes)
        self._woken(subjects, list(self.consumers.values()))
        return True

    def _append_synced(self, subject: str, hdr: bytes, payload: bytes, ts: int, seq: int, msg_id: str,
                       size: int) -> None:
        """The checked message of `store_synced` into the store, with this stream's limits after it."""
        store = self.store
        if seq > store.last_seq + 1:
            store.skip_to(seq)
        ttl = 0
        if self.allow_ttl and hdr and b"Nats-TTL" in hdr:
            # the origin's per-message TTL (a delete marker's too) applies here when this stream has TTLs
            try:
                ttl = max(parse_ttl(get_header(hdr, "Nats-TTL") or "0"), 0)
            except ValueError:
                ttl = 0
        try:
            seq, ts, _ = store.append(subject, hdr, payload, ts, ttl, size)
        except StoreFullError as e:
            raise api_error("JSStreamStoreFailedF", err=str(e) or "insufficient storage") from None
        if msg_id and self.dup_window:
            self.dedupe[msg_id] = (seq, ts)
        removed = 0
        trimmed: list[Any] = []
        if self.max_per > 0:
            removed, trimmed = self._trim_subject(subject)
        if self.max_msgs > 0 or self.max_bytes > 0:
            removed += self._trim_totals()
        if removed:
            self.notify_removed(seqs=[m.seq for m in trimmed])
        if b"Nats-Rollup" in hdr and self.allow_rollup and not self.config.get("deny_purge"):
            # the origin's rollup (a KV purge) rolls up here too; without the permission it is only kept
            rollup = (get_header(hdr, "Nats-Rollup") or "").lower()
            if rollup in ("sub", "all"):
                target = subject if rollup == "sub" else None
                self.purged(target, self.purge_store(target, keep=1)[1])
        for c in self.consumers.values():
            c.on_msg(seq, subject)
        if self.republish is not None:
            self._republish(subject, seq, ts, hdr, payload)
        if self.retention == "interest" and not any(c._matches(subject) for c in self.consumers.values()):
            store.delete(seq)

    def _republish(self, subject: str, seq: int, ts: int, hdr: bytes, payload: bytes) -> None:
        src, dest, headers_only = self.republish  # type: ignore[misc]
        if not subject_matches(src, subject):
            return
        target = transform_subject((src, dest), subject)
        last = self.store.load_prev(seq - 1, subject) if seq > 1 else None
        extra = (f"Nats-Stream: {self.name}\r\nNats-Subject: {subject}\r\nNats-Sequence: {seq}\r\n"
                 f"Nats-Time-Stamp: {rfc3339ns(ts)}\r\nNats-Last-Sequence: {last.seq if last else 0}\r\n").encode()
        if headers_only:
            extra += f"Nats-Msg-Size: {len(payload)}\r\n".encode()
            payload = b""
        base = hdr[:-2] if hdr.endswith(b"\r\n\r\n") else b"NATS/1.0\r\n"
        self.jsa.internal.publish(target, payload, "", base + extra + b"\r\n")

    # ------------------------------------------------------------------ consumers

    def add_consumer(self, c: Any) -> None:
        self.consumers[c.name] = c
        if c.push:
            self.jsa.push_consumers += 1

    def remove_consumer(self, name: str) -> None:
        c = self.consumers.pop(name, None)
        if c is not None and c.push:
            self.jsa.push_consumers -= 1
        if c is not None and c.persist:
            self.store.delete_consumer(name)
        if c is not None and self.retention == "interest":
            self._drop_unwanted(c)

    def _drop_unwanted(self, gone: Any) -> None:
        """Interest retention, a consumer removed: what it had not acked (delivered or not) and no other
        consumer still wants goes, as nats-server scans from the removed consumer's ack floor."""
        st = self.store
        removed = False
        for m in st.metas(getattr(gone, "afloor_s", 0) + 1, st.last_seq, getattr(gone, "flt", None)):
            if not any(c._matches(m.subject) and not c.is_acked(m.seq) for c in self.consumers.values()):
                removed = st.delete(m.seq) or removed
        if removed:
            self.notify_removed()

    def drop_acked(self, upto: int) -> None:
        """Interest retention, a consumer reset past messages: those up to `upto` that every interested
        consumer has now acked go (nats-server's checkStateForInterestStream after a reset)."""
        st = self.store
        removed = False
        for m in st.metas(st.state().first_seq, min(upto, st.last_seq), None):
            if not any(c._matches(m.subject) and not c.is_acked(m.seq) for c in self.consumers.values()):
                removed = st.delete(m.seq) or removed
        if removed:
            self.notify_removed()

    def seq_from_time(self, ns: int) -> int:
        """The first sequence stored at or after `ns` (past the last one: last + 1), nats-server's
        GetSeqFromTime."""
        st = self.store
        m = st.load_next(st.state().first_seq, None)
        while m is not None and m.ts < ns:
            m = st.load_next(m.seq + 1, None)
        return m.seq if m is not None else st.last_seq + 1

    def ack_msg(self, seq: int) -> None:
        """Interest / workqueue retention: drop a message once (every / any) interested consumer acked it."""
        if self.retention != "limits":
            self.ack_msgs([seq])

    def ack_msgs(self, seqs: list[int], by: Any = None, later: bool = False) -> None:
        """`ack_msg` for a run of acks (of consumer `by`, which has acked them all). A message's subject
        is read only when another consumer has not acked it, and the removals are one store call. A
        message removed here was acked by every consumer that takes it, so none holds it pending or
        read ahead: they are not told (notify_removed), which keeps their read-ahead. `later`: acks
        nobody waits on (plain ones): the removals ride with the store's next commit."""
        if self.retention == "limits" or not seqs:
            return
        st = self.store
        if self.retention == "interest":
            others = [c for c in self.consumers.values() if c is not by]
            if others:
                keep = []
                for seq in seqs:
                    subject = None
                    for c in others:
                        if c.is_acked(seq):
                            continue
                        if subject is None:
                            m = st.load(seq)
                            if m is None:
                                break
                            subject = m.subject
                        if c._matches(subject):
                            break
                    else:
                        keep.append(seq)
                seqs = keep
        st.delete_many(seqs, later)

    def enforce_limits(self, max_age: bool = True) -> int:
        """Bring the stored messages within the configured limits (after an update lowered them, or on
        restore: a crash may land between a KV put's commit and the one removing the revision it
        replaced). Returns how many messages were removed; consumers are told."""
        st = self.store
        removed = 0
        trimmed: list[int] = []
        if self.max_per > 0:
            for subj, n in list(st.subjects.items()):
                if n > self.max_per:
                    removed += st.trim_subject(subj, self.max_per)
                    trimmed += (m.seq for m in st.last_removed)
        if self.max_msgs > 0 and st.msgs > self.max_msgs:
            removed += st.trim_msgs(self.max_msgs)
        if self.max_bytes > 0 and st.bytes > self.max_bytes:
            removed += st.trim_bytes(self.max_bytes)
        if max_age and self.max_age and not self.sdm_ttl:  # with markers the tick expires them (expire)
            removed += st.remove_older_than(time.time_ns() - self.max_age)
        if removed:
            self.notify_removed(seqs=trimmed)
        return removed

    def notify_removed(self, seq: int = 0, seqs: Any = ()) -> None:
        """Messages left the stream other than by a purge (limits, age, a delete, retention): the pending
        ones it took are settled as terminated, as nats-server does. `seq`, `seqs`: what was removed past
        the stream's new front, when known (everything below the front is gone anyway)."""
        first = self.store.state().first_seq if self.consumers else 0
        if seq:
            seqs = [*seqs, seq]
        for c in self.consumers.values():
            f = getattr(c, "on_removed", None)
            if f is not None:
                f(first, seqs)

    def purge_store(self, subject: str | None, seq: int = 0, keep: int = 0) -> tuple[int, int]:
        """The store's purge: how many it took, and the one it took when that was a single message of a
        subject (for `purged`), else 0."""
        st = self.store
        lowest = st.load_next(st.first_seq, subject) if subject else None
        n = st.purge(subject, seq=seq, keep=keep)
        return n, lowest.seq if lowest is not None and n == 1 else 0

    def purged(self, subject: str | None, one: int = 0) -> None:
        """After a purge (the API's, or a rollup's), each consumer as nats-server's stream purge tells it:
        one whose filter lies within the purged subject moves up to that subject's first message left
        (past the end if none), one whose filter is wider (or that has none) to the stream's first.
        `one`: the message a purge of a subject removed when it removed only that one; nats-server's
        store then reports it as a single removal too, which settles it where it is still pending."""
        if not self.consumers:
            return
        st = self.store
        first, last = st.first_seq, st.last_seq
        fseq = first
        if subject:
            m = st.load_next(first, subject)
            fseq = m.seq if m is not None else 0
        for c in self.consumers.values():
            how = c.purge_covers(subject)
            if how is None:
                c.forget_read_ahead()
            else:
                c.purged(fseq if how else first, last, not how)
        if one:
            self.notify_removed(seq=one)

    # ------------------------------------------------------------------ upkeep

    def expire(self, now_ns: int) -> int:
        removed = 0
        interior: list[int] = []  # removed past the front: by max_age beside messages that never expire, by TTLs
        if self.sdm_ttl:
            interior = self._expire_with_markers(now_ns)
            removed = len(interior)
        elif self.max_age > 0:
            if self.allow_ttl:
                interior = self._expire_age_keeping_never(now_ns - self.max_age)
                removed += len(interior)
            else:
                removed += self.store.remove_older_than(now_ns - self.max_age)
        if self.allow_ttl and not self.sdm_ttl:
            expired = self.store.expire_due(now_ns)
            removed += len(expired)
            interior += expired
        if self.dedupe:
            cutoff = now_ns - self.dup_window
            for k in [k for k, (_, ts) in self.dedupe.items() if ts < cutoff]:
                del self.dedupe[k]
        if removed:
            self.notify_removed(seqs=interior)
        return removed

    def _expire_with_markers(self, now_ns: int) -> list[int]:
        """Expiry (max_age, then TTLs, by sequence) on a stream with subject delete markers: the last
        message of its subject is replaced by a marker, published to that subject through the stream
        (it rolls the subject up, so consumers see it as nats-server's do); others, and markers
        themselves, just go. Returns the sequences removed without a marker."""
        st = self.store
        due: dict[int, None] = {}
        if self.max_age > 0:
            due.update(dict.fromkeys(self._aged(now_ns - self.max_age)))
        for meta in st.expiring(now_ns):
            due[meta.seq] = None
        removed: list[int] = []
        for seq in sorted(due):
            m = st.load(seq)
            if m is None:
                continue
            if st.subjects.get(m.subject, 0) == 1 and not is_delete_marker(m.hdr):
                try:
                    self.process(m.subject, "", self._marker_hdr(), b"", internal=True)
                    continue
                except JSApiError as e:  # e.g. a sealed stream: the message still goes, unmarked
                    log.warning("JetStream: stream %s: no delete marker for %s: %s", self.name, m.subject, e)
            if st.delete(seq):
                removed.append(seq)
        return removed

    def _marker_hdr(self) -> bytes:
        return (f"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: {go_duration(self.sdm_ttl * NS)}\r\n"
                "Nats-Rollup: sub\r\n\r\n").encode()

    def _expire_age_keeping_never(self, cutoff: int) -> list[int]:
        """max_age on a stream with per-message TTLs: a message published with `Nats-TTL: never` outlives
        max_age (nats-server skips it and goes on with the next ones). Returns what was removed."""
        doomed = self._aged(cutoff)
        for s in doomed:
            self.store.delete(s)
        return doomed

    def _aged(self, cutoff: int) -> list[int]:
        """What max_age takes at `cutoff`, oldest first up to the first younger message, passing over one
        published with `Nats-TTL: never`."""
        st = self.store
        out: list[int] = []
        seq = st.first_seq
        while True:
            batch = st.read_batch(seq, None, 256)
            for m in batch:
                if m.ts > cutoff:
                    return out
                if not (m.hdr and _never_expires(m.hdr)):
                    out.append(m.seq)
            if len(batch) < 256:
                return out
            seq = batch[-1].seq + 1

    def rebuild_dedupe(self) -> None:
        """After a restart: message ids published inside the duplicate window are still duplicates."""
        cutoff = time.time_ns() - self.dup_window
        last = self.store.load(self.store.last_seq)
        self.last_msg_id = (get_header(last.hdr, "Nats-Msg-Id") or "") if last is not None and last.hdr else ""
        if self.dup_window <= 0:
            return
        for n, m in enumerate(self.store.newest_first(self.store.last_seq)):
            if m.ts < cutoff or n >= 100_000:
                break
            mid = get_header(m.hdr, "Nats-Msg-Id") if m.hdr else None
            if mid and mid not in self.dedupe:
                self.dedupe[mid] = (m.seq, m.ts)

    # ------------------------------------------------------------------ views

    def state_dict(self, deleted_details: bool = False, subjects_filter: str | None = None) -> dict[str, Any]:
        st = self.store.state(deleted=deleted_details, subjects_filter=subjects_filter or None)
        # a stream created without first_seq that never held a message nor was purged reports first_seq 0,
        # as nats-server does
        first = 0 if self.store.pristine and st.last_seq == 0 else st.first_seq
        d: dict[str, Any] = {"messages": st.msgs, "bytes": st.bytes, "first_seq": first,
                             "first_ts": rfc3339ns(st.first_ts), "last_seq": st.last_seq,
                             "last_ts": rfc3339ns(st.last_ts)}
        if st.num_subjects and subjects_filter and st.subjects:
            d["subjects"] = st.subjects
        if deleted_details and st.deleted:
            d["deleted"] = st.deleted
        if st.num_deleted:
            d["num_deleted"] = st.num_deleted
        if st.num_subjects:
            d["num_subjects"] = st.num_subjects
        d["consumer_count"] = sum(1 for c in self.consumers.values() if not c.direct)
        return d

    def info(self, deleted_details: bool = False, subjects_filter: str | None = None, domain: bool = False,
             cluster: bool = False) -> dict[str, Any]:
        """nats-server's StreamInfo. Which responses carry `domain` (info, update, list) and `cluster`
        (info only) follows its API handlers."""
        d: dict[str, Any] = {"config": self.config, "created": rfc3339ns(self.created),
                             "state": self.state_dict(deleted_details, subjects_filter)}
        if domain and self.js.domain:
            d["domain"] = self.js.domain
        if cluster:
            d["cluster"] = {"leader": self.js.server.server_name}
        if self.sync is not None:
            d.update(self.sync.info())
        d["ts"] = rfc3339ns(time.time_ns())
        return d

    def config_bytes(self) -> bytes:
        return _json_encode(self.config)


def is_delete_marker(hdr: bytes) -> bool:
    """A subject delete marker (nats-server's isSubjectDeleteMarker): the server's own, or a KV purge."""
    return bool(hdr) and (bool(get_header(hdr, "Nats-Marker-Reason")) or get_header(hdr, "KV-Operation") == "PURGE")


def _never_expires(hdr: bytes) -> bool:
    t = get_header(hdr, "Nats-TTL")
    try:
        return bool(t) and parse_ttl(t) == -1  # type: ignore[arg-type]
    except ValueError:
        return False


def _seq_header(v: str) -> int:
    """An expected sequence header: nats-server's parseInt64, as the uint64 it then compares (-1, what
    anything but digits gives, is the largest one: it never matches)."""
    return _go_int64(v) & 0xFFFFFFFFFFFFFFFF


def msg_dict(m: Any, headers: bool = True) -> dict[str, Any]:
    """A stored message as STREAM.MSG.GET returns it (`no_hdr` leaves the headers out)."""
    d: dict[str, Any] = {"subject": m.subject, "seq": m.seq}
    if m.hdr and headers:
        d["hdrs"] = base64.b64encode(m.hdr).decode()
    if m.data:
        d["data"] = base64.b64encode(m.data).decode()
    d["time"] = rfc3339ns(m.ts)
    return d
