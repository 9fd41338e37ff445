"""Durability: streams, config and messages come back after a restart; `kill -9` during a publish storm
loses nothing that was acked and never reuses a sequence."""

from __future__ import annotations

import asyncio
import tempfile
from typing import Any

import nats
import pytest

from tests.jsutil import run
from tests.servers import ServerProcess


def test_restart_keeps_streams_config_and_messages() -> None:
    d = tempfile.mkdtemp(prefix="js-restart-")
    p = ServerProcess("edged", ["-js", "-sd", d]).start()
    try:
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
    finally:
        p.stop()
    assert info2.config == info1.config
    assert (info2.state.messages, info2.state.first_seq, info2.state.last_seq, info2.state.num_deleted) == (
        info1.state.messages, info1.state.first_seq, info1.state.last_seq, info1.state.num_deleted)
    assert msgs == [f"v{i}".encode() for i in range(info1.state.first_seq - 1, 9)]
    assert dup.duplicate and dup.seq == 9  # the message id outlived the restart
    assert new.seq == 11


@pytest.mark.parametrize("sync", ["default", "always"])
def test_kill9_during_publish_storm_loses_nothing_acked(sync: str) -> None:
    d = tempfile.mkdtemp(prefix="js-kill-")
    conf = f'jetstream {{ store_dir: "{d}"{", sync_interval: always" if sync == "always" else ""} }}\n'
    p = ServerProcess("edged", config=conf).start()
    acked: dict[int, bytes] = {}
    launched: list[int] = []
    try:
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
    finally:
        p.stop()
    assert {s: stored.get(s) for s in acked} == acked  # every acked message, at its acked sequence
    assert info.state.last_seq >= max(acked)
    assert nxt == info.state.last_seq + 1  # sequences continue, none reused
    assert info.state.messages == info.state.last_seq  # no holes
    # messages in flight at the kill may or may not have been stored, but each at most once
    assert len(set(stored.values())) == len(stored)
