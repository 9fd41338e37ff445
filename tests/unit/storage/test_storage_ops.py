"""Every store operation on both backends. SQLite cases run twice: reading straight from the
uncommitted overlay ("pending") and after the batch committed ("committed")."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage import (
    MemoryStore,
    SQLiteStore,
    Store,
    StoreClosedError,
    Stream,
    StreamExistsError,
    compile_filter,
    subject_matches,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", "sqlite-pending", "sqlite-committed"])
async def env(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Store, bool]]:
    kind = request.param
    store: Store = MemoryStore() if kind == "memory" else SQLiteStore(str(tmp_path), "always")
    await store.open()
    yield store, kind == "sqlite-committed"
    await store.close()


async def _settle(env: tuple[Store, bool]) -> None:
    store, commit = env
    if commit:
        await store.flush()


def _size(st: Stream, subj: str, hdr: bytes, data: bytes) -> int:
    return st.msg_size(subj, hdr, data)


async def _fill(env: tuple[Store, bool], subjects: list[str], name: str = "S") -> Stream:
    st = env[0].create_stream(name, b'{"name":"%s"}' % name.encode())
    for i, s in enumerate(subjects):
        st.append(s, b"", f"m{i + 1}".encode())
    await _settle(env)
    return st


def test_msg_size_formulas() -> None:
    # nats-server: memStoreMsgSize = subj+hdr+msg+16; fileStoreMsgSize = 22+subj+msg+8 (+4+hdr).
    from storage import MemoryStream, SQLiteStream

    assert MemoryStream.msg_size("foo", b"", b"hello") == 3 + 5 + 16
    assert MemoryStream.msg_size("foo", b"NATS/1.0\r\n\r\n", b"hello") == 3 + 12 + 5 + 16
    assert SQLiteStream.msg_size("foo", b"", b"hello") == 22 + 3 + 5 + 8
    assert SQLiteStream.msg_size("foo", b"NATS/1.0\r\n\r\n", b"hello") == 22 + 3 + 4 + 12 + 5 + 8
    assert SQLiteStream.msg_size("é", b"", b"") == 22 + 2 + 8


def test_subject_matching() -> None:
    assert subject_matches("foo.*", "foo.bar")
    assert not subject_matches("foo.*", "foo.bar.baz")
    assert subject_matches("foo.>", "foo.bar.baz")
    assert not subject_matches("foo.>", "foo")
    assert subject_matches(">", "x")
    assert subject_matches("*.b.*", "a.b.c")
    assert not subject_matches("*.b.*", "a.c.c")
    assert subject_matches("a*b", "a*b")  # not a wildcard token
    f = compile_filter(["a.b", "c.*"])
    assert f.matches("a.b") and f.matches("c.x") and not f.matches("a.c")
    assert compile_filter([">", "a"]).all


async def test_append_load_and_state(env: tuple[Store, bool]) -> None:
    store, _ = env
    st = store.create_stream("S", b"{}")
    seq, ts, fut = st.append("a.b", b"NATS/1.0\r\nX: 1\r\n\r\n", b"hello", ttl=0)
    assert seq == 1 and ts > 0
    seq2, ts2, _ = st.append("a.c", b"", b"world", ts=ts + 5)
    assert seq2 == 2 and ts2 == ts + 5
    await fut
    await _settle(env)
    m = st.load(1)
    assert m is not None and m.subject == "a.b" and m.data == b"hello" and m.hdr.startswith(b"NATS/1.0")
    assert st.load(0) is None and st.load(3) is None
    s = st.state()
    assert (s.msgs, s.first_seq, s.last_seq, s.first_ts, s.last_ts) == (2, 1, 2, ts, ts + 5)
    assert s.bytes == _size(st, "a.b", m.hdr, b"hello") + _size(st, "a.c", b"", b"world")
    assert s.num_subjects == 2 and s.num_deleted == 0


async def test_first_seq_config(env: tuple[Store, bool]) -> None:
    store, _ = env
    st = store.create_stream("S", b"{}", first_seq=1000)
    assert st.state().first_seq == 1000 and st.state().last_seq == 999
    assert st.append("x", b"", b"")[0] == 1000
    await _settle(env)
    assert st.load(1000) is not None


async def test_load_next_and_last_filters(env: tuple[Store, bool]) -> None:
    st = await _fill(env, ["a.1", "b.1", "a.2", "a.1.x", "b.2", "c", "a.1"])
    assert st.load_next(1, "a.1").seq == 1  # type: ignore[union-attr]
    assert st.load_next(2, "a.1").seq == 7  # type: ignore[union-attr]
    assert st.load_next(2, "a.*").seq == 3  # type: ignore[union-attr]
    assert st.load_next(4, "a.*").seq == 7  # type: ignore[union-attr]
    assert st.load_next(1, "a.>").seq == 1  # type: ignore[union-attr]
    assert st.load_next(5, "*.1.>") is None
    assert st.load_next(1, "*.1.>").seq == 4  # type: ignore[union-attr]
    assert st.load_next(2, ["c", "b.*"]).seq == 2  # type: ignore[union-attr]
    assert st.load_next(3, ["c", "b.*"]).seq == 5  # type: ignore[union-attr]
    assert st.load_next(3, ["c", "b.2"]).seq == 5  # type: ignore[union-attr]
    assert st.load_next(6, ["c", "b.2"]).seq == 6  # type: ignore[union-attr]
    assert st.load_next(7, ["c", "b.2"]) is None
    assert st.load_next(1, "zzz") is None
    assert st.load_next(3).seq == 3  # type: ignore[union-attr]
    assert st.load_next(8) is None
    assert st.load_last("a.1").seq == 7  # type: ignore[union-attr]
    assert st.load_last("b.*").seq == 5  # type: ignore[union-attr]
    assert st.load_last(">").seq == 7  # type: ignore[union-attr]
    assert st.load_last("c.>") is None
    assert st.load_prev(6, "a.*").seq == 3  # type: ignore[union-attr]
    assert st.count(0, "a.*") == 3
    assert st.count(4, "a.*") == 1
    assert st.count(0, None) == 7
    assert st.count(3, ["b.1", "c"]) == 1
    assert st.subject_counts("a.>") == {"a.1": 2, "a.2": 1, "a.1.x": 1}
    assert st.state(subjects_filter="b.*").subjects == {"b.1": 1, "b.2": 1}


async def test_newest_first_walks_back_over_live_messages(env: tuple[Store, bool]) -> None:
    """More messages than one read takes, some removed: each live one once, newest first, with its payload."""
    st = await _fill(env, [f"s.{i % 3}" for i in range(200)])
    for seq in (200, 150, 7):
        st.delete(seq)
    await _settle(env)
    got = [(m.seq, m.data) for m in st.newest_first(180)]
    want = [(s, f"m{s}".encode()) for s in range(180, 0, -1) if s not in (150, 7)]
    assert got == want
    assert [m.seq for m in st.newest_first(10_000)][:2] == [199, 198]
    assert list(st.newest_first(0)) == []


async def test_delete_interior_first_last(env: tuple[Store, bool]) -> None:
    st = await _fill(env, ["a", "b", "c", "d", "e"])
    assert st.delete(3) is True
    assert st.delete(3) is False
    assert st.delete(99) is False
    await _settle(env)
    s = st.state(deleted=True)
    assert (s.msgs, s.first_seq, s.last_seq, s.num_deleted, s.deleted) == (4, 1, 5, 1, [3])
    st.delete(1, erase=True)
    await _settle(env)
    s = st.state(deleted=True)
    assert (s.first_seq, s.deleted) == (2, [3])
    st.delete(5)
    st.delete(2)
    st.delete(4)
    await _settle(env)
    s = st.state(deleted=True)
    # All gone: first = last+1, last keeps the highest assigned sequence.
    assert (s.msgs, s.bytes, s.first_seq, s.last_seq, s.num_deleted, s.deleted, s.num_subjects) == (
        0, 0, 6, 5, 0, [], 0,
    )
    assert st.append("z", b"", b"")[0] == 6


@pytest.mark.parametrize("seqs", [[3, 2, 3, 9, 40], [5, 5, 1], [1, 2, 3, 4, 5, 6, 7, 2, 99], [1, 10], [7]])
async def test_delete_many(env: tuple[Store, bool], seqs: list[int]) -> None:
    """Acks of a run: each live one goes once (repeats and absent ones are skipped), counts follow."""
    st = await _fill(env, ["a", "b"] * 5)
    before = st.state()
    gone = st.delete_many(seqs)
    live = sorted({s for s in seqs if 1 <= s <= 10})
    assert [m.seq for m in gone] == live
    assert [m.subject for m in gone] == ["a" if s % 2 else "b" for s in live]
    await _settle(env)
    s = st.state(deleted=True)
    assert s.msgs == 10 - len(live) and s.bytes == before.bytes - sum(m.size for m in gone)
    assert s.first_seq == min(set(range(1, 11)) - set(live))
    assert all(st.load(x) is None for x in live) and st.delete_many(live) == []


async def test_purge_all_keeps_sequence(env: tuple[Store, bool]) -> None:
    st = await _fill(env, ["a"] * 20)
    assert st.purge() == 20
    await _settle(env)
    s = st.state()
    assert (s.msgs, s.bytes, s.first_seq, s.last_seq) == (0, 0, 21, 20)
    assert st.load(5) is None
    assert st.append("a", b"", b"")[0] == 21


async def test_purge_filter_keep_seq(env: tuple[Store, bool]) -> None:
    subs = ["a", "b", "a", "b", "a", "c", "a", "b"]
    st = await _fill(env, subs)
    assert st.purge("a", keep=1) == 3  # removes 1,3,5 keeps 7
    await _settle(env)
    assert [st.load(i) is not None for i in range(1, 9)] == [False, True, False, True, False, True, True, True]
    assert st.state().first_seq == 2
    assert st.purge("b", seq=8) == 2  # below 8: 2 and 4
    await _settle(env)
    s0 = st.state(deleted=True)
    assert (s0.first_seq, s0.deleted, s0.msgs) == (6, [], 3)
    assert st.purge("*", keep=2) == 1  # c(6), a(7), b(8): keep newest two
    assert st.state().first_seq == 7
    assert st.purge(seq=1) == 0
    with pytest.raises(ValueError):
        st.purge("a", seq=3, keep=1)
    assert st.purge(keep=5) == 0
    assert st.purge(keep=1) == 1
    await _settle(env)
    s = st.state()
    assert (s.msgs, s.first_seq, s.last_seq) == (1, 8, 8)


async def test_purge_keep_all_filter(env: tuple[Store, bool]) -> None:
    st = await _fill(env, [f"s.{i % 4}" for i in range(40)])
    assert st.purge(">", keep=10) == 30
    await _settle(env)
    s = st.state()
    assert (s.msgs, s.first_seq, s.last_seq) == (10, 31, 40)
    assert st.subject_counts() == {"s.0": 2, "s.1": 2, "s.2": 3, "s.3": 3}
    assert sum(st.subject_counts().values()) == 10


async def test_compact(env: tuple[Store, bool]) -> None:
    st = await _fill(env, [f"s.{i % 3}" for i in range(30)])
    st.delete(12)
    assert st.compact(12) == 11
    await _settle(env)
    s = st.state()
    assert (s.msgs, s.first_seq, s.last_seq) == (18, 13, 30)
    assert st.compact(5) == 0
    assert st.compact(100) == 18
    await _settle(env)
    s = st.state()
    assert (s.msgs, s.first_seq, s.last_seq) == (0, 100, 99)
    assert st.append("x", b"", b"")[0] == 100


async def test_limits_primitives(env: tuple[Store, bool]) -> None:
    store, _ = env
    st = store.create_stream("S", b"{}")
    for i in range(30):
        st.append(f"k.{i % 3}", b"", b"x" * 10, ts=1000 + i)
    await _settle(env)
    assert st.trim_msgs(25) == 5
    assert st.state().first_seq == 6
    assert st.remove_older_than(1009) == 5  # ts 1005..1009
    assert st.state().first_seq == 11
    per = st.msg_size("k.0", b"", b"x" * 10)
    assert st.trim_bytes(per * 15) == 5
    assert st.state().msgs == 15 and st.state().first_seq == 16
    before = st.subject_counts()
    assert st.trim_subject("k.0", 2) == before["k.0"] - 2
    await _settle(env)
    assert st.subject_counts()["k.0"] == 2
    assert st.load_last("k.0").seq == 28  # type: ignore[union-attr]
    with pytest.raises(ValueError):
        st.trim_subject("k.*", 1)
    assert st.trim_msgs(-1) == 0 and st.trim_bytes(-1) == 0


async def test_per_message_ttl(env: tuple[Store, bool]) -> None:
    store, _ = env
    st = store.create_stream("S", b"{}")
    st.append("a", b"", b"1", ts=1_000, ttl=500)
    st.append("b", b"", b"2", ts=1_100)
    st.append("c", b"", b"3", ts=1_200, ttl=100)
    st.append("d", b"", b"4", ts=1_300, ttl=10_000)
    await _settle(env)
    assert st.load(1).ttl == 500  # type: ignore[union-attr]
    assert st.next_expiry() == 1_300
    assert st.expire_due(1_299) == []
    assert st.expire_due(1_500) == [1, 3]
    await _settle(env)
    s = st.state(deleted=True)
    assert (s.msgs, s.first_seq, s.deleted) == (2, 2, [3])
    assert st.next_expiry() == 11_300


async def test_expiring_leaves_messages_in_place(env: tuple[Store, bool]) -> None:
    """`expiring`: what a stream with delete markers replaces, by sequence; the store removes nothing."""
    store, _ = env
    st = store.create_stream("S", b"{}")
    st.append("a", b"", b"1", ts=1_000, ttl=500)
    st.append("b", b"", b"2", ts=1_100, ttl=100)
    st.append("c", b"", b"3", ts=1_200)
    await _settle(env)
    assert st.expiring(1_199) == []
    assert [(m.seq, m.subject) for m in st.expiring(1_500)] == [(1, "a"), (2, "b")]
    assert st.state().msgs == 3 and st.load(1) is not None and st.load(2) is not None
    assert st.delete(1) and st.delete(2)
    await _settle(env)
    assert st.state().msgs == 1 and st.expire_due(2_000) == []


async def test_consumers_and_config(env: tuple[Store, bool]) -> None:
    store, _ = env
    st = store.create_stream("S", b'{"v":1}')
    await st.put_consumer("C1", b'{"durable":"C1"}', b"state0")
    st.update_consumer_state("C1", b"state1")
    st.update_consumer_state("C1", b"state2")
    st.put_consumer("C2", b"{}")
    await st.durable()
    assert st.get_consumer("C1") == (b'{"durable":"C1"}', b"state2")
    assert st.delete_consumer("C2") is True and st.delete_consumer("C2") is False
    assert st.get_consumer("C2") is None
    assert st.state().consumers == 1
    await st.update_config(b'{"v":2}')
    assert st.config == b'{"v":2}'


async def test_stream_lifecycle(env: tuple[Store, bool]) -> None:
    store, _ = env
    a = store.create_stream("A", b"{}")
    store.create_stream("A", b"{}", account="OTHER")
    with pytest.raises(StreamExistsError):
        store.create_stream("A", b"{}")
    a.append("x", b"", b"")
    assert store.get_stream("A") is a
    assert {s.name for s in store.streams()} == {"A"}
    assert len(store.streams("OTHER")) == 1
    assert store.delete_stream("A") is True
    assert store.delete_stream("A") is False
    with pytest.raises(StoreClosedError):
        a.append("x", b"", b"")
    b = store.create_stream("A", b"{}")
    assert b.state().msgs == 0 and b.append("y", b"", b"")[0] == 1
    await store.flush()
    assert b.load(1).subject == "y"  # type: ignore[union-attr]


async def test_many_pending_then_reads(env: tuple[Store, bool]) -> None:
    # Mixed deletes across the pending/committed boundary.
    store, commit = env
    st = store.create_stream("S", b"{}")
    for i in range(200):
        st.append(f"t.{i % 5}", b"", str(i).encode())
        if i % 50 == 49 and commit:
            await store.flush()
    for s in range(1, 201, 7):
        st.delete(s)
    await _settle(env)
    live = [s for s in range(1, 201) if (s - 1) % 7 != 0]
    got = []
    nxt = 1
    while (m := st.load_next(nxt, "t.*")) is not None:
        got.append(m.seq)
        nxt = m.seq + 1
    assert got == live
    assert st.count(0, "t.3") == sum(1 for s in live if (s - 1) % 5 == 3)


async def test_read_batch_matches_load_next(env: tuple[Store, bool]) -> None:
    # read_batch (a consumer's read-ahead) against load_next, across committed rows, the uncommitted
    # overlay and deletes in both, for the filters that have a one-query path and one that has not.
    store, commit = env
    st = store.create_stream("S", b"{}")
    for i in range(300):
        st.append(f"t.{i % 3}", b"h" if i % 4 == 0 else b"", str(i).encode(), ttl=5 * 10**9 if i == 7 else 0)
        if i == 149:
            await _settle(env)
    for s in (1, 2, 100, 151, 152, 299):
        st.delete(s)
    if commit:
        # deletes queued but not yet committed must be hidden too
        st.delete(50)
    for flt in (None, "t.1", "t.*", ["t.0", "t.2"], "nope"):
        for start in (0, 1, 3, 99, 149, 150, 151, 298, 301):
            for limit in (1, 7, 256):
                want = []
                nxt = start
                while len(want) < limit and (m := st.load_next(nxt, flt)) is not None:
                    want.append(m)
                    nxt = m.seq + 1
                assert st.read_batch(start, flt, limit) == want, (flt, start, limit)
                assert [tuple(r[:5]) for r in st.read_rows(start, flt, limit)] == [tuple(m[:5]) for m in want]


async def test_append_run_is_appends_in_turn(env: tuple[Store, bool]) -> None:
    """`append_run` (a mirror's run, gaps skipped between runs) leaves the stream as `append` of each in turn
    would: sequences, times, sizes, subjects, state, and what reads back."""
    store = env[0]
    msgs = [(f"r.{i % 3}", b"NATS/1.0\r\nA: b\r\n\r\n" if i % 4 == 0 else b"", b"d%d" % i, 1_000 + i, 0)
            for i in range(40)]
    one = store.create_stream("ONE", b'{"name":"ONE"}')
    run = store.create_stream("RUN", b'{"name":"RUN"}')
    for st in (one, run):
        st.append("first", b"", b"x", 5, 0, 0)
        st.skip_to(10)
    for st in (one, run):
        st.track_recent = True
    for subj, hdr, data, ts, size in msgs:
        one.append(subj, hdr, data, ts, 0, size)
    run.append_run(*zip(*msgs[:25], strict=True))
    run.append_run([], [], [], [], [])
    run.append_run(*map(list, zip(*msgs[25:], strict=True)))
    await _settle(env)
    assert run.state(deleted=True, subjects_filter=True) == one.state(deleted=True, subjects_filter=True)
    assert (run.msgs, run.bytes, run.last_seq, run.last_ts) == (one.msgs, one.bytes, one.last_seq, one.last_ts)
    assert [tuple(m) for m in run.read_batch(1, limit=100)] == [tuple(m) for m in one.read_batch(1, limit=100)]
    assert [m.seq for m in run.read_batch(1, limit=100)] == [1, *range(10, 50)]
    assert [run.recent_meta(s) for s in range(10, 50)] == [one.recent_meta(s) for s in range(10, 50)]


async def test_append_run_stamps_a_message_without_a_time(env: tuple[Store, bool]) -> None:
    """A message of a run with time 0 (a source's) gets the time it is stored, as `append` gives it."""
    store = env[0]
    st = store.create_stream("NOW", b'{"name":"NOW"}')
    before = time.time_ns()
    st.append_run(["a", "b", "a"], [b"", b"", b""], [b"x", b"y", b"z"], [0, 7, 0], [0, 0, 0])
    await _settle(env)
    got = st.read_batch(1, limit=10)
    assert [m.subject for m in got] == ["a", "b", "a"]
    assert got[1].ts == 7 and got[0].ts >= before and got[2].ts >= got[0].ts
    assert st.subjects == {"a": 2, "b": 1} and st.last_ts == got[2].ts


async def test_append_run_on_a_deleted_stream(env: tuple[Store, bool]) -> None:
    store = env[0]
    st = store.create_stream("GONE", b'{"name":"GONE"}')
    store.delete_stream("GONE")
    with pytest.raises(StoreClosedError):
        st.append_run(["a"], [b""], [b"x"], [1], [0])


async def test_read_run_is_a_gapless_read_batch(env: tuple[Store, bool]) -> None:
    """read_run (a push consumer's whole-run read) gives read_batch's messages as (subject bytes, hdr, data,
    ts) rows, and only when they are start, start + 1, ... with none missing and none filtered out; a store
    whose rows are all there and committed (or in memory) must give it."""
    store, commit = env
    st = store.create_stream("S", b"{}")
    for i in range(300):
        st.append(f"t.{i % 3}", b"NATS/1.0\r\nA: b\r\n\r\n" if i % 4 == 0 else b"", str(i).encode())
        if i == 149:
            await _settle(env)
    for s in (1, 2, 100, 151, 152):
        st.delete(s)
    await _settle(env)
    if commit:
        st.delete(60)  # queued, not yet committed: a run over it is not gapless
    gapless_runs = 0
    for flt in (None, ">", "t.1", "t.*"):
        for start in (0, 1, 3, 58, 61, 99, 101, 149, 150, 153, 298, 300, 301):
            for limit in (1, 7, 40, 256):
                want = st.read_batch(start, flt, limit)
                got = st.read_run(start, flt, limit)
                seqs = [m.seq for m in want]
                gapless = (compile_filter(flt).all and start >= st.first_seq and bool(want)
                           and seqs == list(range(start, start + len(want)))
                           and len(want) == min(limit, st.last_seq - start + 1))
                if got is not None:
                    # all of them, or the ones up to where the writer has committed (the rest come next)
                    assert gapless and got, (flt, start, limit)
                    assert got == [(m.subject.encode(), m.hdr, m.data, m.ts) for m in want][:len(got)], \
                        (flt, start, limit)
                    gapless_runs += 1
                elif gapless:
                    raise AssertionError(f"no run where one is: {flt} {start} {limit}")
    assert gapless_runs >= 20
    # runs read one after another across where the writer has got to give every message once, in order
    for i in range(5):
        st.append("t.x", b"", b"late%d" % i)
    got_all: list[tuple[bytes, bytes, bytes, int]] = []
    nxt = 298
    while (got := st.read_run(nxt, None, 256)) is not None:
        got_all += got
        nxt += len(got)
    assert nxt == st.last_seq + 1 == 306
    assert got_all == [(m.subject.encode(), m.hdr, m.data, m.ts) for m in st.read_batch(298, None, 256)]
