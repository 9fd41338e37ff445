"""Consumer configs as nats-server reads them: the request's fields and their Go types (decoded by
gojson.decode_fields with Go's JSON rules), defaults filled and checks run in nats-server's order
(setConsumerConfigDefaults, then checkConsumerCfg), and the rules for what an update may change.

The order matters: clients see only the first fault of a request with several, and match on its
err_code and text, so both follow server/consumer.go.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from edged.goformat import go_duration
from edged.jetstream.stream import valid_asset_name
from edged.jetstream.wire.errors import JSApiError, api_error
from edged.jetstream.wire.gojson import GoType, go_quote, time_ns
from edged.routing.subjects import is_literal, is_valid_subject, subject_matches

if TYPE_CHECKING:
    from edged.jetstream.stream import Stream

NS = 1_000_000_000
DEFAULT_ACK_WAIT = 30 * NS
FC_ACK_HEARTBEAT = NS  # the heartbeat the flow_control ack policy requires (nats-server's sourceHealthHB)
DEFAULT_MAX_ACK_PENDING = 1000
DEFAULT_MAX_WAITING = 512
EPHEMERAL_INACTIVE = 5 * NS
MAX_DESCRIPTION = 4096
MAX_METADATA = 128 * 1024
MAX_NAME = 255

# ConsumerConfig's fields and their Go types (the type names appear in Go's JSON error texts)
_FIELDS: dict[str, GoType] = {
    "durable_name": "string", "name": "string", "description": "string", "deliver_policy": "deliver_policy",
    "opt_start_seq": "uint64", "opt_start_time": "time", "ack_policy": "ack_policy", "ack_wait": "time.Duration",
    "max_deliver": "int", "backoff": "[]time.Duration", "filter_subject": "string", "filter_subjects": "[]string",
    "replay_policy": "replay_policy", "rate_limit_bps": "uint64", "sample_freq": "string", "max_waiting": "int",
    "max_ack_pending": "int", "flow_control": "bool", "headers_only": "bool", "max_batch": "int",
    "max_expires": "time.Duration", "max_bytes": "int", "deliver_subject": "string", "deliver_group": "string",
    "idle_heartbeat": "time.Duration", "inactive_threshold": "time.Duration", "num_replicas": "int",
    "mem_storage": "bool", "direct": "bool", "sourcing": "bool", "metadata": "map[string]string",
    "pause_until": "time", "priority_groups": "[]string", "priority_policy": "priority_policy",
    "priority_timeout": "time.Duration",
}
CREATE_REQUEST: dict[str, GoType] = {"stream_name": "string", "config": ("struct", "server.ConsumerConfig", _FIELDS),
                                     "action": "action", "pedantic": "bool"}
# the order nats-server marshals ConsumerConfig in
_ORDER = ("durable_name", "name", "description", "deliver_policy", "opt_start_seq", "opt_start_time", "ack_policy",
          "ack_wait", "max_deliver", "backoff", "filter_subject", "filter_subjects", "replay_policy",
          "rate_limit_bps", "sample_freq", "max_waiting", "max_ack_pending", "flow_control", "headers_only",
          "max_batch", "max_expires", "max_bytes", "deliver_subject", "deliver_group", "idle_heartbeat",
          "inactive_threshold", "num_replicas", "mem_storage", "direct", "sourcing", "metadata", "pause_until",
          "priority_groups", "priority_policy", "priority_timeout")
DEFAULT_PINNED_TTL = 120 * NS
GROUP_NAME = re.compile(r"[a-zA-Z0-9/_=-]{1,16}")


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


def normalize(req: dict[str, Any], stream: Stream, acc_max_ack_pending: int = -1,
              pedantic: bool = False) -> dict[str, Any]:
    """The consumer config nats-server would keep (defaults filled), or its JSApiError. `pedantic`: the
    request's own flag, which so far only keeps the flow_control ack policy's defaults out."""
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
    if not c.get("ack_wait") and ap in ("explicit", "all"):
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
    if ap == "flow_control" and not pedantic:  # acks come with the flow control answers: its heartbeat and FC
        c["flow_control"] = True
        c["idle_heartbeat"] = FC_ACK_HEARTBEAT
    policy = c.get("priority_policy") or "none"
    if policy == "none":
        c.pop("priority_policy", None)  # the default, which nats-server leaves out
    elif policy == "pinned_client" and not c.get("priority_timeout"):
        c["priority_timeout"] = DEFAULT_PINNED_TTL
    _check(c, stream, acc_max_ack_pending)
    c.setdefault("num_replicas", 0)
    return {k: c[k] for k in _ORDER if k in c and (c[k] or k in ("num_replicas", "max_deliver"))}


def _check_ack_flow_control(c: dict[str, Any]) -> None:
    """The flow_control ack policy (2.14): a push consumer whose flow control answers are its acks (all up to
    the answer's Nats-Last-Stream), so nothing is redelivered on a timer."""
    if not c.get("deliver_subject"):
        raise api_error("JSConsumerAckFCRequiresPushErr")
    if not c.get("flow_control"):
        raise api_error("JSConsumerAckFCRequiresFCErr")
    if c.get("idle_heartbeat", 0) != FC_ACK_HEARTBEAT:  # the stall check of a hub's source waits on it
        raise api_error("JSStreamInvalidConfigF", err="flow control ack policy heartbeat needs to be 1s")
    if c.get("max_ack_pending", 0) <= 0:
        raise api_error("JSConsumerAckFCRequiresMaxAckPendingErr")
    if c.get("ack_wait") or c.get("backoff"):
        raise api_error("JSConsumerAckFCRequiresNoAckWaitErr")
    if c.get("max_deliver", 0) > 0:
        raise api_error("JSConsumerAckFCRequiresNoMaxDeliverErr")


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
    if c["ack_policy"] == "flow_control":
        _check_ack_flow_control(c)
    lbo = len(c.get("backoff") or [])
    if lbo and c["max_deliver"] != -1 and lbo > c["max_deliver"]:
        raise api_error("JSConsumerMaxDeliverBackoffErr")
    if len((c.get("description") or "").encode()) > MAX_DESCRIPTION:
        raise api_error("JSConsumerDescriptionTooLongErrF", max=MAX_DESCRIPTION)
    ds = c.get("deliver_subject") or ""
    hb = c.get("idle_heartbeat") or 0
    if ds:
        if not is_literal(ds):
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
    if c.get("direct"):  # what another server's mirror or source makes: push, ephemeral
        if not c.get("deliver_subject"):
            raise api_error("JSConsumerDirectRequiresPushErr")
        if c.get("durable_name"):
            raise api_error("JSConsumerDirectRequiresEphemeralErr")
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
        if c.get("deliver_subject"):
            raise api_error("JSConsumerPushWithPriorityGroupErr")
        if not c.get("priority_groups"):
            raise api_error("JSConsumerPriorityPolicyWithoutGroup")
        for g in c["priority_groups"]:
            if not g:
                raise api_error("JSConsumerEmptyGroupName")
            if not GROUP_NAME.fullmatch(g):
                raise api_error("JSConsumerInvalidGroupNameErr")


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
    # what a hub's mirror or source made stays that for its whole life (nats-server 2.15)
    if bool(old.get("direct")) != bool(new.get("direct")):
        raise refuse("direct can not be updated")
    if bool(old.get("sourcing")) != bool(new.get("sourcing")):
        raise refuse("sourcing can not be updated")
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
