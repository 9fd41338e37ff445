"""gojson's reading of JetStream API request bodies as nats-server's strict decoding does: the values of a
body one after another, unknown fields, later values over earlier ones. Pure functions, tested directly
(the differential tests in test_js_api_badjson.py check the same texts against nats-server)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from edged.jetstream.wire.errors import JSApiError
from edged.jetstream.wire.gojson import body_values, decode_fields, merge

_SOURCE = ("struct", "server.S", {"name": "string", "external": ("struct", "server.E", {"api": "string"})})
TYPES = {"name": "string", "seq": "uint64", "placement": ("struct", "server.P", {"cluster": "string", "tags": "[]string"}),
         "sources": ("[]", "[]*server.S", _SOURCE), "metadata": "map[string]string"}


def _err(doc: dict[str, Any]) -> str | None:
    try:
        decode_fields(doc, TYPES, "R")
    except JSApiError as e:
        return e.to_dict()["description"].removeprefix("invalid JSON: ")
    return None


def test_body_values_one_after_another() -> None:
    assert body_values(b"") == []
    assert body_values(b" \r\n\t") == []
    assert body_values(b'{"a":1}') == [b'{"a":1}']
    assert body_values(b'{"a":1} {"b":2}\n') == [b'{"a":1} ', b'{"b":2}\n']  # a gap goes with the value before
    assert body_values(b'{"a":1}{"b":2}') == [b'{"a":1}', b'{"b":2}']
    assert body_values(b"null 1") == [b"null ", b"1"]


def test_body_values_stop_at_the_first_malformed_one_with_its_offset_in_the_body() -> None:
    assert body_values(b'{"seq":1} x') == [b'{"seq":1} ',
                                            "invalid character 'x' looking for beginning of value at offset 11"]
    assert body_values(b'{"a":1}{"b":') == [b'{"a":1}', "unexpected EOF"]
    assert body_values(b"[1,") == ["unexpected EOF"]
    assert body_values(b"{bad") == ["invalid character 'b' looking for beginning of object key string at offset 2"]
    assert body_values(b'{} {"a":tru}') == [b"{} ", "invalid character '}' in literal true (expecting 'e') at offset 12"]  # nats-server's 12


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


@given(st.lists(_json, min_size=1, max_size=4), st.lists(st.sampled_from([" ", "\n", "\t", "\r", ""]),
                                                          min_size=4, max_size=4))
def test_body_values_of_concatenated_documents(docs: list[Any], gaps: list[str]) -> None:
    body = "".join(json.dumps(d) + gaps[i] for i, d in enumerate(docs)).encode()
    out = body_values(body)
    # a number or literal straight after another needs a space to end, as in Go: only compare when not glued
    glued = any(gaps[i] == "" and not isinstance(docs[i], (dict, list, str)) for i in range(len(docs) - 1))
    if not glued:
        assert [json.loads(v) for v in out] == docs
    assert all(isinstance(v, (bytes, str)) for v in out)


@given(st.binary(max_size=40))
def test_body_values_of_any_bytes(data: bytes) -> None:
    out = body_values(data)
    pos = 0
    for v in out[:-1]:
        assert isinstance(v, bytes)  # only the last one may be an error
    for v in out:
        if isinstance(v, bytes):
            assert data.startswith(v, pos)
            pos += len(v)
    if out and isinstance(out[-1], str):
        assert out[-1] == "unexpected EOF" or " at offset " in out[-1]


def test_unknown_fields_depth_first_in_document_order() -> None:
    assert _err({"name": "x", "seq": 1}) is None
    assert _err({"zz": 1, "yy": 2}) == 'json: unknown field "zz"'
    assert _err({"placement": {"zz": 1}, "yy": 1}) == 'json: unknown field "zz"'
    assert _err({"sources": [{"name": "a"}, {"external": {"api": "x", "q": 1}}]}) == 'json: unknown field "q"'
    assert _err({"metadata": {"anything": "goes"}}) is None  # a map takes any key
    assert _err({"placement": None, "sources": None}) is None


def test_the_first_fault_in_document_order_wins() -> None:
    assert _err({"seq": "x", "zz": 1}) == "json: cannot unmarshal string into Go struct field R.seq of type uint64"
    assert _err({"zz": 1, "seq": "x"}) == 'json: unknown field "zz"'
    assert _err({"sources": [{"name": 5}]}) == "json: cannot unmarshal number into Go struct field R.sources.0.name of type string"
    assert _err({"sources": ["x"]}) == "json: cannot unmarshal string into R.sources.0 of type server.S"
    assert _err({"placement": {"tags": [1]}}) == "json: cannot unmarshal number into R.placement.tags.0 of type string"
    assert _err({"seq": -1}) == "json: cannot unmarshal number -1 into Go struct field R.seq of type uint64"


def test_keys_match_fields_ignoring_case() -> None:
    assert decode_fields({"SEQ": 2, "Placement": {"CLUSTER": "c"}}, TYPES, "R") == {"seq": 2, "placement": {"cluster": "c"}}
    assert _err({"SEQ": "x"}) == "json: cannot unmarshal string into Go struct field R.SEQ of type uint64"  # as written


def test_merge_later_values_over_earlier_ones() -> None:
    into: dict[str, Any] = {"seq": 1, "placement": {"cluster": "a", "tags": ["x"]}, "metadata": {"k": "1"}}
    merge(into, {"seq": 2, "placement": {"tags": ["y"]}, "metadata": {"j": "2"}})
    assert into == {"seq": 2, "placement": {"cluster": "a", "tags": ["y"]}, "metadata": {"k": "1", "j": "2"}}
