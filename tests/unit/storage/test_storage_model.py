"""Hypothesis state machine: both backends against a trivial in-Python model. The SQLite store
commits only when the `commit` rule fires (so reads hit the uncommitted overlay in between) and is
closed and reopened by the `restart` rule."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as stg
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from storage import MemoryStore, SQLiteStore, Stream, subject_matches
from storage.base import StoreError

SUBJECTS = ["a", "b", "a.x", "a.y", "b.x.z"]
FILTERS = ["a", "b", ">", "a.*", "*.x", "a.>", "*.x.>", "zz"]


class Model:
    def __init__(self) -> None:
        self.msgs: dict[int, tuple[str, bytes, int]] = {}
        self.last = 0
        self.floor = 1  # first seq when empty

    @property
    def first(self) -> int:
        return min(self.msgs) if self.msgs else self.last + 1

    def matching(self, f: str | list[str] | None) -> list[int]:
        fs = [f] if isinstance(f, str) else (f or [">"])
        return sorted(s for s, m in self.msgs.items() if any(subject_matches(x, m[0]) for x in fs))

    def purge(self, f: str | None, seq: int, keep: int) -> int:
        if seq == 1:
            return 0
        if f in (None, ">") and not keep and not seq:
            n = len(self.msgs)
            self.msgs.clear()
            return n
        if f in (None, ">") and seq > 1:
            return self.compact(seq)
        cand = self.matching(f)
        if keep:
            cand = cand[: max(0, len(cand) - keep)]
        if seq:
            cand = [s for s in cand if s < seq]
        for s in cand:
            del self.msgs[s]
        return len(cand)

    def compact(self, seq: int) -> int:
        cand = [s for s in self.msgs if s < seq]
        for s in cand:
            del self.msgs[s]
        if seq > self.last + 1:
            self.last = seq - 1
        return len(cand)


class StoreMachine(RuleBasedStateMachine):
    def _sqlite(self, sync: float | str) -> SQLiteStore:
        return SQLiteStore(self.dir, sync)

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = tempfile.mkdtemp(prefix="edged-model-")
        self.sql = self._sqlite("always")
        self.mem = MemoryStore()
        self.loop.run_until_complete(self.sql.open())
        self.s1: Stream = self.sql.create_stream("S", b"{}")
        self.s2: Stream = self.mem.create_stream("S", b"{}")
        self.loop.run_until_complete(self.sql.flush())  # the stream exists whatever fails later
        self.model = Model()
        self.committed = self._snap()
        self.ts = 1000

    def _snap(self) -> tuple[dict[int, tuple[str, bytes, int, bytes]], int]:
        return dict(self.model.msgs), self.model.last

    def teardown(self) -> None:
        self.loop.run_until_complete(self.sql.close())
        self.loop.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def both(self) -> tuple[Stream, Stream]:
        return self.s1, self.s2

    @rule(subject=stg.sampled_from(SUBJECTS), data=stg.binary(max_size=8), hdr=stg.booleans(),
          n=stg.integers(1, 4))
    def append(self, subject: str, data: bytes, hdr: bool, n: int) -> None:
        h = b"NATS/1.0\r\n\r\n" if hdr else b""
        for _ in range(n):
            self.ts += 1
            seqs = {st.append(subject, h, data, ts=self.ts)[0] for st in self.both()}
            self.model.last += 1
            assert seqs == {self.model.last}
            self.model.msgs[self.model.last] = (subject, h + data, self.ts, h)

    @rule(i=stg.integers(0, 40))
    def delete(self, i: int) -> None:
        seq = self.model.first + i % 8 if i < 35 else self.model.last + 5
        expect = seq in self.model.msgs
        self.model.msgs.pop(seq, None)
        assert [st.delete(seq) for st in self.both()] == [expect, expect]

    @rule(offsets=stg.lists(stg.integers(0, 400), max_size=12), far=stg.booleans(), later=stg.booleans())
    def delete_many(self, offsets: list[int], far: bool, later: bool) -> None:
        """A run of acks on an interest stream: near one another (one scan) or far apart (a read each),
        some gone already or never there; `later`: plain acks, whose removals ride the next commit."""
        base = self.model.first
        seqs = [base + (o * 50 if far else o % 16) for o in offsets]
        want = sorted({s for s in seqs if s in self.model.msgs})
        for s in want:
            self.model.msgs.pop(s)
        assert [[m.seq for m in st.delete_many(seqs, later)] for st in self.both()] == [want, want]

    @rule(on=stg.booleans())
    def track(self, on: bool) -> None:
        """The stream remembers what it stored lately, or stops (`track_recent`, an interest stream's):
        removals then know messages, and the next live one after the first, without a read."""
        for st in self.both():
            st.track_recent = on

    @rule(i=stg.integers(0, 40))
    def delete_known(self, i: int) -> None:
        """The KV path: the caller names a live message with its subject and size (mostly the first
        one, as a bucket cycling through its keys does)."""
        if not self.model.msgs:
            return
        live = sorted(self.model.msgs)
        seq = live[0] if i < 25 else live[i % len(live)]
        subject, raw, _, h = self.model.msgs.pop(seq)
        for st in self.both():
            st.delete_known(seq, subject, st.msg_size(subject, h, raw[len(h):]))

    @rule(f=stg.sampled_from([None, *FILTERS]), seq=stg.integers(0, 12), keep=stg.integers(0, 4))
    def purge(self, f: str | None, seq: int, keep: int) -> None:
        if seq and keep:
            keep = 0
        seq = 0 if seq == 0 else self.model.first + seq - 2
        expect = self.model.purge(f, max(seq, 0), keep)
        assert [st.purge(f, max(seq, 0), keep) for st in self.both()] == [expect, expect]

    @rule(d=stg.integers(-2, 12))
    def compact(self, d: int) -> None:
        seq = max(1, self.model.first + d)
        if self.model.first > seq:
            return
        expect = self.model.compact(seq)
        assert [st.compact(seq) for st in self.both()] == [expect, expect]

    @rule(n=stg.integers(0, 10))
    def trim_msgs(self, n: int) -> None:
        cand = sorted(self.model.msgs)[: max(0, len(self.model.msgs) - n)]
        for s in cand:
            del self.model.msgs[s]
        assert [st.trim_msgs(n) for st in self.both()] == [len(cand)] * 2

    @rule(subject=stg.sampled_from(SUBJECTS), keep=stg.integers(0, 3))
    def trim_subject(self, subject: str, keep: int) -> None:
        cand = self.model.matching(subject)
        cand = cand[: max(0, len(cand) - keep)]
        for s in cand:
            del self.model.msgs[s]
        assert [st.trim_subject(subject, keep) for st in self.both()] == [len(cand)] * 2

    @rule(back=stg.integers(0, 6))
    def max_age(self, back: int) -> None:
        cutoff = self.ts - back
        n = 0
        for s in sorted(self.model.msgs):
            if self.model.msgs[s][2] > cutoff:
                break
            del self.model.msgs[s]
            n += 1
        assert [st.remove_older_than(cutoff) for st in self.both()] == [n, n]

    @rule()
    def commit(self) -> None:
        self.loop.run_until_complete(self.sql.flush())
        self.committed = self._snap()

    @rule()
    def fail_commit(self) -> None:
        """The next commit fails: the SQLite store falls back to what was committed; the memory store
        and the model are rebuilt to the same state."""
        sql = self.sql

        def boom(b: object) -> None:
            raise sqlite3.OperationalError("disk I/O error (injected)")

        sql._write = boom  # type: ignore[method-assign]
        try:
            self.loop.run_until_complete(sql.flush())
        except StoreError:
            pass
        finally:
            del sql._write
        st = sql.get_stream("S")
        assert st is not None
        self.s1 = st
        msgs, last = self.committed
        self.model.msgs, self.model.last = dict(msgs), last
        self.mem = MemoryStore()
        self.s2 = self.mem.create_stream("S", b"{}")
        for seq in range(1, last + 1):
            subject, raw, ts, h = msgs.get(seq, ("zz", b"", 0, b""))
            self.s2.append(subject, h, raw[len(h):], ts=ts or 1)
        for seq in range(1, last + 1):
            if seq not in msgs:
                self.s2.delete(seq)

    @precondition(lambda self: True)
    @rule()
    def restart(self) -> None:
        self.loop.run_until_complete(self.sql.close())
        self.sql = self._sqlite(0.5)
        self.loop.run_until_complete(self.sql.open())
        st = self.sql.get_stream("S")
        assert st is not None
        self.s1 = st
        self.committed = self._snap()

    @invariant()
    def agrees(self) -> None:
        m = self.model
        live = sorted(m.msgs)
        for st in self.both():
            s = st.state(deleted=True, subjects_filter=True)
            assert s.msgs == len(live)
            assert s.last_seq == m.last
            assert s.first_seq == m.first
            assert s.deleted == [x for x in range(m.first, m.last + 1) if x not in m.msgs]
            assert s.bytes == sum(st.msg_size(m.msgs[x][0], m.msgs[x][3], m.msgs[x][1][len(m.msgs[x][3]):]) for x in live)
            counts: dict[str, int] = {}
            for x in live:
                counts[m.msgs[x][0]] = counts.get(m.msgs[x][0], 0) + 1
            assert s.subjects == counts
            for seq in range(max(1, m.first - 1), m.last + 2):
                got = st.load(seq)
                if seq in m.msgs:
                    assert got is not None and got.subject == m.msgs[seq][0] and got.hdr + got.data == m.msgs[seq][1]
                else:
                    assert got is None
            for f in FILTERS:
                want = m.matching(f)
                nxt = st.load_next(m.first, f)
                assert (nxt.seq if nxt else None) == (want[0] if want else None)
                last = st.load_last(f)
                assert (last.seq if last else None) == (want[-1] if want else None)
                mid = m.first + 2
                assert st.count(mid, f) == len([x for x in want if x >= mid])
            for f2 in (None, "a", "b.x.z", "a.*", "zz"):
                want = m.matching(f2)
                for start in (0, m.first + 1, m.last - 2, m.last):
                    exp = [x for x in want if x >= start]
                    for lim in (1, 3, 256):
                        rows = st.read_rows(start, f2, lim)
                        assert [r[0] for r in rows] == exp[:lim]
                        for r in rows:
                            assert (r[1], r[2] + r[3], r[4]) == m.msgs[r[0]][:3]
                        assert [x.seq for x in st.read_batch(start, f2, lim)] == exp[:lim]
            two = st.load_next(0, ["a", "b.x.z"])
            want2 = m.matching(["a", "b.x.z"])
            assert (two.seq if two else None) == (want2[0] if want2 else None)


StoreMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStoreModel = StoreMachine.TestCase

