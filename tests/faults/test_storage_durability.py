"""SQLite store durability: restart, kill -9 mid-append, disk full, sequences never reused."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from storage import SQLiteStore, StoreError, StoreFullError

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]


async def test_restart_restores_streams_state_consumers(tmp_path: Path) -> None:
    s = SQLiteStore(str(tmp_path), 120.0)
    await s.open()
    a = s.create_stream("A", b'{"name":"A"}', first_seq=50)
    b = s.create_stream("B", b'{"name":"B"}', account="ACC")
    for i in range(100):
        a.append(f"a.{i % 7}", b"NATS/1.0\r\nK: v\r\n\r\n" if i % 3 == 0 else b"", os.urandom(i), ttl=10**12 * (i % 2))
        b.append("b", b"", b"x")
    a.delete(60)
    a.delete(149)
    a.purge("a.3", keep=2)
    b.purge()
    a.put_consumer("dur", b'{"durable_name":"dur"}', b"\x00\x01state")
    a.update_config(b'{"name":"A","max_msgs":5}')
    s.create_stream("GONE", b"{}")
    s.delete_stream("GONE")
    before = {st.name: (st.state(deleted=True, subjects_filter=True), st.config) for st in s.streams()}
    msgs_before = [a.load(q) for q in range(50, 150)]
    await s.close()

    s2 = SQLiteStore(str(tmp_path), "always")
    await s2.open()
    after = {st.name: (st.state(deleted=True, subjects_filter=True), st.config) for st in s2.streams()}
    assert after == before
    a2 = s2.get_stream("A")
    assert a2 is not None and s2.get_stream("B", account="ACC") is not None
    assert [a2.load(q) for q in range(50, 150)] == msgs_before
    assert a2.get_consumer("dur") == (b'{"durable_name":"dur"}', b"\x00\x01state")
    assert a2.append("z", b"", b"")[0] == 150  # 149 was deleted: never reused
    b2 = s2.get_stream("B", account="ACC")
    assert b2 is not None and b2.append("b", b"", b"")[0] == 101  # purged: continues
    await s2.close()


async def test_sequence_survives_purge_and_delete_last(tmp_path: Path) -> None:
    # nats-server #2055: after purge / deleting the last message, a restart must not reuse sequences.
    s = SQLiteStore(str(tmp_path), "always")
    await s.open()
    st = s.create_stream("S", b"{}")
    for _ in range(10):
        st.append("x", b"", b"")
    st.delete(10)
    await s.flush()
    await s.close()
    s = SQLiteStore(str(tmp_path), "always")
    await s.open()
    st2 = s.get_stream("S")
    assert st2 is not None and st2.state().last_seq == 10
    st2.purge()
    await s.close()
    s = SQLiteStore(str(tmp_path), "always")
    await s.open()
    st3 = s.get_stream("S")
    assert st3 is not None
    state = st3.state()
    assert (state.msgs, state.first_seq, state.last_seq) == (0, 11, 10)
    assert st3.append("x", b"", b"")[0] == 11
    await s.close()


async def test_state_after_crash_with_interior_and_last_deletes(tmp_path: Path) -> None:
    # The stream row is written only when the rows cannot tell first/last (see SQLiteStream._persist_meta).
    # A second store opened on the same files after each commit sees what a restart after kill -9 would.
    s = SQLiteStore(str(tmp_path), 120.0)
    await s.open()
    st = s.create_stream("KV", b"{}")
    await s.flush()

    async def crash_view() -> tuple[int, int, int, int, int]:
        await s.flush()
        other = SQLiteStore(str(tmp_path), 120.0)
        await other.open()
        try:
            o = other.get_stream("KV")
            assert o is not None
            state = o.state()
            return state.msgs, state.bytes, state.first_seq, state.last_seq, o.last_ts
        finally:
            await other.close()

    def mine() -> tuple[int, int, int, int, int]:
        state = st.state()
        return state.msgs, state.bytes, state.first_seq, state.last_seq, st.last_ts

    for i in range(30):  # a KV bucket replacing revisions: deletes at the front and in the middle
        seq = st.append(f"k.{i % 4}", b"", b"v%d" % i)[0]
        if i >= 4:
            old = seq - 4
            st.delete_known(old, f"k.{i % 4}", st.msg_size(f"k.{i % 4}", b"", b"v%d" % (i - 4)))
        assert await crash_view() == mine()
    st.delete(st.last_seq)  # the last message: only the stream row remembers its sequence
    assert await crash_view() == mine()
    st.delete(st.last_seq - 2)  # interior
    assert await crash_view() == mine()
    for q in list(range(st.first_seq, st.last_seq + 1)):
        st.delete(q)  # down to empty
    assert mine()[0] == 0
    assert await crash_view() == mine()
    st.compact(50)  # an empty stream moved ahead: nothing but the stream row holds 50
    assert await crash_view() == mine()
    assert st.append("k.0", b"", b"")[0] == 50
    assert await crash_view() == mine()
    await s.close()


async def test_replaced_revision_is_removed_in_the_commit_after_the_put(tmp_path: Path) -> None:
    """A KV put's commit (what its PubAck waits on) holds the new row only; the revision it replaced
    goes in the next commit, right behind it. Whoever looks at the files in between (a restart after a
    crash there) finds both rows."""
    import sqlite3

    s = SQLiteStore(str(tmp_path), 120.0)
    await s.open()
    st = s.create_stream("KV", b"{}")
    first = st.append("k", b"", b"a")[0]
    await s.flush()
    seen: list[list[int]] = []

    def look(_: object) -> None:
        with sqlite3.connect(s.path) as c:
            seen.append([r[0] & ((1 << 44) - 1) for r in c.execute("SELECT rowid FROM msgs ORDER BY rowid")])

    s.on_commit = look
    second, _, fut = st.append("k", b"", b"b")
    st.delete_known(first, "k", st.msg_size("k", b"", b"a"))
    assert st.load(first) is None and st.state().msgs == 1  # gone for readers at once
    await fut
    await s.flush()
    assert seen == [[first, second], [second]]
    await s.close()
    s2 = SQLiteStore(str(tmp_path), 120.0)
    await s2.open()
    st2 = s2.get_stream("KV")
    assert st2 is not None and st2.state().msgs == 1 and st2.load(second) is not None
    await s2.close()


async def _fill_until_full(s: SQLiteStore, payload: int) -> tuple[list[int], StoreError]:
    st = s.get_stream("S")
    assert st is not None
    ok: list[int] = []
    for _ in range(10_000):
        batch = [st.append("big", b"", os.urandom(payload)) for _ in range(4)]
        try:
            await batch[-1][2]
        except StoreError as e:
            return ok, e
        ok.extend(seq for seq, _, _ in batch)
    raise AssertionError("store never filled up")


async def _check_full_recovery(
    s: SQLiteStore, path: str, sync: str | float, free_space: Callable[[], None] = lambda: None
) -> None:
    st = s.get_stream("S")
    assert st is not None
    ok, err = await _fill_until_full(s, 3000)
    assert isinstance(err, StoreFullError)
    # Failed appends are not in state; state matches what is on disk.
    state = st.state(deleted=True)
    assert state.last_seq == max(ok) and state.msgs == len(ok) and state.deleted == []
    assert st.load(max(ok) + 1) is None
    assert all(st.load(q) is not None for q in ok)
    # Ops queued while the failing commit ran also failed and were rolled back.
    seq, _, fut = st.append("small", b"", b"x")
    assert seq == max(ok) + 1
    # Free room (the operator grows the disk, or the purge alone frees pages) and carry on.
    free_space()
    st.purge()
    try:
        await fut
    except StoreError:
        # The small append may still not fit before the purge lands; then both are retried below.
        st.purge()
    await s.flush()
    seq2, _, fut2 = st.append("after", b"", b"y")
    await fut2
    assert seq2 > max(ok)
    await s.close()
    s2 = SQLiteStore(path, sync)
    await s2.open()
    st2 = s2.get_stream("S")
    assert st2 is not None and st2.load(seq2) is not None and st2.state().last_seq == seq2
    await s2.close()


async def test_disk_full_max_page_count(tmp_path: Path) -> None:
    s = SQLiteStore(str(tmp_path), "always", max_page_count=200)
    await s.open()
    s.create_stream("S", b"{}")
    await s.flush()
    await _check_full_recovery(s, str(tmp_path), "always")


async def test_disk_full_tmpfs(tmp_path: Path) -> None:
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount tmpfs: {r.stderr.decode().strip()}")
    try:
        s = SQLiteStore(str(mnt), 0.2)
        await s.open()
        s.create_stream("S", b"{}")
        await s.flush()

        def grow() -> None:
            subprocess.run(["mount", "-o", "remount,size=8m", str(mnt)], check=True)

        await _check_full_recovery(s, str(mnt), 0.2, grow)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


async def test_commit_failure_rolls_back_deletes_and_creates(tmp_path: Path) -> None:
    s = SQLiteStore(str(tmp_path), "always", max_page_count=120)
    await s.open()
    st = s.create_stream("S", b"{}")
    for _ in range(5):
        st.append("k", b"", b"v")
    await s.flush()
    before = st.state(deleted=True)
    # One batch: a delete, a new stream and appends that cannot fit.
    st.delete(2)
    s.create_stream("NEW", b"{}")
    fut = None
    for _ in range(200):
        fut = st.append("big", b"", os.urandom(4000))[2]
    assert fut is not None
    with pytest.raises(StoreFullError):
        await fut
    assert st.state(deleted=True) == before
    assert st.load(2) is not None
    assert s.get_stream("NEW") is None
    await s.close()


KILL_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from storage import SQLiteStore

    async def main():
        # a checkpoint every 64 pages: kills land during checkpoints, which run on their own connection
        # beside inline commits (and every third one holding commits back)
        s = SQLiteStore(sys.argv[1], sys.argv[2] if sys.argv[2] == "always" else float(sys.argv[2]),
                        wal_autocheckpoint=64)
        await s.open()
        st = s.get_stream("K") or s.create_stream("K", b"{}")
        await s.flush()
        print("ready", st.state().last_seq, flush=True)
        n = 0
        while True:
            n += 1
            subj = "k." + str(n % 5)
            burst = [st.append(subj, b"", b"x" * (n % 300)) for _ in range(1 + n % 40)]
            if n % 17 == 0:
                st.purge("k.1", keep=3)
            await burst[-1][2]
            sys.stdout.write("".join(f"{q} {subj}\\n" for q, _, _ in burst))
            sys.stdout.flush()

    asyncio.run(main())
    """
)


async def _check_after_kill(path: str, acked: list[int], subj_of: dict[int, str]) -> int:
    s = SQLiteStore(path, "always")
    await s.open()
    st = s.get_stream("K")
    assert st is not None
    state = st.state()
    assert state.last_seq >= acked[-1]
    # Every acknowledged message is there, exactly as written, unless the child's own
    # `purge("k.1", keep=3)` removed it.
    for q in acked:
        m = st.load(q)
        if m is None:
            assert subj_of[q] == "k.1", f"acknowledged seq {q} lost"
        else:
            assert (m.seq, m.subject) == (q, subj_of[q])
    assert st.count(0, "k.1") >= min(3, sum(1 for v in subj_of.values() if v == "k.1"))
    seq, _, fut = st.append("after", b"", b"")
    await fut
    assert seq == state.last_seq + 1 and seq > acked[-1]
    await s.close()
    return seq



@pytest.mark.parametrize("sync", ["always", "30"])
def test_kill_9_loses_nothing_acknowledged(tmp_path: Path, sync: str) -> None:
    rnd = random.Random()
    prev_high = 0
    for _round in range(3):
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        p = subprocess.Popen(
            [sys.executable, "-c", KILL_CHILD, str(tmp_path), sync],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=str(ROOT),
        )
        assert p.stdout is not None
        line = p.stdout.readline().decode()
        assert line.startswith("ready"), p.stderr.read().decode() if p.stderr else line
        assert int(line.split()[1]) >= prev_high
        time.sleep(rnd.uniform(0.2, 1.2))
        os.kill(p.pid, signal.SIGKILL)
        out, _ = p.communicate(timeout=10)
        lines = out.decode().splitlines()
        if lines and not out.endswith(b"\n"):
            lines = lines[:-1]  # a line cut by the kill
        subj_of = {int(x.split()[0]): x.split()[1] for x in lines}
        acked = [int(x.split()[0]) for x in lines]
        assert acked, "child acknowledged nothing before the kill"
        assert len(acked) == len(set(acked)) and acked == sorted(acked)
        assert acked[0] > prev_high

        prev_high = asyncio.run(_check_after_kill(str(tmp_path), acked, subj_of))
