"""`$JS.API.CONSUMER.*` handlers."""

from __future__ import annotations

import hashlib
import os
import string
import time
from typing import TYPE_CHECKING, Any

import msgspec

from edged.goformat import ZERO_TIME, format_time, rfc3339ns
from edged.jetstream.consumer import Consumer
from edged.jetstream.consumer_config import (
    CREATE_REQUEST,
    EPHEMERAL_INACTIVE,
    GROUP_NAME,
    MAX_NAME,
    _filters,
    check_update,
    normalize,
)
from edged.jetstream.stream import valid_asset_name
from edged.jetstream.wire.dispatch import LIST_LIMIT, NAMES_LIMIT, TYPE_PREFIX, handler
from edged.jetstream.wire.errors import JSApiError, api_error
from edged.jetstream.wire.gojson import decode_fields, go_kind, syntax_error, time_ns
from edged.jetstream.wire.versioning import (
    info_with_dynamic_metadata,
    like_previous,
    with_static_consumer_metadata,
)
from edged.routing.headers import get_header, make_headers
from edged.routing.subjects import subjects_overlap

if TYPE_CHECKING:
    from edged.jetstream.engine import JetStream
    from edged.jetstream.stream import Stream
    from edged.jetstream.wire.dispatch import ApiRequest

_ALPHA = string.ascii_letters + string.digits
_enc = msgspec.json.Encoder().encode
_dec = msgspec.json.Decoder()


def _ephemeral_name() -> str:
    raw = os.urandom(8)
    return "".join(_ALPHA[b % len(_ALPHA)] for b in raw)


_GO_DIGITS = string.digits + string.ascii_uppercase + string.ascii_lowercase


def go_hash(text: str) -> str:
    """nats-server's getHash: 8 base62 characters of the SHA-256 of `text`."""
    return "".join(_GO_DIGITS[b % 62] for b in hashlib.sha256(text.encode()).digest()[:8])


def stream_identity(stream: Stream) -> str:
    """What nats-server 2.15 calls a stream's identity: a hash of its creation time, which tells a hub
    sourcing the stream that it was deleted and created again (its position then starts over)."""
    return go_hash(rfc3339ns(stream.created))


def _stream(req: ApiRequest) -> Stream:
    assert req.jsa is not None
    if not req.tokens:
        raise api_error("JSBadRequestErr")
    s = req.jsa.streams.get(req.tokens[0])
    if s is None:
        raise api_error("JSStreamNotFoundErr")
    return s


def _consumer(req: ApiRequest) -> tuple[Stream, Consumer]:
    s = _stream(req)
    if len(req.tokens) < 2:
        raise api_error("JSBadRequestErr")
    c = s.consumers.get(req.tokens[1])
    if c is None:
        raise api_error("JSConsumerNotFoundErr")
    return s, c


def _create(req: ApiRequest, durable_api: bool) -> dict[str, Any]:
    """nats-server's jsConsumerCreateRequest: the same checks in the same order (the subject forms, then
    the config defaults and checks, then create or update by `action`)."""
    assert req.jsa is not None
    r = req.decode("CreateConsumerRequest", CREATE_REQUEST)
    req.check_level()
    cfg_in: dict[str, Any] = dict(r.get("config") or {})
    action = r.get("action") or ""
    tokens = req.tokens
    legacy_ephemeral = len(tokens) == 1
    name = (cfg_in.get("name") or "") if legacy_ephemeral else tokens[1]
    subj_filter = ".".join(tokens[2:]) if len(tokens) > 2 and not durable_api else ""
    durable = cfg_in.get("durable_name") or ""
    if tokens[0] != (r.get("stream_name") or ""):
        raise api_error("JSStreamMismatchErr")
    if "\\" in name or "/" in name:
        raise api_error("JSConsumerNameContainsPathSeparatorsErr")
    if durable_api:
        if not durable:
            raise api_error("JSConsumerDurableNameNotSetErr")
        if durable != name:
            raise api_error("JSConsumerDurableNameNotMatchSubjectErr")
        cfg_in["name"] = name
    elif not legacy_ephemeral:
        if durable and durable != name:
            raise api_error("JSConsumerDurableNameNotMatchSubjectErr")
        cfg_in["name"] = name
    if legacy_ephemeral and durable:
        raise api_error("JSConsumerEphemeralWithDurableNameErr")
    if subj_filter and cfg_in.get("filter_subjects"):
        raise api_error("JSConsumerMultipleFiltersNotAllowed")
    if subj_filter and (cfg_in.get("filter_subject") or "") != subj_filter:
        raise api_error("JSConsumerCreateFilterSubjectMismatchErr")
    if cfg_in.get("num_replicas", 0) > 1:
        raise api_error("JSStreamReplicasNotSupportedErr")
    stream = _stream(req)
    # the consumer a hub creates to mirror or source this stream (nats-server's stream.go): 2.14+ hubs
    # name it after the stream (JS_SRC_<hash>) and ask again under that name while the last one may still
    # be here, from another start. On an interest or workqueue stream it becomes a durable of that name
    # acked by the hub's flow control answers, so what the hub stored leaves the stream (nats-server's
    # durable sourcing, level 4); otherwise each gets a name of its own.
    sync = bool(cfg_in.get("direct") or cfg_in.get("sourcing"))
    if cfg_in.get("direct") and cfg_in.get("sourcing") and name and stream.retention != "limits":
        cfg_in.update(direct=False, durable_name=name, ack_policy="flow_control", ack_wait=0, max_deliver=0,
                      inactive_threshold=0)
        durable = name
    elif cfg_in.get("direct") and cfg_in.get("sourcing") and name:
        base = name
        name = f"{base}-{_ephemeral_name()}"
        while name in stream.consumers:
            name = f"{base}-{_ephemeral_name()}"
        cfg_in["name"] = name
    identity = ""
    if sync:
        identity = stream_identity(stream)
        asked = get_header(req.hdr, "Nats-Stream-Identity")
        if asked and asked != identity:
            raise api_error("JSConsumerStreamIdentityMismatchF", msg=identity)
    existing = stream.consumers.get(name) if name else None
    if existing is not None:
        # a create or update never changes the pause: that is CONSUMER.PAUSE's (an update stores it in UTC;
        # a new consumer keeps the zone it was given)
        cfg_in.pop("pause_until", None)
        if existing.config.get("pause_until"):
            cfg_in["pause_until"] = existing.config["pause_until"]
        if cfg_in.get("sourcing") and cfg_in.get("durable_name"):
            # a durable source's consumer goes on from where it is, wherever the hub asks it to start
            for k in ("deliver_policy", "opt_start_seq", "opt_start_time"):
                cfg_in.pop(k, None)
                if k in existing.config:
                    cfg_in[k] = existing.config[k]
    cfg = normalize(with_static_consumer_metadata(cfg_in), stream, req.jsa.limits.max_ack_pending,
                    pedantic=bool(r.get("pedantic")))
    if existing is not None:
        if action == "create" and like_previous(cfg, existing.config) != existing.config:
            raise api_error("JSConsumerAlreadyExists")
        if stream.retention == "workqueue":
            _wq_unique(stream, name, cfg)
        check_update(existing.config, cfg, existing.push and existing._has_push_interest())
        if cfg.get("pause_until"):
            cfg["pause_until"] = format_time(time_ns(cfg["pause_until"]))
        if not existing.config.get("durable_name") and not cfg.get("inactive_threshold"):
            cfg = _with_inactive(cfg)  # an ephemeral keeps its default, as nats-server stamps it
        existing.update(cfg)
        if cfg.get("sourcing"):
            # as nats-server's standalone updateConfig: a hub asking again for its source's consumer gets
            # it back at the ack floor, nothing pending, consumer sequences from 1, so what went into a
            # cut link comes again and the hub, seeing Last-Consumer 0 in the heartbeats, answers a flow
            # control request lost in the cut rather than asking again forever
            existing.reset(0)
        if identity:
            req.resp_hdr = make_headers([("Nats-Stream-Identity", identity)])
        return info_with_dynamic_metadata(existing.info())
    if action == "update":
        raise api_error("JSConsumerDoesNotExist")
    mc = stream.config.get("max_consumers", -1)
    lim = req.jsa.limits.max_consumers
    if mc <= 0 or 0 < lim < mc:
        mc = lim
    # what a hub's mirror or source made does not count against the limit (nats-server's
    # numLimitableConsumers)
    if mc > 0 and sum(1 for c in stream.consumers.values() if not c.direct) >= mc:
        raise api_error("JSMaximumConsumersLimitErr")
    if stream.retention == "workqueue" and not sync:
        if cfg["ack_policy"] not in ("explicit", "flow_control"):
            raise api_error("JSConsumerWQRequiresExplicitAckErr")
        if cfg["deliver_policy"] != "all":
            raise api_error("JSConsumerWQConsumerNotDeliverAllErr")
        if stream.consumers:
            if not _filters(cfg):
                raise api_error("JSConsumerWQMultipleUnfilteredErr")
            _wq_unique(stream, name, cfg)
    if durable and len(durable) > MAX_NAME:
        raise api_error("JSConsumerNameTooLongErrF", max=MAX_NAME)
    if not name:
        name = _ephemeral_name()
        while name in stream.consumers:
            name = _ephemeral_name()
    if not valid_asset_name(name):
        raise api_error("JSConsumerBadDurableNameErr")
    if not durable and not cfg.get("inactive_threshold"):
        cfg = _with_inactive(cfg)
    created = time.time_ns()
    c = Consumer(stream, name, cfg, created)
    stream.add_consumer(c)
    if c.persist:
        stream.store.put_consumer(name, _enc({"config": cfg, "created": created}), c.state_bytes())
    req.js.advisory(req.jsa, f"CONSUMER.CREATED.{stream.name}.{name}", {
        "type": "io.nats.jetstream.advisory.v1.consumer_action", "stream": stream.name, "consumer": name,
        "action": "create"})
    c.kick()
    if identity:
        req.resp_hdr = make_headers([("Nats-Stream-Identity", identity)])
    return info_with_dynamic_metadata(c.info())


def _with_inactive(cfg: dict[str, Any]) -> dict[str, Any]:
    """An ephemeral's config with nats-server's default inactive threshold, in its marshal order."""
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        if k == "num_replicas":
            out["inactive_threshold"] = EPHEMERAL_INACTIVE
        out[k] = v
    return out


def _wq_unique(stream: Stream, name: str, cfg: dict[str, Any]) -> None:
    """nats-server's partitionUnique: a workqueue consumer's filters overlap no other consumer's."""
    mine = _filters(cfg)
    if not mine:
        return
    for other in stream.consumers.values():
        if other.name == name:
            continue
        theirs = other.filters
        if not theirs or any(subjects_overlap(a, b) for a in mine for b in theirs):
            raise api_error("JSConsumerWQConsumerNotUniqueErr")


@handler("CONSUMER.CREATE", "consumer_create_response", (1, 1 << 16), level_gate="handler")
def consumer_create(req: ApiRequest) -> dict[str, Any]:
    return _create(req, durable_api=False)


@handler("CONSUMER.DURABLE.CREATE", "consumer_create_response", (2, 2), level_gate="handler")
def consumer_durable_create(req: ApiRequest) -> dict[str, Any]:
    return _create(req, durable_api=True)


@handler("CONSUMER.INFO", "consumer_info_response", (2, 2), level_gate="handler")
def consumer_info(req: ApiRequest) -> dict[str, Any]:
    if not req.is_empty():
        raise api_error("JSNotEmptyRequestErr")
    req.check_level()
    return info_with_dynamic_metadata(_consumer(req)[1].info())


@handler("CONSUMER.DELETE", "consumer_delete_response", (2, 2))
async def consumer_delete(req: ApiRequest) -> dict[str, Any]:
    if not req.is_empty():
        raise api_error("JSNotEmptyRequestErr")
    _, c = _consumer(req)
    await c.delete()
    return {"success": True}


def _page(req: ApiRequest) -> tuple[Stream, list[str], int]:
    """The stream, its consumer names in order and the requested offset (clamped as nats-server does);
    a body that is not a JSON object or array means no options."""
    offset = 0
    if req.has_options():
        offset = max(0, req.decode("JSApiConsumersRequest", {"offset": "int"}).get("offset", 0))
    stream = _stream(req)
    names = sorted(n for n, c in stream.consumers.items() if not c.direct)
    return stream, names, min(offset, len(names))


_PAGED_ERR = {"total": 0, "offset": 0, "limit": 0, "consumers": []}


@handler("CONSUMER.NAMES", "consumer_names_response", (1, 1), err_fields=_PAGED_ERR)
def consumer_names(req: ApiRequest) -> dict[str, Any]:
    _, names, offset = _page(req)
    return {"total": len(names), "offset": offset, "limit": NAMES_LIMIT,
            "consumers": names[offset:offset + NAMES_LIMIT]}


@handler("CONSUMER.LIST", "consumer_list_response", (1, 1), err_fields=_PAGED_ERR)
def consumer_list(req: ApiRequest) -> dict[str, Any]:
    stream, names, offset = _page(req)
    return {"total": len(names), "offset": offset, "limit": LIST_LIMIT,
            "consumers": [stream.consumers[n].info() for n in names[offset:offset + LIST_LIMIT]]}


@handler("CONSUMER.MSG.NEXT")
def consumer_next(req: ApiRequest) -> None:
    assert req.jsa is not None
    stream = req.jsa.streams.get(req.tokens[0]) if req.tokens else None
    c = stream.consumers.get(req.tokens[1]) if stream is not None and len(req.tokens) > 1 else None
    if c is None:  # nobody listens there (Dispatcher._listened): the requester got "no responders"
        return None
    c.next_request(req.reply, req.data)
    return None



@handler("CONSUMER.PAUSE", "consumer_pause_response", (2, 2),
          err_fields={"paused": False, "pause_until": ZERO_TIME}, level_gate="handler")
def consumer_pause(req: ApiRequest) -> dict[str, Any]:
    """Pause until a time (kept in the config, in UTC, even when already past) or resume (no time)."""
    until = ""
    if req.has_options():
        until = req.decode("JSApiConsumerPauseRequest", {"pause_until": "time"}).get("pause_until") or ""
    req.check_level()
    _, c = _consumer(req)
    ns = time_ns(until) if until and until != ZERO_TIME else 0
    utc = format_time(ns) if ns else ZERO_TIME
    cfg = {k: v for k, v in c.config.items() if k != "pause_until"}
    if ns:
        cfg["pause_until"] = utc
    c.update(with_static_consumer_metadata(cfg))
    now = time.time_ns()
    out: dict[str, Any] = {"paused": bool(ns) and ns > now, "pause_until": utc}
    if out["paused"]:
        out["pause_remaining"] = ns - now
    return out


@handler("CONSUMER.UNPIN", "consumer_unpin_response", (2, 2))
def consumer_unpin(req: ApiRequest) -> dict[str, Any]:
    """A pinned_client consumer's pin is taken from its client: nats-server's checks in its order (it reads
    this body leniently: json.Unmarshal), then the unpinned advisory ("admin")."""
    err = syntax_error(req.data)  # the whole body one value, unknown fields ignored
    if err is not None:
        raise api_error("JSInvalidJSONErr", err=err)
    doc = _dec.decode(req.data)
    if doc is not None and not isinstance(doc, dict):
        raise api_error("JSInvalidJSONErr", err=f"json: cannot unmarshal {go_kind(doc)} into Go value of type "
                                               f"server.JSApiConsumerUnpinRequest")
    group = decode_fields(doc or {}, {"group": "string"}, "JSApiConsumerUnpinRequest", strict=False).get("group") or ""
    if not group:
        raise api_error("JSInvalidJSONErr", err="consumer group not specified")
    if not GROUP_NAME.fullmatch(group):
        raise api_error("JSConsumerInvalidGroupNameErr")
    _, c = _consumer(req)
    if group not in c.groups:
        raise api_error("JSConsumerInvalidPriorityGroupErr")
    c.unpin(group, "admin")
    return {}


_RESET_TYPE = TYPE_PREFIX + "consumer_reset_response"


@handler("CONSUMER.RESET", arity=(2, 2))
def consumer_reset(req: ApiRequest) -> None:
    """A consumer starts over at a sequence. nats-server serves this on the consumer's own subscription,
    not its API dispatcher: no consumer, no reply (no "no responders" either: the API import took it), no
    API count or audit; the body is read leniently (json.Unmarshal), only when there is one."""
    assert req.jsa is not None
    stream = req.jsa.streams.get(req.tokens[0])
    c = stream.consumers.get(req.tokens[1]) if stream is not None else None
    if c is None:
        return None
    out: dict[str, Any] = {"type": _RESET_TYPE}
    hdr = None
    try:
        req.check_level()
        identity = stream_identity(c.stream) if get_header(req.hdr, "Nats-Stream-Identity") is not None else ""
        seq = 0
        if req.data:
            err = syntax_error(req.data)
            if err is not None:
                raise api_error("JSInvalidJSONErr", err=err)
            doc = _dec.decode(req.data)
            if doc is not None and not isinstance(doc, dict):
                raise api_error("JSInvalidJSONErr", err=f"json: cannot unmarshal {go_kind(doc)} into Go value of "
                                                       f"type server.JSApiConsumerResetRequest")
            seq = decode_fields(doc or {}, {"seq": "uint64"}, "JSApiConsumerResetRequest", strict=False).get("seq") or 0
        try:
            start = c.reset(int(seq))
        except ValueError as e:
            raise api_error("JSConsumerInvalidResetErr", err=str(e)) from None
    except JSApiError as e:
        out.update({"error": e.to_dict(), "reset_seq": 0})
    else:
        out.update(info_with_dynamic_metadata(c.info()))
        out["reset_seq"] = start
        if identity:
            hdr = make_headers([("Nats-Stream-Identity", identity)])
    req.account.internal.publish(req.reply, _enc(out), hdr=hdr)
    req.js.pubacks.spin()
    return None


def install(js: JetStream) -> None:
    for f in (consumer_create, consumer_durable_create, consumer_info, consumer_delete, consumer_names,
              consumer_list, consumer_next, consumer_pause, consumer_unpin, consumer_reset):
        js.register_api(f.prefix, f)  # type: ignore[attr-defined]
