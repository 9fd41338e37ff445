"""An unknown key is an error, as in nats-server, at every block level nats-server checks; keys it
knows load, even in blocks edged ignores. Pure parsing: the cases are shared with the differential
test against `nats-server -t` (tests/interop/cli/test_config_check_diff.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edged.settings.conf import ConfigError
from edged.settings.config import load_options, options_from_text
from tests.support.config_cases import KNOWN_KEYS, UNKNOWN_KEYS


@pytest.mark.parametrize(("text", "line"), UNKNOWN_KEYS, ids=[c[1].split(": ", 1)[1] for c in UNKNOWN_KEYS])
def test_unknown_key_is_an_error_naming_its_place(text: str, line: str) -> None:
    with pytest.raises(ConfigError) as e:
        options_from_text(text, "x.conf")
    assert line in [str(one) for one in e.value.errors]


def test_known_keys_of_every_block_load() -> None:
    o = options_from_text(KNOWN_KEYS, "x.conf")
    assert o.server_name == "S1" and o.jetstream.store_dir == "./js"
    assert [a.name for a in o.accounts] == ["A", "B"]
    ignored = {w.key for w in o.warnings}
    assert {"cluster", "gateway", "limits", "proxies"} <= ignored
    assert "websocket" not in ignored and "mqtt" not in ignored
    w = o.websocket
    assert w is not None and w.no_tls and w.compression and w.handshake_timeout == 2
    assert (w.auth_timeout, w.headers) == (2, {"X-Edge": "yes"})
    assert o.mqtt is not None and (o.mqtt.js_domain, o.mqtt.username, o.mqtt.max_ack_pending) == ("d", "m", 100)


def test_every_unknown_key_of_a_file_is_reported() -> None:
    text = "htpp_port: 1\njetstream {\n  store_dri: /x\n  sync: \"1s\", enabld: true\n}\nprot: 4222\n"
    with pytest.raises(ConfigError) as e:
        options_from_text(text, "x.conf")
    assert [str(one) for one in e.value.errors] == [
        'x.conf:1:1: unknown field "htpp_port"', 'x.conf:3:3: unknown field "store_dri"',
        'x.conf:4:15: unknown field "enabld"', 'x.conf:6:1: unknown field "prot"']


def test_unknown_keys_come_with_a_later_error_of_another_kind() -> None:
    with pytest.raises(ConfigError) as e:
        options_from_text("foo: 1\nport: \"x\"\n", "x.conf")
    assert [str(one) for one in e.value.errors] == ['x.conf:1:1: unknown field "foo"',
                                                    "x.conf:2:1: port: expected an integer, got 'x'"]


def test_a_typo_in_store_dir_does_not_move_the_store(tmp_path: Path) -> None:
    conf = tmp_path / "js.conf"
    conf.write_text(f"jetstream {{ store_dri: {str(tmp_path / 'data')!r} }}\n")
    with pytest.raises(ConfigError, match=r'js.conf:1:13: unknown field "store_dri"'):
        load_options(str(conf))


def test_unknown_keys_in_included_files_name_that_file(tmp_path: Path) -> None:
    (tmp_path / "js.conf").write_text("jetstream {\n  max_mem: 1G\n  max_fiel: 2G\n}\n")
    (tmp_path / "main.conf").write_text("port: 4333\ninclude js.conf\n")
    with pytest.raises(ConfigError, match=rf'{tmp_path / "js.conf"}:3:3: unknown field "max_fiel"'):
        load_options(str(tmp_path / "main.conf"))


def test_variables_are_not_unknown_keys_in_any_block() -> None:
    o = options_from_text("LIM = 5\nmqtt { P = 1883, port: $P }\ncluster { N = C, name: $N }\n"
                          "accounts { A { limits { M = 3, max_conn: $M } } }\nmax_subs: $LIM\n")
    assert o.max_subscriptions == 5 and o.mqtt is not None and o.mqtt.port == 1883


@pytest.mark.parametrize(("text", "where"), [
    ("port: 99999", "x.conf:1:1: error parsing port: address 99999"),
    ("port: -2", "x.conf:1:1: error parsing port: address -2"),
    ("listen: '127.0.0.1:65536'", "x.conf:1:1: error parsing listen: address 65536"),
    ("http_port: 70000", "x.conf:1:1: error parsing http_port: address 70000"),
    ("http: 'localhost:70000'", "x.conf:1:1: error parsing http: address 70000"),
    ("mqtt { port: 100000 }", "x.conf:1:8: error parsing port: address 100000"),
    ("websocket { listen: '0.0.0.0:99999' }", "x.conf:1:13: error parsing listen: address 99999"),
])
def test_ports_out_of_range_are_refused(text: str, where: str) -> None:
    with pytest.raises(ConfigError) as e:
        options_from_text(text, "x.conf")
    assert str(e.value).startswith(where) and "invalid port" in str(e.value)


@pytest.mark.parametrize("port", [-1, 0, 1, 4222, 65535])
def test_ports_in_range_load(port: int) -> None:
    o = options_from_text(f"port: {port}\nhttp_port: {port}\n")
    assert (o.port, o.http_port) == (port, port)
