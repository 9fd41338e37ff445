"""An account's JetStream: its streams, its limits and what its streams use and reserve.

Streams come and go here only: created by the API (`add_stream`), reopened from the store at start
(`restore_stream`), both through `open_stream`; updated (`update_stream`) and deleted (`delete_stream`)
with nats-server's checks in its order, so a request with several faults gets the same error.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import msgspec

from edged.jetstream.consumer import Consumer
from edged.jetstream.mirror import StreamSync
from edged.jetstream.stream import Stream, check_update
from edged.jetstream.wire.errors import api_error
from edged.jetstream.wire.versioning import like_previous
from edged.log import log
from edged.routing.subjects import subject_matches, subjects_overlap
from storage import StreamExistsError

if TYPE_CHECKING:
    from edged.jetstream.engine import JetStream
    from edged.routing.accounts import Account
    from edged.settings.options import JetStreamAccountLimits
    from storage.base import Stream as StoreStream

_encode = msgspec.json.Encoder().encode
_decoder = msgspec.json.Decoder()


class JSAccount:
    """An account's JetStream: its streams and limits."""

    def __init__(self, js: JetStream, account: Account, limits: JetStreamAccountLimits) -> None:
        self.js = js
        self.space = js.space
        self.account = account
        self.limits = limits
        self.streams: dict[str, Stream] = {}
        self.internal = account.internal
        self.push_consumers = 0
        self.api_total = 0
        self.api_errors = 0
        account.interest_listeners.append(self._on_interest)

    def _on_interest(self, sub: Any, added: bool) -> None:
        """A subscriber appeared: push consumers delivering to its subject can start (nats-server does
        the same, so a client may create the consumer before subscribing its deliver subject)."""
        if not added or not self.push_consumers or sub.conn is self.internal:
            return
        for s in self.streams.values():
            for c in s.consumers.values():
                if c.push and subject_matches(sub.subject, c.deliver_subject):
                    c.kick()

    def usage(self) -> tuple[int, int]:
        mem = file = 0
        for s in self.streams.values():
            if s.config["storage"] == "memory":
                mem += s.store.bytes
            else:
                file += s.store.bytes
        return mem, file

    def reserved(self, skip: str = "") -> tuple[int, int]:
        """Bytes reserved by streams with max_bytes (memory, file), as nats-server's reservedStorage."""
        mem = file = 0
        for s in self.streams.values():
            mb = s.config["max_bytes"]
            if mb > 0 and s.name != skip:
                if s.config["storage"] == "memory":
                    mem += mb
                else:
                    file += mb
        return mem, file

    def check_store(self, stream: Stream, size: int) -> None:
        """Before storing a message: the server already past its limit is "insufficient resources", the
        account going past its limit with this message is "resource limits exceeded" (nats-server's
        checks, in its order)."""
        lim = self.limits
        space = self.space
        memory = stream.config["storage"] == "memory"
        acc_max = lim.max_memory if memory else lim.max_file
        srv_max = space.max_memory if memory else space.max_file
        if acc_max < 0 and srv_max < 0:
            return
        if srv_max >= 0 and space.server_usage(memory, size) > srv_max:
            raise api_error("JSInsufficientResourcesErr")
        if acc_max >= 0:
            mem, file = self.usage()
            if (mem if memory else file) + size > acc_max:
                raise api_error("JSAccountResourcesExceededErr")

    def direct_stream(self, name: str) -> Stream | None:
        """The stream that answers direct gets for `name`: that stream with `allow_direct`, else a mirror of
        it with `mirror_direct` (nats-server's mirror joins its origin's direct get group)."""
        stream = self.streams.get(name)
        if stream is not None and stream.config.get("allow_direct"):
            return stream
        for s in self.streams.values():
            m = s.config.get("mirror")
            if m and m.get("name") == name and s.config.get("mirror_direct"):
                return s
        return None

    def consumer_count(self) -> int:
        return sum(len(s.consumers) for s in self.streams.values())

    def limits_dict(self) -> dict[str, Any]:
        lim = self.limits
        return {"max_memory": lim.max_memory, "max_storage": lim.max_file, "max_streams": lim.max_streams,
                "max_consumers": lim.max_consumers, "max_ack_pending": lim.max_ack_pending,
                "memory_max_stream_bytes": lim.memory_max_stream_bytes,
                "storage_max_stream_bytes": lim.store_max_stream_bytes,
                "max_bytes_required": lim.max_bytes_required}

    # ------------------------------------------------------------------ streams coming and going

    def open_stream(self, cfg: dict[str, Any], st: StoreStream, created: int, restored: bool = False) -> Stream:
        """A stream running over its store's part: registered and subscribed. A new stream and one
        restored at start both come through here; a restored one first recalls its dedupe window."""
        stream = Stream(self.js, self, cfg, st, created)
        if restored:
            stream.rebuild_dedupe()
        self.streams[stream.name] = stream
        stream.subscribe()
        _start_sync(stream)
        return stream

    def restore_stream(self, st: StoreStream) -> None:
        """A stream the store kept, with its consumers, as it was when the server stopped."""
        try:
            cfg = _decoder.decode(st.config)
            created = st.created_ns
        except Exception as e:
            log.error("JetStream: stream %s has an unreadable config: %s", st.name, e)
            return
        stream = self.open_stream(cfg, st, created, restored=True)
        for cname, (ccfg, cstate) in list(st.consumers.items()):
            try:
                _restore_consumer(stream, cname, ccfg, cstate)
            except Exception as e:
                log.error("JetStream: consumer %s > %s could not be restored: %s", st.name, cname, e)
        try:
            # (max_age is the ticker's: it runs within the second)
            stream.enforce_limits(max_age=False)
        except Exception as e:
            log.error("JetStream: stream %s: limits could not be applied on restore: %s", st.name, e)

    async def add_stream(self, cfg: dict[str, Any]) -> Stream:
        """Create a stream from a normalized config (stream.normalize_config), stored durably before it
        runs. The same config as an existing stream's is that stream (nats-server's idempotent create)."""
        name = cfg["name"]
        self._check_max_bytes_required(cfg)
        self._check_stream_limits(cfg, name, creating=True)
        existing = self.streams.get(name)
        if existing is not None:
            if like_previous(cfg, existing.config) == existing.config:  # the versioning keys aside
                return existing
            raise api_error("JSStreamNameExistErr")
        self._check_overlap(cfg)
        js = self.js
        store = js.store_for(cfg["storage"])
        try:
            st = store.create_stream(name, _encode(cfg), account=self.account.name, first_seq=cfg.get("first_seq") or 0)
        except StreamExistsError:
            raise api_error("JSStreamNameExistErr") from None
        await store.durable()
        stream = self.open_stream(cfg, st, st.created_ns)
        js.advisory(self, f"STREAM.CREATED.{name}", {"type": "io.nats.jetstream.advisory.v1.stream_action",
                                                     "stream": name, "action": "create"})
        return stream

    async def update_stream(self, stream: Stream, cfg: dict[str, Any]) -> None:
        """Change a stream's config (normalized, same name) where nats-server allows it: stored, then
        applied, its subscriptions and limits following."""
        name = stream.name
        check_update(stream.config, cfg)
        if cfg["sealed"]:
            # what sealing means, spelled out in the config as nats-server does
            cfg.update(max_age=0, discard="new", deny_delete=True, deny_purge=True, allow_rollup_hdrs=False)
        self._check_max_bytes_required(cfg)
        self._check_stream_limits(cfg, name, creating=False, old_max_bytes=stream.config["max_bytes"])
        self._check_overlap(cfg, skip=name)
        old_subjects = stream.config.get("subjects", [])
        old_sync = (stream.config.get("mirror"), stream.config.get("sources"))
        stream.config = cfg
        stream._apply_config()
        await stream.store.update_config(_encode(cfg))
        if old_sync != (cfg.get("mirror"), cfg.get("sources")):
            if stream.sync is not None:
                stream.sync.stop()
                stream.sync = None
            _start_sync(stream)
        if old_subjects != cfg.get("subjects", []):
            stream.unsubscribe()
            stream.subscribe()
        stream.enforce_limits()
        self.js.advisory(self, f"STREAM.UPDATED.{name}", {"type": "io.nats.jetstream.advisory.v1.stream_action",
                                                          "stream": name, "action": "modify"})

    async def delete_stream(self, stream: Stream) -> None:
        """Remove a stream with its consumers and its messages; each consumer's delete advisory goes out
        before the stream's, as from nats-server."""
        name = stream.name
        await _close(stream, deleted=True)
        del self.streams[name]
        js = self.js
        store = js.store_for(stream.config["storage"])
        store.delete_stream(name, account=self.account.name)
        await store.durable()
        js.space.space_freed()
        js.advisory(self, f"STREAM.DELETED.{name}", {"type": "io.nats.jetstream.advisory.v1.stream_action",
                                                     "stream": name, "action": "delete"})

    async def stop(self) -> None:
        """The server stops: streams and consumers stop, their state stays stored."""
        for s in self.streams.values():
            await _close(s, deleted=False)

    def _check_overlap(self, cfg: dict[str, Any], skip: str = "") -> None:
        for other in self.streams.values():
            if other.name == skip:
                continue
            for a in cfg.get("subjects", []):
                for b in other.config.get("subjects", []):
                    if subjects_overlap(a, b):
                        raise api_error("JSStreamSubjectOverlapErr")

    def _check_stream_limits(self, cfg: dict[str, Any], name: str, creating: bool, old_max_bytes: int = 0) -> None:
        """nats-server's jsNonClusteredStreamLimitsCheck / configUpdateCheck limits: the stream count, the
        account's max_consumers, and max_bytes reservations against the account's and the server's
        memory/storage limits. A stream without max_bytes reserves one byte."""
        lim = self.limits
        if creating and lim.max_streams > 0 and sum(1 for n in self.streams if n != name) >= lim.max_streams:
            raise api_error("JSMaximumStreamsLimitErr")
        if cfg["max_consumers"] > 0 and lim.max_consumers > 0 and cfg["max_consumers"] > lim.max_consumers:
            raise api_error("JSMaximumConsumersLimitErr")
        memory = cfg["storage"] == "memory"
        i = 0 if memory else 1
        new_max = cfg["max_bytes"]
        others = self.reserved(skip=name)[i]  # the account's other streams
        if creating:
            add = new_max if new_max >= 0 else 1
            reserved = others
        else:
            add = max(max(new_max, 0) - max(old_max_bytes, 0), 0)
            reserved = others + max(new_max - add, 0)
        acc_max = lim.max_memory if memory else lim.max_file
        err = "JSMemoryResourcesExceededErr" if memory else "JSStorageResourcesExceededErr"
        if acc_max >= 0 and (reserved > acc_max or add > acc_max - reserved):
            raise api_error(err)
        space = self.space
        srv_max = space.max_memory if memory else space.max_file
        if srv_max >= 0:
            # every stream of the server but this one
            srv_reserved = space.total_reserved()[i] - (self.reserved()[i] - others)
            if srv_reserved > srv_max or add > srv_max - srv_reserved:
                raise api_error(err)

    def _check_max_bytes_required(self, cfg: dict[str, Any]) -> None:
        lim = self.limits
        per_stream = lim.memory_max_stream_bytes if cfg["storage"] == "memory" else lim.store_max_stream_bytes
        if lim.max_bytes_required and cfg["max_bytes"] <= 0:
            raise api_error("JSStreamMaxBytesRequired")
        if per_stream > 0 and cfg["max_bytes"] > per_stream:
            raise api_error("JSStreamMaxStreamBytesExceeded")


async def _close(stream: Stream, deleted: bool) -> None:
    """Stop a stream taking messages and stop its consumers; for a deletion each consumer also sends its
    delete advisory."""
    stream.closed = True
    stream.unsubscribe()
    if stream.atomic is not None:  # open batches go with it (the global in-flight count too)
        stream.atomic.clear()
    if stream.scheduler is not None:
        stream.scheduler.stop()
    if stream.sync is not None:
        stream.sync.stop()
        stream.sync = None
    for c in list(stream.consumers.values()):
        await c.stop(deleted=deleted)
        if deleted:
            c.delete_advisory()


def _start_sync(stream: Stream) -> None:
    """A mirror, or a stream with sources, starts taking its origins' messages."""
    if stream.config.get("mirror") or stream.config.get("sources"):
        stream.sync = StreamSync(stream)
        stream.sync.start()


def _restore_consumer(stream: Stream, name: str, config: bytes, state: bytes) -> None:
    """Recreate a persisted consumer after a restart: acked stays acked, pending is redelivered."""
    doc = _decoder.decode(config)
    cfg, created = (doc["config"], int(doc.get("created") or 0)) if "config" in doc else (doc, 0)
    st = _decoder.decode(state) if state else None
    c = Consumer(stream, name, cfg, created or time.time_ns(), st)
    stream.add_consumer(c)
    c.kick()
