"""KV buckets under random operations through nats-py, differential: puts, creates, updates against a
random revision, deletes and purges (rollups with markers) of a few keys, gets and histories, with a
watcher on the whole bucket all along. Every result or error, everything the watcher saw and the final
status must match nats-server's. Seeded, so a run is repeatable."""

from __future__ import annotations

import random
from typing import Any

import nats

from tests.support.jsutil import differing, replies_of_both

SEEDS = (1, 2, 3)


async def _watched(seen: list[Any], w: Any) -> None:
    """What the watcher has got so far (it stops after 50 ms without an update)."""
    while True:
        try:
            e = await w.updates(timeout=0.05)
        except Exception:  # nats-py's timeout
            return
        if e is not None:
            seen.append((e.key, e.revision, e.operation, e.value))


async def _scenario(url: str) -> list[Any]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    out: list[Any] = []
    for seed in SEEDS:
        rnd = random.Random(seed)
        kv = await js.create_key_value(bucket=f"F{seed}", history=rnd.choice([1, 3, 5]))
        w = await kv.watchall()
        seen: list[Any] = []
        for i in range(60):
            k = f"k{rnd.randrange(4)}"
            op = rnd.choice(["put", "put", "create", "update", "delete", "purge", "get", "hist"])
            r: Any = None
            try:
                if op == "put":
                    r = await kv.put(k, b"v%d" % i)
                elif op == "create":
                    r = await kv.create(k, b"c%d" % i)
                elif op == "update":
                    r = await kv.update(k, b"u%d" % i, last=rnd.randrange(0, 2 * i + 2))
                elif op == "delete":
                    await kv.delete(k)
                elif op == "purge":
                    await kv.purge(k)
                elif op == "get":
                    e = await kv.get(k)
                    r = (e.key, e.value, e.revision, e.operation)
                else:
                    r = [(e.revision, e.value, e.operation) for e in await kv.history(k)]
            except Exception as ex:  # the same error class from both servers
                r = type(ex).__name__
            out.append((seed, i, op, k, r))
        await _watched(seen, w)
        st = await kv.status()
        out.append((seed, "watch", seen))
        out.append((seed, "status", st.values, st.history))
    await nc.close()
    return out


def test_kv_random_operations() -> None:
    res = replies_of_both(_scenario, "kvfuzz-")
    nats_server = res["nats-server"]
    diffs = differing(res)
    assert not diffs, diffs[:3]
    assert any(len(r) == 3 and r[1] == "watch" and len(r[2]) > 20 for r in nats_server)
