"""Malformed JSON request bodies on the JetStream API, differential: nats-server answers 10025 with the
text of Go's JSON syntax error ("invalid character ... looking for ... at offset N", "unexpected EOF"),
takes the first value of a body with more behind it (but for stream create and update), and so must
edged."""

from __future__ import annotations

import json
from typing import Any

import nats

from tests.jsutil import replies_of_both

BODIES = [b"{bad", b'{"name":', b'{"name": "X",}', b"[1,", b'{"a":tru}', b'{"name":"\\x"}', b"\xff",
          b'{"config": {"durable_name": 1e}}', b'{"name":"X"} x', b"{'name':1}", b'{"a":[1 2]}', b"-"]
# A body with more after its first value: nats-server then also refuses fields the request does not have,
# where it otherwise ignores them (edged does not tell the two apart: its stream requests ignore them).
TRAILING = b'{"name":"X"} x'
SUBJECTS = ["STREAM.CREATE.X", "STREAM.UPDATE.X", "STREAM.INFO.X", "STREAM.PURGE.X", "STREAM.MSG.GET.X",
            "STREAM.NAMES", "CONSUMER.CREATE.X", "CONSUMER.DURABLE.CREATE.X.D", "CONSUMER.PAUSE.X.D",
            "CONSUMER.NAMES.X"]


def test_malformed_json_bodies_get_go_syntax_errors() -> None:
    async def scenario(url: str) -> list[Any]:
        nc = await nats.connect(url)
        js = nc.jetstream()
        await js.add_stream(name="X", subjects=["x"])
        await js.publish("x", b"1")
        out = []
        for subj in SUBJECTS:
            for body in BODIES:
                if body == TRAILING and not subj.startswith(("STREAM.CREATE", "STREAM.UPDATE", "CONSUMER.")):
                    continue  # see TRAILING
                r = await nc.request(f"$JS.API.{subj}", body, timeout=5)
                out.append((subj, body, json.loads(r.data)))
        await nc.close()
        return out

    got = replies_of_both(scenario, "js-badjson-")
    edged, ref = got["edged"], got["nats-server"]
    assert [e for e in edged if e[2].get("error", {}).get("err_code") == 10025]  # the case is exercised
    bad = []
    for e, n in zip(edged, ref, strict=True):
        if "error" not in e[2] and "error" not in n[2]:
            continue  # carried out on both (a body that is no JSON at all is none): other tests compare those
        if e != n:
            bad.append(f"\nedged: {e}\nnats:  {n}")
    assert not bad, "".join(bad)
