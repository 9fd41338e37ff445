"""Malformed and unexpected JSON request bodies on the JetStream API, differential. nats-server (in its
default strict mode) reads every JSON value of a body, one after another, into the request struct and
refuses a key the struct has no field for; the first fault is its 10025 answer: the text of Go's syntax
error ("invalid character ... looking for ... at offset N", "unexpected EOF"), `json: unknown field "x"`
(nested structs too; keys match fields ignoring case), `json: cannot unmarshal array into Go value of type
...`. So must edged, on every API that reads a body, and on those it does not support (snapshot, restore,
unpin, the clustered ones) with nats-server's own checks and errors."""

from __future__ import annotations

import json
from typing import Any

import nats

from tests.support.jsutil import replies_of_both

BODIES = [b"{bad", b'{"name":', b'{"name": "X",}', b"[1,", b'{"a":tru}', b'{"name":"\\x"}', b"\xff",
          b'{"config": {"durable_name": 1e}}', b'{"name":"X"} x', b"{'name':1}", b'{"a":[1 2]}', b"-",
          b'{"zz":1}', b'{"seq":1} ', b'{"seq":3}{"zz":2}', b"[1]", b'"s"', b"{} {}", b'{"SEQ":2}',
          b'{"config":{"zz":1}}', b'{"name":"X","placement":{"ZZ":1}}', b'{"name":"X","sources":[{"name":"a","zz":1}]}',
          b'{"state":{"zz":1}}', b'{"group":5}', b'{"group":"g1"}']
SUBJECTS = ["STREAM.CREATE.X", "STREAM.UPDATE.X", "STREAM.INFO.X", "STREAM.PURGE.X", "STREAM.MSG.GET.X",
            "STREAM.MSG.DELETE.X", "STREAM.NAMES", "STREAM.LIST", "CONSUMER.CREATE.X", "CONSUMER.DURABLE.CREATE.X.D",
            "CONSUMER.PAUSE.X.D", "CONSUMER.NAMES.X", "CONSUMER.LIST.X", "CONSUMER.UNPIN.X.D", "STREAM.SNAPSHOT.X",
            "STREAM.RESTORE.X", "STREAM.LEADER.STEPDOWN.X", "CONSUMER.LEADER.STEPDOWN.X.D", "STREAM.PEER.REMOVE.X"]


async def _stream_x_with_consumer_d(js: Any) -> None:
    """Stream X (subject x) with four messages and a durable consumer D, on the server under test."""
    await js.add_stream(name="X", subjects=["x"])
    for _ in range(4):
        await js.publish("x", b"1")
    await js.add_consumer("X", durable_name="D")


def test_bad_request_bodies_get_nats_servers_json_errors() -> None:
    async def scenario(url: str) -> list[Any]:
        nc = await nats.connect(url)
        await _stream_x_with_consumer_d(nc.jetstream())
        out = []
        for subj in SUBJECTS:
            for body in BODIES:
                r = await nc.request(f"$JS.API.{subj}", body, timeout=5)
                out.append((subj, body, json.loads(r.data)))
        await nc.close()
        return out

    got = replies_of_both(scenario, "js-badjson-")
    edged, ref = got["edged"], got["nats-server"]
    texts = {e[2].get("error", {}).get("description", "") for e in edged}
    for part in ("at offset", "unexpected EOF", 'json: unknown field "zz"', 'json: unknown field "ZZ"',
                 "into Go value of type server.", "JetStream clustering support required"):
        assert any(part in t for t in texts), part  # the cases are exercised
    bad = []
    for e, n in zip(edged, ref, strict=True):
        if "error" not in e[2] and "error" not in n[2]:
            continue  # carried out on both (a body that is no JSON at all is none): other tests compare those
        if e != n:
            bad.append(f"\nedged: {e}\nnats:  {n}")
    assert not bad, "".join(bad)


# Stream configs with values of the wrong Go type, nested structs included: Go's type errors, with the
# field's path and Go type (the policies' own texts and the other checks are compared elsewhere)
CONFIGS = [{"max_msgs": "x"}, {"subjects": "x"}, {"subjects": [1]}, {"retention": "foo"}, {"retention": 1},
           {"max_age": "1s"}, {"max_age": 1.5}, {"storage": "x"}, {"discard": 1}, {"num_replicas": "1"},
           {"max_msg_size": 1 << 40}, {"max_bytes": 1.5}, {"no_ack": "yes"}, {"placement": "x"},
           {"placement": {"tags": "x"}}, {"metadata": {"a": 1}}, {"metadata": []}, {"republish": {"dest": 1}},
           {"subject_transform": {"src": 1}}, {"consumer_limits": {"max_ack_pending": "x"}}, {"compression": "zz"},
           {"compression": 1}, {"first_seq": -1}, {"first_seq": "1"}, {"allow_msg_ttl": 1},
           {"subject_delete_marker_ttl": "1s"}, {"persist_mode": "x"}, {"description": 5}, {"max_consumers": 1 << 70},
           {"sealed": "no"}, {"name": 5}, {"pedantic": "x"}, {"duplicate_window": "x"}, {"sources": "x"},
           {"sources": [1]}, {"mirror": {"opt_start_time": 5}}, {"no_ack": True, "zz": 1, "max_msgs": "x"},
           {"max_msgs": "x", "zz": 1}, {"MAX_MSGS": "x"}, {"retention": None}, {"storage": None},
           {"discard": None}, {"compression": None}, {"persist_mode": None}, {"discard": "NEW"},
           {"zz": 1, "discard": 5}, {"storage": "x", "zz": 1}]


def test_stream_config_values_of_the_wrong_type_get_gos_type_errors() -> None:
    async def scenario(url: str) -> list[Any]:
        nc = await nats.connect(url)
        out = []
        for i, extra in enumerate(CONFIGS):
            body = {"name": f"S{i}", "subjects": [f"s{i}"], **extra}
            r = await nc.request(f"$JS.API.STREAM.CREATE.S{i}", json.dumps(body).encode(), timeout=5)
            out.append((extra, json.loads(r.data).get("error")))
        await nc.close()
        return out

    got = replies_of_both(scenario, "js-badcfg-")
    edged, ref = got["edged"], got["nats-server"]
    assert sum(1 for _, e in ref if e and "into Go struct field" in e["description"]) >= 20, ref
    bad = [f"\nedged: {e}\nnats:  {n}" for e, n in zip(edged, ref, strict=True) if e != n]
    assert not bad, "".join(bad)


# The other request structs' fields with values of the wrong Go type
TYPED = {
    "STREAM.MSG.GET.X": [{"seq": "1"}, {"seq": -1}, {"seq": 1.5}, {"last_by_subj": 1}, {"batch": "x", "seq": 1},
                         {"start_time": 5}, {"start_time": "x"}, {"multi_last": "x"}, {"multi_last": [1]},
                         {"up_to_seq": -1}, {"no_hdr": 1, "seq": 1}],
    "STREAM.MSG.DELETE.X": [{"seq": "1"}, {"seq": -1}, {"seq": 1.5}, {"no_erase": "x", "seq": 2}],
    "STREAM.PURGE.P": [{"seq": "1"}, {"seq": -1}, {"keep": "x"}, {"keep": -1}, {"filter": 5}],
    "STREAM.INFO.X": [{"offset": "x"}, {"offset": 1.5}, {"deleted_details": "x"}, {"subjects_filter": 5}],
    "STREAM.NAMES": [{"offset": "x"}, {"subject": 5}],
    "STREAM.LIST": [{"offset": 1.5}, {"subject": 5}],
    "CONSUMER.NAMES.X": [{"offset": "x"}],
    "CONSUMER.PAUSE.X.D": [{"pause_until": 5}, {"pause_until": "x"}],
    "STREAM.SNAPSHOT.X": [{"deliver_subject": 5}, {"chunk_size": "x", "deliver_subject": "a"}],
    "STREAM.RESTORE.X": [{"config": {"max_msgs": "x"}}, {"state": {"messages": -1}}, {"state": {"lost": []}}],
}


def test_request_fields_of_the_wrong_type_get_gos_type_errors() -> None:
    async def scenario(url: str) -> list[Any]:
        nc = await nats.connect(url)
        js = nc.jetstream()
        await _stream_x_with_consumer_d(js)
        await js.add_stream(name="P", subjects=["p"])
        out = []
        for subj, bodies in TYPED.items():
            for body in bodies:
                r = await nc.request("$JS.API." + subj, json.dumps(body).encode(), timeout=5)
                out.append((subj, body, json.loads(r.data).get("error")))
        await nc.close()
        return out

    got = replies_of_both(scenario, "js-badtype-")
    edged, ref = got["edged"], got["nats-server"]
    assert sum(1 for *_, e in ref if e and "cannot unmarshal" in e["description"]) >= 25, ref
    bad = [f"\nedged: {e}\nnats:  {n}" for e, n in zip(edged, ref, strict=True) if e != n]
    assert not bad, "".join(bad)


# A direct get reads its body leniently (one value, unknown keys ignored) and answers any fault with a
# status message: "408 Malformed Request" for a value of the wrong type too
DIRECT = [b'{"seq":"1"}', b'{"last_by_subj":[]}', b'{"no_hdr":[]}', b'{"max_bytes":9223372036854775808}',
          b'{"seq":1,"zz":1}', b'{"seq":-1}', b'{"start_time":"x"}', b'{"multi_last":[1]}', b'[1]', b'{"seq":1} x',
          b'{"SEQ":1}', b"{}", b'{"seq":1}']


def test_direct_get_bodies_of_the_wrong_type_are_malformed_requests() -> None:
    async def scenario(url: str) -> list[Any]:
        nc = await nats.connect(url)
        js = nc.jetstream()
        await js.add_stream(name="X", subjects=["x"], allow_direct=True)
        await js.publish("x", b"1")
        out = []
        for body in DIRECT:
            r = await nc.request("$JS.API.DIRECT.GET.X", body, timeout=5)
            h = r.headers or {}
            out.append((body, h.get("Status"), h.get("Description"), r.data))
        await nc.close()
        return out

    got = replies_of_both(scenario, "js-baddirect-")
    assert sum(1 for o in got["nats-server"] if o[2] == "Malformed Request") >= 6, got["nats-server"]
    assert got["edged"] == got["nats-server"]
