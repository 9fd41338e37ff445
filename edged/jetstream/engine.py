"""The JetStream service: the facade the server, streams, consumers and API handlers hold, composed of
one part per concern.

- lifecycle.py: start (stores, accounts, streams restored from the store), the upkeep tick, stop
- dispatch.py: `$JS.API` routing, replies, API counters and audit advisories
- pubacks.py: PubAcks, sent per group-commit batch in publish order, and the reply spin
- space.py: server limits, usage and reservations, the disk reserve and a full disk
- account.py: an account's JetStream (its streams, limits, usage)
- monitoring.py: /varz, /jsz, /healthz

It sits on the router like any other receiver: one internal client per account subscribes the API
subjects (`$JS.API.>` and, with a domain, `$JS.<domain>.API.>`) and each stream's subjects. Streams
and the dispatcher keep the parts they call on the publish and reply paths (`space`, `pubacks`) as
their own attributes, so those calls cost what they did when all of this was one class.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from edged.goformat import rfc3339ns
from edged.jetstream import lifecycle, monitoring
from edged.jetstream.publish.pubacks import PubAcks
from edged.jetstream.space import Space
from edged.jetstream.wire import api, consumer_api
from edged.jetstream.wire.dispatch import ApiRequest, Dispatcher
from edged.jetstream.wire.domain import ACK_PREFIX
from storage import MemoryStore, SQLiteStore

if TYPE_CHECKING:
    from edged.jetstream.account import JSAccount
    from edged.server import Server

_encode = msgspec.json.Encoder().encode


class JetStream:
    """What the rest of edged holds of JetStream: its parts, stores and accounts, and the few calls
    shared by streams, consumers and API handlers (advisories, subject transforms, background tasks)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        cfg = server.opts.jetstream
        self.config = cfg
        self.enabled = True
        self.domain = cfg.domain
        # a consumer client's plain acks come in runs: the client parser takes them as one event each
        server.empty_run_prefix = ACK_PREFIX
        base = cfg.store_dir or os.path.join(tempfile.gettempdir(), "nats")
        # like nats-server, the store lives in a `jetstream` directory inside store_dir
        self.store_dir = os.path.abspath(os.path.join(base, "jetstream"))
        self.file_store: SQLiteStore | None = None
        self.mem_store = MemoryStore()
        self.accounts: dict[str, JSAccount] = {}
        self.ticker: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.started = 0.0
        self.link_up_at = 0.0  # monotonic time a leafnode link last came up (mirror.py)
        self.space = Space(self.store_dir, cfg.max_memory_store, cfg.max_file_store, self.accounts)
        self.pubacks = PubAcks(server, self.space, cfg.domain, cfg.sync_interval)
        self.dispatch = Dispatcher(self)
        api.install(self)
        consumer_api.install(self)

    async def start(self) -> None:
        await lifecycle.start(self)

    async def stop(self) -> None:
        await lifecycle.stop(self)

    def set_domain(self, domain: str) -> None:
        """A reload changed the domain: the API answers on the new `$JS.<domain>.API.>` only, and replies,
        advisories and monitoring name it; streams and their data stay as they are (the domain is not
        part of what is stored)."""
        self.domain = domain
        self.config.domain = domain
        self.pubacks.set_domain(domain)
        self.dispatch.set_domain(domain)

    def signal_pull_consumers(self) -> int:
        """Before the clients are closed at shutdown: tell every waiting pull request (nats-server's
        signalPullConsumers). Returns how many were told."""
        return sum(c.signal_shutdown() for jsa in self.accounts.values() for st in jsa.streams.values()
                   for c in st.consumers.values())

    def account_enabled(self, name: str) -> bool:
        return name in self.accounts

    def leafnode_connected(self, account_name: str) -> None:
        """A leafnode link came up: mirrors and sources start over now rather than at their next retry
        (nats-server's checkInternalSyncConsumers), which is what resyncs them within a second or two."""
        self.link_up_at = time.monotonic()
        for jsa in self.accounts.values():
            for s in jsa.streams.values():
                if s.sync is not None:
                    s.sync.link_up()

    def store_for(self, storage: str) -> Any:
        return self.mem_store if storage == "memory" else self.file_store

    def register_api(self, prefix: str, handler: Callable[[ApiRequest], Any]) -> None:
        self.dispatch.register(prefix, handler)

    def loop_task(self, aw: Any) -> None:
        """Run a coroutine in the background, kept referenced until done."""
        t = asyncio.get_running_loop().create_task(aw)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    def advisory(self, jsa: JSAccount, suffix: str, body: dict[str, Any], kind: str = "ADVISORY") -> None:
        """Publish on `$JS.EVENT.<kind>.<suffix>` (ADVISORY, or METRIC for ack samples), as nats-server."""
        body.setdefault("id", os.urandom(11).hex())
        body.setdefault("timestamp", rfc3339ns(time.time_ns()))
        if self.domain:
            body.setdefault("domain", self.domain)
        jsa.internal.publish(f"$JS.EVENT.{kind}.{suffix}", _encode(body))

    # ------------------------------------------------------------------ monitoring

    def info(self) -> dict[str, Any]:
        """The `jetstream` section of /varz."""
        return monitoring.info(self)

    def jsz(self, opts: Any = None) -> dict[str, Any]:
        return monitoring.jsz(self, opts)

    def healthz(self, account: str = "", stream: str = "", consumer: str = "") -> tuple[bool, str]:
        return monitoring.healthz(self, account, stream, consumer)
