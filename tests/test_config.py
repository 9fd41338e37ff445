"""Config files → Options: the seed configs, nats-server's key forms, clear errors with file:line:col."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edged.conf import ConfigError
from edged.config import load_options, options_from_text, parse_duration
from tests.servers import nats_server_path

SEEDS = Path(__file__).parent / "seed_configs"


def test_seed_leaf_conf() -> None:
    o = load_options(str(SEEDS / "leaf.conf"))
    assert (o.port, o.server_name) == (4111, "leaf-server")
    assert o.jetstream.enabled and o.jetstream.store_dir == "./store_leaf" and o.jetstream.domain == "leaf"
    assert o.system_account == "SYS"
    accs = {a.name: a for a in o.accounts}
    assert set(accs) == {"SYS", "ACC"}
    assert [u.username for u in accs["SYS"].users] == ["admin"] and accs["SYS"].jetstream is None
    assert accs["ACC"].jetstream is not None and accs["ACC"].users[0].password == "acc"
    assert o.leafnodes is not None
    assert [(r.urls, r.account) for r in o.leafnodes.remotes] == [
        (["nats://admin:admin@0.0.0.0:7422"], "SYS"), (["nats://acc:acc@0.0.0.0:7422"], "ACC")]
    assert o.warnings == []


def test_seed_hub_conf_warns_about_the_accept_side() -> None:
    o = load_options(str(SEEDS / "hub.conf"))
    assert o.jetstream.domain == "hub" and o.port == 4222
    assert [w.key for w in o.warnings] == ["port"]
    assert "accept side" in o.warnings[0].message
    assert o.warnings[0].where.endswith("hub.conf:8:5")


@pytest.mark.parametrize("name", ["leaf.conf", "hub.conf", "accounts.conf"])
def test_seed_configs_are_valid_for_nats_server_too(name: str) -> None:
    r = subprocess.run([nats_server_path(), "-t", "-c", name], cwd=SEEDS, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr


def test_key_forms_and_units() -> None:
    o = options_from_text("""
listen: 127.0.0.1:4333
http: "0.0.0.0:8333"
max_payload: 2MB
ping_interval: "30s"
write_deadline: 2
lame_duck_duration: "2m"
authorization {
  users = [
    {user: a, password: b, permissions: {publish: "x.>", subscribe: {allow: ["y"], deny: "z"},
     allow_responses: {max: 3, expires: "5s"}}}
  ]
  timeout: 1.5
}
jetstream { store_dir: /tmp/js, max_mem: 1G, max_file: 10G, sync_interval: always }
""")
    assert (o.host, o.port, o.http_host, o.http_port) == ("127.0.0.1", 4333, "0.0.0.0", 8333)
    assert o.max_payload == 2 * 1024 * 1024
    assert (o.ping_interval, o.write_deadline, o.lame_duck_duration, o.auth_timeout) == (30, 2, 120, 1.5)
    perms = o.users[0].permissions
    assert perms is not None and perms.publish is not None and perms.subscribe is not None
    assert perms.publish.allow == ["x.>"] and perms.subscribe.allow == ["y"] and perms.subscribe.deny == ["z"]
    assert perms.allow_responses is not None and perms.allow_responses.max_msgs == 3
    assert perms.allow_responses.expires == 5
    assert o.jetstream.sync_interval == "always" and o.jetstream.max_file_store == 10 * 1000**3


def test_unsupported_settings_are_reported() -> None:
    o = options_from_text("cluster { port: 6222 }\nmqtt { port: 1883 }\nfoo: 1\n", "x.conf")
    assert [(w.key, w.where) for w in o.warnings] == [("cluster", "x.conf:1:1"), ("mqtt", "x.conf:2:1"),
                                                        ("foo", "x.conf:3:1")]


@pytest.mark.parametrize("text,message", [
    ("port: abc", "x.conf:1:1: port: expected an integer"),
    ("ping_interval: \"2 minutes\"", 'x.conf:1:1: ping_interval: time: invalid duration "2 minutes"'),
    ("authorization { users: [ {password: x} ] }", "x.conf:1:26: user entry needs `user` or `nkey`"),
    ("max_pending: 100\n", "max_payload (1048576) cannot be higher than max_pending (100)"),
    ("lame_duck_duration: \"5s\"", "x.conf:1:1: invalid lame_duck_duration of 5s, minimum is 30 seconds"),
    ("no_auth_user: ghost", 'no_auth_user: "ghost" not present'),
    ("leafnodes { remotes: [ { account: X } ] }", "needs `url` or `urls`"),
    ("port: 1\n  foo {", "x.conf:2"),
])
def test_errors_name_the_place(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        options_from_text(text, "x.conf")
    assert message in str(e.value)


@pytest.mark.parametrize("text,secs", [("1s", 1), ("1h30m", 5400), ("500ms", 0.5), ("1.5m", 90), ("0", 0),
                                       ("2h", 7200), ("100us", 1e-4)])
def test_go_durations(text: str, secs: float) -> None:
    assert parse_duration(text) == pytest.approx(secs)


@settings(max_examples=200)
@given(st.text(max_size=120))
def test_any_text_gives_options_or_a_config_error(text: str) -> None:
    try:
        options_from_text(text, "fuzz.conf")
    except ConfigError:
        pass
