"""`$JS.API` handlers for the account and streams (consumers register theirs from their own module).

Responses carry nats-server's `type` values and field names; failures are `{"error": {...}}` with
its codes (errors.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from edged.headers import make_headers
from edged.jetstream.errors import api_error
from edged.jetstream.stream import (
    Stream,
    check_update,
    msg_dict,
    normalize_config,
    parse_rfc3339,
    rfc3339ns,
    valid_asset_name,
)
from edged.sublist import subject_is_subset, subjects_overlap
from storage import StreamExistsError

if TYPE_CHECKING:
    from edged.jetstream.engine import ApiRequest, JetStream, JSAccount

T = "io.nats.jetstream.api.v1."
NAMES_LIMIT = 1024
LIST_LIMIT = 256

_TYPES = {
    "INFO": "account_info_response",
    "STREAM.CREATE": "stream_create_response",
    "STREAM.UPDATE": "stream_update_response",
    "STREAM.INFO": "stream_info_response",
    "STREAM.NAMES": "stream_names_response",
    "STREAM.LIST": "stream_list_response",
    "STREAM.DELETE": "stream_delete_response",
    "STREAM.PURGE": "stream_purge_response",
    "STREAM.MSG.GET": "stream_msg_get_response",
    "STREAM.MSG.DELETE": "stream_msg_delete_response",
}


def response_type(rest: str) -> str:
    toks = rest.split(".")
    for n in (3, 2, 1):
        t = _TYPES.get(".".join(toks[:n]))
        if t:
            return T + t
    return ""


def handler(prefix: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        f.prefix = prefix  # type: ignore[attr-defined]
        f.resp_type = T + _TYPES[prefix] if prefix in _TYPES else ""  # type: ignore[attr-defined]
        return f
    return deco


def _stream_of(req: ApiRequest) -> Stream:
    name = req.tokens[0] if req.tokens else ""
    assert req.jsa is not None
    s = req.jsa.streams.get(name)
    if s is None:
        raise api_error("JSStreamNotFoundErr")
    return s


def _name_token(req: ApiRequest) -> str:
    if len(req.tokens) != 1 or not req.tokens[0]:
        raise api_error("JSBadRequestErr")
    return req.tokens[0]


# ------------------------------------------------------------------ account


@handler("INFO")
def account_info(req: ApiRequest) -> dict[str, Any]:
    jsa = req.jsa
    assert jsa is not None
    mem, file = jsa.usage()
    out: dict[str, Any] = {"memory": mem, "storage": file, "reserved_memory": 0, "reserved_storage": 0,
                           "streams": len(jsa.streams), "consumers": jsa.consumer_count(),
                           "limits": jsa.limits_dict()}
    if req.js.domain:
        out["domain"] = req.js.domain
    out["api"] = {"total": req.js.api_total, "errors": req.js.api_errors}
    return out


# ------------------------------------------------------------------ streams


def _check_overlap(jsa: JSAccount, cfg: dict[str, Any], skip: str = "") -> None:
    for other in jsa.streams.values():
        if other.name == skip:
            continue
        for a in cfg["subjects"]:
            for b in other.config["subjects"]:
                if subjects_overlap(a, b):
                    raise api_error("JSStreamSubjectOverlapErr")


def _check_account_limits(jsa: JSAccount, cfg: dict[str, Any], creating: bool) -> None:
    lim = jsa.limits
    if creating and lim.max_streams >= 0 and len(jsa.streams) >= lim.max_streams:
        raise api_error("JSMaximumStreamsLimitErr")
    memory = cfg["storage"] == "memory"
    per_stream = lim.memory_max_stream_bytes if memory else lim.store_max_stream_bytes
    if lim.max_bytes_required and cfg["max_bytes"] <= 0:
        raise api_error("JSStreamMaxBytesRequired")
    if per_stream > 0 and cfg["max_bytes"] > per_stream:
        raise api_error("JSStreamMaxStreamBytesExceeded")
    acc_max = lim.max_memory if memory else lim.max_file
    if acc_max >= 0 and cfg["max_bytes"] > acc_max:
        raise api_error("JSStorageResourcesExceededErr" if not memory else "JSMemoryResourcesExceededErr")
    srv_max = jsa.js.max_memory if memory else jsa.js.max_file
    if srv_max >= 0 and cfg["max_bytes"] > srv_max:
        raise api_error("JSStorageResourcesExceededErr" if not memory else "JSMemoryResourcesExceededErr")


def _body_name_matches(req: ApiRequest, body: dict[str, Any], name: str) -> None:
    if body.get("name") and body["name"] != name:
        raise api_error("JSStreamMismatchErr")
    body["name"] = body.get("name") or name


@handler("STREAM.CREATE")
async def stream_create(req: ApiRequest) -> dict[str, Any]:
    name = _name_token(req)
    body = req.json()
    _body_name_matches(req, body, name)
    if not valid_asset_name(name):
        raise api_error("JSStreamInvalidConfigF", err="stream name is required and can not contain '.', '*', '>', '\\', '/'")
    cfg = normalize_config(body)
    jsa = req.jsa
    assert jsa is not None
    existing = jsa.streams.get(name)
    if existing is not None:
        if existing.config == cfg:
            return existing.info()
        raise api_error("JSStreamNameExistErr")
    _check_account_limits(jsa, cfg, creating=True)
    _check_overlap(jsa, cfg)
    js = req.js
    store = js.store_for(cfg["storage"])
    from edged.jetstream.stream import _json_encode

    try:
        st = store.create_stream(name, _json_encode(cfg), account=jsa.account.name, first_seq=cfg.get("first_seq") or 1)
    except StreamExistsError:
        raise api_error("JSStreamNameExistErr") from None
    await store.durable()
    stream = Stream(js, jsa, cfg, st, st.created_ns)
    jsa.streams[name] = stream
    stream.subscribe()
    js.advisory(jsa, f"STREAM.CREATED.{name}", {"type": "io.nats.jetstream.advisory.v1.stream_action",
                                                 "stream": name, "action": "create"})
    return stream.info()


@handler("STREAM.UPDATE")
async def stream_update(req: ApiRequest) -> dict[str, Any]:
    name = _name_token(req)
    body = req.json()
    _body_name_matches(req, body, name)
    stream = _stream_of(req)
    cfg = normalize_config(body)
    check_update(stream.config, cfg)
    jsa = req.jsa
    assert jsa is not None
    _check_account_limits(jsa, cfg, creating=False)
    _check_overlap(jsa, cfg, skip=name)
    from edged.jetstream.stream import _json_encode

    old_subjects = stream.config["subjects"]
    stream.config = cfg
    stream._apply_config()
    await stream.store.update_config(_json_encode(cfg))
    if old_subjects != cfg["subjects"]:
        stream.unsubscribe()
        stream.subscribe()
    st = stream.store
    removed = 0
    if stream.max_per > 0:
        for subj, n in list(st.subjects.items()):
            if n > stream.max_per:
                removed += st.trim_subject(subj, stream.max_per)
    if stream.max_msgs > 0 and st.msgs > stream.max_msgs:
        removed += st.trim_msgs(stream.max_msgs)
    if stream.max_bytes > 0 and st.bytes > stream.max_bytes:
        removed += st.trim_bytes(stream.max_bytes)
    if stream.max_age:
        removed += st.remove_older_than(time.time_ns() - stream.max_age)
    if removed:
        stream.notify_removed()
    req.js.advisory(jsa, f"STREAM.UPDATED.{name}", {"type": "io.nats.jetstream.advisory.v1.stream_action",
                                                     "stream": name, "action": "modify"})
    return stream.info()


@handler("STREAM.INFO")
def stream_info(req: ApiRequest) -> dict[str, Any]:
    stream = _stream_of(req)
    body = req.json()
    subjects_filter = body.get("subjects_filter") or None
    info = stream.info(bool(body.get("deleted_details")), subjects_filter)
    subs = info["state"].get("subjects")
    if subjects_filter and subs is not None:
        offset = int(body.get("offset") or 0)
        keys = sorted(subs)
        limit = 100_000
        page = keys[offset:offset + limit]
        info["state"]["subjects"] = {k: subs[k] for k in page}
        return {"total": len(keys), "offset": offset, "limit": limit, **info}
    return {"total": 0, "offset": 0, "limit": 0, **info}


def _filtered_streams(req: ApiRequest) -> list[Stream]:
    assert req.jsa is not None
    body = req.json()
    subj = body.get("subject") or ""
    out = sorted(req.jsa.streams.values(), key=lambda s: s.name)
    if subj:
        out = [s for s in out if any(subjects_overlap(subj, x) or subject_is_subset(x, subj)
                                     for x in s.config["subjects"])]
    return out


@handler("STREAM.NAMES")
def stream_names(req: ApiRequest) -> dict[str, Any]:
    streams = _filtered_streams(req)
    offset = max(0, int(req.json().get("offset") or 0))
    page = [s.name for s in streams[offset:offset + NAMES_LIMIT]]
    return {"total": len(streams), "offset": offset, "limit": NAMES_LIMIT, "streams": page or None}


@handler("STREAM.LIST")
def stream_list(req: ApiRequest) -> dict[str, Any]:
    streams = _filtered_streams(req)
    offset = max(0, int(req.json().get("offset") or 0))
    page = [s.info() for s in streams[offset:offset + LIST_LIMIT]]
    return {"total": len(streams), "offset": offset, "limit": LIST_LIMIT, "streams": page}


@handler("STREAM.DELETE")
async def stream_delete(req: ApiRequest) -> dict[str, Any]:
    name = _name_token(req)
    stream = _stream_of(req)
    jsa = req.jsa
    assert jsa is not None
    stream.closed = True
    stream.unsubscribe()
    for c in list(stream.consumers.values()):
        stop = getattr(c, "stop", None)
        if stop is not None:
            r = stop(deleted=True)
            if hasattr(r, "__await__"):
                await r
    del jsa.streams[name]
    store = req.js.store_for(stream.config["storage"])
    store.delete_stream(name, account=jsa.account.name)
    await store.durable()
    req.js.advisory(jsa, f"STREAM.DELETED.{name}", {"type": "io.nats.jetstream.advisory.v1.stream_action",
                                                     "stream": name, "action": "delete"})
    return {"success": True}


@handler("STREAM.PURGE")
async def stream_purge(req: ApiRequest) -> dict[str, Any]:
    stream = _stream_of(req)
    if stream.sealed or stream.config.get("deny_purge"):
        raise api_error("JSStreamPurgeFailedF", err="stream is sealed or purge is not permitted" if stream.sealed
                        else "purge not permitted")
    body = req.json()
    flt = body.get("filter") or None
    seq = int(body.get("seq") or 0)
    keep = int(body.get("keep") or 0)
    if seq and keep:
        raise api_error("JSBadRequestErr")
    purged = stream.store.purge(flt, seq=seq, keep=keep)
    await stream.store.durable()
    stream.notify_removed()
    return {"success": True, "purged": purged}


@handler("STREAM.MSG.GET")
def msg_get(req: ApiRequest) -> dict[str, Any]:
    stream = _stream_of(req)
    body = req.json()
    m = _lookup(stream, body)
    if m is None:
        raise api_error("JSNoMessageFoundErr")
    return {"message": msg_dict(m)}


def _lookup(stream: Stream, body: dict[str, Any]) -> Any:
    st = stream.store
    seq = int(body.get("seq") or 0)
    last_by = body.get("last_by_subj") or ""
    next_by = body.get("next_by_subj") or ""
    start_time = body.get("start_time")
    if (seq and last_by) or (last_by and next_by):
        raise api_error("JSBadRequestErr")
    if start_time and (seq or last_by):
        raise api_error("JSBadRequestErr")
    if last_by:
        return st.load_last(last_by)
    if start_time:
        try:
            ns = parse_rfc3339(str(start_time))
        except ValueError:
            raise api_error("JSBadRequestErr") from None
        m = st.load_next(max(1, st.state().first_seq), next_by or None)
        while m is not None and m.ts < ns:
            m = st.load_next(m.seq + 1, next_by or None)
        return m
    if next_by:
        return st.load_next(max(seq, 1), next_by)
    if seq <= 0:
        raise api_error("JSBadRequestErr")
    return st.load(seq)


@handler("STREAM.MSG.DELETE")
async def msg_delete(req: ApiRequest) -> dict[str, Any]:
    stream = _stream_of(req)
    if stream.sealed:
        raise api_error("JSStreamSealedErr")
    if stream.config.get("deny_delete"):
        raise api_error("JSStreamMsgDeleteFailedF", err="message delete not permitted")
    body = req.json()
    seq = int(body.get("seq") or 0)
    if seq <= 0:
        raise api_error("JSBadRequestErr")
    ok = stream.store.delete(seq, erase=not body.get("no_erase"))
    if not ok:
        if seq > stream.store.last_seq:
            raise api_error("JSStreamMsgDeleteFailedF", err=f"sequence {seq} not found")
        raise api_error("JSStreamMsgDeleteFailedF", err="no message found")
    await stream.store.durable()
    stream.notify_removed()
    return {"success": True}


# ------------------------------------------------------------------ direct get


def direct_get(req: ApiRequest) -> None:
    """`$JS.API.DIRECT.GET.<stream>[.<subject>]`: the message itself, with Nats-* headers, or a status."""
    assert req.jsa is not None
    ic = req.jsa.internal
    reply = req.reply
    name = req.tokens[0] if req.tokens else ""
    stream = req.jsa.streams.get(name)
    if stream is None or not stream.config.get("allow_direct"):
        return None  # no responder: nats-server only listens when allow_direct is on
    if len(req.tokens) > 1:
        last_subject = ".".join(req.tokens[1:])
        if req.data and req.data.strip():
            ic.publish(reply, b"", "", make_headers(status=408, description="Bad Request"))
            return None
        m = stream.store.load_last(last_subject)
        _send_direct(ic, reply, stream, m)
        return None
    try:
        body = req.json()
    except Exception:
        ic.publish(reply, b"", "", make_headers(status=408, description="Bad Request"))
        return None
    batch = int(body.get("batch") or 0)
    multi_last = body.get("multi_last") or []
    up_to_seq = int(body.get("up_to_seq") or 0)
    st = stream.store
    if multi_last:
        subjects: dict[str, Any] = {}
        for flt in multi_last:
            for subj in st.subject_counts(flt):
                m = st.load_last(subj)
                if m is not None and (not up_to_seq or m.seq <= up_to_seq):
                    subjects[subj] = m
                elif up_to_seq:
                    p = st.load_prev(up_to_seq, subj)
                    if p is not None:
                        subjects[subj] = p
        msgs = sorted(subjects.values(), key=lambda m: m.seq)
        if batch:
            msgs = msgs[:batch]
        if not msgs:
            ic.publish(reply, b"", "", make_headers(status=404, description="No Results"))
            return None
        for i, m in enumerate(msgs):
            _send_direct(ic, reply, stream, m, pending=len(msgs) - i - 1, batch=True)
        _send_eob(ic, reply, stream, msgs[-1].seq)
        return None
    if batch:
        try:
            m = _lookup(stream, body)
        except Exception:
            ic.publish(reply, b"", "", make_headers(status=408, description="Bad Request"))
            return None
        flt = body.get("next_by_subj") or None
        sent = 0
        last = 0
        max_bytes = int(body.get("max_bytes") or 0)
        size = 0
        pending = 0
        while m is not None and sent < batch:
            size += len(m.data) + len(m.hdr)
            if max_bytes and sent and size > max_bytes:
                break
            pending = st.count(m.seq + 1, flt)
            _send_direct(ic, reply, stream, m, pending=pending, batch=True)
            sent += 1
            last = m.seq
            m = st.load_next(m.seq + 1, flt)
        if not sent:
            ic.publish(reply, b"", "", make_headers(status=404, description="Message Not Found"))
            return None
        _send_eob(ic, reply, stream, last, pending)
        return None
    try:
        m = _lookup(stream, body)
    except Exception:
        ic.publish(reply, b"", "", make_headers(status=408, description="Bad Request"))
        return None
    _send_direct(ic, reply, stream, m)
    return None


def _send_direct(ic: Any, reply: str, stream: Stream, m: Any, pending: int = -1, batch: bool = False) -> None:
    if m is None:
        ic.publish(reply, b"", "", make_headers(status=404, description="Message Not Found"))
        return
    extra = (f"Nats-Stream: {stream.name}\r\nNats-Subject: {m.subject}\r\nNats-Sequence: {m.seq}\r\n"
             f"Nats-Time-Stamp: {rfc3339ns(m.ts)}\r\n")
    if batch:
        extra += f"Nats-Num-Pending: {pending}\r\nNats-Last-Sequence: {m.seq}\r\n"
    base = m.hdr[:-2] if m.hdr and m.hdr.endswith(b"\r\n\r\n") else b"NATS/1.0\r\n"
    ic.publish(reply, m.data, "", base + extra.encode() + b"\r\n")


def _send_eob(ic: Any, reply: str, stream: Stream, last: int, pending: int = 0) -> None:
    hdr = make_headers([("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(last))], status=204,
                       description="EOB")
    ic.publish(reply, b"", "", hdr)


def install(js: JetStream) -> None:
    for f in (account_info, stream_create, stream_update, stream_info, stream_names, stream_list, stream_delete,
              stream_purge, msg_get, msg_delete):
        js.register_api(f.prefix, f)  # type: ignore[attr-defined]
    js.register_api("DIRECT.GET", direct_get)
