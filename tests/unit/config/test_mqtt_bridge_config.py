"""`edged { mqtt_bridge [...] }`: what loads, and the clear error (file:line) for a bad URL, an unknown key,
a rule without a source, a template naming a wildcard its source does not have."""

from __future__ import annotations

import pytest

from edged.settings.conf import ConfigError
from edged.settings.config import options_from_text


def conf(bridge: str) -> str:
    return "jetstream: true\nedged {\n  mqtt_bridge [\n    {\n" + bridge + "\n    }\n  ]\n}\n"


GOOD = """      name: cloud
      urls: ["mqtts://broker.example:8883", "mqtt://10.0.0.2"]
      client_id: edge-7, username: u, password: p
      tls { ca_file: "/etc/ca.pem", cert_file: "/etc/c.pem", key_file: "/etc/k.pem" }
      protocol: "5", keepalive: "20s", clean_session: false, max_inflight: 50, reconnect_max: "10s"
      out: [
        { subject: "telemetry.*.temp", topic: "site/{{wildcard(1)}}/temp", qos: 0 }
        { stream: TELE, filter_subject: "tele.>", topic: "up/#", qos: 2, deliver: new }
      ]
      in: [
        { topic: "cmd/+/set", subject: "cmd.$1", qos: 1 }
        { topic: "cfg/#", subject: "cfg.>", stream: CFG }
      ]"""


def test_a_full_bridge_loads() -> None:
    o = options_from_text(conf(GOOD), "x.conf")
    (b,) = o.mqtt_bridges
    assert (b.name, b.urls, b.client_id, b.protocol, b.keepalive, b.max_inflight, b.reconnect_max) == (
        "cloud", ["mqtts://broker.example:8883", "mqtt://10.0.0.2"], "edge-7", 5, 20.0, 50, 10.0)
    assert b.tls is not None and b.tls.ca_file == "/etc/ca.pem" and b.username == "u"
    assert [(r.subject, r.stream, r.topic, r.qos) for r in b.out] == [
        ("telemetry.*.temp", "", "site/{{wildcard(1)}}/temp", 0), ("", "TELE", "up/#", 2)]
    assert b.out[1].durable == "mqtt_bridge_cloud_1" and b.out[1].deliver == "new"
    assert [(r.topic, r.subject, r.stream, r.qos) for r in b.in_] == [
        ("cmd/+/set", "cmd.$1", "", 1), ("cfg/#", "cfg.>", "CFG", 1)]


def test_no_bridge_no_service() -> None:
    assert options_from_text("edged { tags: [a] }").mqtt_bridges == []


@pytest.mark.parametrize(("bridge", "message"), [
    ('url: "http://b:1883", out: [{subject: a}]', "x.conf:5:7: bad upstream url 'http://b:1883': the scheme must be mqtt:// or mqtts://"),
    ('url: "mqtt://:1883", out: [{subject: a}]', "x.conf:5:7: bad upstream url 'mqtt://:1883': no host"),
    ('url: "mqtt://b:99999", out: [{subject: a}]', "x.conf:5:7: bad upstream url 'mqtt://b:99999': Port out of range 0-65535"),
    ('url: "mqtt://b/x", out: [{subject: a}]', "only mqtt[s]://host:port is understood"),
    ('out: [{subject: a}]', "x.conf:4:5: mqtt_bridge needs `url` or `urls`"),
    ('url: "mqtt://b"', "mqtt_bridge has no `out` or `in` rule"),
    ('url: "mqtt://b", out: [{subject: a, stream: S}]', "give either `subject` or `stream`"),
    ('url: "mqtt://b", out: [{topic: a}]', "give either `subject` or `stream`"),
    ('url: "mqtt://b", out: [{subject: "a.*", topic: "x/$2"}]', "wildcard 2 is not in 'a.*' (it has 1)"),
    ('url: "mqtt://b", out: [{subject: "a", topic: "x/+"}]', "a topic to publish to has no wildcards"),
    ('url: "mqtt://b", out: [{subject: "a..b"}]', "subject 'a..b' is not a valid subject"),
    ('url: "mqtt://b", out: [{subject: a, qos: 3}]', "qos: must be 0, 1 or 2, got 3"),
    ('url: "mqtt://b", out: [{stream: "S.x"}]', "stream 'S.x' is not a valid stream name"),
    ('url: "mqtt://b", in: [{topic: "a/#/b"}]', "topic 'a/#/b' is not a valid MQTT topic filter"),
    ('url: "mqtt://b", in: [{topic: "a/+", subject: "x.$3"}]', "wildcard 3 is not in 'a/+'"),
    ('url: "mqtt://b", in: [{topic: "a/b", subject: "x.*"}]', "subject 'x.*' is not a subject to publish to"),
    ('url: "mqtt://b", protocol: "4.0", out: [{subject: a}]', 'protocol: must be "3.1.1" or "5"'),
    ('url: "mqtt://b", password: p, out: [{subject: a}]', "a password needs a username"),
])
def test_bad_bridge_is_a_clear_error(bridge: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        options_from_text(conf("      " + bridge), "x.conf")
    assert message in str(e.value)


@pytest.mark.parametrize(("bridge", "line"), [
    ('url: "mqtt://b", out: [{subject: a}], keepalvie: "5s"', 'x.conf:5:45: unknown field "keepalvie"'),
    ('url: "mqtt://b", out: [{subject: a, topik: x}]', 'x.conf:5:43: unknown field "topik"'),
    ('url: "mqtt://b", in: [{topic: a, subjet: x}]', 'x.conf:5:40: unknown field "subjet"'),
    ('url: "mqtt://b", out: [{subject: a}], tls { ca: x }', 'x.conf:5:51: error parsing tls config, unknown field "ca"'),
])
def test_unknown_key_names_its_place(bridge: str, line: str) -> None:
    with pytest.raises(ConfigError) as e:
        options_from_text(conf("      " + bridge), "x.conf")
    assert line in [str(one) for one in e.value.errors]


def test_two_bridges_with_one_name() -> None:
    text = ('edged { mqtt_bridge [ { name: a, url: "mqtt://b", out: [{subject: x}] },'
            ' { name: a, url: "mqtt://c", out: [{subject: y}] } ] }')
    with pytest.raises(ConfigError, match="two bridges are named 'a'"):
        options_from_text(text, "x.conf")
