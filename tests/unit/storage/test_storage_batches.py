"""Batches of many rows: the SQLite store writes their inserts and deletes many rows to a statement
(storage.sqlite._execute_rows), which must store exactly what one statement per row would. Checked on
the helper itself against executemany, and through the store: a batch of any size appended or deleted in
one commit, then the database opened again."""

from __future__ import annotations

import asyncio
import random
import sqlite3
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from storage import SQLiteStore
from storage.sqlite import _DELETES, _INSERTS, _SCHEMA, _execute_rows, _insert_rows


def _db() -> sqlite3.Connection:
    c = sqlite3.connect(":memory:", isolation_level=None)
    c.executescript(_SCHEMA)
    return c


def _rows(n: int, rnd: random.Random) -> list[tuple]:
    return [(1000 + i, 1, rnd.choice(["a", "b.c", "é"]), rnd.choice([b"", b"NATS/1.0\r\n\r\n"]),
             rnd.randbytes(rnd.randint(0, 40)), 10 + i, rnd.choice([0, 5]), rnd.choice([0, 99]), 30 + i)
            for i in range(n)]


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 300), st.integers(0, 2**32), st.floats(0, 1))
def test_many_rows_to_a_statement_store_what_one_per_row_would(n: int, seed: int, frac: float) -> None:
    rnd = random.Random(seed)
    rows = _rows(n, rnd)
    gone = [(r[0],) for r in rows if rnd.random() < frac] + [(5,)]  # one that is not there
    rnd.shuffle(gone)
    want, got = _db(), _db()
    want.executemany(_INSERTS[1], rows)
    _execute_rows(got, _INSERTS, rows)
    q = "SELECT rowid, stream, subject, hdr, data, ts, ttl, expires, size FROM msgs ORDER BY rowid"
    assert got.execute(q).fetchall() == want.execute(q).fetchall() == rows
    want.executemany(_DELETES[1], gone)
    _execute_rows(got, _DELETES, gone)
    assert got.execute(q).fetchall() == want.execute(q).fetchall()
    assert len(want.execute(q).fetchall()) == n - len(gone) + 1


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 400), st.integers(0, 2**32), st.floats(0, 1))
def test_plain_inserts_store_what_one_statement_per_row_would(n: int, seed: int, mixed: float) -> None:
    """_insert_rows writes 64 rows of one stream without headers or TTLs with those columns in the statement:
    the rows stored are the same, whatever the mix (other streams, headers, TTLs among them or not)."""
    rnd = random.Random(seed)
    rows = []
    for i in range(n):
        odd = rnd.random() < mixed / 8  # most chunks plain, some with one row that is not
        rows.append((1000 + i, rnd.choice([1, 2]) if odd else 1, rnd.choice(["a", "b.c", "é"]),
                     b"NATS/1.0\r\n\r\n" if odd and rnd.random() < 0.5 else b"", rnd.randbytes(rnd.randint(0, 40)),
                     10 + i, 5 if odd and rnd.random() < 0.3 else 0, 99 if odd and rnd.random() < 0.3 else 0, 30 + i))
    want, got = _db(), _db()
    want.executemany(_INSERTS[1], rows)
    _insert_rows(got, rows)
    q = "SELECT rowid, stream, subject, hdr, data, ts, ttl, expires, size FROM msgs ORDER BY rowid"
    assert got.execute(q).fetchall() == want.execute(q).fetchall() == rows
    assert [type(r[3]) for r in got.execute(q)] == [bytes] * n  # an empty header is a blob as bound


def test_a_batch_of_any_size_survives_reopening(tmp_path: Path) -> None:
    async def main() -> None:
        rnd = random.Random(7)
        sizes = [1, 2, 3, 4, 5, 15, 16, 17, 63, 64, 65, 85, 200, 333]
        store = SQLiteStore(str(tmp_path))
        await store.open()
        s = store.create_stream("S", b'{"name":"S"}')
        expect: dict[int, bytes] = {}
        for n in sizes:  # each size one batch, one commit
            for _ in range(n):
                data = rnd.randbytes(rnd.randint(0, 30))
                seq = s.append(rnd.choice(["a", "b"]), b"", data)[0]
                expect[seq] = data
            await store.flush()
        for n in sizes:  # deletes of each size in one batch
            for seq in rnd.sample(sorted(expect), min(n, len(expect) - 1)):
                assert s.delete(seq)
                del expect[seq]
            await store.flush()
        await store.close()
        store = SQLiteStore(str(tmp_path))
        await store.open()
        s2 = store.get_stream("S")
        assert s2 is not None and s2.msgs == len(expect)
        for seq, data in expect.items():
            m = s2.load(seq)
            assert m is not None and m.data == data
        assert [seq for seq in range(1, s2.last_seq + 1) if s2.load(seq) is not None] == sorted(expect)
        await store.close()

    asyncio.run(main())


def test_acked_removals_and_consumer_states_ride_the_next_commit(tmp_path: Path) -> None:
    """`delete_many(later=True)` (an interest stream's acked messages) and `update_consumer_state_later`
    start no commit of their own: the next commit takes them (a publish's, here), the state asked for
    once however often it changed; removing the last message keeps the stream's last sequence across a
    reopen; with nothing else to commit they go on their own, within LATER_DELAY."""

    async def main() -> None:
        store = SQLiteStore(str(tmp_path))
        await store.open()
        s = store.create_stream("S", b'{"name":"S"}')
        s.put_consumer("C", b'{"config":{}}', b"old")
        for i in range(5):
            s.append("a", b"", b"%d" % i)
        await store.flush()
        commits = store.commits
        asked: list[int] = []

        def state() -> bytes:
            asked.append(1)
            return b"new"

        assert [m.seq for m in s.delete_many([1, 2, 5], later=True)] == [1, 2, 5]
        s.update_consumer_state_later("C", state)
        s.update_consumer_state_later("C", state)
        assert s.state().msgs == 2 and s.load(1) is None and s.load(5) is None  # gone at once for readers
        await asyncio.sleep(0)
        assert store.commits == commits and not asked  # no commit of their own yet
        _, _, done = s.append("a", b"", b"6")
        await done
        assert store.commits == commits + 1 and asked == [1]  # rode with the publish's commit
        # nothing else: on their own, soon
        s.delete_many([6], later=True)
        for _ in range(200):
            if store.commits > commits + 1:
                break
            await asyncio.sleep(0.005)
        assert store.commits == commits + 2
        await store.close()
        again = SQLiteStore(str(tmp_path))
        await again.open()
        t = again.get_stream("S")
        assert t is not None
        assert [m.seq for m in t.metas(1, 10)] == [3, 4]
        assert t.last_seq == 6 and t.get_consumer("C") == (b'{"config":{}}', b"new")
        await again.close()

    asyncio.run(main())


def test_removals_with_recent_metas_match_removals_read_back(tmp_path: Path) -> None:
    """A stream that remembers what it stored lately (`track_recent`, an interest stream) removes acked
    messages without reading them back: the same messages go, with the same counts, as from a stream that
    reads them; what another removal took (a delete, a purge) is not removed twice."""

    async def main() -> None:
        store = SQLiteStore(str(tmp_path))
        await store.open()
        rnd = random.Random(3)
        a = store.create_stream("A", b'{"name":"A"}')
        b = store.create_stream("B", b'{"name":"B"}')
        a.track_recent = True
        for i in range(300):
            subj, data = rnd.choice(["x", "y.z", "é"]), rnd.randbytes(rnd.randint(0, 40))
            for s in (a, b):
                s.append(subj, b"", data)
            if i % 50 == 49:
                await store.flush()
        for s in (a, b):
            s.delete(7)
            s.purge(seq=20)
        assert a.recent_meta(7) is None and a.recent_meta(21) is None  # the purge forgot them all
        for i in range(300, 320):
            for s in (a, b):
                s.append("x", b"", b"%d" % i)
        assert a.recent_meta(305) is not None
        for seqs in ([5, 7, 25, 26], list(range(30, 60)), [301, 303, 305, 319], [304, 305, 306]):
            ga = [m.seq for m in a.delete_many(seqs, later=True)]
            gb = [m.seq for m in b.delete_many(seqs, later=True)]
            assert ga == gb
            assert (a.msgs, a.bytes, a.subjects, a.first_seq, a.last_seq) == \
                (b.msgs, b.bytes, b.subjects, b.first_seq, b.last_seq)
        await store.flush()
        assert [m.seq for m in a.metas(1, 400)] == [m.seq for m in b.metas(1, 400)]
        await store.close()

    asyncio.run(main())
