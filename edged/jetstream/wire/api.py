"""`$JS.API` handlers for the account and streams (consumers register theirs from their own module).

Each handler follows nats-server's request handler of the same name (server/jetstream_api.go): the
same order of checks, so that a request with several faults gets the same error; the same `type`
values and field names; `{"error": {...}}` with its codes (errors.py) on failure. What the dispatcher
reads of a handler is given to dispatch.handler.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edged import API_LEVEL
from edged.jetstream.stream import Stream, msg_dict, normalize_config
from edged.jetstream.wire.direct import MSG_GET_REQUEST, direct_get, int_field, lookup
from edged.jetstream.wire.dispatch import LIST_LIMIT, NAMES_LIMIT, handler
from edged.jetstream.wire.errors import api_error
from edged.jetstream.wire.versioning import (
    info_with_dynamic_metadata,
    with_dynamic_metadata,
    with_static_stream_metadata,
)
from edged.routing.subjects import is_valid_literal_subject, subjects_overlap
from storage import MAX_SEQ

if TYPE_CHECKING:
    from edged.jetstream.engine import JetStream
    from edged.jetstream.wire.dispatch import ApiRequest

MAX_SUBJECT_DETAILS = 100_000

_PAGED = {"total": 0, "offset": 0, "limit": 0}


def _struct(goname: str, **fields: Any) -> tuple[str, str, dict[str, Any]]:
    return ("struct", "server." + goname, fields)


# nats-server's request structs (server/jetstream_api.go, stream.go): their fields' JSON names and Go types,
# for its strict decoding (ApiRequest.decode)
_S, _B, _D = "string", "bool", "time.Duration"
_TRANSFORM_T = _struct("SubjectTransformConfig", src=_S, dest=_S)
_SOURCE_T = _struct("StreamSource", name=_S, opt_start_seq="uint64", opt_start_time="time", filter_subject=_S,
                    subject_transforms=("[]", "[]server.SubjectTransformConfig", _TRANSFORM_T),
                    external=_struct("ExternalStream", api=_S, deliver=_S),
                    consumer=_struct("StreamConsumerSource", name=_S, deliver_subject=_S))
STREAM_CONFIG_TYPES: dict[str, Any] = {
    "name": _S, "description": _S, "subjects": "[]string", "retention": "retention", "max_consumers": "int",
    "max_msgs": "int64", "max_bytes": "int64", "max_age": _D, "max_msgs_per_subject": "int64", "max_msg_size": "int32",
    "discard": "discard", "storage": "storage", "num_replicas": "int", "no_ack": _B, "duplicate_window": _D,
    "placement": _struct("Placement", cluster=_S, tags="[]string", preferred=_S), "mirror": _SOURCE_T,
    "sources": ("[]", "[]*server.StreamSource", _SOURCE_T), "compression": "compression", "first_seq": "uint64",
    "subject_transform": _TRANSFORM_T, "republish": _struct("RePublish", src=_S, dest=_S, headers_only=_B),
    "allow_direct": _B, "mirror_direct": _B, "discard_new_per_subject": _B, "sealed": _B, "deny_delete": _B,
    "deny_purge": _B, "allow_rollup_hdrs": _B,
    "consumer_limits": _struct("StreamConsumerLimits", inactive_threshold=_D, max_ack_pending="int"),
    "allow_msg_ttl": _B, "subject_delete_marker_ttl": _D, "allow_msg_counter": _B, "allow_atomic": _B,
    "allow_msg_schedules": _B, "persist_mode": "persist_mode", "allow_batched": _B, "metadata": "map[string]string",
    "pedantic": _B,
}
_STREAM_INFO_REQUEST = {"offset": "int", "deleted_details": _B, "subjects_filter": _S}
_STREAMS_REQUEST = {"offset": "int", "subject": _S}
_PURGE_REQUEST = {"seq": "uint64", "filter": _S, "keep": "uint64"}
_MSG_DELETE_REQUEST = {"seq": "uint64", "no_erase": _B}
_SNAPSHOT_REQUEST = {"deliver_subject": _S, "no_consumers": _B, "chunk_size": "int", "window_size": "int", "jsck": _B}
_RESTORE_REQUEST = {
    "config": _struct("StreamConfig", **{k: v for k, v in STREAM_CONFIG_TYPES.items() if k != "pedantic"}),
    "state": _struct("StreamState", messages="uint64", bytes="uint64", first_seq="uint64", first_ts="time",
                     last_seq="uint64", last_ts="time", num_subjects="int", subjects="any", num_deleted="int",
                     deleted="[]uint64", lost=_struct("LostStreamData", msgs="[]uint64", bytes="uint64"),
                     consumer_count="int"),
}


def _stream_of(req: ApiRequest) -> Stream:
    assert req.jsa is not None
    s = req.jsa.streams.get(req.tokens[0])
    if s is None:
        raise api_error("JSStreamNotFoundErr")
    return s


# ------------------------------------------------------------------ account


@handler("INFO", "account_info_response", (0, 0))
def account_info(req: ApiRequest) -> dict[str, Any]:
    jsa = req.jsa
    assert jsa is not None
    mem, file = jsa.usage()
    rmem, rfile = jsa.reserved()
    out: dict[str, Any] = {"memory": mem, "storage": file, "reserved_memory": rmem, "reserved_storage": rfile,
                           "streams": len(jsa.streams), "consumers": jsa.consumer_count(),
                           "limits": jsa.limits_dict()}
    if req.js.domain:
        out["domain"] = req.js.domain
    out["api"] = {"level": API_LEVEL, "total": jsa.api_total, "errors": jsa.api_errors}
    return out


# ------------------------------------------------------------------ streams


@handler("STREAM.CREATE", "stream_create_response", (1, 1))
async def stream_create(req: ApiRequest) -> dict[str, Any]:
    name = req.tokens[0]
    body = req.decode("StreamConfigRequest", STREAM_CONFIG_TYPES)
    if body.get("name") != name:
        raise api_error("JSStreamMismatchErr")
    if "/" in name or "\\" in name:
        raise api_error("JSStreamNameContainsPathSeparatorsErr")
    if body.get("sealed"):
        raise api_error("JSStreamInvalidConfigF", err="stream configuration for create can not be sealed")
    if body.get("mirror_direct") and not body.get("mirror"):
        raise api_error("JSStreamInvalidConfigF", err="stream has no mirror but does have mirror direct")
    jsa = req.jsa
    assert jsa is not None
    stream = await jsa.add_stream(with_static_stream_metadata(normalize_config(body)))
    return {**info_with_dynamic_metadata(stream.info()), "did_create": True}


@handler("STREAM.UPDATE", "stream_update_response", (1, 1))
async def stream_update(req: ApiRequest) -> dict[str, Any]:
    name = req.tokens[0]
    body = req.decode("StreamConfigRequest", STREAM_CONFIG_TYPES)
    cfg = with_static_stream_metadata(normalize_config(body))
    if cfg["name"] != name:
        raise api_error("JSStreamMismatchErr")
    stream = _stream_of(req)
    assert req.jsa is not None
    await req.jsa.update_stream(stream, cfg)
    return info_with_dynamic_metadata(stream.info(domain=True))


@handler("STREAM.INFO", "stream_info_response", (1, 1), err_fields=_PAGED)
def stream_info(req: ApiRequest) -> dict[str, Any]:
    body = req.options("JSApiStreamInfoRequest", _STREAM_INFO_REQUEST)
    details = bool(body.get("deleted_details"))
    subjects_filter = body.get("subjects_filter") or None
    offset = max(int_field(body, "offset"), 0)
    stream = _stream_of(req)
    info = stream.info(details, subjects_filter, domain=True, cluster=True)
    info["config"] = with_dynamic_metadata(info["config"])
    paged = {"total": 0, "offset": 0, "limit": 0}
    subs = info["state"].pop("subjects", None)
    if subjects_filter and subs:
        paged = {"total": len(subs), "offset": offset, "limit": MAX_SUBJECT_DETAILS}
        if offset == 0 and len(subs) <= MAX_SUBJECT_DETAILS:
            page = subs
        else:
            keys = sorted(subs)
            offset = min(offset, len(keys))
            page = {k: subs[k] for k in keys[offset:offset + MAX_SUBJECT_DETAILS]}
        if page:
            info["state"]["subjects"] = page
    return {**paged, **info}


def _streams_page(req: ApiRequest, struct: str) -> tuple[list[Stream], int, int]:
    assert req.jsa is not None
    body = req.options(struct, _STREAMS_REQUEST)
    offset = max(int_field(body, "offset"), 0)
    flt = body.get("subject") or ""
    streams = sorted(req.jsa.streams.values(), key=lambda s: s.name)
    if flt:
        streams = [s for s in streams if any(subjects_overlap(flt, x) for x in s.config.get("subjects", []))]
    return streams, min(offset, len(streams)), len(streams)


@handler("STREAM.NAMES", "stream_names_response", (0, 0), err_fields={**_PAGED, "streams": None})
def stream_names(req: ApiRequest) -> dict[str, Any]:
    streams, offset, total = _streams_page(req, "JSApiStreamNamesRequest")
    page = [s.name for s in streams[offset:offset + NAMES_LIMIT]]
    return {"total": total, "offset": offset, "limit": NAMES_LIMIT, "streams": page or None}


@handler("STREAM.LIST", "stream_list_response", (0, 0), err_fields={**_PAGED, "streams": []})
def stream_list(req: ApiRequest) -> dict[str, Any]:
    streams, offset, total = _streams_page(req, "JSApiStreamListRequest")
    page = [s.info(domain=True) for s in streams[offset:offset + LIST_LIMIT]]
    return {"total": total, "offset": offset, "limit": LIST_LIMIT, "streams": page}


@handler("STREAM.DELETE", "stream_delete_response", (1, 1))
async def stream_delete(req: ApiRequest) -> dict[str, Any]:
    if not req.is_empty():
        raise api_error("JSNotEmptyRequestErr")
    stream = _stream_of(req)
    assert req.jsa is not None
    await req.jsa.delete_stream(stream)
    return {"success": True}


@handler("STREAM.PURGE", "stream_purge_response", (1, 1), err_fields={"purged": 0})
async def stream_purge(req: ApiRequest) -> dict[str, Any]:
    body = req.options("JSApiStreamPurgeRequest", _PURGE_REQUEST)
    seq = int_field(body, "seq")
    keep = int_field(body, "keep")
    if seq > 0 and keep > 0:
        raise api_error("JSBadRequestErr")
    stream = _stream_of(req)
    if seq > MAX_SEQ + 1:  # past the end, a purge to seq makes seq the next sequence
        raise api_error("JSStreamPurgeFailedF", err=f"sequences above 2**{MAX_SEQ.bit_length()} are not "
                                                    "supported by edged")
    if stream.sealed:
        raise api_error("JSStreamSealedErr")
    if stream.config.get("deny_purge"):
        raise api_error("JSStreamPurgeFailedF", err="stream purge not permitted")
    flt = body.get("filter") or None
    purged, one = stream.purge_store(flt, seq=max(seq, 0), keep=max(keep, 0))
    await stream.store.durable()
    stream.purged(flt, one)
    req.js.space.space_freed()
    return {"success": True, "purged": purged}


@handler("STREAM.MSG.GET", "stream_msg_get_response", (1, 1), count_ok=False)
def msg_get(req: ApiRequest) -> dict[str, Any]:
    if req.is_empty():
        raise api_error("JSBadRequestErr")
    body = req.decode("JSApiMsgGetRequest", MSG_GET_REQUEST)
    if int_field(body, "batch") > 0 or int_field(body, "max_bytes") > 0:
        raise api_error("JSBadRequestErr")
    stream = _stream_of(req) if _valid_get(body) else None
    if stream is None:
        raise api_error("JSBadRequestErr")
    m = lookup(stream, body)
    if m is None:
        raise api_error("JSNoMessageFoundErr")
    return {"message": msg_dict(m, headers=not body.get("no_hdr"))}


def _valid_get(body: dict[str, Any]) -> bool:
    """The request shapes nats-server accepts (one way of naming the message)."""
    seq = int_field(body, "seq")
    last_by = body.get("last_by_subj") or ""
    next_by = body.get("next_by_subj") or ""
    start = body.get("start_time")
    return not ((seq > 0 and last_by) or (seq == 0 and not last_by and not next_by and start is None)
                or (seq > 0 and start is not None) or (start is not None and last_by) or (last_by and next_by))


@handler("STREAM.MSG.DELETE", "stream_msg_delete_response", (1, 1))
async def msg_delete(req: ApiRequest) -> dict[str, Any]:
    if req.is_empty():
        raise api_error("JSBadRequestErr")
    body = req.decode("JSApiMsgDeleteRequest", _MSG_DELETE_REQUEST)
    seq = int_field(body, "seq")
    stream = _stream_of(req)
    if stream.sealed:
        raise api_error("JSStreamSealedErr")
    if stream.config.get("deny_delete"):
        raise api_error("JSStreamMsgDeleteFailedF", err="message delete not permitted")
    st = stream.store
    if seq > 0 and st.delete(seq, erase=not body.get("no_erase")):
        await st.durable()
        stream.notify_removed(seq=seq)
        req.js.space.space_freed()
        return {"success": True}
    # nats-server's file store tells "before the first / past the last" from "an interior gap"; its memory
    # store says "not found" for both
    if stream.config["storage"] == "file" and (seq == 0 or seq < st.first_seq or seq > st.last_seq or not st.msgs):
        raise api_error("JSStreamMsgDeleteFailedF", err="stream store EOF" if seq > st.last_seq
                        else "no message found").counted_as_ok()
    raise api_error("JSSequenceNotFoundErrF", seq=max(seq, 0)).counted_as_ok()


@handler("STREAM.LEADER.STEPDOWN", "stream_leader_stepdown_response", (1, 1), level_gate="")
def stream_leader_stepdown(req: ApiRequest) -> dict[str, Any]:
    """A single server has no leaders to change (nats-server says so before anything else)."""
    raise api_error("JSClusterRequiredErr")


@handler("CONSUMER.LEADER.STEPDOWN", "consumer_leader_stepdown_response", (2, 2), level_gate="")
def consumer_leader_stepdown(req: ApiRequest) -> dict[str, Any]:
    raise api_error("JSClusterRequiredErr")


@handler("STREAM.PEER.REMOVE", "stream_remove_peer_response", (1, 1), level_gate="")
def stream_peer_remove(req: ApiRequest) -> dict[str, Any]:
    raise api_error("JSClusterRequiredErr")


@handler("STREAM.SNAPSHOT", "stream_snapshot_response", (1, 1))
def stream_snapshot(req: ApiRequest) -> dict[str, Any]:
    """Not supported: answered with nats-server's checks in its order, then its snapshot error."""
    if req.is_empty():
        raise api_error("JSBadRequestErr")
    _stream_of(req)
    body = req.decode("JSApiStreamSnapshotRequest", _SNAPSHOT_REQUEST)
    if not is_valid_literal_subject(str(body.get("deliver_subject") or "")):
        raise api_error("JSSnapshotDeliverSubjectInvalidErr")
    raise api_error("JSStreamSnapshotErrF", err="stream snapshots are not supported by edged")


@handler("STREAM.RESTORE", "stream_restore_response", (1, 1), err_fields={"deliver_subject": ""})
def stream_restore(req: ApiRequest) -> dict[str, Any]:
    """Not supported: answered with nats-server's checks in its order, then its restore error."""
    if req.is_empty():
        raise api_error("JSBadRequestErr")
    body = req.decode("JSApiStreamRestoreRequest", _RESTORE_REQUEST)
    name = req.tokens[0]
    cfg = body.get("config")
    given = (cfg.get("name") if isinstance(cfg, dict) else None) or name
    if given != name:
        raise api_error("JSStreamMismatchErr")
    if "/" in name or "\\" in name:
        raise api_error("JSStreamNameContainsPathSeparatorsErr")
    normalize_config({**(cfg if isinstance(cfg, dict) else {}), "name": name})
    assert req.jsa is not None
    if name in req.jsa.streams:
        raise api_error("JSStreamNameExistRestoreFailedErr")
    raise api_error("JSStreamRestoreErrF", err="stream restores are not supported by edged")


def install(js: JetStream) -> None:
    for f in (account_info, stream_create, stream_update, stream_info, stream_names, stream_list, stream_delete,
              stream_purge, msg_get, msg_delete, stream_leader_stepdown, consumer_leader_stepdown,
              stream_peer_remove, stream_snapshot, stream_restore, direct_get):
        js.register_api(f.prefix, f)  # type: ignore[attr-defined]
