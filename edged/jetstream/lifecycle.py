"""JetStream's life cycle: start (stores opened, accounts enabled, streams and consumers restored from
the store), the upkeep tick (ages, TTLs, dedupe windows, limits after a reload, disk space) and stop."""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING

from edged.jetstream.account import JSAccount
from edged.log import log
from edged.routing.accounts import GLOBAL_ACCOUNT, Account
from edged.settings.options import JetStreamAccountLimits
from storage import SQLiteStore

if TYPE_CHECKING:
    from edged.jetstream.engine import JetStream


async def start(js: JetStream) -> None:
    loop = asyncio.get_running_loop()
    js.pubacks.start(loop)
    os.makedirs(js.store_dir, exist_ok=True)
    js.space.start()
    js.file_store = SQLiteStore(js.store_dir, sync_interval=js.config.sync_interval)
    await js.file_store.open()
    await js.mem_store.open()
    # after each socket read: start the commit now; if it commits inline, its acks go out in the same
    # read's flush (on_commit runs as the batch commits, before its future's callbacks are scheduled)
    js.server.reading.hooks.append(js.file_store.kick)
    js.file_store.on_commit = js.pubacks.on_commit
    server = js.server
    for name, acc in list(server.accounts.items()):
        if name == server.system_account_name:
            continue
        limits = limits_for(js, acc)
        if limits is not None:
            js.accounts[name] = JSAccount(js, acc, limits)
        js.dispatch.subscribe(acc)
    restore(js)
    js.started = time.time()
    js.ticker = loop.create_task(tick(js))
    n = sum(len(a.streams) for a in js.accounts.values())
    log.info("Starting JetStream")
    log.info("  Domain:    %s", js.domain or "(none)")
    log.info("  Store dir: %s (SQLite, WAL, sync_interval=%s)", js.store_dir, js.config.sync_interval)
    log.info("  Streams:   %d restored", n)


def restore(js: JetStream) -> None:
    """The file store's streams and their consumers, as they were when the server stopped."""
    assert js.file_store is not None
    for st in js.file_store.streams():
        jsa = js.accounts.get(st.account)
        if jsa is None:
            log.warning("JetStream: stream %s of account %s is not loaded (JetStream is off for the account)",
                        st.name, st.account)
            continue
        jsa.restore_stream(st)


async def stop(js: JetStream) -> None:
    if js.ticker is not None:
        js.ticker.cancel()
        js.ticker = None
    for jsa in js.accounts.values():
        await jsa.stop()
    kick = getattr(js.file_store, "kick", None)
    if kick in js.server.reading.hooks:
        js.server.reading.hooks.remove(kick)
    js.dispatch.unsubscribe()
    if js.file_store is not None:
        try:
            await js.file_store.flush()
        finally:
            await js.file_store.close()
    await js.mem_store.close()
    log.info("JetStream stopped")


def limits_for(js: JetStream, acc: Account) -> JetStreamAccountLimits | None:
    """The account's JetStream limits, None where JetStream is off for it."""
    if acc.config.jetstream is not None:
        return acc.config.jetstream
    opts = js.server.opts
    if acc.name == GLOBAL_ACCOUNT and not opts.accounts and not opts.trusted_operators:
        return JetStreamAccountLimits()
    return None


async def tick(js: JetStream) -> None:
    """Upkeep within the second, more often for short max_age and TTLs."""
    while True:
        interval = 1.0
        for jsa in js.accounts.values():
            for s in jsa.streams.values():
                if s.max_age:
                    interval = min(interval, max(0.05, s.max_age / 1e9 / 10))
                if s.allow_ttl:
                    interval = min(interval, 0.25)
        await asyncio.sleep(interval)
        js.space.tick()
        now = time.time_ns()
        for jsa in list(js.accounts.values()):
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

