"""JetStream on its SQLite store under stress: the WAL stays bounded while a publisher awaits each ack
(small commits run on the loop thread, so checkpoints must be handed to the writer thread), and a full
disk turns into JetStream errors, never a crash, and is recoverable: a purge gets through, publishing
resumes, and everything acked before is still there after a restart. (The server's own limit, 75% of
the disk free at start as in nats-server, answers "insufficient resources" before the disk is full;
the test fills the disk from outside, as other programs would.)"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import nats
import pytest
from nats.js.errors import APIError

from storage import SQLiteStore
from tests.support.aio import run
from tests.support.servers import ServerProcess


def _record_checkpoints(store: SQLiteStore, holding: list[bool] | None = None,
                        frames: list[int] | None = None) -> list[int]:
    """From now on, the thread of each checkpoint the store runs, one entry per checkpoint (and in
    `holding`, whether it held commits back; in `frames`, the frames it found in the -wal file, -1 if
    it could not tell)."""
    threads: list[int] = []
    orig = store._checkpoint

    def spy(fsync_wal: bool) -> int | None:
        threads.append(threading.get_ident())
        if holding is not None:
            holding.append(store._exec_busy > 0)
        n = orig(fsync_wal)
        if frames is not None:
            frames.append(-1 if n is None else n)
        return n

    store._checkpoint = spy  # type: ignore[method-assign]
    return threads


def test_wal_stays_bounded_with_inline_commits() -> None:
    """2000 one-row commits (the synchronous-publish pattern) with a 64-page checkpoint interval: the
    -wal file must stay near that size, and no checkpoint may run on the event loop's thread."""
    d = tempfile.mkdtemp(prefix="js-wal-")
    loop_thread = threading.get_ident()
    holding: list[bool] = []

    async def body() -> tuple[int, list[int]]:
        store = SQLiteStore(d, wal_autocheckpoint=64)
        await store.open()
        threads = _record_checkpoints(store, holding)
        st = store.create_stream("W", b"{}")
        await store.flush()
        biggest = 0
        for i in range(2000):
            _, _, done = st.append("w", b"", os.urandom(200))
            await done
            if i % 50 == 0:
                biggest = max(biggest, os.path.getsize(store.path + "-wal"))
        await store.close()
        return biggest, threads

    biggest, seen_threads = run(body())
    # 2000 commits write ~4000 frames (table + index page each); without checkpoints that is > 16 MB
    assert biggest < 2 * 1024 * 1024, biggest
    assert seen_threads and loop_thread not in seen_threads
    assert sum(holding) >= 3, holding  # the -wal file was started over again and again


def test_commits_are_held_back_only_once_the_wal_really_holds_three_intervals() -> None:
    """KV puts (one row per commit, the replaced revision removed in a later commit) write about a third
    of the pages `_pages_written` estimates. The checkpoints' own frame counts correct the estimate, so
    the pass that holds commits back to start the -wal file over comes once the file really holds about
    three checkpoint intervals, not one: a publisher is stalled a third as often, and the -wal file still
    stays under four intervals. (Paced like a client awaiting each ack over the network, so that each
    checkpoint is done well before the next interval is written.)"""
    d = tempfile.mkdtemp(prefix="js-hold-")
    interval = 640

    holding: list[bool] = []
    frames: list[int] = []

    async def body() -> None:
        store = SQLiteStore(d, wal_autocheckpoint=interval)
        await store.open()
        _record_checkpoints(store, holding, frames)
        st = store.create_stream("KV_B", b"{}")
        await store.flush()
        last: dict[str, tuple[int, int]] = {}
        for i in range(6000):
            subject = f"$KV.B.k{i % 100}"
            seq, _, done = st.append(subject, b"", b"v" * 64)
            if subject in last:
                st.delete_known(last[subject][0], subject, last[subject][1])
            last[subject] = (seq, st.msg_size(subject, b"", b"v" * 64))
            await done
            await asyncio.sleep(0.0001)
        await store.close()

    run(body())
    seen = list(zip(holding, frames, strict=True))
    assert all(n >= 0 for _, n in seen) and len(seen) >= 20, seen
    # a pass that holds commits back follows the plain first pass of its checkpoint, which tells how big
    # the -wal file had grown; with the estimate alone that was about one interval (and less after SQLite
    # had started the file over by itself, which it does when a checkpoint catches up between two commits)
    grown = [seen[i - 1][1] for i in range(1, len(seen)) if seen[i][0] and not seen[i - 1][0]]
    assert all(2 * interval <= n for n in grown), (grown, seen)
    assert max(n for _, n in seen) < 4 * interval, seen


def test_idle_checkpoint_waits_for_a_quiet_second() -> None:
    """The idle checkpoint runs once the writer has been quiet for IDLE_CHECKPOINT_DELAY, not while
    commits keep coming, and once per quiet spell."""
    from storage.sqlite import IDLE_CHECKPOINT_DELAY

    d = tempfile.mkdtemp(prefix="js-idle-")

    async def body() -> tuple[int, int, int]:
        store = SQLiteStore(d, wal_autocheckpoint=0)  # no page-count checkpoints: only the idle one
        await store.open()
        calls = _record_checkpoints(store)
        st = store.create_stream("I", b"{}")
        await store.flush()
        calls.clear()
        end = time.monotonic() + 1.6 * IDLE_CHECKPOINT_DELAY
        while time.monotonic() < end:  # a commit every 0.1 s: never a quiet second
            await st.append("i", b"", b"x")[2]
            await asyncio.sleep(0.1 * IDLE_CHECKPOINT_DELAY)
        during = len(calls)
        await asyncio.sleep(1.5 * IDLE_CHECKPOINT_DELAY)
        after = len(calls)
        await asyncio.sleep(1.5 * IDLE_CHECKPOINT_DELAY)  # nothing committed since: no second one
        again = len(calls)
        await store.close()
        return during, after, again

    assert run(body()) == (0, 1, 1)


def _mount_tmpfs(path: str, size: str) -> None:
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], check=True,
                       capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"needs a small filesystem to fill (mount tmpfs as root): {e}")


@contextlib.contextmanager
def _edged_on_tmpfs(prefix: str) -> Iterator[tuple[str, ServerProcess]]:
    """edged with its store on a 48 MB tmpfs of its own, to fill: (its directory, the server)."""
    d = tempfile.mkdtemp(prefix=prefix)
    _mount_tmpfs(d, "48m")
    p = ServerProcess("edged", ["-js", "-sd", d])
    try:
        p.start()
        yield d, p
    finally:
        p.stop()
        subprocess.run(["umount", "-l", d], check=False, capture_output=True, timeout=10)


def _fill_disk(d: str, leave: int) -> str:
    """Something else fills the disk (logs, another program), leaving `leave` bytes: its file."""
    st = os.statvfs(d)
    filler = os.path.join(d, "filler")
    with open(filler, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, st.f_bavail * st.f_frsize - leave)
    return filler


async def _publish_until_refused(js: Any, stop: Callable[[list[int]], bool]) -> tuple[int, list[int]]:
    """Publish 64 KB messages until `stop(error codes so far)`: (how many were acked, the error codes)."""
    acked, errors = 0, []
    for _ in range(2000):
        try:
            await js.publish("fill", os.urandom(64 * 1024))
            acked += 1
        except APIError as e:
            errors.append(e.err_code)
            if stop(errors):
                break
    return acked, errors


def test_disk_full_is_an_error_and_recoverable() -> None:
    with _edged_on_tmpfs("js-full-") as (d, p):

        async def fill() -> dict[str, Any]:
            nc = await nats.connect(p.url)
            js = nc.jetstream(timeout=10)
            await js.add_stream(name="KEEP", subjects=["keep"])
            kept = [(await js.publish("keep", f"k{i}".encode())).seq for i in range(20)]
            await js.add_stream(name="FILL", subjects=["fill"])
            _fill_disk(d, 6 * 1024 * 1024)  # leave edged a few MB
            acked, codes = await _publish_until_refused(js, lambda codes: len(set(codes)) >= 2)
            errors = set(codes)
            # the server still answers, and what was stored is readable
            info = await js.stream_info("FILL")
            keep = [(await js.get_msg("KEEP", s)).data for s in kept]
            purged = (await js.purge_stream("FILL"))
            resumed = None
            for _ in range(50):
                try:
                    resumed = (await js.publish("fill", b"after")).seq
                    break
                except APIError:
                    await asyncio.sleep(0.1)
            later = (await js.publish("keep", b"later")).seq
            await nc.close()
            return {"acked": acked, "errors": errors, "fill_msgs": info.state.messages, "keep": keep,
                    "purged": purged, "resumed": resumed, "later": later}

        r = run(fill(), timeout=180)
        assert r["acked"] > 20
        assert r["errors"] <= {10077, 10023} and 10077 in r["errors"]  # store failed: full; then refused
        assert r["fill_msgs"] == r["acked"]  # exactly the acked ones were stored
        assert r["keep"] == [f"k{i}".encode() for i in range(20)]
        assert r["purged"] is True
        assert r["resumed"] == r["acked"] + 1
        assert r["later"] == 21
        assert p.proc is not None and p.proc.poll() is None
        p.restart()

        async def after() -> tuple[Any, Any, list[bytes]]:
            nc = await nats.connect(p.url)
            js = nc.jetstream()
            fill, keep = await js.stream_info("FILL"), await js.stream_info("KEEP")
            data = [(await js.get_msg("KEEP", s)).data for s in range(1, 22)]
            await nc.close()
            return fill, keep, data

        fill, keep, data = run(after())
        assert (fill.state.messages, fill.state.last_seq) == (1, r["acked"] + 1)
        assert keep.state.messages == 21
        assert data == [f"k{i}".encode() for i in range(20)] + [b"later"]


def test_publishing_resumes_when_the_disk_has_room_again() -> None:
    """Something else filled the disk (logs, another program) and edged refuses publishes; once that is
    cleared away, without any message removed, publishing resumes on its own, the sequence going on from
    the last acked message, and nothing stored is lost, also across a restart."""
    with _edged_on_tmpfs("js-room-") as (d, p):

        async def body() -> dict[str, Any]:
            nc = await nats.connect(p.url)
            js = nc.jetstream(timeout=10)
            await js.add_stream(name="FILL", subjects=["fill"])
            filler = _fill_disk(d, 6 * 1024 * 1024)
            acked, errors = await _publish_until_refused(js, lambda codes: codes.count(10023) >= 3)
            refused_before = 10023 in errors
            os.unlink(filler)
            resumed = None
            for _ in range(50):  # the ticker looks once a second
                try:
                    resumed = (await js.publish("fill", b"after")).seq
                    break
                except APIError as e:
                    assert e.err_code == 10023, e
                    await asyncio.sleep(0.1)
            more = [(await js.publish("fill", b"more")).seq for _ in range(3)]
            info = await js.stream_info("FILL")
            await nc.close()
            return {"acked": acked, "refused": refused_before, "first_error": errors[0], "resumed": resumed,
                    "more": more, "msgs": info.state.messages}

        r = run(body(), timeout=180)
        assert r["acked"] > 3 and r["refused"] and r["first_error"] == 10077
        assert r["resumed"] == r["acked"] + 1, r
        assert r["more"] == [r["acked"] + 2, r["acked"] + 3, r["acked"] + 4]
        assert r["msgs"] == r["acked"] + 4
        assert os.path.getsize(os.path.join(d, "jetstream", "space.reserve")) > 0  # the reserve was made again
        p.restart()

        async def after() -> tuple[int, int, bytes]:
            nc = await nats.connect(p.url)
            js = nc.jetstream()
            info = await js.stream_info("FILL")
            last = (await js.get_msg("FILL", info.state.last_seq)).data
            await nc.close()
            return info.state.messages, info.state.last_seq, last

        assert run(after()) == (r["acked"] + 4, r["acked"] + 4, b"more")


def test_kv_puts_through_a_full_disk_keep_one_revision_per_key() -> None:
    """A KV put whose commit fails on a full disk is not stored, and its sequence is used again. Once room
    is made (the other keys purged, which lets publishing resume), puts carry on, the failed key's first:
    each key keeps exactly its last acked value, and no put removes its own value or another key's (the
    bucket's shortcut to a key's previous revision must not outlive the failure)."""
    with _edged_on_tmpfs("js-kvfull-") as (d, p):

        async def body() -> tuple[dict[str, bytes], dict[str, list[bytes]], int]:
            nc = await nats.connect(p.url)
            js = nc.jetstream(timeout=10)
            kv = await js.create_key_value(bucket="F", history=1)
            last: dict[str, bytes] = {}
            filler = _fill_disk(d, 4 * 1024 * 1024)
            failed = ""
            for i in range(400):
                key = f"k{i % 7}"
                value = f"{i}:".encode() + os.urandom(32 * 1024)
                try:
                    await kv.put(key, value)
                    last[key] = value
                except APIError as e:
                    assert e.err_code == 10077, e  # the commit failed: the disk is full
                    failed = key
                    break
            assert failed
            # the removals of the revisions replaced just before the failure were to be committed after
            # it: once the ticker has applied the limits again, each key has one revision, the failed
            # key its previous one
            await asyncio.sleep(1.5)
            counts = (await js.stream_info("KV_F", subjects_filter=">")).state.subjects
            values = {k: (await kv.get(k)).value for k in last}
            assert counts == {f"$KV.F.{k}": 1 for k in last}, counts
            assert values == last
            os.unlink(filler)
            for k in [k for k in last if k != failed]:
                await js.purge_stream("KV_F", subject=f"$KV.F.{k}")
                del last[k]
            order = [failed] + [f"k{j}" for j in range(7) if f"k{j}" != failed]
            for j in range(30):
                key = order[j % 7]
                value = f"after {j}".encode()
                for _ in range(50):
                    try:
                        await kv.put(key, value)
                        last[key] = value
                        break
                    except APIError:
                        await asyncio.sleep(0.1)  # until edged sees the removals
            hist = {k: [e.value for e in await kv.history(k)] for k in last}
            info = await js.stream_info("KV_F")
            await nc.close()
            return last, hist, info.state.messages

        last, hist, msgs = run(body(), timeout=180)
        assert hist == {k: [v] for k, v in last.items()}
        assert msgs == len(last) == 7
