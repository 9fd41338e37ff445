"""The JetStream consumer API on the wire, differential: one script of raw `$JS.API.CONSUMER.*` requests
(create in all its subject forms, the `action` field, update rules, config validation, info, names and
list with paging, delete, pause) runs against nats-server and against edged, and every reply must be the
same JSON: field names, values, defaults filled into the returned config, `type`, error
code/err_code/description. Only what differs by nature is masked: clock readings, the remaining pause
(its presence is compared), generated ephemeral names and nats-server 2.11+ version metadata. The API
counters and consumer counts at the end must agree too."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import nats
import pytest

from tests.support.jsutil import replies_of_both

TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
TIME_KEYS = {"created", "ts", "last_active"}  # clock readings; every other time is the request's own
FUTURE = "2100-01-01T00:00:00Z"
PAST = "2000-01-01T00:00:00Z"
A = "$JS.API."


def cc(stream: str, cfg: dict[str, Any], action: str | None = None) -> dict[str, Any]:
    """A consumer create request body."""
    body: dict[str, Any] = {"stream_name": stream, "config": cfg}
    if action is not None:
        body["action"] = action
    return body


def named(name: str, **cfg: Any) -> tuple[str, str, Any]:
    """`CONSUMER.CREATE.C.<name>` of a config on stream C."""
    return ("api", f"{A}CONSUMER.CREATE.C.{name}", cc("C", {"name": name, **cfg}))


# (kind, subject, body). kinds: "api" (JSON request), "pub" (publish, PubAck awaited), "eph" (a create
# whose reply names a generated consumer: that name is masked in this and every later reply)
SCRIPT: list[tuple[str, str, Any]] = [
    ("api", f"{A}INFO", ""),
    ("api", f"{A}STREAM.CREATE.C", {"name": "C", "subjects": ["c.>"]}),
    ("pub", "c.a", b"1"), ("pub", "c.b", b"2"), ("pub", "c.a", b"3"),
    # durable pull consumer with the defaults nats-server fills in; the same create again is idempotent
    ("api", f"{A}CONSUMER.CREATE.C.D1", cc("C", {"durable_name": "D1", "ack_policy": "explicit"})),
    ("api", f"{A}CONSUMER.CREATE.C.D1", cc("C", {"durable_name": "D1", "ack_policy": "explicit"})),
    ("api", f"{A}CONSUMER.CREATE.C.D1", cc("C", {"durable_name": "D1", "ack_policy": "explicit"}, "create")),
    ("api", f"{A}CONSUMER.CREATE.C.D1", cc("C", {"durable_name": "D1", "ack_policy": "explicit",
                                                  "description": "x"}, "create")),
    ("api", f"{A}CONSUMER.CREATE.C.D1", cc("C", {"durable_name": "D1", "ack_policy": "explicit",
                                                  "description": "x"}, "update")),
    ("api", f"{A}CONSUMER.CREATE.C.D9", cc("C", {"durable_name": "D9", "ack_policy": "explicit"}, "update")),
    ("api", f"{A}CONSUMER.CREATE.C.D9", cc("C", {"durable_name": "D9", "ack_policy": "explicit"}, "bogus")),
    # the action as written: its error quotes the bytes, an escaped letter is another action, null is refused
    *[("api", f"{A}CONSUMER.CREATE.C.D9",
       '{"stream_name":"C","config":{"durable_name":"D9","ack_policy":"explicit"},' + a + "}")
      for a in ('"action":null', '"action":"\\u0063reate"', '"action":{"a": 1}', '"action":1.5e3',
                '"action":[ 1, 2 ]', '"Action" : "bogus"', '"action" : "update" ', '"ACTION":"Create"')],
    ("api", f"{A}CONSUMER.CREATE.C.D9", cc("C", {"durable_name": "D9", "ack_policy": "explicit"}, "")),
    # update rules
    ("api", f"{A}CONSUMER.CREATE.C.D1", cc("C", {"durable_name": "D1", "ack_policy": "none"})),
    ("api", f"{A}CONSUMER.CREATE.C.D1", cc("C", {"durable_name": "D1", "ack_policy": "explicit",
                                                  "deliver_policy": "last"})),
    ("api", f"{A}CONSUMER.CREATE.C.D1", cc("C", {"durable_name": "D1", "ack_policy": "explicit",
                                                  "deliver_policy": "by_start_sequence", "opt_start_seq": 2})),
    ("api", f"{A}CONSUMER.CREATE.C.D1", cc("C", {"durable_name": "D1", "ack_policy": "explicit",
                                                  "replay_policy": "original"})),
    ("api", f"{A}CONSUMER.CREATE.C.D1", cc("C", {"durable_name": "D1", "ack_policy": "explicit",
                                                  "deliver_subject": "dl"})),
    ("api", f"{A}CONSUMER.CREATE.C.D1", cc("C", {"durable_name": "D1", "ack_policy": "explicit",
                                                  "mem_storage": True})),
    ("api", f"{A}CONSUMER.CREATE.C.D1", cc("C", {"durable_name": "D1", "ack_policy": "explicit",
                                                  "max_waiting": 10})),
    ("api", f"{A}CONSUMER.CREATE.C.D1", cc("C", {"durable_name": "D1", "ack_policy": "explicit",
                                                  "num_replicas": 1})),
    ("api", f"{A}CONSUMER.CREATE.C.D1", cc("C", {"durable_name": "D1", "ack_policy": "explicit",
                                                  "max_ack_pending": 7, "max_deliver": 4, "ack_wait": 10**9,
                                                  "filter_subject": "c.a", "headers_only": True,
                                                  "sample_freq": "50%", "metadata": {"k": "v"},
                                                  "max_batch": 3, "max_expires": 10**9, "max_bytes": 1000,
                                                  "inactive_threshold": 60 * 10**9})),
    ("api", f"{A}CONSUMER.INFO.C.D1", ""),
    ("api", f"{A}CONSUMER.CREATE.C.D1", cc("C", {"durable_name": "D1", "ack_policy": "explicit",
                                                  "backoff": [10**9, 2 * 10**9], "max_deliver": 5})),
    # push consumer updates
    ("api", f"{A}CONSUMER.CREATE.C.P1", cc("C", {"name": "P1", "deliver_subject": "dp1"})),
    ("api", f"{A}CONSUMER.CREATE.C.P1", cc("C", {"name": "P1", "deliver_subject": "dp2", "rate_limit_bps": 1000,
                                                  "idle_heartbeat": 10**9, "flow_control": True})),
    ("api", f"{A}CONSUMER.CREATE.C.P1", cc("C", {"name": "P1"})),
    ("api", f"{A}CONSUMER.CREATE.C.P1", cc("C", {"name": "P1", "deliver_subject": "dp2", "deliver_group": "g"})),
    # subject forms and name mismatches
    ("eph", f"{A}CONSUMER.CREATE.E", cc("E", {})),
    ("api", f"{A}STREAM.CREATE.E", {"name": "E", "subjects": ["e"]}),
    ("eph", f"{A}CONSUMER.CREATE.E", cc("E", {})),
    ("eph", f"{A}CONSUMER.CREATE.E", cc("E", {"ack_policy": "explicit", "deliver_subject": "de"})),
    ("api", f"{A}CONSUMER.CREATE.E", cc("E", {"name": "EN"})),
    ("api", f"{A}CONSUMER.CREATE.E", cc("E", {"durable_name": "ED"})),
    ("api", f"{A}CONSUMER.CREATE.E", cc("X", {})),
    ("eph", f"{A}CONSUMER.CREATE.E", cc("E", {"inactive_threshold": 2 * 10**9})),
    ("eph", f"{A}CONSUMER.CREATE.E", {"stream_name": "E"}),
    ("api", f"{A}CONSUMER.CREATE.E", ""),
    ("api", f"{A}CONSUMER.CREATE.E", "[1]"),
    ("api", f"{A}CONSUMER.CREATE.E", {"stream_name": "E", "config": "x"}),
    ("api", f"{A}CONSUMER.CREATE.E", {"stream_name": "E", "config": {}, "bogus": 1}),
    ("api", f"{A}CONSUMER.CREATE.E", {"stream_name": "E", "config": {"bogus_field": 1, "max_deliver": "x"}}),
    ("api", f"{A}CONSUMER.CREATE.E", {"stream_name": "E", "config": {"max_deliver": "x", "bogus_field": 1}}),
    ("api", f"{A}CONSUMER.CREATE.E", {"stream_name": "E", "config": {"max_deliver": 1.5}}),
    ("api", f"{A}CONSUMER.CREATE.E", {"stream_name": "E", "config": {"ack_wait": True}}),
    ("api", f"{A}CONSUMER.CREATE.E", {"stream_name": "E", "config": {"opt_start_seq": -1}}),
    ("api", f"{A}CONSUMER.CREATE.E", {"stream_name": "E", "config": {"name": 5}}),
    ("api", f"{A}CONSUMER.CREATE.E", {"stream_name": "E", "config": {"deliver_policy": 5}}),
    ("api", f"{A}CONSUMER.CREATE.E", {"stream_name": "E", "config": {"filter_subjects": "e"}}),
    ("api", f"{A}CONSUMER.CREATE.E", {"stream_name": "E", "config": {"backoff": [1, "x"]}}),
    ("api", f"{A}CONSUMER.CREATE.E", {"stream_name": "E", "config": {"metadata": {"a": 1}}}),
    ("api", f"{A}CONSUMER.CREATE.E", {"stream_name": "E", "config": {"max_deliver": "x", "ack_policy": "x"}}),
    ("api", f"{A}CONSUMER.CREATE.E", {"stream_name": "E", "config": {"pause_until": 5}}),
    ("api", f"{A}CONSUMER.CREATE.E", {"stream_name": "E", "config": {"name": "EP"}, "pedantic": False}),
    ("api", f"{A}CONSUMER.CREATE.NOPE", cc("NOPE", {})),
    ("api", f"{A}CONSUMER.CREATE.NOPE.X", cc("NOPE", {"name": "X"})),
    ("api", f"{A}CONSUMER.CREATE.C.N1", cc("C", {})),
    ("api", f"{A}CONSUMER.CREATE.C.N2", cc("C", {"name": "OTHER"})),
    ("api", f"{A}CONSUMER.CREATE.C.N2", cc("C", {"durable_name": "OTHER"})),
    ("api", f"{A}CONSUMER.CREATE.C.N2", cc("C", {"name": "N2", "durable_name": "N3"})),
    ("api", f"{A}CONSUMER.CREATE.C.N2", cc("C", {"durable_name": "N2"})),
    ("api", f"{A}CONSUMER.CREATE.C.N3", cc("C", {"name": "N3", "durable_name": "N3"})),
    ("api", f"{A}CONSUMER.CREATE.C.F1.c.a", cc("C", {"name": "F1"})),
    ("api", f"{A}CONSUMER.CREATE.C.F2.c.a", cc("C", {"name": "F2", "filter_subject": "c.a"})),
    ("api", f"{A}CONSUMER.CREATE.C.F3.c.a", cc("C", {"name": "F3", "filter_subject": "c.b"})),
    ("api", f"{A}CONSUMER.CREATE.C.F4.c.a", cc("C", {"name": "F4", "filter_subjects": ["c.a", "c.b"]})),
    ("api", f"{A}CONSUMER.CREATE.C.F5.c.*", cc("C", {"name": "F5"})),
    ("api", f"{A}CONSUMER.CREATE.C.F6.x.y", cc("C", {"name": "F6"})),
    ("api", f"{A}CONSUMER.DURABLE.CREATE.C.DD", cc("C", {"durable_name": "DD"})),
    ("api", f"{A}CONSUMER.DURABLE.CREATE.C.DD", cc("C", {"durable_name": "DD"})),
    ("api", f"{A}CONSUMER.DURABLE.CREATE.C.DE", cc("C", {})),
    ("api", f"{A}CONSUMER.DURABLE.CREATE.C.DE", cc("C", {"durable_name": "OTHER"})),
    ("api", f"{A}CONSUMER.DURABLE.CREATE.C.DE", cc("C", {"name": "DE"})),
    ("api", f"{A}CONSUMER.DURABLE.CREATE.NOPE.DE", cc("NOPE", {"durable_name": "DE"})),
    # invalid names
    ("api", f"{A}CONSUMER.CREATE.C", cc("C", {"name": "a.b"})),
    ("api", f"{A}CONSUMER.CREATE.C", cc("C", {"name": "a*b"})),
    ("api", f"{A}CONSUMER.CREATE.C", cc("C", {"name": "a>"})),
    ("api", f"{A}CONSUMER.CREATE.C", cc("C", {"name": "a b"})),
    ("api", f"{A}CONSUMER.CREATE.C", cc("C", {"name": "a/b"})),
    ("api", f"{A}CONSUMER.CREATE.C", cc("C", {"name": "a\\b"})),
    ("api", f"{A}CONSUMER.CREATE.C", cc("C", {"durable_name": "a.b"})),
    ("api", f"{A}CONSUMER.CREATE.C.LONG", cc("C", {"name": "x" * 300})),
    ("api", f"{A}CONSUMER.CREATE.C", cc("C", {"durable_name": "z" * 256})),
    ("api", f"{A}CONSUMER.DURABLE.CREATE.C." + "z" * 256, cc("C", {"durable_name": "z" * 256})),
    # config validation
    named("V1", deliver_policy="by_start_sequence"),
    named("V2", deliver_policy="by_start_time"),
    named("V3", deliver_policy="by_start_time", opt_start_time="2020-01-01T00:00:00Z"),
    named("V4", opt_start_seq=2),
    named("V5", deliver_policy="last", opt_start_seq=2),
    named("V6", opt_start_time="2020-01-01T00:00:00Z"),
    named("V7", deliver_policy="by_start_sequence", opt_start_seq=2, opt_start_time="2020-01-01T00:00:00Z"),
    named("V8", deliver_policy="last_per_subject"),
    named("V9", deliver_policy="last_per_subject", filter_subject="c.*"),
    named("V10", deliver_policy="bogus"),
    named("V11", ack_policy="bogus"),
    named("V12", replay_policy="bogus"),
    named("V13", ack_policy="none", max_ack_pending=5),
    named("V14", deliver_subject="dv14", max_waiting=5),
    named("V15", deliver_group="g"),
    named("V16", deliver_subject="dv16", flow_control=True),
    named("V17", idle_heartbeat=10**9),
    named("V18", flow_control=True),
    named("V19", deliver_subject="dv19", idle_heartbeat=10**6),
    named("V20", ack_policy="explicit", backoff=[10**9, 2 * 10**9], max_deliver=2),
    named("V21", ack_policy="explicit", backoff=[10**9, 2 * 10**9], max_deliver=3),
    named("V22", ack_policy="explicit", backoff=[10**9], ack_wait=5 * 10**9),
    named("V23", ack_policy="explicit", backoff=[10**9, 2 * 10**9]),
    named("V24", num_replicas=3),
    named("V25", mem_storage=True, description="d", metadata={"a": "b"}),
    named("V26", rate_limit_bps=100),
    named("V27", deliver_subject="dv27", rate_limit_bps=100, headers_only=True, sample_freq="20"),
    named("V28", sample_freq="bogus"),
    named("V29", inactive_threshold=-1),
    named("V30", filter_subject="c.a", filter_subjects=["c.b"]),
    named("V31", filter_subjects=["c.a", "c.*"]),
    named("V32", filter_subjects=["c.a", "c.a"]),
    named("V33", filter_subjects=["c.a", ""]),
    named("V34", filter_subject="x.y"),
    named("V35", filter_subjects=["c.a", "x.y"]),
    named("V36", filter_subject="c.>"),
    named("V37", filter_subject="c..a"),
    named("V38", max_batch=-1),
    named("V39", max_batch=5, max_expires=10**6, max_bytes=2048),
    named("V40", max_expires=10),
    named("V41", max_bytes=-1),
    named("V42", deliver_subject="dv42", max_batch=5),
    named("V43", ack_policy="all"),
    named("V44", ack_policy="none"),
    named("V45", ack_policy="explicit", max_deliver=0, ack_wait=0),
    named("V46", ack_policy="explicit", max_deliver=-5),
    named("V47", ack_wait=-1),
    named("V48", max_waiting=-1),
    named("V49", deliver_subject="a.*"),
    named("V50", deliver_subject="a b"),
    named("V51", num_replicas=-1),
    named("V52", description="z" * 5000),
    named("V53", metadata={"k": "v" * 130000}),
    named("V54", backoff=[-1], ack_policy="explicit"),
    named("V55", deliver_subject="c.x"),
    named("V56", max_ack_pending=-1, ack_policy="explicit"),
    named("V57", pause_until=FUTURE),
    named("V58", pause_until=PAST),
    named("V59", deliver_policy="new"),
    named("V60", deliver_policy="last", filter_subject="c.b"),
    named("V61", opt_start_time="not a time", deliver_policy="by_start_time"),
    named("V62", opt_start_time="2020-13-01T00:00:00Z", deliver_policy="by_start_time"),
    named("V62", opt_start_time="2020-02-30T00:00:00Z", deliver_policy="by_start_time"),
    named("V62", opt_start_time="2020-01-01", deliver_policy="by_start_time"),
    named("V62", opt_start_time="2020-01-01T00:00:00", deliver_policy="by_start_time"),
    named("V62", opt_start_time="2020-01-01T24:00:00Z", deliver_policy="by_start_time"),
    named("V62", opt_start_time="2020-01-01T00:00:00Zx", deliver_policy="by_start_time"),
    named("V62", opt_start_time="2020-01-01T00:00:00+1:00", deliver_policy="by_start_time"),
    named("V62", opt_start_time="2020-1-01T00:00:00Z", deliver_policy="by_start_time"),
    named("V62", opt_start_time="2020-01-01T01:00:00.500+01:00", deliver_policy="by_start_time"),
    named("V63", opt_start_time="2020-01-01T00:00:00.500000Z", deliver_policy="by_start_time"),
    named("V63", opt_start_time="2020-01-01T00:00:00.5Z", deliver_policy="by_start_time"),
    named("V63", opt_start_time="2020-01-01T00:00:00.6Z", deliver_policy="by_start_time"),
    named("V64", sample_freq="%"),
    named("V64", sample_freq="101%"),
    named("V65", deliver_policy="last_per_subject", filter_subjects=["c.a", "c.b"]),
    named("V66", deliver_subject="dv66", idle_heartbeat=10**9, flow_control=True, max_ack_pending=3,
          ack_policy="explicit"),
    named("V66", deliver_subject="dv66", idle_heartbeat=10**9, flow_control=False, max_ack_pending=3,
          ack_policy="explicit"),
    named("V66", deliver_subject="dv66", idle_heartbeat=10**9, flow_control=True, max_ack_pending=3,
          ack_policy="explicit", deliver_group="q", headers_only=True, rate_limit_bps=5),
    named("V67", deliver_subject="dv67", max_ack_pending=3),
    named("V68", deliver_subject="dv68", pause_until=FUTURE),
    named("V69", pause_until="2100-01-01T01:00:00+01:00"),
    ("api", f"{A}CONSUMER.CREATE.C.V69", cc("C", {"name": "V69", "inactive_threshold": 5 * 10**9}, "create")),
    ("api", f"{A}CONSUMER.CREATE.C.V69", cc("C", {"name": "V69", "pause_until": PAST})),
    ("api", f"{A}CONSUMER.CREATE.C.N1", cc("C", {"name": "N1"}, "create")),
    ("api", f"{A}CONSUMER.CREATE.C.N1", cc("C", {"name": "N1", "inactive_threshold": 5 * 10**9}, "create")),
    ("api", f"{A}CONSUMER.CREATE.C.N1", cc("C", {"name": "N1", "durable_name": "N1"})),
    ("api", f"{A}CONSUMER.CREATE.C.N1", cc("C", {"name": "N1", "durable_name": "N1"}, "create")),
    ("api", f"{A}CONSUMER.CREATE.C.DD", cc("C", {"durable_name": "DD", "metadata": {"x": "y"}})),
    ("api", f"{A}CONSUMER.CREATE.C.DD", cc("C", {"durable_name": "DD"}, "create")),
    ("api", f"{A}CONSUMER.CREATE.C.DD", cc("C", {"durable_name": "DD", "metadata": {"x": "y"}}, "create")),
    # a bound push consumer: its deliver subject can not move
    ("sub", "bound.p", None),
    ("api", f"{A}CONSUMER.CREATE.C.BP", cc("C", {"name": "BP", "deliver_subject": "bound.p"})),
    ("sleep", "", 0.3),  # both servers deliver the stream's messages before the info is asked for
    ("api", f"{A}CONSUMER.INFO.C.BP", ""),
    ("api", f"{A}CONSUMER.CREATE.C.BP", cc("C", {"name": "BP", "deliver_subject": "bound.q"})),
    ("api", f"{A}CONSUMER.CREATE.C.BP", cc("C", {"name": "BP", "deliver_subject": "bound.p", "description": "d"})),
    # workqueue and stream consumer limits
    ("api", f"{A}STREAM.CREATE.WQ", {"name": "WQ", "subjects": ["wq.>"], "retention": "workqueue",
                                     "max_consumers": 3}),
    ("api", f"{A}CONSUMER.CREATE.WQ.W1", cc("WQ", {"name": "W1"})),
    ("api", f"{A}CONSUMER.CREATE.WQ.W1", cc("WQ", {"name": "W1", "ack_policy": "all"})),
    ("api", f"{A}CONSUMER.CREATE.WQ.W1", cc("WQ", {"name": "W1", "deliver_subject": "dw1"})),
    ("api", f"{A}CONSUMER.CREATE.WQ.W1", cc("WQ", {"name": "W1", "ack_policy": "explicit", "deliver_policy": "new"})),
    ("api", f"{A}CONSUMER.CREATE.WQ.W1", cc("WQ", {"name": "W1", "ack_policy": "explicit", "num_replicas": 1})),
    ("api", f"{A}CONSUMER.CREATE.WQ.W2", cc("WQ", {"name": "W2", "ack_policy": "explicit"})),
    ("api", f"{A}CONSUMER.CREATE.WQ.W2", cc("WQ", {"name": "W2", "ack_policy": "explicit", "filter_subject": "wq.a"})),
    ("api", f"{A}CONSUMER.CREATE.WQ.W1", cc("WQ", {"name": "W1", "ack_policy": "explicit", "filter_subject": "wq.>"})),
    ("api", f"{A}CONSUMER.CREATE.WQ.W1", cc("WQ", {"name": "W1", "ack_policy": "explicit", "filter_subject": "wq.b"})),
    ("api", f"{A}CONSUMER.CREATE.WQ.W2", cc("WQ", {"name": "W2", "ack_policy": "explicit", "filter_subject": "wq.a"})),
    ("api", f"{A}CONSUMER.CREATE.WQ.W3", cc("WQ", {"name": "W3", "ack_policy": "explicit", "filter_subject": "wq.*"})),
    ("api", f"{A}CONSUMER.CREATE.WQ.W3", cc("WQ", {"name": "W3", "ack_policy": "explicit", "filter_subject": "wq.c"})),
    ("api", f"{A}CONSUMER.CREATE.WQ.W4", cc("WQ", {"name": "W4", "ack_policy": "explicit", "filter_subject": "wq.d"})),
    ("api", f"{A}STREAM.CREATE.CL", {"name": "CL", "subjects": ["cl"], "consumer_limits": {
        "max_ack_pending": 10, "inactive_threshold": 60 * 10**9}}),
    ("api", f"{A}CONSUMER.CREATE.CL.L1", cc("CL", {"name": "L1"})),
    ("api", f"{A}CONSUMER.CREATE.CL.L2", cc("CL", {"durable_name": "L2", "ack_policy": "explicit"})),
    ("api", f"{A}CONSUMER.CREATE.CL.L3", cc("CL", {"name": "L3", "ack_policy": "explicit", "max_ack_pending": 11})),
    ("api", f"{A}CONSUMER.CREATE.CL.L4", cc("CL", {"name": "L4", "inactive_threshold": 61 * 10**9})),
    # info, names, list, delete
    ("api", f"{A}CONSUMER.INFO.C.V59", ""),
    ("api", f"{A}CONSUMER.INFO.C.NOPE", ""),
    ("api", f"{A}CONSUMER.INFO.NOPE.X", ""),
    ("api", f"{A}CONSUMER.NAMES.C", ""),
    ("api", f"{A}CONSUMER.NAMES.C", {"offset": 3}),
    ("api", f"{A}CONSUMER.NAMES.C", {"offset": 300}),
    ("api", f"{A}CONSUMER.NAMES.NOPE", ""),
    ("api", f"{A}CONSUMER.NAMES.C", "x"),
    ("api", f"{A}CONSUMER.NAMES.C", {"offset": -5}),
    ("api", f"{A}CONSUMER.NAMES.C", {"offset": "x"}),
    ("api", f"{A}CONSUMER.NAMES.C", {"offset": 1, "x": 1}),
    ("api", f"{A}CONSUMER.INFO.C.D1", "x"),
    ("api", f"{A}CONSUMER.INFO.C.D1", "{}"),
    ("api", f"{A}CONSUMER.DELETE.C.D1", "x"),
    ("api", f"{A}CONSUMER.LIST.C", {"offset": 5}),
    ("api", f"{A}CONSUMER.LIST.NOPE", ""),
    # pause and resume
    ("api", f"{A}CONSUMER.PAUSE.C.D1", {"pause_until": FUTURE}),
    ("api", f"{A}CONSUMER.INFO.C.D1", ""),
    ("api", f"{A}CONSUMER.PAUSE.C.D1", {"pause_until": PAST}),
    ("api", f"{A}CONSUMER.INFO.C.D1", ""),
    ("api", f"{A}CONSUMER.PAUSE.C.D1", {"pause_until": FUTURE}),
    ("api", f"{A}CONSUMER.PAUSE.C.D1", ""),
    ("api", f"{A}CONSUMER.INFO.C.D1", ""),
    ("api", f"{A}CONSUMER.PAUSE.C.D1", {}),
    ("api", f"{A}CONSUMER.PAUSE.C.D1", {"pause_until": "2100-01-01T01:00:00.5+01:00"}),
    ("api", f"{A}CONSUMER.INFO.C.D1", ""),
    ("api", f"{A}CONSUMER.CREATE.C.D1", cc("C", {"durable_name": "D1", "ack_policy": "explicit",
                                                  "backoff": [10**9, 2 * 10**9], "max_deliver": 5})),
    ("api", f"{A}CONSUMER.CREATE.C.D1", cc("C", {"durable_name": "D1", "ack_policy": "explicit",
                                                  "backoff": [10**9, 2 * 10**9], "max_deliver": 5,
                                                  "pause_until": PAST})),
    ("api", f"{A}CONSUMER.PAUSE.C.D1", {"pause_until": "bad"}),
    ("api", f"{A}CONSUMER.PAUSE.C.D1", "bad"),
    ("api", f"{A}CONSUMER.PAUSE.C.D1", {"pause_until": FUTURE, "x": 1}),
    ("api", f"{A}CONSUMER.PAUSE.C.D1", {"pause_until": "0001-01-01T00:00:00Z"}),
    ("api", f"{A}CONSUMER.PAUSE.C.NOPE", {"pause_until": FUTURE}),
    ("api", f"{A}CONSUMER.PAUSE.NOPE.X", {"pause_until": FUTURE}),
    ("api", f"{A}CONSUMER.INFO.C.V57", ""),
    ("api", f"{A}CONSUMER.PAUSE.C.V57", ""),
    ("api", f"{A}CONSUMER.INFO.C.V57", ""),
    # delete
    ("api", f"{A}CONSUMER.DELETE.C.V59", ""),
    ("api", f"{A}CONSUMER.DELETE.C.V59", ""),
    ("api", f"{A}CONSUMER.DELETE.NOPE.V59", ""),
    ("api", f"{A}CONSUMER.NAMES.C", ""),
    ("api", f"{A}INFO", ""),
]


class Masker:
    """Masks what differs by nature; generated consumer names become `<eph1>`, `<eph2>`... in order."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def learn(self, reply: Any) -> None:
        if isinstance(reply, dict) and isinstance(reply.get("name"), str) and reply["name"] not in self.names:
            self.names[reply["name"]] = f"<eph{len(self.names) + 1}>"

    def __call__(self, v: Any, key: str = "") -> Any:
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if k.startswith("_nats.") or (key == "api" and k == "level") or (
                        k == "allow_msg_ttl" and x is False):
                    continue  # nats-server 2.11+ additions (edged reports itself as 2.10)
                out[k] = self(x, k)
            if key == "config" and out.get("metadata") == {}:
                del out["metadata"]
            return out
        if isinstance(v, list):
            return [self(x) for x in v]
        if key in TIME_KEYS and isinstance(v, str) and TS.fullmatch(v):
            return "<time>"
        if key == "pause_remaining":
            return "<duration>" if isinstance(v, int) and v > 0 else v
        if isinstance(v, str) and v in self.names:
            return self.names[v]
        return v


async def _scenario(url: str, script: list[tuple[str, str, Any]] = SCRIPT) -> list[Any]:
    nc = await nats.connect(url)
    mask = Masker()
    out: list[Any] = []
    try:
        for kind, subject, body in script:
            if kind == "sub":
                await nc.subscribe(subject)
                await nc.flush()
                out.append((subject, body, "subscribed"))
                continue
            if kind == "sleep":
                await asyncio.sleep(body)
                out.append((subject, body, "slept"))
                continue
            if kind == "pub":
                data = body
            else:
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
            try:
                r = await nc.request(subject, data, timeout=2)
            except nats.errors.TimeoutError:
                out.append((subject, body, "timeout"))
                continue
            try:
                reply = json.loads(r.data)
            except ValueError:
                out.append((subject, body, ("raw", r.headers, r.data)))
                continue
            if kind == "eph":
                mask.learn(reply)
            out.append((subject, body, mask(reply)))
    finally:
        await nc.close()
    return out


@pytest.fixture(scope="module")
def replies() -> dict[str, list[Any]]:
    return replies_of_both(_scenario, "jscwire-")


@pytest.mark.parametrize("i", range(len(SCRIPT)),
                         ids=[f"{i}:{s[1].removeprefix(A)[:60]}" for i, s in enumerate(SCRIPT)])
def test_same_reply(replies: dict[str, list[Any]], i: int) -> None:
    want, got = replies["nats-server"][i], replies["edged"][i]
    assert got == want


def test_script_covers_errors(replies: dict[str, list[Any]]) -> None:
    """The script is not all successes: it exercises a good spread of nats-server's consumer error codes."""
    codes = {r[2]["error"]["err_code"] for r in replies["nats-server"] if isinstance(r[2], dict) and "error" in r[2]}
    assert len(codes) >= 25, codes
