"""Asset versioning as nats-server writes it (server/jetstream_versioning.go): the API level a stream or
consumer config needs (`_nats.req.level`, stored with the config), the server's version and level
(`_nats.ver`, `_nats.level`, only ever added to responses), and the `Nats-Required-Api-Level` gate on API
requests. The level itself is edged.API_LEVEL."""

from __future__ import annotations

import re
from typing import Any

from edged import API_LEVEL, SERVER_VERSION
from edged.routing.headers import get_header

REQ_LEVEL_KEY = "_nats.req.level"
VERSION_KEY = "_nats.ver"
LEVEL_KEY = "_nats.level"
REQUIRED_LEVEL_HEADER = "Nats-Required-Api-Level"
_GO_INT = re.compile(r"[+-]?[0-9]+")


def stream_required_level(cfg: dict[str, Any]) -> int:
    """The API level a stream config needs to be restored as it is."""
    level = 0
    if cfg.get("allow_msg_ttl") or (cfg.get("subject_delete_marker_ttl") or 0) > 0:
        level = 1
    if (cfg.get("allow_msg_counter") or cfg.get("allow_atomic") or cfg.get("allow_msg_schedules")
            or cfg.get("persist_mode") == "async"):
        level = 2
    if cfg.get("allow_batched"):
        level = 4
    return level


def consumer_required_level(cfg: dict[str, Any]) -> int:
    """The API level a consumer config needs (a pause in the future or past, priority groups, flow_control)."""
    level = 0
    if cfg.get("pause_until") and not str(cfg["pause_until"]).startswith("0001-01-01T00:00:00"):
        level = 1
    if (cfg.get("priority_policy") or "none") != "none" or cfg.get("pinned_ttl") or cfg.get("priority_groups"):
        level = 1
    if cfg.get("ack_policy") == "flow_control":
        level = 4
    return level


def _static(cfg: dict[str, Any], level: int) -> dict[str, Any]:
    md = {k: v for k, v in (cfg.get("metadata") or {}).items() if k not in (VERSION_KEY, LEVEL_KEY)}
    md[REQ_LEVEL_KEY] = str(level)
    return {**cfg, "metadata": md}


def with_static_stream_metadata(cfg: dict[str, Any]) -> dict[str, Any]:
    """The config to store: the level it needs set, any dynamic key a client sent dropped."""
    return _static(cfg, stream_required_level(cfg))


def with_static_consumer_metadata(cfg: dict[str, Any]) -> dict[str, Any]:
    return _static(cfg, consumer_required_level(cfg))


def with_dynamic_metadata(cfg: dict[str, Any]) -> dict[str, Any]:
    """A config as a create, update or info response shows it: with this server's version and level."""
    return {**cfg, "metadata": {**(cfg.get("metadata") or {}), VERSION_KEY: SERVER_VERSION,
                                LEVEL_KEY: str(API_LEVEL)}}


def info_with_dynamic_metadata(info: dict[str, Any]) -> dict[str, Any]:
    return {**info, "config": with_dynamic_metadata(info["config"])}


def like_previous(cfg: dict[str, Any], prev: dict[str, Any]) -> dict[str, Any]:
    """`cfg` with the versioning keys of `prev` (nats-server's copyStreamMetadata/copyConsumerMetadata), so
    that comparing the two ignores them: an idempotent create of an asset stored by another version."""
    md = {k: v for k, v in (cfg.get("metadata") or {}).items() if k not in (VERSION_KEY, LEVEL_KEY, REQ_LEVEL_KEY)}
    pmd = prev.get("metadata") or {}
    if REQ_LEVEL_KEY in pmd:
        md[REQ_LEVEL_KEY] = pmd[REQ_LEVEL_KEY]
    out = {k: v for k, v in cfg.items() if k != "metadata"} if not md else {**cfg, "metadata": md}
    return out


def refuses_required_level(hdr: bytes | None) -> bool:
    """A request whose `Nats-Required-Api-Level` is not a number or is above edged's level (10185)."""
    if not hdr:
        return False
    want = get_header(hdr, REQUIRED_LEVEL_HEADER)
    if not want:
        return False
    if not _GO_INT.fullmatch(want):  # strconv.Atoi's syntax
        return True
    return int(want) > API_LEVEL
