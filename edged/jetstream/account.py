"""An account's JetStream: its streams, its limits and what its streams use and reserve."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edged.jetstream.errors import api_error
from edged.sublist import subject_matches

if TYPE_CHECKING:
    from edged.accounts import Account
    from edged.jetstream.engine import JetStream
    from edged.jetstream.stream import Stream
    from edged.options import JetStreamAccountLimits


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

    def consumer_count(self) -> int:
        return sum(len(s.consumers) for s in self.streams.values())

    def limits_dict(self) -> dict[str, Any]:
        lim = self.limits
        return {"max_memory": lim.max_memory, "max_storage": lim.max_file, "max_streams": lim.max_streams,
                "max_consumers": lim.max_consumers, "max_ack_pending": lim.max_ack_pending,
                "memory_max_stream_bytes": lim.memory_max_stream_bytes,
                "storage_max_stream_bytes": lim.store_max_stream_bytes,
                "max_bytes_required": lim.max_bytes_required}

