"""Memory storage (JetStream `storage: memory`): the same interface as the SQLite store, nothing
persisted. Every append is "durable" at once. `bytes` uses nats-server's memStoreMsgSize
(len(subj)+len(hdr)+len(msg)+16). Erase and delete are the same here: the only references to the
payload are dropped.
"""

from __future__ import annotations

import heapq
import time
from bisect import bisect_left, bisect_right
from collections.abc import Awaitable, Iterator
from typing import Any

from edged.routing.subjects import CompiledFilter
from storage.base import (
    DEFAULT_ACCOUNT,
    DONE,
    Meta,
    Store,
    StoreClosedError,
    StoredMsg,
    Stream,
    StreamExistsError,
)


def _blen(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode())


class MemoryStream(Stream):
    @staticmethod
    def msg_size(subject: str, hdr: bytes, data: bytes) -> int:
        return _blen(subject) + len(hdr) + len(data) + 16

    def __init__(self, account: str, name: str, config: bytes, created_ns: int, first_seq: int) -> None:
        super().__init__(account, name, config, created_ns, first_seq)
        self._msgs: dict[int, StoredMsg] = {}
        # Per-subject sorted sequence lists: literal-filter reads are a bisect.
        self._by_subj: dict[str, list[int]] = {}
        self._ttl_heap: list[tuple[int, int]] = []

    def append(
        self, subject: str, hdr: bytes = b"", data: bytes = b"", ts: int = 0, ttl: int = 0, size: int = 0
    ) -> tuple[int, int, Awaitable[None]]:
        if self._dead:
            raise StoreClosedError(f"stream {self.name!r} is closed or deleted")
        seq = self.last_seq + 1
        if not ts:
            ts = time.time_ns()
        self._msgs[seq] = StoredMsg(seq, subject, hdr, data, ts, ttl)
        lst = self._by_subj.get(subject)
        if lst is None:
            self._by_subj[subject] = [seq]
            self.subjects[subject] = 1
        else:
            lst.append(seq)
            self.subjects[subject] += 1
        if ttl > 0:
            heapq.heappush(self._ttl_heap, (ts + ttl, seq))
        self.last_seq = seq
        self.last_ts = ts
        self.msgs += 1
        self.bytes += size or (_blen(subject) + len(hdr) + len(data) + 16)
        return seq, ts, DONE

    def durable(self) -> Awaitable[None]:
        return DONE

    def _get(self, seq: int) -> StoredMsg | None:
        return self._msgs.get(seq)

    def _meta(self, m: StoredMsg, full: bool) -> Any:
        if full:
            return m
        return Meta(m.seq, m.subject, _blen(m.subject) + len(m.hdr) + len(m.data) + 16, m.ts)

    def _scan(self, lo: int, hi: int, filt: CompiledFilter, reverse: bool, full: bool) -> Iterator[Any]:
        if lo > hi or not self._msgs:
            return
        msgs = self._msgs
        if not filt.all:
            subs = (
                [s for s in filt.literals if s in self._by_subj]
                if filt.literal_only
                else [s for s in self._by_subj if filt.matches(s)]
                if len(self._by_subj) <= (hi - lo + 1)
                else None
            )
            if subs is not None:
                # Merge the per-subject sorted lists restricted to [lo, hi].
                parts: list[list[int]] = []
                for s in subs:
                    lst = self._by_subj[s]
                    parts.append(lst[bisect_left(lst, lo) : bisect_right(lst, hi)])
                seqs = heapq.merge(*parts, reverse=False) if not reverse else heapq.merge(
                    *[p[::-1] for p in parts], reverse=True
                )
                for seq in seqs:
                    yield self._meta(msgs[seq], full)
                return
        if hi - lo + 1 <= 4 * len(msgs) + 64:
            rng = range(hi, lo - 1, -1) if reverse else range(lo, hi + 1)
            for seq in rng:
                m = msgs.get(seq)
                if m is not None and (filt.all or filt.matches(m.subject)):
                    yield self._meta(m, full)
        else:
            keys = sorted(k for k in msgs if lo <= k <= hi)
            if reverse:
                keys.reverse()
            for seq in keys:
                m = msgs[seq]
                if filt.all or filt.matches(m.subject):
                    yield self._meta(m, full)

    def _unindex(self, m: StoredMsg) -> None:
        lst = self._by_subj[m.subject]
        i = bisect_left(lst, m.seq)
        if i < len(lst) and lst[i] == m.seq:
            del lst[i]
        if not lst:
            del self._by_subj[m.subject]

    def _drop_one(self, seq: int) -> None:
        m = self._msgs.pop(seq, None)
        if m is not None:
            self._unindex(m)

    def _drop_range(self, lo: int, hi: int) -> None:
        if hi - lo + 1 >= len(self._msgs):
            if all(lo <= k <= hi for k in self._msgs):
                self._msgs.clear()
                self._by_subj.clear()
                self._ttl_heap.clear()
                return
            keys = [k for k in self._msgs if lo <= k <= hi]
        else:
            keys = [k for k in range(lo, hi + 1) if k in self._msgs]
        for k in keys:
            self._drop_one(k)

    def _persist_meta(self) -> None:
        pass

    def _expired_metas(self, now_ns: int) -> list[Meta]:
        out: list[Meta] = []
        h = self._ttl_heap
        while h and h[0][0] <= now_ns:
            _, seq = heapq.heappop(h)
            m = self._msgs.get(seq)
            if m is not None:
                out.append(self._meta(m, False))
        return out

    def next_expiry(self) -> int:
        h = self._ttl_heap
        while h and h[0][1] not in self._msgs:
            heapq.heappop(h)
        return h[0][0] if h else 0

    def _put_consumer(self, name: str, config: bytes, state: bytes) -> None:
        pass

    def _del_consumer(self, name: str) -> None:
        pass

    def _put_config(self, config: bytes) -> None:
        pass


class MemoryStore(Store):
    """Streams held in memory only; the same API as `SQLiteStore`."""

    def __init__(self) -> None:
        self._streams: dict[tuple[str, str], MemoryStream] = {}

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        for st in self._streams.values():
            st._dead = True
        self._streams.clear()

    def create_stream(
        self, name: str, config: bytes, *, account: str = DEFAULT_ACCOUNT, first_seq: int = 0
    ) -> MemoryStream:
        """`first_seq` 0: not set (see Stream.pristine)."""
        key = (account, name)
        if key in self._streams:
            raise StreamExistsError(f"stream {name!r} exists")
        if first_seq < 0:
            raise ValueError("first_seq must be >= 0")
        st = MemoryStream(account, name, config, time.time_ns(), first_seq)
        self._streams[key] = st
        return st

    def delete_stream(self, name: str, *, account: str = DEFAULT_ACCOUNT) -> bool:
        st = self._streams.pop((account, name), None)
        if st is None:
            return False
        st._dead = True
        return True

    def get_stream(self, name: str, *, account: str = DEFAULT_ACCOUNT) -> MemoryStream | None:
        return self._streams.get((account, name))

    def streams(self, account: str | None = None) -> list[Stream]:
        return [s for (a, _), s in self._streams.items() if account is None or a == account]

    def durable(self) -> Awaitable[None]:
        return DONE
