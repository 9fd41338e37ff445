"""The JetStream API on the wire, differential: one script of raw requests (stream API, publishes with
headers, direct gets) runs against nats-server and against edged, and every reply must be the same
JSON (field names, values, `type`, error code/err_code/description, paging) or the same status/headers,
once the values that differ by nature (times, server names, nats-server 2.11+ version metadata) are
masked. The API counters at the end must agree too: they count errors the way nats-server does."""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable
from typing import Any

import nats
import pytest

from tests.support.aio import run
from tests.support.jsutil import replies_of_both
from tests.support.servers import ServerProcess

TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")

# (kind, subject, body-or-headers, payload). kinds: "api" (JSON request), "pub" (publish, PubAck
# awaited), "hpub" (publish with headers), "direct" (collect the direct-get replies)
SCRIPT: list[tuple[str, str, Any, Any]] = [
    ("api", "$JS.API.INFO", "", None),
    ("api", "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "max_msgs": 10, "metadata": {"a": "b"}},
     None),
    ("api", "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "max_msgs": 10, "metadata": {"a": "b"}},
     None),
    ("api", "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "max_msgs": 11}, None),
    ("api", "$JS.API.STREAM.CREATE.T", {"name": "X", "subjects": ["t"]}, None),
    ("api", "$JS.API.STREAM.CREATE.T", {"subjects": ["t"]}, None),
    ("api", "$JS.API.STREAM.CREATE.U", {"name": "U", "subjects": ["s.a"]}, None),
    ("api", "$JS.API.STREAM.CREATE.W", {"name": "W", "subjects": ["w"], "max_age": 50_000_000}, None),
    ("api", "$JS.API.STREAM.CREATE.W", {"name": "W", "subjects": ["w"], "retention": "bogus"}, None),
    ("api", "$JS.API.STREAM.CREATE.W", {"name": "W", "subjects": ["w"], "storage": "disk"}, None),
    ("api", "$JS.API.STREAM.CREATE.W", {"name": "W", "subjects": ["w"], "discard_new_per_subject": True}, None),
    ("api", "$JS.API.STREAM.CREATE.W", {"name": "W", "subjects": ["w"], "storage": "memory", "allow_direct": True,
                                        "allow_rollup_hdrs": True, "deny_delete": True, "description": "x",
                                        "first_seq": 5}, None),
    ("pub", "s.a", None, b"1"), ("pub", "s.b", None, b"2"), ("pub", "s.a", None, b"3"), ("pub", "w", None, b"w1"),
    ("api", "$JS.API.STREAM.INFO.S", "", None),
    ("api", "$JS.API.STREAM.INFO.S", "not json", None),
    ("api", "$JS.API.STREAM.INFO.S", {"subjects_filter": ">"}, None),
    ("api", "$JS.API.STREAM.INFO.S", {"subjects_filter": "s.b"}, None),
    ("api", "$JS.API.STREAM.INFO.S", {"subjects_filter": "nothing.here"}, None),
    ("api", "$JS.API.STREAM.INFO.S", {"subjects_filter": ">", "offset": 1}, None),
    ("api", "$JS.API.STREAM.INFO.S", {"subjects_filter": ">", "offset": 9}, None),
    ("api", "$JS.API.STREAM.INFO.NOPE", "", None),
    ("api", "$JS.API.STREAM.NAMES", "", None),
    ("api", "$JS.API.STREAM.NAMES", {"subject": "s.a"}, None),
    ("api", "$JS.API.STREAM.NAMES", {"offset": 5}, None),
    ("api", "$JS.API.STREAM.LIST", "", None),
    ("api", "$JS.API.STREAM.MSG.GET.S", {"seq": 2}, None),
    ("api", "$JS.API.STREAM.MSG.GET.S", {"seq": 2, "no_hdr": True}, None),
    ("api", "$JS.API.STREAM.MSG.GET.S", {"seq": 20}, None),
    ("api", "$JS.API.STREAM.MSG.GET.S", {"last_by_subj": "s.a"}, None),
    ("api", "$JS.API.STREAM.MSG.GET.S", {"last_by_subj": "s.*"}, None),
    ("api", "$JS.API.STREAM.MSG.GET.S", {"next_by_subj": "s.b", "seq": 1}, None),
    ("api", "$JS.API.STREAM.MSG.GET.S", {"start_time": "2001-01-01T00:00:00Z"}, None),
    ("api", "$JS.API.STREAM.MSG.GET.S", {"start_time": "2201-01-01T00:00:00Z"}, None),
    ("api", "$JS.API.STREAM.MSG.GET.S", {"seq": 1, "last_by_subj": "s.a"}, None),
    ("api", "$JS.API.STREAM.MSG.GET.S", {"seq": 1, "batch": 2}, None),
    ("api", "$JS.API.STREAM.MSG.GET.S", {}, None),
    ("api", "$JS.API.STREAM.MSG.DELETE.S", {"seq": 2}, None),
    ("api", "$JS.API.STREAM.MSG.DELETE.S", {"seq": 2}, None),
    ("api", "$JS.API.STREAM.MSG.DELETE.S", {"seq": 200}, None),
    ("api", "$JS.API.STREAM.MSG.DELETE.S", {"seq": 0}, None),
    ("api", "$JS.API.STREAM.MSG.DELETE.S", "", None),
    ("api", "$JS.API.STREAM.MSG.DELETE.S", {"seq": 1, "no_erase": True}, None),
    ("api", "$JS.API.STREAM.MSG.DELETE.S", {"seq": 1}, None),
    ("api", "$JS.API.STREAM.MSG.DELETE.W", {"seq": 5}, None),
    ("api", "$JS.API.STREAM.INFO.S", {"deleted_details": True}, None),
    ("api", "$JS.API.STREAM.UPDATE.S", {"name": "S", "subjects": ["s.>"], "max_msgs": 5, "storage": "memory"}, None),
    ("api", "$JS.API.STREAM.UPDATE.S", {"name": "S", "subjects": ["s.>", "q"], "max_msgs": 5}, None),
    ("api", "$JS.API.STREAM.UPDATE.S", {"name": "S2", "subjects": ["s.>"]}, None),
    ("api", "$JS.API.STREAM.UPDATE.NOPE", {"name": "NOPE", "subjects": ["nope"]}, None),
    ("api", "$JS.API.STREAM.UPDATE.W", {"name": "W", "subjects": ["w"], "storage": "memory", "deny_delete": False},
     None),
    ("api", "$JS.API.STREAM.UPDATE.W", {"name": "W", "subjects": ["w"], "storage": "memory", "deny_delete": True,
                                        "first_seq": 1}, None),
    ("api", "$JS.API.STREAM.PURGE.S", {"filter": "s.a"}, None),
    ("api", "$JS.API.STREAM.PURGE.S", {"seq": 3, "keep": 1}, None),
    ("api", "$JS.API.STREAM.PURGE.S", "", None),
    ("api", "$JS.API.STREAM.PURGE.NOPE", "", None),
    ("api", "$JS.API.STREAM.DELETE.S", "{\"x\": 1}", None),
    ("api", "$JS.API.STREAM.DELETE.S", "", None),
    ("api", "$JS.API.STREAM.DELETE.S", "", None),
    ("api", "$JS.API.STREAM.CREATE.Z1", {"name": "Z1", "num_replicas": 3}, None),
    ("api", "$JS.API.STREAM.CREATE.Z3", {"name": "Z3", "subjects": [">"]}, None),
    ("api", "$JS.API.STREAM.CREATE.Z4", {"name": "Z4", "subjects": ["a", "a"]}, None),
    ("api", "$JS.API.STREAM.CREATE.Z5", {"name": "Z5", "subjects": ["a.*", "a.b"]}, None),
    ("api", "$JS.API.STREAM.CREATE.Z6", {"name": "Z6", "max_age": -1}, None),
    ("api", "$JS.API.STREAM.CREATE.Z7", {"name": "Z7", "duplicate_window": 10_000_000_000, "max_age": 1_000_000_000},
     None),
    ("api", "$JS.API.STREAM.CREATE.Z8", {"name": "Z8", "deny_purge": True, "allow_rollup_hdrs": True}, None),
    ("api", "$JS.API.STREAM.CREATE.Z9", {"name": "Z9", "subject_transform": {"src": "z.*", "dest": "zz.{{wildcard(1)}}"},
                                         "subjects": ["z.*"]}, None),
    ("api", "$JS.API.STREAM.CREATE.Z10", {"name": "Z10", "subjects": ["$JS.API.foo"]}, None),
    ("api", "$JS.API.STREAM.CREATE.Z11", {"name": "Z11", "subjects": ["a b"]}, None),
    ("api", "$JS.API.STREAM.CREATE.Y", {"name": "Y", "republish": {"src": "y.>", "dest": "rp.>"}, "subjects": ["y.>"]},
     None),
    ("api", "$JS.API.STREAM.CREATE.Y2", {"name": "Y2", "republish": {"src": "y2", "dest": "y2"}, "subjects": ["y2"]},
     None),
    ("api", "$JS.API.STREAM.CREATE.SEAL", {"name": "SEAL", "sealed": True}, None),
    ("api", "$JS.API.STREAM.CREATE.DUP", {"name": "DUP", "duplicate_window": 1}, None),
    ("api", "$JS.API.STREAM.CREATE.CL", {"name": "CL", "consumer_limits": {"max_ack_pending": 10}}, None),
    ("api", "$JS.API.STREAM.CREATE.CMP", {"name": "CMP", "compression": "s2"}, None),
    ("api", "$JS.API.STREAM.CREATE.MC", {"name": "MC", "max_consumers": 3, "max_msg_size": 10, "max_bytes": 1000,
                                         "max_msgs_per_subject": 2, "discard": "new", "max_msgs": 3,
                                         "subjects": ["mc.*"]}, None),
    ("pub", "mc.a", None, b"0123456789-too-long"),
    ("pub", "mc.a", None, b"1"), ("pub", "mc.a", None, b"2"), ("pub", "mc.a", None, b"3"), ("pub", "mc.b", None, b"4"),
    ("pub", "mc.c", None, b"5"),
    ("api", "$JS.API.STREAM.CREATE.PL", {"name": "PL", "placement": {"cluster": "c"}}, None),
    ("api", "$JS.API.STREAM.CREATE.PL2", {"name": "PL2", "placement": {"preferred": "x"}}, None),
    ("api", "$JS.API.STREAM.CREATE.M", {"name": "M", "storage": "memory"}, None),
    ("pub", "M", None, b"1"), ("pub", "M", None, b"2"), ("pub", "M", None, b"3"),
    ("api", "$JS.API.STREAM.MSG.DELETE.M", {"seq": 2}, None),
    ("api", "$JS.API.STREAM.MSG.DELETE.M", {"seq": 2}, None),
    ("api", "$JS.API.STREAM.MSG.DELETE.M", {"seq": 9}, None),
    ("api", "$JS.API.STREAM.INFO.M", {"deleted_details": True}, None),
    ("api", "$JS.API.STREAM.PURGE.M", {"keep": 1}, None),
    ("api", "$JS.API.STREAM.UPDATE.M", {"name": "M", "storage": "memory", "max_consumers": 4}, None),
    ("api", "$JS.API.STREAM.UPDATE.M", {"name": "M", "storage": "memory", "sealed": True}, None),
    ("pub", "M", None, b"4"),
    ("api", "$JS.API.STREAM.PURGE.M", "", None),
    ("api", "$JS.API.STREAM.MSG.DELETE.M", {"seq": 3}, None),
    ("api", "$JS.API.STREAM.UPDATE.M", {"name": "M", "storage": "memory", "sealed": False}, None),
    ("api", "$JS.API.STREAM.CREATE.R", {"name": "R", "retention": "workqueue"}, None),
    ("api", "$JS.API.STREAM.UPDATE.R", {"name": "R", "retention": "limits"}, None),
    ("api", "$JS.API.STREAM.CREATE.A1", {"name": "A1", "subjects": ["foo.*"], "no_ack": True}, None),
    ("api", "$JS.API.STREAM.CREATE.A2", {"name": "A2", "subjects": ["foo.>"]}, None),
    ("api", "$JS.API.STREAM.NAMES", {"subject": "foo.x"}, None),
    ("api", "$JS.API.STREAM.NAMES", {"subject": "nomatch"}, None),
    # publishes with headers
    ("api", "$JS.API.STREAM.CREATE.H", {"name": "H", "subjects": ["h.>"], "allow_rollup_hdrs": True,
                                        "allow_direct": True}, None),
    ("hpub", "h.a", {"Nats-Msg-Id": "m1"}, b"1"),
    ("hpub", "h.a", {"Nats-Msg-Id": "m1"}, b"1 again"),
    ("hpub", "h.a", {"Nats-Expected-Stream": "OTHER"}, b""),
    ("hpub", "h.a", {"Nats-Expected-Stream": "H"}, b"2"),
    ("hpub", "h.a", {"Nats-Expected-Last-Sequence": "7"}, b""),
    ("hpub", "h.a", {"Nats-Expected-Last-Sequence": "2"}, b"3"),
    ("hpub", "h.b", {"Nats-Expected-Last-Subject-Sequence": "1"}, b""),
    ("hpub", "h.b", {"Nats-Expected-Last-Subject-Sequence": "0"}, b"4"),
    ("hpub", "h.c", {"Nats-Expected-Last-Msg-Id": "zzz"}, b""),
    ("hpub", "h.c", {"Nats-Expected-Last-Msg-Id": "m1", "Nats-Msg-Id": "m5"}, b"5"),
    ("hpub", "h.c", {"Nats-TTL": "5s"}, b""),
    ("hpub", "h.a", {"Nats-Rollup": "sub"}, b"rolled"),
    ("hpub", "h.a", {"Nats-Rollup": "bogus"}, b""),
    # header lookup is nats-server's: exact case, empty values count as absent, digits only
    ("hpub", "h.d", {"nats-msg-id": "m1"}, b"lower"),
    ("hpub", "h.d", {"Nats-Msg-Id": ""}, b"empty id"),
    ("hpub", "h.d", {"Nats-Expected-Last-Sequence": ""}, b"empty expect"),
    ("hpub", "h.d", {"Nats-Expected-Last-Msg-Id": ""}, b"empty expect id"),
    ("hpub", "h.d", {"Nats-Expected-Last-Sequence": "+9"}, b""),
    ("hpub", "h.d", {"Nats-Expected-Last-Subject-Sequence": "x"}, b""),
    ("hpub", "h.d", {"Nats-Rollup": "all"}, b"all"),
    ("api", "$JS.API.STREAM.CREATE.TTL", {"name": "TTL", "allow_msg_ttl": True}, None),
    ("hpub", "TTL", {"Nats-TTL": "5s"}, b"t1"),
    ("hpub", "TTL", {"Nats-TTL": "never"}, b"t2"),
    ("hpub", "TTL", {"Nats-TTL": "soon"}, b""),
    ("hpub", "TTL", {"Nats-TTL": "0"}, b""),
    ("api", "$JS.API.STREAM.UPDATE.TTL", {"name": "TTL", "allow_msg_ttl": False}, None),
    ("api", "$JS.API.STREAM.UPDATE.TTL", {"name": "TTL", "allow_msg_ttl": True, "sealed": True}, None),
    ("pub", "TTL", None, b"sealed"),
    ("api", "$JS.API.STREAM.MSG.DELETE.TTL", {"seq": 1}, None),
    ("api", "$JS.API.STREAM.INFO.H", {"subjects_filter": ">"}, None),
    ("direct", "$JS.API.DIRECT.GET.H", {"seq": 4}, None),
    ("direct", "$JS.API.DIRECT.GET.H", {"seq": 2}, None),
    ("direct", "$JS.API.DIRECT.GET.H", {"seq": 1, "batch": 3}, None),
    ("direct", "$JS.API.DIRECT.GET.H", {"seq": 4, "no_hdr": True}, None),
    ("direct", "$JS.API.DIRECT.GET.H", {"next_by_subj": "h.c", "batch": 5}, None),
    ("direct", "$JS.API.DIRECT.GET.H", {"multi_last": ["h.*"]}, None),
    ("direct", "$JS.API.DIRECT.GET.H", {"multi_last": ["h.*"], "up_to_seq": 4}, None),
    ("direct", "$JS.API.DIRECT.GET.H", {"last_by_subj": "h.b"}, None),
    ("direct", "$JS.API.DIRECT.GET.H.h.b", "", None),
    ("direct", "$JS.API.DIRECT.GET.H.h.b", {"seq": 1}, None),
    ("direct", "$JS.API.DIRECT.GET.H", "", None),
    ("direct", "$JS.API.DIRECT.GET.H", "{nope", None),
    ("direct", "$JS.API.DIRECT.GET.H", {"seq": 1, "last_by_subj": "h.a"}, None),
    ("direct", "$JS.API.DIRECT.GET.H", {"seq": 99}, None),
    ("api", "$JS.API.INFO", "", None),
]


def _mask(v: Any, key: str = "") -> Any:
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if k.startswith("_nats.") or (k == "allow_msg_ttl" and x is False) or (key == "api" and k == "level"):
                continue  # nats-server 2.11+ additions (edged reports itself as 2.10)
            out[k] = _mask(x, k)
        if key == "config" and out.get("metadata") == {}:
            del out["metadata"]
        return out
    if isinstance(v, list):
        return [_mask(x) for x in v]
    if isinstance(v, str) and TS.fullmatch(v) and not v.startswith("0001-"):
        return "<time>"
    if key == "leader":
        return "<server>"
    return v


def _mask_headers(h: dict[str, str] | None) -> dict[str, str] | None:
    if not h:
        return h
    return {k: ("<time>" if k == "Nats-Time-Stamp" else v) for k, v in h.items()}


async def _scenario(url: str, script: list[tuple[str, str, Any, Any]] = SCRIPT) -> list[Any]:
    nc = await nats.connect(url)
    out: list[Any] = []
    try:
        for kind, subject, body, payload in script:
            if kind == "direct":
                inbox = nc.new_inbox()
                got: list[Any] = []
                sub = await nc.subscribe(inbox)
                data = body if isinstance(body, str) else json.dumps(body)
                await nc.publish(subject, data.encode(), reply=inbox)
                many = isinstance(body, dict) and ("batch" in body or "multi_last" in body)
                while True:
                    try:
                        m = await sub.next_msg(timeout=0.5)
                    except nats.errors.TimeoutError:
                        got.append("timeout")
                        break
                    got.append((_mask_headers(dict(m.headers) if m.headers else None), m.data))
                    if (m.headers or {}).get("Status") or not many:
                        break
                await sub.unsubscribe()
                out.append((subject, body, got))
                continue
            if kind in ("pub", "hpub"):
                data = payload
                headers = body
            else:
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
                headers = None
            r = await nc.request(subject, data, timeout=2, headers=headers)
            try:
                out.append((subject, body, _mask(json.loads(r.data))))
            except ValueError:
                out.append((subject, body, ("raw", r.headers, r.data)))
    finally:
        await nc.close()
    return out


@pytest.fixture(scope="module")
def replies() -> dict[str, list[Any]]:
    return replies_of_both(_scenario, "jswire-")


@pytest.mark.parametrize("i", range(len(SCRIPT)), ids=[f"{s[0]}:{s[1]}" for s in SCRIPT])
def test_same_reply(replies: dict[str, list[Any]], i: int) -> None:
    want, got = replies["nats-server"][i], replies["edged"][i]
    assert got == want


def test_script_covers_errors(replies: dict[str, list[Any]]) -> None:
    """The script is not all successes: it exercises a good spread of nats-server's error codes."""
    codes = {r[2]["error"]["err_code"] for r in replies["nats-server"] if isinstance(r[2], dict) and "error" in r[2]}
    assert len(codes) >= 15, codes


DOMAIN_SCRIPT: list[tuple[str, str, Any, Any]] = [
    ("api", "$JS.API.STREAM.CREATE.D", {"name": "D", "subjects": ["d.>"]}, None),
    ("pub", "d.1", None, b"x"),
    ("hpub", "d.1", {"Nats-Msg-Id": "a"}, b"y"),
    ("hpub", "d.1", {"Nats-Msg-Id": "a"}, b"y"),
    ("api", "$JS.API.STREAM.INFO.D", "", None),
    ("api", "$JS.API.STREAM.UPDATE.D", {"name": "D", "subjects": ["d.>"], "max_msgs": 9}, None),
    ("api", "$JS.API.STREAM.LIST", "", None),
    ("api", "$JS.EDGE1.API.STREAM.NAMES", "", None),
    ("api", "$JS.EDGE1.API.STREAM.INFO.D", "", None),
    ("api", "$JS.EDGE1.API.INFO", "", None),
    ("api", "$JS.API.INFO", "", None),
]


def test_domain_replies_match(start_server: Callable[..., ServerProcess]) -> None:
    """With `domain`, PubAcks, stream info/update/list and account info carry it, and the API also
    answers on `$JS.<domain>.API.>`: the same replies as nats-server."""
    res = {}
    for kind in ("nats-server", "edged"):
        d = tempfile.mkdtemp(prefix="jswire-dom-")
        p = start_server(kind, config=f'jetstream {{ store_dir: "{d}", domain: EDGE1 }}\n')
        res[kind] = run(_scenario(p.url, DOMAIN_SCRIPT), timeout=60)
    assert res["edged"] == res["nats-server"]
    assert res["edged"][1][2] == {"stream": "D", "seq": 1, "domain": "EDGE1"}
    assert res["edged"][3][2] == {"stream": "D", "seq": 2, "domain": "EDGE1", "duplicate": True}
    assert res["edged"][4][2]["domain"] == "EDGE1"
