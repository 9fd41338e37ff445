"""`$JS.API.CONSUMER.*` handlers and the consumer factory used when streams are restored."""

from __future__ import annotations

import os
import string
import time
from typing import TYPE_CHECKING, Any

import msgspec

from edged.jetstream.consumer import Consumer, check_update, normalize
from edged.jetstream.errors import api_error
from edged.jetstream.stream import parse_rfc3339, rfc3339ns

if TYPE_CHECKING:
    from edged.jetstream.engine import ApiRequest, JetStream
    from edged.jetstream.stream import Stream

T = "io.nats.jetstream.api.v1."
NAMES_LIMIT = 1024
LIST_LIMIT = 256
_ALPHA = string.ascii_letters + string.digits
_enc = msgspec.json.Encoder().encode
_dec = msgspec.json.Decoder()


def _rtype(name: str) -> Any:
    def deco(f: Any) -> Any:
        f.resp_type = T + name
        return f
    return deco


def _ephemeral_name() -> str:
    raw = os.urandom(8)
    return "".join(_ALPHA[b % len(_ALPHA)] for b in raw)


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
    stream = _stream(req)
    body = req.json()
    if body.get("stream_name") and body["stream_name"] != stream.name:
        raise api_error("JSStreamMismatchErr")
    raw = body.get("config")
    if not isinstance(raw, dict):
        raise api_error("JSConsumerConfigRequiredErr")
    cfg_in = dict(raw)
    action = body.get("action") or ""
    subj_name = req.tokens[1] if len(req.tokens) > 1 else ""
    subj_filter = ".".join(req.tokens[2:]) if len(req.tokens) > 2 else ""
    if durable_api:
        if not cfg_in.get("durable_name"):
            raise api_error("JSConsumerDurableNameNotSetErr")
        if cfg_in["durable_name"] != subj_name:
            raise api_error("JSConsumerDurableNameNotMatchSubjectErr")
    elif subj_name:
        for k in ("name", "durable_name"):
            if cfg_in.get(k) and cfg_in[k] != subj_name:
                raise api_error("JSConsumerDurableNameNotMatchSubjectErr")
        cfg_in.setdefault("name", subj_name)
        if subj_filter:
            if cfg_in.get("filter_subjects"):
                raise api_error("JSConsumerMultipleFiltersNotAllowed")
            if cfg_in.get("filter_subject") and cfg_in["filter_subject"] != subj_filter:
                raise api_error("JSConsumerCreateFilterSubjectMismatchErr")
            cfg_in["filter_subject"] = subj_filter
    name = cfg_in.get("name") or cfg_in.get("durable_name") or ""
    existing = stream.consumers.get(name) if name else None
    cfg = normalize(cfg_in, stream, name_hint=name or _ephemeral_name())
    name = cfg.get("name") or cfg.get("durable_name") or ""
    if existing is not None:
        if existing.config == cfg:
            return existing.info()
        if action == "create":
            raise api_error("JSConsumerAlreadyExists")
        check_update(existing.config, cfg)
        existing.update(cfg)
        return existing.info()
    if action == "update":
        raise api_error("JSConsumerDoesNotExist")
    mc = stream.config.get("max_consumers", -1)
    if mc > 0 and len(stream.consumers) >= mc:
        raise api_error("JSMaximumConsumersLimitErr")
    assert req.jsa is not None
    lim = req.jsa.limits.max_consumers
    if lim >= 0 and req.jsa.consumer_count() >= lim:
        raise api_error("JSMaximumConsumersLimitErr")
    created = time.time_ns()
    c = Consumer(stream, name, cfg, created)
    stream.add_consumer(c)
    if c.persist:
        stream.store.put_consumer(name, _enc({"config": cfg, "created": created}), c.state_bytes())
    req.js.advisory(req.jsa, f"CONSUMER.CREATED.{stream.name}.{name}", {
        "type": "io.nats.jetstream.advisory.v1.consumer_action", "stream": stream.name, "consumer": name,
        "action": "create"})
    c.kick()
    return c.info()


@_rtype("consumer_create_response")
def consumer_create(req: ApiRequest) -> dict[str, Any]:
    return _create(req, durable_api=False)


@_rtype("consumer_create_response")
def consumer_durable_create(req: ApiRequest) -> dict[str, Any]:
    return _create(req, durable_api=True)


@_rtype("consumer_info_response")
def consumer_info(req: ApiRequest) -> dict[str, Any]:
    return _consumer(req)[1].info()


@_rtype("consumer_delete_response")
async def consumer_delete(req: ApiRequest) -> dict[str, Any]:
    stream, c = _consumer(req)
    await c.stop(deleted=True)
    stream.remove_consumer(c.name)
    assert req.jsa is not None
    req.js.advisory(req.jsa, f"CONSUMER.DELETED.{stream.name}.{c.name}", {
        "type": "io.nats.jetstream.advisory.v1.consumer_action", "stream": stream.name, "consumer": c.name,
        "action": "delete"})
    return {"success": True}


@_rtype("consumer_names_response")
def consumer_names(req: ApiRequest) -> dict[str, Any]:
    stream = _stream(req)
    offset = max(0, int(req.json().get("offset") or 0))
    names = sorted(stream.consumers)
    return {"total": len(names), "offset": offset, "limit": NAMES_LIMIT,
            "consumers": names[offset:offset + NAMES_LIMIT]}


@_rtype("consumer_list_response")
def consumer_list(req: ApiRequest) -> dict[str, Any]:
    stream = _stream(req)
    offset = max(0, int(req.json().get("offset") or 0))
    names = sorted(stream.consumers)
    return {"total": len(names), "offset": offset, "limit": LIST_LIMIT,
            "consumers": [stream.consumers[n].info() for n in names[offset:offset + LIST_LIMIT]]}


def consumer_next(req: ApiRequest) -> None:
    assert req.jsa is not None
    stream = req.jsa.streams.get(req.tokens[0]) if req.tokens else None
    c = stream.consumers.get(req.tokens[1]) if stream is not None and len(req.tokens) > 1 else None
    if c is None:
        from edged.headers import make_headers

        req.jsa.internal.publish(req.reply, b"", "", make_headers(status=404, description="No Messages"))
        return None
    c.next_request(req.reply, req.data)
    return None


@_rtype("consumer_pause_response")
def consumer_pause(req: ApiRequest) -> dict[str, Any]:
    _, c = _consumer(req)
    body = req.json()
    until = body.get("pause_until") or ""
    ns = parse_rfc3339(until) if until else 0
    cfg = dict(c.config)
    if ns and ns > time.time_ns():
        cfg["pause_until"] = until
    else:
        cfg.pop("pause_until", None)
    c.update(cfg)
    paused = bool(ns and ns > time.time_ns())
    out: dict[str, Any] = {"paused": paused, "pause_until": rfc3339ns(ns) if ns else "0001-01-01T00:00:00Z"}
    if paused:
        out["pause_remaining"] = ns - time.time_ns()
    return out


def restore(stream: Stream, name: str, config: bytes, state: bytes) -> None:
    """Recreate a persisted consumer after a restart: acked stays acked, pending is redelivered."""
    doc = _dec.decode(config)
    cfg, created = (doc["config"], int(doc.get("created") or 0)) if "config" in doc else (doc, 0)
    st = _dec.decode(state) if state else None
    c = Consumer(stream, name, cfg, created or time.time_ns(), st)
    stream.add_consumer(c)
    c.kick()


def install(js: JetStream) -> None:
    js.register_api("CONSUMER.CREATE", consumer_create)
    js.register_api("CONSUMER.DURABLE.CREATE", consumer_durable_create)
    js.register_api("CONSUMER.INFO", consumer_info)
    js.register_api("CONSUMER.DELETE", consumer_delete)
    js.register_api("CONSUMER.NAMES", consumer_names)
    js.register_api("CONSUMER.LIST", consumer_list)
    js.register_api("CONSUMER.MSG.NEXT", consumer_next)
    js.register_api("CONSUMER.PAUSE", consumer_pause)
    js.consumer_factory = restore
