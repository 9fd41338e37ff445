"""Durability: streams, config and messages come back after a restart; `kill -9` during a publish storm
loses nothing that was acked and never reuses a sequence."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from typing import Any

import nats
import pytest

from tests.support.aio import run
from tests.support.servers import ServerProcess


def test_restart_keeps_streams_config_and_messages(start_server: Callable[..., ServerProcess]) -> None:
    d = tempfile.mkdtemp(prefix="js-restart-")
    p = start_server("edged", ["-js", "-sd", d])

    async def before() -> Any:
        nc = await nats.connect(p.url)
        js = nc.jetstream()
        await js.add_stream(name="KEEP", subjects=["keep.>"], max_msgs_per_subject=3, description="kept")
        for i in range(10):
            await js.publish(f"keep.{i % 4}", f"v{i}".encode(), headers={"Nats-Msg-Id": f"id{i}"})
        await js.delete_msg("KEEP", 10)
        info = await js.stream_info("KEEP")
        await nc.close()
        return info

    info1 = run(before())
    p.restart()

    async def after() -> Any:
        nc = await nats.connect(p.url)
        js = nc.jetstream()
        info = await js.stream_info("KEEP")
        msgs = [(await js.get_msg("KEEP", s)).data for s in range(info.state.first_seq, 10)]
        dup = await js.publish("keep.0", b"again", headers={"Nats-Msg-Id": "id8"})
        new = await js.publish("keep.0", b"new")
        await nc.close()
        return info, msgs, dup, new

    info2, msgs, dup, new = run(after())
    assert info2.config == info1.config
    assert (info2.state.messages, info2.state.first_seq, info2.state.last_seq, info2.state.num_deleted) == (
        info1.state.messages, info1.state.first_seq, info1.state.last_seq, info1.state.num_deleted)
    assert msgs == [f"v{i}".encode() for i in range(info1.state.first_seq - 1, 9)]
    assert dup.duplicate and dup.seq == 9  # the message id outlived the restart
    assert new.seq == 11


@pytest.mark.parametrize("sync", ["default", "always"])
def test_kill9_during_publish_storm_loses_nothing_acked(sync: str,
                                                       start_server: Callable[..., ServerProcess]) -> None:
    d = tempfile.mkdtemp(prefix="js-kill-")
    conf = f'jetstream {{ store_dir: "{d}"{", sync_interval: always" if sync == "always" else ""} }}\n'
    p = start_server("edged", config=conf)
    acked: dict[int, bytes] = {}
    launched: list[int] = []
    async def create() -> None:
        nc = await nats.connect(p.url)
        await nc.jetstream().add_stream(name="STORM", subjects=["storm"])
        await nc.close()

    run(create())

    async def storm() -> None:
        # 300 publishes always in flight; the kill lands while they are, from another thread
        nc = await nats.connect(p.url, allow_reconnect=False)
        js = nc.jetstream(timeout=2)
        sem = asyncio.Semaphore(300)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        async def one(n: int) -> None:
            payload = f"m{n}".encode()
            try:
                ack = await js.publish("storm", payload)
                acked[ack.seq] = payload
            except Exception:
                stop.set()
            finally:
                sem.release()

        async def killer() -> None:
            while len(acked) < 3000:
                await asyncio.sleep(0.005)
            await loop.run_in_executor(None, p.kill9)
            stop.set()

        k = asyncio.ensure_future(killer())
        tasks = []
        n = 0
        while not stop.is_set() and n < 200_000:
            await sem.acquire()
            tasks.append(asyncio.ensure_future(one(n)))
            n += 1
        await k
        await asyncio.gather(*tasks, return_exceptions=True)
        await nc.close()
        launched.append(n)

    run(storm())
    assert len(acked) >= 3000
    assert launched[0] > len(acked)  # the kill cut publishes in flight
    p.start()

    async def check() -> tuple[Any, dict[int, bytes], int]:
        nc = await nats.connect(p.url)
        js = nc.jetstream()
        info = await js.stream_info("STORM")
        stored = {}
        for seq in range(1, info.state.last_seq + 1):
            stored[seq] = (await js.get_msg("STORM", seq)).data
        nxt = (await js.publish("storm", b"after")).seq
        await nc.close()
        return info, stored, nxt

    info, stored, nxt = run(check(), timeout=120)
    assert {s: stored.get(s) for s in acked} == acked  # every acked message, at its acked sequence
    assert info.state.last_seq >= max(acked)
    assert nxt == info.state.last_seq + 1  # sequences continue, none reused
    assert info.state.messages == info.state.last_seq  # no holes
    # messages in flight at the kill may or may not have been stored, but each at most once
    assert len(set(stored.values())) == len(stored)


def test_restore_trims_kv_revision_left_by_a_crash(start_server: Callable[..., ServerProcess]) -> None:
    """A KV put commits its new revision first and the removal of the one it replaced right after (the
    PubAck waits on the first commit only). A crash between the two leaves both rows: the restored
    stream applies its limits again, so the bucket holds one revision per key, the newest."""
    from storage.sqlite import SQLiteStore

    d = tempfile.mkdtemp(prefix="js-kvcrash-")
    p = start_server("edged", ["-js", "-sd", d])

    async def before() -> None:
        nc = await nats.connect(p.url)
        kv = await nc.jetstream().create_key_value(bucket="B", history=1)
        await kv.put("k", b"a")
        await kv.put("k", b"b")
        await kv.put("other", b"x")
        await nc.close()

    run(before())
    p.stop()

    async def crash_window() -> int:
        # exactly the rows such a crash leaves: the next revision of k committed, b still there
        s = SQLiteStore(f"{d}/jetstream", 120.0)
        await s.open()
        st = s.get_stream("KV_B")
        assert st is not None and st.state().msgs == 2
        seq, _, fut = st.append("$KV.B.k", b"", b"c")
        await fut
        assert st.state().msgs == 3
        await s.close()
        return seq

    seq = run(crash_window())
    p.start()

    async def after() -> tuple[Any, Any, list[Any], Any]:
        nc = await nats.connect(p.url)
        js = nc.jetstream()
        kv = await js.key_value("B")
        info = await js.stream_info("KV_B")
        entry = await kv.get("k")
        hist = await kv.history("k")
        await kv.put("k", b"d")
        info2 = await js.stream_info("KV_B")
        await nc.close()
        return info, entry, hist, info2

    info, entry, hist, info2 = run(after())
    assert (entry.value, entry.revision) == (b"c", seq)
    assert [(e.value, e.revision) for e in hist] == [(b"c", seq)]
    assert info.state.messages == 2 and info.state.last_seq == seq
    assert info2.state.messages == 2 and info2.state.last_seq == seq + 1


def test_kill9_during_kv_puts_keeps_one_revision_per_key(start_server: Callable[..., ServerProcess]) -> None:
    d = tempfile.mkdtemp(prefix="js-kvkill-")
    p = start_server("edged", ["-js", "-sd", d])
    acked: dict[str, int] = {}
    async def load() -> None:
        nc = await nats.connect(p.url, allow_reconnect=False)
        js = nc.jetstream(timeout=2)
        await js.create_key_value(bucket="L", history=1)
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        count = 0

        async def putter(w: int) -> None:
            nonlocal count
            i = 0
            while not stop.is_set():
                key = f"k{(w * 7 + i) % 40}"
                try:
                    ack = await js.publish(f"$KV.L.{key}", f"{w}-{i}".encode())
                except Exception:
                    stop.set()
                    return
                acked[key] = max(acked.get(key, 0), ack.seq)
                count += 1
                i += 1

        async def killer() -> None:
            while count < 3000 and not stop.is_set():
                await asyncio.sleep(0.005)
            await loop.run_in_executor(None, p.kill9)
            stop.set()

        await asyncio.gather(killer(), *(putter(w) for w in range(16)))
        await nc.close()

    run(load(), timeout=120)
    assert len(acked) == 40
    p.start()

    async def check() -> tuple[Any, dict[str, list[int]]]:
        nc = await nats.connect(p.url)
        js = nc.jetstream()
        kv = await js.key_value("L")
        info = await js.stream_info("KV_L")
        revs = {k: [e.revision for e in await kv.history(k)] for k in acked}
        await nc.close()
        return info, revs

    info, revs = run(check(), timeout=60)
    # one revision per key, never older than the last one acked for it
    assert all(len(r) == 1 and r[0] >= acked[k] for k, r in revs.items()), revs
    assert info.state.messages == 40
