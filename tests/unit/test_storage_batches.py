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
from storage.sqlite import _DELETES, _INSERTS, _SCHEMA, _execute_rows, _insert_statements


def _db() -> sqlite3.Connection:
    c = sqlite3.connect(":memory:", isolation_level=None)
    c.executescript(_SCHEMA)
    return c


def _rows(n: int, rnd: random.Random) -> list[tuple]:
    return [(1000 + i, 1, rnd.choice(["a", "b.c", "é"]), rnd.choice([b"", b"NATS/1.0\r\n\r\n"]),
             rnd.randbytes(rnd.randint(0, 40)), 10 + i, rnd.choice([0, 5]), rnd.choice([0, 99]), 30 + i)
            for i in range(n)]


def test_insert_statements_by_the_parameter_limit() -> None:
    """Up to 1024 rows a statement where SQLite allows the parameters, 64 under the old limit of 999."""
    assert list(_insert_statements(999)) == [64, 16, 4, 1]
    assert list(_insert_statements(32766)) == [1024, 256, 64, 16, 4, 1]
    assert list(_insert_statements(2304)) == [256, 64, 16, 4, 1]


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 300) | st.integers(1000, 2700), st.integers(0, 2**32), st.floats(0, 1), st.booleans())
def test_many_rows_to_a_statement_store_what_one_per_row_would(n: int, seed: int, frac: float, big: bool) -> None:
    rnd = random.Random(seed)
    inserts = _insert_statements(32766) if big else _INSERTS
    rows = _rows(n, rnd)
    gone = [(r[0],) for r in rows if rnd.random() < frac] + [(5,)]  # one that is not there
    rnd.shuffle(gone)
    want, got = _db(), _db()
    want.executemany(_INSERTS[1], rows)
    _execute_rows(got, inserts, rows)
    q = "SELECT rowid, stream, subject, hdr, data, ts, ttl, expires, size FROM msgs ORDER BY rowid"
    assert got.execute(q).fetchall() == want.execute(q).fetchall() == rows
    want.executemany(_DELETES[1], gone)
    _execute_rows(got, _DELETES, gone)
    assert got.execute(q).fetchall() == want.execute(q).fetchall()
    assert len(want.execute(q).fetchall()) == n - len(gone) + 1


def test_a_batch_of_any_size_survives_reopening(tmp_path: Path) -> None:
    async def main() -> None:
        rnd = random.Random(7)
        sizes = [1, 2, 3, 4, 5, 15, 16, 17, 63, 64, 65, 85, 200, 333, 1024, 1300, 2390]
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
