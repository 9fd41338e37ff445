"""Random JetStream API request bodies, differential: objects made of the API's field names with values of
every JSON type (numbers out of range, strings that are subjects, times, policy names, nested objects),
sent to each API against both servers, which must answer alike (error code and text, or the status of a
direct get). Seeded, so a run is repeatable; the state a request changed is put back after each one."""

from __future__ import annotations

import json
import random
from typing import Any

import nats
from nats.js.errors import NotFoundError

from tests.support.jsutil import replies_of_both

FIELDS = ["name", "subjects", "seq", "filter", "keep", "offset", "subject", "deleted_details", "subjects_filter",
          "last_by_subj", "next_by_subj", "batch", "max_bytes", "multi_last", "up_to_seq", "no_hdr", "no_erase",
          "pause_until", "config", "action", "stream_name", "durable_name", "deliver_policy", "ack_policy",
          "filter_subject", "filter_subjects", "max_deliver", "backoff", "ack_wait", "deliver_subject", "metadata",
          "max_msgs", "max_age", "retention", "storage", "discard", "num_replicas", "subject_transform", "republish",
          "placement", "sources", "consumer_limits", "start_time", "opt_start_seq", "opt_start_time", "max_waiting",
          "inactive_threshold", "idle_heartbeat", "flow_control", "headers_only", "sample_freq", "rate_limit_bps"]
VALUES: list[Any] = [None, True, False, 0, 1, -1, 2**63, 1.5, "", "x", "x.>", "*", [], ["a"], [1], {}, {"a": 1},
                     {"src": "a", "dest": "b"}, "2020-01-01T00:00:00Z", "all", "explicit", "NEW"]
SUBJECTS = ["STREAM.CREATE.X2", "STREAM.UPDATE.X", "STREAM.INFO.X", "STREAM.PURGE.X", "STREAM.MSG.GET.X",
            "STREAM.MSG.DELETE.X", "STREAM.NAMES", "STREAM.LIST", "CONSUMER.CREATE.X", "CONSUMER.CREATE.X.C9",
            "CONSUMER.DURABLE.CREATE.X.D9", "CONSUMER.PAUSE.X.D", "CONSUMER.NAMES.X", "CONSUMER.LIST.X",
            "CONSUMER.INFO.X.D", "DIRECT.GET.X", "STREAM.DELETE.ZZ"]
SEED, COUNT = 20261125, 250


def _cases() -> list[tuple[str, dict[str, Any]]]:
    rnd = random.Random(SEED)
    out = []
    for _ in range(COUNT):
        body: dict[str, Any] = {}
        for _ in range(rnd.randint(1, 3)):
            field = rnd.choice(FIELDS)
            value = rnd.choice(VALUES)
            if field == "config" and rnd.random() < 0.7:
                value = {rnd.choice(FIELDS): rnd.choice(VALUES)}
            body[field] = value
        out.append((rnd.choice(SUBJECTS), body))
    return out


async def _restore(js: Any) -> None:
    for name in ("X2",):
        try:
            await js.delete_stream(name)
        except NotFoundError:
            pass
    for name in ("C9", "D9"):
        try:
            await js.delete_consumer("X", name)
        except NotFoundError:
            pass
    await js.add_stream(name="X", subjects=["x.>"], allow_direct=True)  # as it was, whatever an update did
    await js.update_stream(name="X", subjects=["x.>"], allow_direct=True)


async def _scenario(url: str) -> list[tuple[Any, ...]]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="X", subjects=["x.>"], allow_direct=True)
    for _ in range(3):
        await js.publish("x.a", b"1")
    await js.add_consumer("X", durable_name="D")
    out: list[tuple[Any, ...]] = []
    for subject, body in _cases():
        try:
            r = await nc.request("$JS.API." + subject, json.dumps(body).encode(), timeout=1)
        except nats.errors.TimeoutError:
            out.append((subject, body, "timeout"))
        else:
            if r.data[:1] == b"{" and not (r.headers or {}).get("Nats-Stream"):
                out.append((subject, body, json.loads(r.data).get("error")))
            else:
                h = r.headers or {}
                out.append((subject, body, h.get("Status"), h.get("Description")))
        await _restore(js)
    await nc.close()
    return out


def test_random_request_bodies_get_the_same_answers() -> None:
    got = replies_of_both(_scenario, "js-fuzz-")
    edged, ref = got["edged"], got["nats-server"]
    assert sum(1 for o in ref if len(o) == 3 and isinstance(o[2], dict) and o[2].get("err_code") == 10025) >= 40
    bad = [f"\nedged: {e}\nnats:  {n}" for e, n in zip(edged, ref, strict=True) if e != n]
    assert not bad, "".join(bad)
