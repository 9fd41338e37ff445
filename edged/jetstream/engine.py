"""The JetStream service: stores, per-account state, the `$JS.API` dispatcher, upkeep timers.

It sits on the router like any other receiver: one internal client per account subscribes the API
subjects (`$JS.API.>` and, with a domain, `$JS.<domain>.API.>`) and each stream's subjects.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from edged.accounts import GLOBAL_ACCOUNT, Account
from edged.jetstream.errors import JSApiError, api_error
from edged.jetstream.stream import Stream, rfc3339ns
from edged.log import log
from edged.options import JetStreamAccountLimits
from edged.sublist import subject_matches
from storage import MemoryStore, SQLiteStore, StoreError

if TYPE_CHECKING:
    from edged.server import Server

API_PREFIX = "$JS.API."
_encode = msgspec.json.Encoder().encode
_decoder = msgspec.json.Decoder()


class ApiRequest:
    __slots__ = ("js", "account", "jsa", "subject", "tokens", "reply", "hdr", "data", "client_info")

    def __init__(self, js: JetStream, account: Account, jsa: JSAccount | None, subject: str, tokens: list[str],
                 reply: str, hdr: bytes | None, data: bytes) -> None:
        self.js, self.account, self.jsa = js, account, jsa
        self.subject, self.tokens, self.reply, self.hdr, self.data = subject, tokens, reply, hdr, data
        self.client_info = None

    def json(self) -> dict[str, Any]:
        """The request body; empty = {}. Bad JSON is nats-server's 10025."""
        if not self.data or not self.data.strip():
            return {}
        try:
            v = _decoder.decode(self.data)
        except msgspec.DecodeError as e:
            raise api_error("JSInvalidJSONErr", err=str(e)) from None
        if not isinstance(v, dict):
            raise api_error("JSInvalidJSONErr", err="json: cannot unmarshal into Go value of type object")
        return v


class JSAccount:
    """An account's JetStream: its streams and limits."""

    def __init__(self, js: JetStream, account: Account, limits: JetStreamAccountLimits) -> None:
        self.js = js
        self.account = account
        self.limits = limits
        self.streams: dict[str, Stream] = {}
        self.internal = account.internal
        self.push_consumers = 0
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

    def check_store(self, stream: Stream, size: int) -> None:
        lim = self.limits
        js = self.js
        memory = stream.config["storage"] == "memory"
        acc_max = lim.max_memory if memory else lim.max_file
        srv_max = js.max_memory if memory else js.max_file
        if acc_max < 0 and srv_max < 0:
            return
        mem, file = self.usage()
        used = mem if memory else file
        if 0 <= acc_max < used + size:
            raise api_error("JSAccountResourcesExceededErr")
        if srv_max >= 0:
            total = js.total_usage()[0 if memory else 1]
            if total + size > srv_max:
                raise api_error("JSStorageResourcesExceededErr" if not memory else "JSMemoryResourcesExceededErr")

    def consumer_count(self) -> int:
        return sum(len(s.consumers) for s in self.streams.values())

    def limits_dict(self) -> dict[str, Any]:
        lim = self.limits
        return {"max_memory": lim.max_memory, "max_storage": lim.max_file, "max_streams": lim.max_streams,
                "max_consumers": lim.max_consumers, "max_ack_pending": lim.max_ack_pending,
                "memory_max_stream_bytes": lim.memory_max_stream_bytes,
                "storage_max_stream_bytes": lim.store_max_stream_bytes,
                "max_bytes_required": lim.max_bytes_required}


class JetStream:
    def __init__(self, server: Server) -> None:
        self.server = server
        cfg = server.opts.jetstream
        self.config = cfg
        self.enabled = True
        self.domain = cfg.domain
        base = cfg.store_dir or os.path.join(tempfile.gettempdir(), "nats")
        # like nats-server, the store lives in a `jetstream` directory inside store_dir
        self.store_dir = os.path.abspath(os.path.join(base, "jetstream"))
        self.max_memory = cfg.max_memory_store
        self.max_file = cfg.max_file_store
        self.file_store: SQLiteStore | None = None
        self.mem_store = MemoryStore()
        self.accounts: dict[str, JSAccount] = {}
        self.handlers: dict[str, Callable[[ApiRequest], Any]] = {}
        self._api_subs: list[tuple[Account, Any]] = []
        self.api_total = 0
        self.api_errors = 0
        self.api_inflight = 0
        self.consumer_factory: Callable[..., Any] | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._batch_acks: dict[Any, list[tuple[JSAccount, str, str, int]]] = {}
        self.started = 0.0
        from edged.jetstream import api

        api.install(self)
        try:
            from edged.jetstream import consumer_api  # type: ignore[attr-defined]
        except ImportError:
            consumer_api = None
        if consumer_api is not None:
            consumer_api.install(self)

    # ------------------------------------------------------------------ life cycle

    async def start(self) -> None:
        os.makedirs(self.store_dir, exist_ok=True)
        self.file_store = SQLiteStore(self.store_dir, sync_interval=self.config.sync_interval)
        await self.file_store.open()
        await self.mem_store.open()
        self.server.read_hooks.append(self.file_store.kick)
        for name, acc in list(self.server.accounts.items()):
            if name == self.server.system_account_name:
                continue
            limits = self._limits_for(acc)
            if limits is not None:
                self.accounts[name] = JSAccount(self, acc, limits)
            self._subscribe_api(acc)
        for st in self.file_store.streams():
            jsa = self.accounts.get(st.account)
            if jsa is None:
                log.warning("JetStream: stream %s of account %s is not loaded (JetStream is off for the account)",
                            st.name, st.account)
                continue
            try:
                cfg = _decoder.decode(st.config)
                created = st.created_ns
            except Exception as e:
                log.error("JetStream: stream %s has an unreadable config: %s", st.name, e)
                continue
            stream = Stream(self, jsa, cfg, st, created)
            stream.rebuild_dedupe()
            jsa.streams[stream.name] = stream
            stream.subscribe()
            if self.consumer_factory is not None:
                for cname, (ccfg, cstate) in list(st.consumers.items()):
                    try:
                        self.consumer_factory(stream, cname, ccfg, cstate)
                    except Exception as e:
                        log.error("JetStream: consumer %s > %s could not be restored: %s", st.name, cname, e)
        self.started = time.time()
        self._ticker = asyncio.get_running_loop().create_task(self._tick())
        n = sum(len(a.streams) for a in self.accounts.values())
        log.info("Starting JetStream")
        log.info("  Domain:    %s", self.domain or "(none)")
        log.info("  Store dir: %s (SQLite, WAL, sync_interval=%s)", self.store_dir, self.config.sync_interval)
        log.info("  Streams:   %d restored", n)

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        for jsa in self.accounts.values():
            for s in jsa.streams.values():
                s.closed = True
                s.unsubscribe()
                for c in list(s.consumers.values()):
                    stop = getattr(c, "stop", None)
                    if stop is not None:
                        r = stop(deleted=False)
                        if inspect.isawaitable(r):
                            await r
        if self.file_store is not None and self.file_store.kick in self.server.read_hooks:
            self.server.read_hooks.remove(self.file_store.kick)
        for acc, sub in self._api_subs:
            acc.internal.unsubscribe(sub)
        self._api_subs.clear()
        if self.file_store is not None:
            try:
                await self.file_store.flush()
            finally:
                await self.file_store.close()
        await self.mem_store.close()
        log.info("JetStream stopped")

    def _limits_for(self, acc: Account) -> JetStreamAccountLimits | None:
        if acc.config.jetstream is not None:
            return acc.config.jetstream
        if acc.name == GLOBAL_ACCOUNT and not self.server.opts.accounts and not self.server.opts.trusted_operators:
            return JetStreamAccountLimits()
        return None

    def account_enabled(self, name: str) -> bool:
        return name in self.accounts

    def _subscribe_api(self, acc: Account) -> None:
        ic = acc.internal
        self._api_subs.append((acc, ic.subscribe("$JS.API.>", self._on_api)))
        if self.domain:
            self._api_subs.append((acc, ic.subscribe(f"$JS.{self.domain}.API.>", self._on_api)))

    def leafnode_connected(self, account_name: str) -> None:
        """Mirrors and sources re-check their links here once they exist."""

    def store_for(self, storage: str) -> Any:
        return self.mem_store if storage == "memory" else self.file_store

    def total_usage(self) -> tuple[int, int]:
        mem = file = 0
        for jsa in self.accounts.values():
            m, f = jsa.usage()
            mem += m
            file += f
        return mem, file

    # ------------------------------------------------------------------ API

    def loop_task(self, aw: Any) -> None:
        """Run a coroutine in the background, kept referenced until done."""
        t = asyncio.get_running_loop().create_task(aw)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    def register_api(self, prefix: str, handler: Callable[[ApiRequest], Any]) -> None:
        self.handlers[prefix] = handler

    def _on_api(self, sub: Any, subject: str, reply: str, hdr: bytes | None, payload: bytes) -> None:
        if subject.startswith(API_PREFIX):
            rest = subject[len(API_PREFIX):]
        else:
            # $JS.<domain>.API.<rest>
            parts = subject.split(".", 3)
            if len(parts) < 4:
                return
            rest = parts[3]
        acc: Account = sub.conn.account
        jsa = self.accounts.get(acc.name)
        tokens = rest.split(".")
        handler = None
        for n in range(min(len(tokens), 4), 0, -1):
            handler = self.handlers.get(".".join(tokens[:n]))
            if handler is not None:
                tokens = tokens[n:]
                break
        if not reply:
            return  # nats-server ignores API requests without a reply subject
        if jsa is None:
            self.api_errors += 1
            self._reply(acc, reply, {"error": api_error("JSNotEnabledForAccountErr").to_dict()},
                        _type_for(rest))
            return
        if handler is None:
            self.api_errors += 1
            self._reply(acc, reply, {"error": api_error("JSBadRequestErr").to_dict()}, "")
            return
        req = ApiRequest(self, acc, jsa, subject, tokens, reply, hdr, payload)
        self.api_total += 1
        try:
            res = handler(req)
        except JSApiError as e:
            self.api_errors += 1
            self._reply(acc, reply, {"error": e.to_dict()}, getattr(handler, "resp_type", ""))
            return
        if inspect.isawaitable(res):
            t = asyncio.get_running_loop().create_task(self._finish(acc, reply, handler, res))
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)
        elif res is not None:
            self._reply(acc, reply, res, getattr(handler, "resp_type", ""))

    async def _finish(self, acc: Account, reply: str, handler: Any, aw: Any) -> None:
        try:
            res = await aw
        except JSApiError as e:
            self.api_errors += 1
            self._reply(acc, reply, {"error": e.to_dict()}, getattr(handler, "resp_type", ""))
            return
        except Exception as e:  # a bug must not kill the API; report it as nats-server would a store error
            log.exception("JetStream API handler failed")
            self.api_errors += 1
            self._reply(acc, reply, {"error": api_error("JSStreamGeneralErrorF", err=str(e)).to_dict()},
                        getattr(handler, "resp_type", ""))
            return
        if res is not None:
            self._reply(acc, reply, res, getattr(handler, "resp_type", ""))

    def _reply(self, acc: Account, reply: str, body: dict[str, Any], rtype: str) -> None:
        if rtype and "type" not in body:
            body = {"type": rtype, **body}
        acc.internal.publish(reply, _encode(body))

    def send_json(self, jsa: JSAccount, reply: str, body: dict[str, Any]) -> None:
        jsa.internal.publish(reply, _encode(body))

    def send_ack(self, jsa: JSAccount, reply: str, stream: str, seq: int, duplicate: bool = False) -> None:
        # hand-built: this is the hottest response; same bytes as nats-server's encoder
        b = b'{"stream":"%s","seq":%d' % (stream.encode(), seq)
        if self.domain:
            b += b',"domain":"%s"' % self.domain.encode()
        if duplicate:
            b += b',"duplicate":true'
        jsa.internal.publish(reply, b + b"}")

    def ack_after(self, committed: Any, jsa: JSAccount, reply: str, stream: str, seq: int) -> None:
        """Send this PubAck once `committed` (a group-commit batch) resolves. One callback per batch,
        not per message, and one socket flush for all the acks of the batch."""
        acks = self._batch_acks.get(committed)
        if acks is None:
            acks = self._batch_acks[committed] = []
            committed.add_done_callback(self._batch_committed)
        acks.append((jsa, reply, stream, seq))

    def _batch_committed(self, f: Any) -> None:
        acks = self._batch_acks.pop(f, ())
        exc = f.exception() if not f.cancelled() else StoreError("cancelled")
        if exc is not None:
            for jsa, reply, stream, _ in acks:
                self.send_json(jsa, reply, {"error": api_error("JSStreamStoreFailedF", err=str(exc)).to_dict(),
                                            "stream": stream, "seq": 0})
        else:
            send = self.send_ack
            for jsa, reply, stream, seq in acks:
                send(jsa, reply, stream, seq)
        self.server.flush_now()

    def advisory(self, jsa: JSAccount, suffix: str, body: dict[str, Any], kind: str = "ADVISORY") -> None:
        """Publish on `$JS.EVENT.<kind>.<suffix>` (ADVISORY, or METRIC for ack samples), as nats-server."""
        body.setdefault("id", os.urandom(11).hex())
        body.setdefault("timestamp", rfc3339ns(time.time_ns()))
        if self.domain:
            body.setdefault("domain", self.domain)
        jsa.internal.publish(f"$JS.EVENT.{kind}.{suffix}", _encode(body))

    def transform(self, rule: tuple[str, str], subject: str) -> str:
        """Subject transform with nats-server's `{{wildcard(n)}}` / `$n` placeholders and `>` tail."""
        src, dest = rule
        if not subject_matches(src, subject):
            return subject
        stoks = src.split(".")
        toks = subject.split(".")
        wild: list[str] = []
        for i, t in enumerate(stoks):
            if t == "*":
                wild.append(toks[i])
            elif t == ">":
                wild.append(".".join(toks[i:]))
        out = []
        for t in dest.split("."):
            tt = t.replace(" ", "")
            if tt.startswith("{{wildcard(") and tt.endswith(")}}"):
                n = int(tt[11:-3])
                out.append(wild[n - 1] if 0 < n <= len(wild) else t)
            elif tt.startswith("$") and tt[1:].isdigit():
                n = int(tt[1:])
                out.append(wild[n - 1] if 0 < n <= len(wild) else t)
            elif t == ">":
                out.append(wild[-1] if wild and stoks[-1] == ">" else ">")
            elif t == "*":
                out.append(wild[0] if wild else "*")
            else:
                out.append(t)
        return ".".join(out)

    # ------------------------------------------------------------------ upkeep

    async def _tick(self) -> None:
        while True:
            interval = 1.0
            for jsa in self.accounts.values():
                for s in jsa.streams.values():
                    if s.max_age:
                        interval = min(interval, max(0.05, s.max_age / 1e9 / 10))
                    if s.allow_ttl:
                        interval = min(interval, 0.25)
            await asyncio.sleep(interval)
            now = time.time_ns()
            for jsa in list(self.accounts.values()):
                for s in list(jsa.streams.values()):
                    if s.max_age or s.allow_ttl or s.dedupe:
                        try:
                            s.expire(now)
                        except Exception as e:
                            log.error("JetStream: expiring stream %s failed: %s", s.name, e)

    # ------------------------------------------------------------------ monitoring

    def info(self) -> dict[str, Any]:
        mem, file = self.total_usage()
        return {
            "config": {"max_memory": self.max_memory, "max_storage": self.max_file, "store_dir": self.store_dir,
                       "sync_interval": _sync_ns(self.config.sync_interval), **({"domain": self.domain}
                                                                                  if self.domain else {})},
            "stats": {"memory": mem, "storage": file, "reserved_memory": 0, "reserved_storage": 0,
                      "accounts": len(self.accounts), "ha_assets": 0,
                      "api": {"total": self.api_total, "errors": self.api_errors, "inflight": self.api_inflight}},
        }

    def jsz(self, opts: Any = None) -> dict[str, Any]:
        mem, file = self.total_usage()
        streams = sum(len(a.streams) for a in self.accounts.values())
        consumers = sum(a.consumer_count() for a in self.accounts.values())
        msgs = sum(s.store.msgs for a in self.accounts.values() for s in a.streams.values())
        nbytes = sum(s.store.bytes for a in self.accounts.values() for s in a.streams.values())
        out: dict[str, Any] = {
            "server_id": self.server.server_id, "now": rfc3339ns(time.time_ns()),
            "config": self.info()["config"], "memory": mem, "storage": file, "reserved_memory": 0,
            "reserved_storage": 0, "accounts": len(self.accounts), "ha_assets": 0,
            "api": {"total": self.api_total, "errors": self.api_errors}, "streams": streams,
            "consumers": consumers, "messages": msgs, "bytes": nbytes,
        }
        if getattr(opts, "accounts", False) or getattr(opts, "streams", False):
            details = []
            for name, jsa in self.accounts.items():
                d: dict[str, Any] = {"name": name, "id": name, "memory": jsa.usage()[0], "storage": jsa.usage()[1],
                                     "api": {"total": 0, "errors": 0}}
                if getattr(opts, "streams", False):
                    d["stream_detail"] = [{"name": s.name, "created": rfc3339ns(s.created),
                                           "state": s.state_dict(), **({"config": s.config}
                                                                        if getattr(opts, "config", False) else {})}
                                          for s in jsa.streams.values()]
                details.append(d)
            out["account_details"] = details
        return out

    def healthz(self, account: str = "", stream: str = "", consumer: str = "") -> tuple[bool, str]:
        if self.file_store is None:
            return False, "JetStream not started"
        if account:
            jsa = self.accounts.get(account)
            if jsa is None:
                return False, f"JetStream account '{account}' could not be resolved"
            if stream:
                s = jsa.streams.get(stream)
                if s is None:
                    return False, f"JetStream stream '{stream}' could not be found"
                if consumer and consumer not in s.consumers:
                    return False, f"JetStream consumer '{consumer}' could not be found"
        return True, ""


def _sync_ns(v: float | str) -> Any:
    return v if isinstance(v, str) else int(v * 1e9)


def _type_for(rest: str) -> str:
    from edged.jetstream.api import response_type

    return response_type(rest)
