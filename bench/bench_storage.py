"""Micro-benchmark of the message store's append path: `python -m bench.bench_storage [--n N]`.

- pipelined: one producer appends as fast as it can and awaits the commit future every `window`
  messages (what a fast async publisher looks like), sync_interval=120s and sync_interval=always.
- group commit, fsync always: C concurrent publishers each await their own PubAck-equivalent before
  the next append, so throughput comes only from batching many publishers into one fsync.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

from storage import MemoryStore, SQLiteStore, Store


async def _pipelined(store: Store, n: int, size: int, window: int) -> float:
    await store.open()
    st = store.create_stream("BENCH", b"{}")
    await store.flush()
    payload = b"x" * size
    t0 = time.perf_counter()
    fut = None
    for i in range(n):
        fut = st.append("bench.data", b"", payload)[2]
        if i % window == window - 1:
            await fut
    if fut is not None:
        await fut
    dt = time.perf_counter() - t0
    await store.close()
    return n / dt


async def _publishers(store: SQLiteStore, n: int, size: int, conc: int) -> tuple[float, float]:
    await store.open()
    st = store.create_stream("BENCH", b"{}")
    await store.flush()
    payload = b"x" * size
    per = n // conc

    async def pub(k: int) -> None:
        subj = f"bench.{k}"
        for _ in range(per):
            await st.append(subj, b"", payload)[2]

    c0 = store.commits
    t0 = time.perf_counter()
    await asyncio.gather(*(pub(k) for k in range(conc)))
    dt = time.perf_counter() - t0
    commits = store.commits - c0
    await store.close()
    return per * conc / dt, per * conc / max(commits, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--window", type=int, default=1000)
    ap.add_argument("--conc", type=int, default=64)
    a = ap.parse_args()

    async def run() -> None:
        r = await _pipelined(MemoryStore(), a.n, a.size, a.window)
        print(f"memory     pipelined                 {r:>10,.0f} appends/s")
        with tempfile.TemporaryDirectory() as d:
            r = await _pipelined(SQLiteStore(d, 120.0), a.n, a.size, a.window)
            print(f"sqlite     pipelined sync=120s       {r:>10,.0f} appends/s")
        with tempfile.TemporaryDirectory() as d:
            r = await _pipelined(SQLiteStore(d, "always"), a.n, a.size, a.window)
            print(f"sqlite     pipelined sync=always     {r:>10,.0f} appends/s")
        n2 = max(a.conc, a.n // 5)
        with tempfile.TemporaryDirectory() as d:
            r, per = await _publishers(SQLiteStore(d, "always"), n2, a.size, a.conc)
            print(f"sqlite     {a.conc} pubs wait-ack always {r:>10,.0f} appends/s  ({per:.0f} msgs/commit)")
        with tempfile.TemporaryDirectory() as d:
            r, per = await _publishers(SQLiteStore(d, "always"), max(200, a.n // 50), a.size, 1)
            print(f"sqlite     1 pub wait-ack always     {r:>10,.0f} appends/s  ({per:.0f} msgs/commit)")

    print(f"payload {a.size} B, n={a.n}")
    asyncio.run(run())


if __name__ == "__main__":
    main()
