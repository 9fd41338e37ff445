"""The JetStream service: stores, per-account state, the `$JS.API` dispatcher, upkeep timers.

It sits on the router like any other receiver: one internal client per account subscribes the API
subjects (`$JS.API.>` and, with a domain, `$JS.<domain>.API.>`) and each stream's subjects.

PubAcks go out once per group-commit batch: after each socket read the store commits what the read
queued (small batches inline), and the acks of a committed batch are sent in the same read's flush.
Server-wide limits default as in nats-server (75% of memory, 75% of the disk free at start). A small
reserve file in the store directory is released when the disk fills up, so that purges and deletes
can still be written (see note_store_full).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import msgspec

from edged.accounts import GLOBAL_ACCOUNT, Account
from edged.jetstream.consumer_config import decode_fields
from edged.jetstream.domain import ACK_PREFIX, API_PREFIX, api_prefix
from edged.jetstream.errors import JSApiError, api_error
from edged.jetstream.gojson import body_values, go_kind, merge
from edged.jetstream.stream import Stream, rfc3339ns
from edged.log import log
from edged.options import JetStreamAccountLimits
from edged.receiver import KIND_CLIENT, Message
from edged.sublist import subject_matches
from storage import MemoryStore, SQLiteStore, StoreError, StoreFullError

if TYPE_CHECKING:
    from edged.server import Server

AUDIT_SUBJECT = "$JS.EVENT.ADVISORY.API"
RESERVE_NAME = "space.reserve"
RESERVE_MAX = 8 * 1024 * 1024
# nats-server's JetStream API import leaves requests on subjects starting so to the streams' and consumers'
# own subscriptions (client.go, processServiceImport): with none, nobody answers
_OWN_LISTENERS = ("DIRECT.GET", "CONSUMER.MSG.NEXT.")
# see JetStream.spin. 400 µs: a nats-py KV put loop sends its next put 130-300 µs after the ack on a
# loaded 2-vCPU VM; at 200 µs a quarter of the puts found the loop asleep (73 % of windows caught the
# next request, 99.4 % at 400 µs), and a SQLite insert right after a sleep took 35 µs against 21 µs
SPIN_NS = 400_000
_encode = msgspec.json.Encoder().encode
_decoder = msgspec.json.Decoder()


class ApiRequest:
    __slots__ = ("js", "account", "jsa", "subject", "tokens", "reply", "hdr", "data", "client_info")

    def __init__(self, js: JetStream, account: Account, jsa: JSAccount | None, subject: str, tokens: list[str],
                 reply: str, hdr: bytes | None, data: bytes) -> None:
        self.js, self.account, self.jsa = js, account, jsa
        self.subject, self.tokens, self.reply, self.hdr, self.data = subject, tokens, reply, hdr, data
        self.client_info = None

    def values(self, struct: str) -> Iterator[tuple[dict[str, Any], bytes]]:
        """The body's JSON values one after another, each with the text it was decoded from, as
        nats-server's strict decoding (its default) reads a request struct: a malformed value is its 10025
        answer, a `null` is nothing, another value than an object cannot go into the struct."""
        for v in body_values(self.data):
            if isinstance(v, str):
                raise api_error("JSInvalidJSONErr", err=v)
            try:
                doc = _decoder.decode(v)
            except msgspec.DecodeError as e:
                raise api_error("JSInvalidJSONErr", err=str(e)) from None
            if doc is None:
                continue
            if not isinstance(doc, dict):
                raise api_error("JSInvalidJSONErr", err=f"json: cannot unmarshal {go_kind(doc)} into Go value of "
                                                       f"type server.{struct}")
            yield doc, v

    def decode(self, struct: str, types: dict[str, Any]) -> dict[str, Any]:
        """The body as nats-server reads the request struct `struct` (fields' JSON names and Go types in
        `types`): every value decoded over the ones before with Go's rules, a key the struct has no
        field for refused; the first fault is the 10025 answer. Empty = {}."""
        out: dict[str, Any] = {}
        for doc, raw in self.values(struct):
            merge(out, decode_fields(doc, types, struct, raw=raw))
        return out


class JSAccount:
    """An account's JetStream: its streams and limits."""

    def __init__(self, js: JetStream, account: Account, limits: JetStreamAccountLimits) -> None:
        self.js = js
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
        js = self.js
        memory = stream.config["storage"] == "memory"
        acc_max = lim.max_memory if memory else lim.max_file
        srv_max = js.max_memory if memory else js.max_file
        if acc_max < 0 and srv_max < 0:
            return
        if srv_max >= 0 and js.server_usage(memory, size) > srv_max:
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


class JetStream:
    def __init__(self, server: Server) -> None:
        self.server = server
        cfg = server.opts.jetstream
        self.config = cfg
        self.enabled = True
        self.domain = cfg.domain
        self._domain_field = b',"domain":"%s"' % cfg.domain.encode() if cfg.domain else b""  # in PubAcks
        # a consumer client's plain acks come in runs: the client parser takes them as one event each
        server.empty_run_prefix = ACK_PREFIX
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
        self._usage = [0, 0]  # upper bounds of the server's memory and file usage (see server_usage)
        self._usage_recheck = [-1, -1]  # past these bounds the exact totals are taken again
        self._spin_ok = not isinstance(cfg.sync_interval, str)  # fsync=always commits on the writer thread
        self._last_ack_ns = 0
        self._spin_until = 0
        self._spinning = False
        self._spin_misses = 0
        self._spin_skip = 0
        self._loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]  # set in start()
        # disk full: see note_store_full
        self.store_full = False
        self._full_usage = 0
        self._reserve_path = os.path.join(self.store_dir, RESERVE_NAME)
        self._reserve_size = 0
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
        self._loop = asyncio.get_running_loop()
        os.makedirs(self.store_dir, exist_ok=True)
        # unset server limits default as nats-server's do: 75% of the memory, 75% of the disk free now
        if self.max_memory < 0:
            with contextlib.suppress(ValueError, OSError):
                self.max_memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4 * 3
        if self.max_file < 0:
            with contextlib.suppress(OSError):
                st = os.statvfs(self.store_dir)
                self.max_file = st.f_bavail * st.f_frsize // 4 * 3
        self._make_reserve()
        self.file_store = SQLiteStore(self.store_dir, sync_interval=self.config.sync_interval)
        await self.file_store.open()
        await self.mem_store.open()
        # after each socket read: start the commit now; if it commits inline, its acks go out in the same
        # read's flush (on_commit runs as the batch commits, before its future's callbacks are scheduled)
        self.server.reading.hooks.append(self.file_store.kick)
        self.file_store.on_commit = self._on_commit
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
            try:
                # (max_age is the ticker's: it runs within the second)
                stream.enforce_limits(max_age=False)
            except Exception as e:
                log.error("JetStream: stream %s: limits could not be applied on restore: %s", st.name, e)
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
        kick = getattr(self.file_store, "kick", None)
        if kick in self.server.reading.hooks:
            self.server.reading.hooks.remove(kick)
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
        self._api_subs.append((acc, ic.subscribe("$JS.API.>", self._on_api, passive=True)))
        if self.domain:
            self._api_subs.append((acc, ic.subscribe(api_prefix(self.domain) + ">", self._on_api, passive=True)))

    def leafnode_connected(self, account_name: str) -> None:
        """Mirrors and sources re-check their links here once they exist."""

    def store_for(self, storage: str) -> Any:
        return self.mem_store if storage == "memory" else self.file_store

    def total_reserved(self) -> tuple[int, int]:
        return _sum_pairs(jsa.reserved() for jsa in self.accounts.values())

    def server_usage(self, memory: bool, adding: int) -> int:
        """The server's memory or file usage before a message of `adding` bytes, for the server-wide limit
        checked on every publish. Summing all streams each time would cost per message; instead the last
        exact total plus everything added since (removals not counted) is an upper bound, and the exact
        total is taken again once that bound has used up half the room the last total left, so always
        before the bound can pass the limit."""
        i = 0 if memory else 1
        u = self._usage
        used = u[i]
        if used > self._usage_recheck[i]:
            u[0], u[1] = self.total_usage()
            used = u[i]
            for j, limit in ((0, self.max_memory), (1, self.max_file)):
                self._usage_recheck[j] = u[j] + (limit - u[j]) // 2 if limit > u[j] else u[j]
        u[i] = used + adding
        return used

    def total_usage(self) -> tuple[int, int]:
        return _sum_pairs(jsa.usage() for jsa in self.accounts.values())

    # ------------------------------------------------------------------ disk full

    def _make_reserve(self) -> None:
        """Keep a few MB of the store's filesystem in a reserve file. When the disk fills up, SQLite can
        neither checkpoint its WAL (the database file must grow) nor write the WAL of a purge, so
        nothing could ever be removed; releasing the reserve gives exactly that room back."""
        try:
            st = os.statvfs(self.store_dir)
            size = _reserve_for(st)
            if size <= 0:
                return
            if os.path.exists(self._reserve_path) and os.path.getsize(self._reserve_path) >= size:
                self._reserve_size = size
                return
            fd = os.open(self._reserve_path, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, size)
            finally:
                os.close(fd)
            self._reserve_size = size
        except OSError as e:
            self._reserve_size = 0
            with contextlib.suppress(OSError):
                os.unlink(self._reserve_path)
            log.warning("JetStream: could not reserve space in %s: %s", self.store_dir, e)

    def note_store_full(self) -> None:
        """The store hit a full disk: release the reserve so that purges and deletes can be written, and
        refuse publishes to file streams until enough has been removed or the disk has room again
        (_check_space)."""
        if self.store_full:
            return
        self.store_full = True
        self._full_usage = self.total_usage()[1]
        released = self._reserve_size
        with contextlib.suppress(OSError):
            os.unlink(self._reserve_path)
        self._reserve_size = 0
        log.error("JetStream: the store's disk is full (%s); released %d reserved bytes so purges and deletes "
                  "can proceed; publishes to file streams are refused until messages are removed or the disk "
                  "has room again",
                  self.store_dir, released)

    def space_freed(self) -> None:
        """Called after a purge or delete committed: maybe publishes can resume right away."""
        if self.store_full:
            self._check_space()

    def _check_space(self) -> None:
        """While the disk is full (and each tick until the reserve is back): resume publishes once
        messages were removed, or once the disk has room again for another reason (something else's
        files deleted, the filesystem grown); make the reserve again when there is room for it."""
        try:
            st: os.statvfs_result | None = os.statvfs(self.store_dir)
        except OSError:
            st = None
        if self.store_full:
            need = max(1, min(RESERVE_MAX // 2, self._full_usage // 2))
            if self.total_usage()[1] <= self._full_usage - need:
                # enough removed: the database reuses those pages without growing
                self.store_full = False
                log.info("JetStream: messages were removed; publishes to file streams are accepted again")
            elif st is not None and _free_reserves(st) >= 4:
                # room for the reserve and three times as much besides, so that a publisher does not
                # bounce straight back onto a full disk
                self.store_full = False
                log.info("JetStream: the store's disk has room again; publishes to file streams are accepted "
                         "again")
        if not self._reserve_size and st is not None and _free_reserves(st) > 2:
            self._make_reserve()

    # ------------------------------------------------------------------ API

    def _listened(self, acc: Account, rest: str) -> bool:
        """Is there what nats-server would have listening for this direct get or pull request: a stream
        with `allow_direct` (`DIRECT.GET.<stream>` and below), a consumer (`CONSUMER.MSG.NEXT.<stream>.
        <consumer>` exactly)? Its API import does not carry these subjects, only such a subscription."""
        jsa = self.accounts.get(acc.name)
        if jsa is None:
            return False
        tokens = rest.split(".")
        if tokens[0] == "DIRECT":
            if len(tokens) < 3 or tokens[1] != "GET":
                return False
            stream = jsa.streams.get(tokens[2])
            return stream is not None and bool(stream.config.get("allow_direct"))
        if len(tokens) != 5:
            return False
        stream = jsa.streams.get(tokens[3])
        return stream is not None and tokens[4] in stream.consumers

    def _unheard(self, acc: Account, subject: str, reply: str) -> None:
        """Nobody answers this request: its publisher gets "no responders", as from nats-server, unless a
        subscriber of its own took it (see ReadContext.decline)."""
        if not reply:
            return
        psubs, qgroups = acc.sublist.match(subject)
        ours = {s for a, s in self._api_subs if a is acc}
        if not qgroups and all(s in ours for s in psubs):
            self.server.reading.decline(subject, reply)

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
        if rest.startswith(_OWN_LISTENERS) and not self._listened(sub.conn.account, rest):
            self._unheard(sub.conn.account, subject, reply)
            return
        reading = self.server.reading
        if reading.work and not rest.startswith("CONSUMER.MSG.NEXT."):
            # a pull request may go ahead of the acks before it (nats-server's order too); anything
            # else sees them done
            reading.run()
        tokens = rest.split(".")
        handler = None
        for n in range(min(len(tokens), 4), 0, -1):
            handler = self.handlers.get(".".join(tokens[:n]))
            if handler is not None:
                tokens = tokens[n:]
                break
        # nats-server subscribes each API subject with its exact token count (`STREAM.INFO.*`, ...):
        # anything else gets no response at all. A JSON API request without a reply subject is carried
        # out all the same (and audited), only unanswered; a pull request or direct get needs one.
        if handler is None or (not reply and not getattr(handler, "resp_type", "")):
            return
        arity = getattr(handler, "arity", None)
        if arity is not None and not (arity[0] <= len(tokens) <= arity[1] and all(tokens)):
            return
        acc: Account = sub.conn.account
        jsa = self.accounts.get(acc.name)
        # what the audit advisory reports: the request and the client it came from (the connection whose
        # read is being processed; kept for a handler that answers later)
        audit = (subject, payload, reading.origin)
        if jsa is None:
            if getattr(handler, "resp_type", ""):  # JSON APIs say so; a direct get has no one listening
                self._reply(acc, None, reply, {"error": api_error("JSNotEnabledForAccountErr").to_dict()}, handler,
                            audit=audit)
            return
        req = ApiRequest(self, acc, jsa, subject, tokens, reply, hdr, payload)
        try:
            res = handler(req)
        except JSApiError as e:
            self._reply(acc, jsa, reply, {"error": e.to_dict()}, handler, e.counted_ok, audit)
            return
        except Exception as e:  # a handler bug must not take the client's connection down with it
            log.exception("JetStream API handler failed")
            self._reply(acc, jsa, reply, {"error": api_error("JSStreamGeneralErrorF", err=str(e)).to_dict()}, handler,
                        audit=audit)
            return
        if inspect.isawaitable(res):
            t = asyncio.get_running_loop().create_task(self._finish(acc, jsa, reply, handler, res, audit))
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)
        elif res is not None:
            self._reply(acc, jsa, reply, res, handler, audit=audit)

    async def _finish(self, acc: Account, jsa: JSAccount, reply: str, handler: Any, aw: Any,
                      audit: tuple[str, bytes, Any] | None = None) -> None:
        self.api_inflight += 1
        ok = False
        try:
            res = await aw
        except JSApiError as e:
            res = {"error": e.to_dict()}
            ok = e.counted_ok
        except StoreError as e:
            if isinstance(e, StoreFullError):
                self.note_store_full()
            log.error("JetStream API request failed in the store: %s", e)
            res = {"error": api_error("JSStreamGeneralErrorF", err=str(e)).to_dict()}
        except Exception as e:  # a bug must not kill the API; report it as nats-server would a store error
            log.exception("JetStream API handler failed")
            res = {"error": api_error("JSStreamGeneralErrorF", err=str(e)).to_dict()}
        finally:
            self.api_inflight -= 1
        if res is not None:
            self._reply(acc, jsa, reply, res, handler, ok, audit)

    def _reply(self, acc: Account, jsa: JSAccount | None, reply: str, body: dict[str, Any], handler: Any,
               counted_ok: bool = False, audit: tuple[str, bytes, Any] | None = None) -> None:
        """Send an API response: `type` first, as nats-server's structs marshal; an error reply also carries
        the fields its response struct always has (`total/offset/limit`, `purged`...). Counted afterwards,
        so `$JS.API.INFO` reports the calls before itself, as nats-server does. What is counted is also
        audited (`audit`: subject, request, client connection), when anyone listens."""
        rtype = getattr(handler, "resp_type", "")
        err = "error" in body
        if err:
            extra = getattr(handler, "err_fields", None)
            head = {"type": rtype} if rtype and "type" not in body else {}
            body = {**head, **body, **extra} if extra else ({**head, **body} if head else body)
        elif rtype and "type" not in body:
            body = {"type": rtype, **body}
        resp = _encode(body)
        if reply:
            acc.internal.publish(reply, resp)
            self.spin()
        if counted_ok:
            err = False
        if err or getattr(handler, "count_ok", True):
            if audit is not None and acc.sublist.has_interest(AUDIT_SUBJECT):
                self._audit(acc, audit, resp)
            self.api_total += 1
            if err:
                self.api_errors += 1
            if jsa is not None:
                jsa.api_total += 1
                if err:
                    jsa.api_errors += 1

    def _audit(self, acc: Account, audit: tuple[str, bytes, Any], response: bytes) -> None:
        """nats-server's API audit advisory (`io.nats.jetstream.advisory.v1.api_audit`) for an answered
        API call, in its field order: the server, the client the request came from, the request subject
        and body, the response as sent."""
        subject, request, conn = audit
        name = self.server.server_name
        client: dict[str, Any] | None = None
        if conn is not None and conn.kind == KIND_CLIENT:
            client = {"start": rfc3339ns(int(conn.start * 1e9)), "host": conn.host, "id": conn.cid,
                      "acc": conn.account.name if conn.account is not None else ""}
            for key, v in (("user", conn.user), ("name", conn.name), ("lang", conn.lang), ("ver", conn.version),
                           ("rtt", int(conn.rtt * 1e9)), ("server", name), ("kind", conn.kind),
                           ("client_type", "websocket" if conn.websocket else "nats")):
                if v:
                    client[key] = v
        adv: dict[str, Any] = {"type": "io.nats.jetstream.advisory.v1.api_audit", "id": os.urandom(11).hex(),
                               "timestamp": rfc3339ns(time.time_ns()), "server": name, "client": client,
                               "subject": subject}
        if request:
            adv["request"] = request.decode("utf-8", "replace")
        adv["response"] = response.decode("utf-8", "replace")
        if self.domain:
            adv["domain"] = self.domain
        acc.internal.publish(AUDIT_SUBJECT, _encode(adv))

    def send_json(self, jsa: JSAccount, reply: str, body: dict[str, Any]) -> None:
        jsa.internal.publish(reply, _encode(body))

    def puback(self, stream: str, seq: int, duplicate: bool = False) -> bytes:
        """A PubAck's JSON, hand-built: this is the hottest response; same bytes as nats-server's encoder."""
        return b'{"stream":"%s","seq":%d%s%s}' % (stream.encode(), seq, self._domain_field,
                                                 b',"duplicate":true' if duplicate else b"")

    def send_ack(self, jsa: JSAccount, reply: str, stream: str, seq: int, duplicate: bool = False) -> None:
        jsa.internal.publish(reply, self.puback(stream, seq, duplicate))

    def reply_in_order(self, jsa: JSAccount, reply: str, body: bytes | dict[str, Any], committed: Any) -> None:
        """The reply to a publish that stored nothing (refused, or a duplicate), sent after the PubAcks
        that still wait for `committed` (the store's pending commits): nats-server answers a stream's
        publishes in the order they came."""
        if isinstance(body, dict):
            body = _encode(body)
        if getattr(committed, "done", None) is None or committed.done():
            jsa.internal.publish(reply, body)
        else:
            self.ack_after(committed, jsa, reply, None, body)

    def ack_after(self, committed: Any, jsa: JSAccount, reply: str, stream: str | None, seq: Any) -> None:
        """Send this PubAck once `committed` (a group-commit batch) resolves. One callback per batch,
        not per message, and one socket flush for all the acks of the batch. With `stream` None, `seq`
        is a reply's whole body, sent as it is (see `reply_in_order`)."""
        acks = self._batch_acks.get(committed)
        if acks is None:
            acks = self._batch_acks[committed] = []
            committed.add_done_callback(self._batch_committed)
        acks.append((jsa, reply, stream, seq))

    def _on_commit(self, f: Any) -> None:
        """The store committed the batch of future `f` (not resolved yet): its PubAcks go out now, and
        the done callback that would send them a loop turn later (kept for a failed batch) comes off."""
        acks = self._batch_acks.pop(f, None)
        if acks is not None:
            f.remove_done_callback(self._batch_committed)
            self._send_acks(acks, None)

    def _batch_committed(self, f: Any) -> None:
        acks = self._batch_acks.pop(f, None)
        if acks is not None:
            self._send_acks(acks, f.exception() if not f.cancelled() else StoreError("cancelled"))

    def _send_acks(self, acks: list[tuple[JSAccount, str, str | None, Any]], exc: BaseException | None) -> None:
        if isinstance(exc, StoreFullError):
            self.note_store_full()
        if exc is not None:
            for jsa, reply, stream, x in acks:
                if stream is None:
                    jsa.internal.publish(reply, x)
                else:
                    self.send_json(jsa, reply, {"error": api_error("JSStreamStoreFailedF", err=str(exc)).to_dict(),
                                                "stream": stream, "seq": 0})
        elif len(acks) == 1:
            jsa, reply, stream, seq = acks[0]
            if stream is None:
                jsa.internal.publish(reply, seq)
            else:
                self.send_ack(jsa, reply, stream, seq)
                self.spin()
        else:
            self._send_ack_run(acks)
        self.server.flush_now()

    def _send_ack_run(self, acks: list[tuple[JSAccount, str, str | None, Any]]) -> None:
        """The PubAcks of one commit. Those to replies under one parent that the sublist answers alike
        and that go to one subscription of a receiver taking batches (a client's response inbox,
        `_INBOX.<id>.<n>`) are handed to it in one `deliver_batch`: what `send_ack` publishing each would
        deliver, without a route per ack. Anything else is published one by one."""
        puback = self.puback
        i = 0
        n = len(acks)
        while i < n:
            jsa, reply, stream, seq = acks[i]
            if stream is None:  # a reply of reply_in_order
                jsa.internal.publish(reply, seq)
                i += 1
                continue
            sl = jsa.account.sublist
            psubs, qgroups = sl.match(reply)
            parent = sl.memo_parent(reply) if len(psubs) == 1 and not qgroups else None
            sub = psubs[0] if parent is not None else None
            conn = sub.conn if sub is not None else None
            if sub is None or sub.max or sub.closed or not conn.takes_batch(sub):
                sl.count_repeats(-1)  # publishing matches it again
                self.send_ack(jsa, reply, stream, seq)
                i += 1
                continue
            under = parent + "."
            k = len(under)
            batch: list[Message] = []
            size = 0
            j = i
            while j < n:
                a = acks[j]
                r = a[1]
                if a[0] is not jsa or a[2] is None or not r.startswith(under) or r.find(".", k) >= 0:
                    break
                body = puback(a[2], a[3])
                batch.append((r.encode("utf-8", "surrogateescape"), b"", None, body))
                size += len(body)
                j += 1
            sl.count_repeats(j - i - 1)
            conn.deliver_batch(sub, batch, size)
            i = j

    def spin(self) -> None:
        """A client that awaits each reply (a PubAck, an API or direct-get response) sends its next
        request right after receiving one. When replies go out one at a time and often (the previous one
        under 2 ms ago), keep the event loop polling for up to SPIN_NS instead of letting it sleep: waking
        a sleeping loop costs tens of µs (a halted core, a VM's vCPU), more than the rest of the round
        trip. Go's scheduler spins the same way before parking. A sporadic publisher never triggers it;
        between turns the loop polls its sockets without the GIL, so the store's writer thread is not
        held up; with `sync_interval: always` (commits on the writer thread) it is off. A window that
        ends without the next request arriving (a client slower than SPIN_NS) is a miss; from the second
        miss in a row on, each doubles the number of replies that follow without spinning (up to 63), so
        a slow client costs at most a few percent of a core."""
        if not self._spin_ok:
            return
        now = time.perf_counter_ns()
        recent = now - self._last_ack_ns < 2_000_000
        self._last_ack_ns = now
        if not recent:
            return
        if self._spinning:
            self._spin_misses = 0  # this window caught the next request
        elif self._spin_skip:
            self._spin_skip -= 1
            return
        self._spin_until = now + SPIN_NS
        if not self._spinning:
            self._spinning = True
            self._loop.call_soon(self._spin)

    def _spin(self) -> None:
        if time.perf_counter_ns() < self._spin_until:
            self._loop.call_soon(self._spin)
        else:
            self._spinning = False
            self._spin_misses = min(self._spin_misses + 1, 7)
            self._spin_skip = (1 << (self._spin_misses - 1)) - 1  # a single miss is free

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
            if self.store_full or not self._reserve_size:
                self._check_space()
            now = time.time_ns()
            for jsa in list(self.accounts.values()):
                for s in list(jsa.streams.values()):
                    if s.store.epoch != s.limits_epoch:
                        # the store reloaded the stream after a failed commit (a full disk): the
                        # removals that were to follow the commits before it (a KV put's previous
                        # revision, see storage's _drop_later) were lost with it
                        s.limits_epoch = s.store.epoch
                        try:
                            s.enforce_limits(max_age=False)
                        except Exception as e:
                            log.error("JetStream: applying the limits of stream %s failed: %s", s.name, e)
                    if s.max_age or s.allow_ttl or s.dedupe:
                        try:
                            s.expire(now)
                        except Exception as e:
                            log.error("JetStream: expiring stream %s failed: %s", s.name, e)

    # ------------------------------------------------------------------ monitoring

    def _config_dict(self) -> dict[str, Any]:
        """nats-server's JetStreamConfig as /varz and /jsz print it."""
        c: dict[str, Any] = {"max_memory": self.max_memory, "max_storage": self.max_file,
                             "store_dir": self.store_dir}
        si = self.config.sync_interval
        if isinstance(si, str):
            c["sync_interval"] = int(120 * 1e9)
            c["sync_always"] = True
        else:
            c["sync_interval"] = int(si * 1e9)
        if self.domain:
            c["domain"] = self.domain
        return c

    def _stats(self) -> dict[str, Any]:
        mem, file = self.total_usage()
        rmem, rfile = self.total_reserved()
        api: dict[str, Any] = {"total": self.api_total, "errors": self.api_errors}
        if self.api_inflight:
            api["inflight"] = self.api_inflight
        return {"memory": mem, "storage": file, "reserved_memory": rmem, "reserved_storage": rfile,
                "accounts": len(self.accounts), "ha_assets": 0, "api": api}

    def info(self) -> dict[str, Any]:
        """The `jetstream` section of /varz."""
        return {"config": self._config_dict(), "stats": self._stats()}

    def jsz(self, opts: Any = None) -> dict[str, Any]:
        """/jsz, with nats-server's options: `accounts`, `streams` (implies accounts), `consumers`
        (implies streams), `config`, `acc` (one account), `offset`/`limit` over accounts."""
        accounts_opt = bool(getattr(opts, "accounts", False))
        streams_opt = bool(getattr(opts, "streams", False))
        consumers_opt = bool(getattr(opts, "consumer", False))
        config_opt = bool(getattr(opts, "config", False))
        only = str(getattr(opts, "account", "") or "")
        offset = int(getattr(opts, "offset", 0) or 0)
        limit = int(getattr(opts, "limit", 0) or 0) or 1024
        if consumers_opt:
            streams_opt = True
        if streams_opt and not only:
            accounts_opt = True
        all_streams = [s for a in self.accounts.values() for s in a.streams.values()]
        out: dict[str, Any] = {
            "server_id": self.server.server_id, "now": rfc3339ns(time.time_ns()), "config": self._config_dict(),
            **self._stats(), "streams": len(all_streams), "consumers": sum(len(s.consumers) for s in all_streams),
            "messages": sum(s.store.msgs for s in all_streams), "bytes": sum(s.store.bytes for s in all_streams),
        }
        if only and only in self.accounts:
            accounts = [self.accounts[only]]
        elif accounts_opt:
            accounts = sorted(self.accounts.values(), key=lambda a: a.account.name)[offset:][:limit]
        else:
            accounts = []
        if accounts:
            out["account_details"] = [self._account_detail(jsa, streams_opt, consumers_opt, config_opt)
                                      for jsa in accounts]
        return out

    def _account_detail(self, jsa: JSAccount, streams: bool, consumers: bool, config: bool) -> dict[str, Any]:
        mem, file = jsa.usage()
        u64 = (1 << 64) - 1
        # nats-server prints the account's limits here, as unsigned numbers (so -1 is 2^64-1)
        d: dict[str, Any] = {"name": jsa.account.name, "id": jsa.account.name, "memory": mem, "storage": file,
                             "reserved_memory": jsa.limits.max_memory & u64,
                             "reserved_storage": jsa.limits.max_file & u64, "accounts": 0, "ha_assets": 0,
                             "api": {"total": jsa.api_total, "errors": jsa.api_errors}}
        if streams:
            details = []
            for s in jsa.streams.values():
                sd: dict[str, Any] = {"name": s.name, "created": rfc3339ns(s.created),
                                      "cluster": {"leader": self.server.server_name}}
                if config:
                    sd["config"] = s.config
                sd["state"] = s.state_dict()
                if consumers and s.consumers:
                    infos = []
                    for c in s.consumers.values():
                        info = getattr(c, "info", None)
                        if info is None:
                            continue
                        ci = dict(info())
                        ci.pop("type", None)
                        if not config:
                            ci.pop("config", None)
                        infos.append(ci)
                    sd["consumer_detail"] = infos
                details.append(sd)
            d["stream_detail"] = details
        return d

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


def _reserve_for(st: os.statvfs_result) -> int:
    """The reserve kept on a filesystem: 5% of it, at most RESERVE_MAX, in whole pages."""
    size = min(RESERVE_MAX, st.f_blocks * st.f_frsize // 20)
    return size - size % 4096


def _free_reserves(st: os.statvfs_result) -> float:
    """The filesystem's free space in reserves (at least 1 MB each)."""
    return st.f_bavail * st.f_frsize / max(_reserve_for(st), 1 << 20)


def _sum_pairs(pairs: Iterable[tuple[int, int]]) -> tuple[int, int]:
    """(memory, file) totals over accounts."""
    mem = file = 0
    for m, f in pairs:
        mem += m
        file += f
    return mem, file
