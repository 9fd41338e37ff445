"""`edged { mqtt_bridge [ ... ] }`: the upstream bridges' settings, checked when the file is read.

Called by edged/settings/config.py with its typed getters (`cx`: str_/int_/bool_/duration/strlist/list_/map_, `err`,
`unknown`) and its TLS block reader, so the bridge's errors name file:line as every other config error
does, and an unknown key is refused, not ignored: a typo in a rule must not silently stop forwarding.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from bridges.mqtt_bridge.topics import expand_tail, placeholders, valid_topic_filter
from edged.routing.subjects import is_valid_literal_subject, is_valid_subject
from edged.settings.options import BridgeInRule, BridgeOutRule, MQTTBridgeOpts, TLSConfig

SCHEMES = {"mqtt": 1883, "tcp": 1883, "mqtts": 8883, "ssl": 8883, "tls": 8883}
_NAME = re.compile(r"[A-Za-z0-9_-]+")
_PROTOCOLS = {"3.1.1": 4, "4": 4, "311": 4, "5": 5, "5.0": 5}

TLSReader = Callable[[Any, Any, str], TLSConfig]


def parse_url(url: str) -> tuple[str, int, bool]:
    """(host, port, tls) of `mqtt://host[:port]` / `mqtts://host[:port]`; ValueError says what is wrong."""
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError as e:
        raise ValueError(f"bad upstream url {url!r}: {e}") from None
    scheme = u.scheme.lower()
    if scheme not in SCHEMES:
        raise ValueError(f"bad upstream url {url!r}: the scheme must be mqtt:// or mqtts://")
    if not u.hostname:
        raise ValueError(f"bad upstream url {url!r}: no host")
    if u.path not in ("", "/") or u.query or u.fragment:
        raise ValueError(f"bad upstream url {url!r}: only mqtt[s]://host:port is understood")
    return u.hostname, port or SCHEMES[scheme], scheme in ("mqtts", "ssl", "tls")


def parse_bridges(cx: Any, m: Any, key: str, tls_block: TLSReader) -> list[MQTTBridgeOpts]:
    arr = cx.list_(m, key)
    out: list[MQTTBridgeOpts] = []
    for i, b in enumerate(arr):
        if not isinstance(b, dict):
            raise cx.err(arr, i, "mqtt_bridge: each bridge is a block { }")
        out.append(_bridge(cx, arr, i, b, tls_block))
        if not out[-1].name:
            out[-1].name = f"bridge{i}"
    names = [b.name for b in out]
    for n in names:
        if names.count(n) > 1:
            raise cx.err(m, key, f"mqtt_bridge: two bridges are named {n!r}")
    return out


def _qos(cx: Any, m: Any, k: str) -> int:
    q = cx.int_(m, k)
    if q not in (0, 1, 2):
        raise cx.err(m, k, f"{k}: must be 0, 1 or 2, got {q}")
    return q


def _bridge(cx: Any, arr: Any, index: int, b: Any, tls_block: TLSReader) -> MQTTBridgeOpts:
    o = MQTTBridgeOpts()
    for k in b:
        lk = k.lower()
        if lk == "name":
            o.name = cx.str_(b, k)
            if not _NAME.fullmatch(o.name):
                raise cx.err(b, k, f"mqtt_bridge name {o.name!r}: letters, digits, '-' and '_' only")
        elif lk in ("url", "urls"):
            for u in cx.strlist(b, k):
                try:
                    parse_url(u)
                except ValueError as e:
                    raise cx.err(b, k, str(e)) from None
                o.urls.append(u)
        elif lk == "client_id":
            o.client_id = cx.str_(b, k)
        elif lk in ("username", "user"):
            o.username = cx.str_(b, k)
        elif lk in ("password", "pass"):
            o.password = cx.str_(b, k)
        elif lk == "tls":
            o.tls = tls_block(cx, b, k)
        elif lk in ("protocol", "mqtt_version", "version"):
            v = str(b[k]).strip().lower().removeprefix("v")
            if v not in _PROTOCOLS:
                raise cx.err(b, k, f"{k}: must be \"3.1.1\" or \"5\", got {b[k]!r}")
            o.protocol = _PROTOCOLS[v]
        elif lk in ("keepalive", "keep_alive"):
            o.keepalive = cx.duration(b, k, legacy_seconds=False)
            if not 1 <= o.keepalive <= 65535:
                raise cx.err(b, k, f"{k}: between 1s and 65535s")
        elif lk in ("clean_session", "clean_start"):
            o.clean_session = cx.bool_(b, k)
        elif lk == "account":
            o.account = cx.str_(b, k)
        elif lk in ("max_inflight", "max_in_flight", "window"):
            o.max_inflight = cx.int_(b, k)
            if not 1 <= o.max_inflight <= 65535:
                raise cx.err(b, k, f"{k}: between 1 and 65535")
        elif lk in ("reconnect_max", "max_reconnect_delay"):
            o.reconnect_max = cx.duration(b, k, legacy_seconds=False)
            if o.reconnect_max < 1:
                raise cx.err(b, k, f"{k}: at least 1s")
        elif lk == "out":
            rules = cx.list_(b, k)
            for j, r in enumerate(rules):
                if not isinstance(r, dict):
                    raise cx.err(rules, j, "mqtt_bridge out: each rule is a block { }")
                o.out.append(_out_rule(cx, rules, j, r))
        elif lk == "in":
            rules = cx.list_(b, k)
            for j, r in enumerate(rules):
                if not isinstance(r, dict):
                    raise cx.err(rules, j, "mqtt_bridge in: each rule is a block { }")
                o.in_.append(_in_rule(cx, rules, j, r))
        else:
            cx.unknown(b, k)
    if not o.urls:
        raise cx.err(arr, index, "mqtt_bridge needs `url` or `urls` (mqtt://host:port or mqtts://host:port)")
    if not o.out and not o.in_:
        raise cx.err(arr, index, "mqtt_bridge has no `out` or `in` rule: nothing to forward")
    if o.password and not o.username:
        raise cx.err(arr, index, "mqtt_bridge: a password needs a username")
    if o.tls is not None and (bool(o.tls.cert_file) != bool(o.tls.key_file)):
        raise cx.err(b, "tls", "mqtt_bridge tls: cert_file and key_file go together")
    for j, r in enumerate(o.out):
        if r.stream and not r.durable:
            r.durable = f"mqtt_bridge_{o.name or index}_{j}"
    return o


def _check_template(cx: Any, m: Any, k: str, template: str, source: str, sep: str, wilds: tuple[str, str]) -> None:
    n = sum(1 for t in source.split(sep) if t in wilds)
    for p in placeholders(template):
        if not 0 < p <= n:
            raise cx.err(m, k, f"{k} {template!r}: wildcard {p} is not in {source!r} (it has {n})")


def _out_rule(cx: Any, rules: Any, j: int, r: Any) -> BridgeOutRule:
    o = BridgeOutRule()
    for k in r:
        lk = k.lower()
        if lk == "subject":
            o.subject = cx.str_(r, k)
            if not is_valid_subject(o.subject):
                raise cx.err(r, k, f"subject {o.subject!r} is not a valid subject")
        elif lk == "stream":
            o.stream = cx.str_(r, k)
            if not o.stream or any(c in o.stream for c in " .*>\t"):
                raise cx.err(r, k, f"stream {o.stream!r} is not a valid stream name")
        elif lk == "filter_subject":
            o.filter_subject = cx.str_(r, k)
            if not is_valid_subject(o.filter_subject):
                raise cx.err(r, k, f"filter_subject {o.filter_subject!r} is not a valid subject")
        elif lk in ("durable", "durable_name"):
            o.durable = cx.str_(r, k)
            if not o.durable or any(c in o.durable for c in " .*>\t"):
                raise cx.err(r, k, f"durable {o.durable!r} is not a valid consumer name")
        elif lk in ("deliver", "deliver_policy"):
            o.deliver = cx.str_(r, k).lower()
            if o.deliver not in ("all", "new"):
                raise cx.err(r, k, f"{k}: \"all\" or \"new\", got {o.deliver!r}")
        elif lk == "topic":
            o.topic = cx.str_(r, k)
            body = o.topic.removesuffix("/#")  # a trailing `/#` takes the source's `>` tail
            if not body or any(c in body for c in "+#\x00"):
                raise cx.err(r, k, f"topic {o.topic!r}: a topic to publish to has no wildcards")
        elif lk == "qos":
            o.qos = _qos(cx, r, k)
        elif lk == "retain":
            o.retain = cx.bool_(r, k)
        else:
            cx.unknown(r, k)
    if bool(o.subject) == bool(o.stream):
        raise cx.err(rules, j, "mqtt_bridge out rule: give either `subject` or `stream`")
    if o.subject and (o.filter_subject or o.durable):
        raise cx.err(rules, j, "mqtt_bridge out rule: filter_subject and durable go with `stream`")
    if o.topic:
        _check_template(cx, r, "topic", o.topic, o.subject or o.filter_subject or ">", ".", ("*", ">"))
    return o


def _in_rule(cx: Any, rules: Any, j: int, r: Any) -> BridgeInRule:
    o = BridgeInRule()
    for k in r:
        lk = k.lower()
        if lk == "topic":
            o.topic = cx.str_(r, k)
            if not valid_topic_filter(o.topic):
                raise cx.err(r, k, f"topic {o.topic!r} is not a valid MQTT topic filter")
        elif lk == "subject":
            o.subject = cx.str_(r, k)
        elif lk == "stream":
            o.stream = cx.str_(r, k)
            if not o.stream or any(c in o.stream for c in " .*>\t"):
                raise cx.err(r, k, f"stream {o.stream!r} is not a valid stream name")
        elif lk == "qos":
            o.qos = _qos(cx, r, k)
        else:
            cx.unknown(r, k)
    if not o.topic:
        raise cx.err(rules, j, "mqtt_bridge in rule needs `topic` (an upstream topic filter)")
    if o.subject:
        _check_template(cx, r, "subject", o.subject, o.topic, "/", ("+", "#"))
        literal = expand_tail(o.subject, o.topic, ".", ">", "/", "#")
        if not placeholders(literal) and not is_valid_literal_subject(literal):
            raise cx.err(r, "subject", f"subject {o.subject!r} is not a subject to publish to")
    return o
