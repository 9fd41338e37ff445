"""Config rules of the stream features nats-server 2.12 added (JetStream API level 2): counters,
atomic batch publish, message schedules and the persist mode, as its checkStreamCfg and update checks
apply them. Kept apart so each feature's module (counters, batches, schedules) stays about messages."""

from __future__ import annotations

from typing import Any

from edged.jetstream.wire.errors import JSApiError, api_error


def _invalid(msg: str) -> JSApiError:
    return api_error("JSStreamInvalidConfigF", err=msg)


def level2_config_checks(req: dict[str, Any], retention: str, discard: str, storage: str, allow_rollup: bool,
                         deny_purge: bool) -> tuple[bool, bool]:
    """Refuse what nats-server refuses; returns (allow_rollup_hdrs, deny_purge), which message schedules
    switch on (roll-ups) unless the request is pedantic."""
    counter = bool(req.get("allow_msg_counter"))
    schedules = bool(req.get("allow_msg_schedules"))
    atomic = bool(req.get("allow_atomic"))
    if counter:
        if discard == "new":
            raise _invalid("counter stream cannot use discard new")
        if req.get("allow_msg_ttl"):
            raise _invalid("counter stream cannot use message TTLs")
        if schedules:
            raise _invalid("counter stream cannot use message schedules")
        if retention != "limits":
            raise _invalid("counter stream can only use limits retention")
    if schedules:
        if discard == "new":
            raise _invalid("message scheduling cannot use discard new")
        if not allow_rollup:
            if req.get("pedantic"):
                raise _invalid("message scheduling cannot be set if roll-ups are disabled")
            allow_rollup, deny_purge = True, False
    if req.get("persist_mode") == "async":
        if storage != "file":
            raise _invalid("async persist mode is only supported on file storage")
        if atomic:
            raise _invalid("async persist mode is not supported with atomic batch publish")
    if req.get("mirror"):
        if counter:
            raise api_error("JSMirrorWithCountersErr")
        if atomic:
            raise api_error("JSMirrorWithAtomicPublishErr")
        if schedules:
            raise api_error("JSMirrorWithMsgSchedulesErr")
    if req.get("sources") and schedules:
        raise api_error("JSSourceWithMsgSchedulesErr")
    return allow_rollup, deny_purge


def level2_config_fields(req: dict[str, Any], cfg: dict[str, Any]) -> None:
    """The fields as nats-server reports them: present only when set (omitempty)."""
    for key in ("allow_msg_counter", "allow_atomic", "allow_msg_schedules"):
        if req.get(key):
            cfg[key] = True
    if req.get("persist_mode") == "async":
        cfg["persist_mode"] = "async"


def level2_update_checks(old: dict[str, Any], new: dict[str, Any]) -> None:
    if bool(old.get("allow_msg_counter")) != bool(new.get("allow_msg_counter")):
        raise _invalid("stream configuration update can not change message counter setting")
    if old.get("allow_msg_schedules") and not new.get("allow_msg_schedules"):
        raise _invalid("message schedules can not be disabled")
    if old.get("persist_mode") != new.get("persist_mode"):
        raise _invalid("stream configuration update can not change persist mode")
