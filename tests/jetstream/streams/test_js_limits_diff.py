"""Stream limits under random publishes, differential: random limits (max_msgs, max_bytes,
max_msgs_per_subject, discard new or old, discard_new_per_subject, file or memory) and publishes of random
sizes and subjects, some with a rollup header. With `discard: new`, nats-server's store refuses at a
subject's limit only with discard_new_per_subject (a rollup passes); otherwise the message replaces that
subject's oldest, so the message limit lets it in, and the byte limit too unless the message replaced is
smaller. With `discard: old`, the store applies the limits as it writes, and a rollup purges after them.
Every PubAck or error and each stream's final state must match. Seeded, so a run is repeatable."""

from __future__ import annotations

import json
import random
from typing import Any

import nats

from tests.support.jsutil import ANCHOR, case_stream, replies_of_both

SEEDS = (1, 2, 3, 4, 5, 6)


def _plan(seed: int, discard: str) -> tuple[list[dict[str, Any]], list[tuple[str, bytes, dict[str, str] | None]]]:
    rnd = random.Random(seed)
    cfgs = []
    for i in range(6):
        per = rnd.choice([-1, 1, 2])
        cfgs.append({"name": case_stream(f"D{i}", seed, discard), "subjects": [f"d{i}.>"], "discard": discard,
                     "max_msgs": rnd.choice([-1, 3, 5]),
                     "max_bytes": rnd.choice([-1, 200, 400]), "max_msgs_per_subject": per,
                     "discard_new_per_subject": discard == "new" and per > 0 and rnd.random() < 0.5,
                     "allow_rollup_hdrs": True,
                     "storage": rnd.choice(["file", "memory"])})
    pubs = []
    for _ in range(120):
        hdrs = rnd.choice([None, None, None, {"Nats-Rollup": "sub"}, {"Nats-Rollup": "all"}])
        pubs.append((f"d{rnd.randrange(6)}.{rnd.choice('abc')}", b"x" * rnd.choice([1, 30, 80]), hdrs))
    return cfgs, pubs


async def _scenario(url: str) -> list[Any]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(**ANCHOR)
    out: list[Any] = []
    for seed, discard in [(s, d) for s in SEEDS for d in ("new", "old")]:
        cfgs, pubs = _plan(seed, discard)
        for c in cfgs:
            r = await nc.request(f"$JS.API.STREAM.CREATE.{c['name']}", json.dumps(c).encode(), timeout=5)
            out.append(json.loads(r.data).get("error"))
        for subject, data, hdrs in pubs:
            ack = json.loads((await nc.request(subject, data, timeout=5, headers=hdrs)).data)
            ack.pop("domain", None)
            out.append((subject, len(data), hdrs, ack))
        for c in cfgs:
            st = (await js.stream_info(c["name"])).state
            out.append((c["name"], st.messages, st.bytes, st.first_seq, st.last_seq))
            await js.delete_stream(c["name"])
    await nc.close()
    return out


def test_stream_limits_under_random_publishes() -> None:
    got = replies_of_both(_scenario, "js-discard-")
    edged, ref = got["edged"], got["nats-server"]
    texts = {o[3].get("error", {}).get("description") for o in ref if isinstance(o, tuple) and len(o) == 4}
    assert {"maximum messages exceeded", "maximum bytes exceeded", "maximum messages per subject exceeded"} <= texts
    bad = [f"\nedged: {e}\nnats:  {n}" for e, n in zip(edged, ref, strict=True) if e != n]
    assert not bad, "".join(bad[:10])
