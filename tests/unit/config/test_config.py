"""Config files → Options: the seed configs, nats-server's key forms and aliases, clear errors with file:line:col.

nats-server is the reference: the seed configs must be valid for `nats-server -t` too, and a config
full of settings must give the values nats-server itself reports in /varz.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import nkeys
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edged.security import jwt as jwtmod
from edged.settings.conf import ConfigError
from edged.settings.config import _TOP, load_options, options_from_text, parse_duration, set_flag_overrides
from edged.settings.options import Options
from tests.support.servers import ServerProcess, free_port, nats_server_path, wait_port

SEEDS = Path(__file__).parents[2] / "seed_configs"
# nats-server rejects mappings_account.conf (see seed_configs/README.md); edged loads it
NATS_SERVER_VALID = sorted(p.name for p in SEEDS.glob("*.conf") if p.name != "mappings_account.conf")


def nats_server_check(path: Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([nats_server_path(), "-t", "-c", str(path)], cwd=cwd or path.parent,
                          capture_output=True, text=True, timeout=30)


def warning_keys(o: Options) -> list[str]:
    return [w.key for w in o.warnings]


# ------------------------------------------------------------------------------------------ seed configs


def test_seed_leaf_conf() -> None:
    o = load_options(str(SEEDS / "leaf.conf"))
    assert (o.port, o.server_name) == (4111, "leaf-server")
    assert o.jetstream.enabled and o.jetstream.store_dir == "./store_leaf" and o.jetstream.domain == "leaf"
    assert o.system_account == "SYS"
    accs = {a.name: a for a in o.accounts}
    assert set(accs) == {"SYS", "ACC"}
    assert [u.username for u in accs["SYS"].users] == ["admin"] and accs["SYS"].jetstream is None
    assert accs["ACC"].jetstream is not None and accs["ACC"].users[0].password == "acc"
    assert accs["ACC"].users[0].account == "ACC"
    assert o.leafnodes is not None
    assert [(r.urls, r.account) for r in o.leafnodes.remotes] == [
        (["nats://admin:admin@0.0.0.0:7422"], "SYS"), (["nats://acc:acc@0.0.0.0:7422"], "ACC")]
    assert o.warnings == []
    assert o.config_file == str((SEEDS / "leaf.conf").resolve())


def test_seed_hub_conf_opens_the_leafnode_port() -> None:
    o = load_options(str(SEEDS / "hub.conf"))
    assert o.jetstream.domain == "hub" and o.port == 4222 and o.jetstream.store_dir == "./store_server"
    assert {a.name for a in o.accounts} == {"SYS", "ACC"}  # from the include
    assert o.leafnodes is not None and o.leafnodes.port == 7422 and not o.leafnodes.remotes
    assert o.warnings == []


def test_seed_cross_account_exports_and_imports() -> None:
    o = load_options(str(SEEDS / "accounts_cross_domain.conf"))
    accs = {a.name: a for a in o.accounts}
    assert set(accs) == {"SYS", "ACC", "IMPORT_MIRROR", "IMPORT_CLIENT"}
    acc = accs["ACC"]
    assert [(e.stream, e.service, e.response_type) for e in acc.exports] == [
        (None, "$JS.hub.API.CONSUMER.CREATE.*", "stream"),
        ("deliver.acc.hub.>", None, "Singleton"),
        (None, "$JS.hub.API.CONSUMER.MSG.NEXT.aggregate-test-leaf.dur", "stream"),
        (None, "$JS.ACK.aggregate-test-leaf.dur.>", "Singleton"),
        (None, "$JS.FC.aggregate-test-leaf.dur.>", "Singleton"),
    ]
    mirror = accs["IMPORT_MIRROR"]
    assert [(i.account, i.subject, i.to) for i in mirror.service_imports] == [
        ("ACC", "$JS.hub.API.CONSUMER.CREATE.*", "JS.acc@hub.API.CONSUMER.CREATE.*"),
        ("ACC", "$JS.FC.aggregate-test-leaf.dur.>", ""),
    ]
    assert [(i.account, i.subject) for i in mirror.stream_imports] == [("ACC", "deliver.acc.hub.import_mirror.>")]
    assert len(accs["IMPORT_CLIENT"].service_imports) == 2
    assert all(a.jetstream is not None for n, a in accs.items() if n != "SYS")
    # imports/exports are applied (edged/routing/imports.py): nothing to warn about
    assert o.warnings == []


def test_seed_auth_snippets() -> None:
    o = load_options(str(SEEDS / "nkey_user.conf"))
    assert [n.nkey for n in o.nkeys] == ["UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"] and not o.users
    o = load_options(str(SEEDS / "bcrypt_user.conf"))
    assert o.username == "derek" and o.password.startswith("$2a$11$3kIDaCxw") and len(o.password) == 60


def test_seed_mappings_and_tags_load_with_warnings() -> None:
    o = load_options(str(SEEDS / "mappings_hub.conf"))
    assert o.server_name == "hub" and warning_keys(o) == ["cluster"]
    assert [(m.src, [(d.subject, d.weight) for d in m.dests]) for m in o.mappings] == [
        ("orders.*", [("orders.central.{{wildcard(1)}}", 100)])]
    o = load_options(str(SEEDS / "mappings_account.conf"))
    assert [a.name for a in o.accounts] == ["accountA"] and warning_keys(o) == ["cluster"]
    assert [m.src for m in o.accounts[0].mappings] == ["orders.flush", "orders.*"]
    o = load_options(str(SEEDS / "server_tags.conf"))
    assert o.jetstream.enabled and o.jetstream.unique_tag == "az" and warning_keys(o) == ["server_tags"]


@pytest.mark.parametrize("name", NATS_SERVER_VALID)
def test_seed_configs_are_valid_for_nats_server_too(name: str) -> None:
    r = nats_server_check(SEEDS / name)
    assert r.returncode == 0, r.stderr


# ------------------------------------------------------------------------------- nats-server as reference


VARZ_CONF = """
NAME: varz-test
server_name: $NAME
listen: 127.0.0.1:{port}
http: 127.0.0.1:{http}
max_payload: 2MB
max_pending: 32MB
max_connections: 1k
max_subscriptions: 10
max_control_line: 2KB
ping_interval: "1m30s"
ping_max: 3
write_deadline: "500ms"
lame_duck_duration: "45s"
authorization {{ user: a, password: b, timeout: 1.5 }}
jetstream {{ store_dir: "{store}", max_mem: 10M, max_file: "1G", domain: d1, sync_interval: "30s" }}
"""


def test_values_match_what_nats_server_reports_in_varz(tmp_path: Path) -> None:
    port, http = free_port(), free_port()
    conf = tmp_path / "varz.conf"
    conf.write_text(VARZ_CONF.format(port=port, http=http, store=tmp_path / "js"))
    o = load_options(str(conf))
    assert o.warnings == []
    p = subprocess.Popen([nats_server_path(), "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(http, p)
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/varz", timeout=5) as r:
            v: dict[str, Any] = json.load(r)
    finally:
        p.terminate()
        p.wait(10)
    ns = 1e9
    assert (o.server_name, o.host, o.port, o.http_host, o.http_port) == (
        v["server_name"], v["host"], v["port"], v["http_host"], v["http_port"])
    assert (o.max_payload, o.max_pending, o.max_connections, o.max_subscriptions, o.max_control_line) == (
        v["max_payload"], v["max_pending"], v["max_connections"], v["max_subscriptions"], v["max_control_line"])
    assert (o.ping_interval * ns, o.ping_max, o.write_deadline * ns, o.auth_timeout) == (
        v["ping_interval"], v["ping_max"], v["write_deadline"], v["auth_timeout"])
    js = v["jetstream"]["config"]
    assert (o.jetstream.max_memory_store, o.jetstream.max_file_store, o.jetstream.domain) == (
        js["max_memory"], js["max_storage"], js["domain"])
    assert o.jetstream.sync_interval == js["sync_interval"] / ns
    assert os.path.join(o.jetstream.store_dir, "jetstream") == js["store_dir"]
    assert o.lame_duck_duration == 45


@pytest.mark.parametrize("kind", ["nats-server", "edged"])
def test_relative_store_dir_is_relative_to_the_working_directory(kind: str, tmp_path: Path) -> None:
    """nats-server resolves store_dir against its working directory, not the config's: edged does the same."""
    (tmp_path / "etc").mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "etc" / "js.conf").write_text('jetstream { store_dir: "./var" }\n')
    with ServerProcess(kind, ["-c", str(tmp_path / "etc" / "js.conf")], workdir=str(tmp_path / "run")):
        assert (tmp_path / "run" / "var" / "jetstream").is_dir()
    assert not (tmp_path / "etc" / "var").exists()


# ------------------------------------------------------------------------------------ keys and aliases


def test_key_forms_and_units() -> None:
    o = options_from_text("""
listen: 127.0.0.1:4333
http: "0.0.0.0:8333"
max_payload: 2MB
ping_interval: "30s"
write_deadline: 2
lame_duck_duration: "2m"
lame_duck_grace_period: "5s"
authorization {
  users = [
    {user: a, password: b, permissions: {publish: "x.>", subscribe: {allow: ["y"], deny: "z"},
     allow_responses: {max: 3, expires: "5s"}}}
    {user: c, password: d, permissions: {pub: {deny: ">"}, allow_responses: true}, allowed_connection_types: STANDARD}
  ]
  timeout: 1.5
}
jetstream { store_dir: /tmp/js, max_mem: 1G, max_file: 10G, sync_interval: always }
""")
    assert (o.host, o.port, o.http_host, o.http_port) == ("127.0.0.1", 4333, "0.0.0.0", 8333)
    assert o.max_payload == 2 * 1024 * 1024
    assert (o.ping_interval, o.write_deadline, o.lame_duck_duration, o.lame_duck_grace_period) == (30, 2, 120, 5)
    assert o.auth_timeout == 1.5
    perms = o.users[0].permissions
    assert perms is not None and perms.publish is not None and perms.subscribe is not None
    assert perms.publish.allow == ["x.>"] and perms.subscribe.allow == ["y"] and perms.subscribe.deny == ["z"]
    assert perms.allow_responses is not None and perms.allow_responses.max_msgs == 3
    assert perms.allow_responses.expires == 5
    p2 = o.users[1].permissions
    assert p2 is not None and p2.publish is not None and p2.publish.deny == [">"] and p2.subscribe is None
    assert p2.allow_responses is not None and (p2.allow_responses.max_msgs, p2.allow_responses.expires) == (1, 0)
    assert o.users[1].allowed_connection_types == ["STANDARD"]
    assert o.jetstream.sync_interval == "always" and o.jetstream.max_file_store == 10 * 1000**3
    # an integer duration is nats-server's older form: accepted, with nats-server's warning
    assert [(w.key, w.message) for w in o.warnings] == [("write_deadline",
                                                         "write_deadline should be converted to a duration")]


def test_unquoted_minutes_mean_minutes_with_a_warning() -> None:
    """`2m` lexes as the size 2000000 (nats-server then waits 23 days); edged reads 2 minutes and says so."""
    o = options_from_text("ping_interval: 2m\n", "x.conf")
    assert o.ping_interval == 120
    assert warning_keys(o) == ["ping_interval"] and "2000000 seconds" in o.warnings[0].message


@pytest.mark.parametrize("alias,canonical", [
    ("net: 10.0.0.1", "host: 10.0.0.1"),
    ("listen: 4333", "port: 4333"),
    ("listen: '[::1]:4333'", "host: '::1'\nport: 4333"),
    ("monitor_port: 8333", "http_port: 8333"),
    ("http: 8333", "http_port: 8333"),
    ("max_conn: 5", "max_connections: 5"),
    ("max_subs: 5", "max_subscriptions: 5"),
    ("pidfile: /run/x.pid", "pid_file: /run/x.pid"),
    ("logfile: /var/log/x", "log_file: /var/log/x"),
    ("system: SYS\naccounts: [SYS]", "system_account: SYS\naccounts: [SYS]"),
    ("no_sys_acc: true", "no_system_account: true"),
    ("no_sublist_cache: true", "disable_sublist_cache: true"),
    ("trace_verbose: true", "trace: true"),
    ("store_dir: /x\njetstream: enabled", "jetstream { store_dir: /x }"),
    ("jetstream { storedir: /x, max_mem_store: 1K, sync: \"1s\", enable: false }",
     "jetstream { store_dir: /x, max_memory_store: 1K, sync_interval: \"1s\", enabled: false }"),
    ("authorization { username: a, pass: b }", "authorization { user: a, password: b }"),
    ("authorization { users: [ {user: a, authorization: {sub: x}, clients: [MQTT]} ] }",
     "authorization { users: [ {user: a, permissions: {subscribe: x}, allowed_connection_types: [MQTT]} ] }"),
    ("accounts { A { jetstream { mem: 1M, store: 2M, streams: 3, consumers: 4, max_bytes: true } } }",
     "accounts { A { jetstream { max_mem: 1M, max_file: 2M, max_streams: 3, max_consumers: 4, "
     "max_bytes_required: true } } }"),
    ("leaf { remotes: [ {url: 'nats://h:7422', local: A, dont_randomize: true, ws_compress: true, "
     "ignore_discovered_servers: true, deny_import: x} ], reconnect_interval: \"3s\" }\naccounts: [A]",
     "leafnodes { remotes: [ {urls: ['nats://h:7422'], account: A, no_randomize: true, ws_compression: true, "
     "ignore_discovered_urls: true, deny_imports: [x]} ], reconnect: \"3s\" }\naccounts: [A]"),
    ("tls { cert_file: c, key_file: k, immediate: true, minimum_version: '1.3' }",
     "tls { cert_file: c, key_file: k, handshake_first: true, min_version: '1.3' }"),
])
def test_aliases_mean_the_same(alias: str, canonical: str) -> None:
    a, c = options_from_text(alias), options_from_text(canonical)
    a.warnings = c.warnings = []
    assert a == c
    assert a != Options()


def test_durations_sizes_and_handshake_first_forms() -> None:
    o = options_from_text('jetstream { max_file: "2G", max_mem: "512M" }\naccounts { A { jetstream { max_mem: "1K" }}}')
    assert (o.jetstream.max_file_store, o.jetstream.max_memory_store) == (2 << 30, 512 << 20)
    assert o.accounts[0].jetstream is not None and o.accounts[0].jetstream.max_memory == 1024
    for value, first, fallback in [("true", True, 0.0), ("false", False, 0.0), ('"auto"', True, 0.05),
                                   ('"300ms"', True, 0.3), ("on", True, 0.0)]:
        t = options_from_text(f"tls {{ cert_file: c, key_file: k, handshake_first: {value}, timeout: \"3s\" }}").tls
        assert t is not None and (t.handshake_first, t.handshake_first_fallback, t.timeout) == (first, fallback, 3)


def test_used_variables_are_not_unknown_keys() -> None:
    o = options_from_text("PORT = 4333\nport: $PORT\naccounts { PW: secret, A { users: [ {user: a, password: $PW} ] } }")
    assert o.port == 4333 and o.accounts[0].users[0].password == "secret"
    assert [a.name for a in o.accounts] == ["A"] and o.warnings == []


def test_unsupported_settings_are_reported() -> None:
    o = options_from_text("cluster { port: 6222 }\nmqtt { port: 1883, js_domain: d }\nprof_port: 1\nwebsocket { "
                          "port: 8080, no_tls: true }\njetstream { strict: false }\nsyslog: true\n", "x.conf")
    assert [(w.key, w.where) for w in o.warnings] == [("cluster", "x.conf:1:1"), ("prof_port", "x.conf:3:1"),
                                                        ("strict", "x.conf:5:13"), ("syslog", "x.conf:6:1")]
    assert o.mqtt is not None and o.mqtt.port == 1883 and o.mqtt.js_domain == "d" and o.mqtt.extra == {}
    assert o.websocket is not None and o.websocket.port == 8080 and o.websocket.no_tls
    # strict is what edged does anyway (nats-server's default): only turning it off is reported
    assert options_from_text("jetstream { strict: true }\n").warnings == []


def test_leafnode_remote_auth_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seed = jwtmod.new_keypair(nkeys.PREFIX_BYTE_USER).seed.decode()
    o = options_from_text(f"leafnodes {{ remotes: [ {{ url: 'tls://h:7422', nkey: {seed}, "
                          "tls { ca_file: ca.pem }, dial_timeout: \"2s\" }, "
                          "{ urls: [ 'ws://h:80', 'wss://h:443' ], first_info_timeout: \"3s\" } ], dial_timeout: \"5s\" }")
    assert o.leafnodes is not None
    r1, r2 = o.leafnodes.remotes
    assert r1.seed == seed and r1.tls is not None and r1.tls.ca_file == "ca.pem" and r1.dial_timeout == 2
    assert r2.urls == ["ws://h:80", "wss://h:443"] and r2.first_info_timeout == 3 and r2.dial_timeout == 5
    # credentials expand ~ and $VAR as nats-server's expandPath does; otherwise the path stays as written
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("EDGED_T_DIR", "creds")
    o = options_from_text("leafnodes { remotes: [ {url: 'nats://h:7422', credentials: '~/$EDGED_T_DIR/l.creds'},"
                          "{url: 'nats://h:7422', creds: 'rel/l.creds'} ] }")
    assert o.leafnodes is not None
    assert [r.credentials for r in o.leafnodes.remotes] == [str(tmp_path / "creds" / "l.creds"), "rel/l.creds"]


def test_operator_jwt_inline_and_from_a_file(tmp_path: Path) -> None:
    op = jwtmod.new_keypair(nkeys.PREFIX_BYTE_OPERATOR)
    token = jwtmod.encode({"sub": op.public_key.decode(), "name": "OP", "nats": {"type": "operator", "version": 2}},
                          op)
    jwt_file = tmp_path / "op.jwt"
    jwt_file.write_text(f"-----BEGIN NATS OPERATOR JWT-----\n{token}\n------END NATS OPERATOR JWT------\n")
    conf = tmp_path / "op.conf"
    conf.write_text(f"operator: {jwt_file}\nresolver: MEMORY\n")
    assert load_options(str(conf)).trusted_operators == [token]
    assert nats_server_check(conf).returncode == 0
    assert options_from_text(f"operators: [{token}]\nresolver: MEMORY").trusted_operators == [token]
    with pytest.raises(ConfigError, match="x.conf:1:1: error parsing operator JWT"):
        options_from_text(f"operator: {tmp_path / 'missing.jwt'}", "x.conf")


def test_flag_overrides_apply_to_every_load(tmp_path: Path) -> None:
    """The CLI's flags survive a reload: load_options puts them on top each time (nats-server's FlagSnapshot)."""
    conf = tmp_path / "f.conf"
    conf.write_text("port: 4333\ndebug: false\n")

    def flags(o: Options) -> None:
        o.port, o.debug = 5444, True

    set_flag_overrides(flags)
    try:
        first = load_options(str(conf))
        conf.write_text("port: 4334\ndebug: false\nserver_name: reloaded\n")
        second = load_options(str(conf))
    finally:
        set_flag_overrides(None)
    assert (first.port, first.debug) == (second.port, second.debug) == (5444, True)
    assert second.server_name == "reloaded"
    assert load_options(str(conf)).port == 4334


# ------------------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize("text,message", [
    ("port: abc", "x.conf:1:1: port: expected an integer"),
    ("ping_interval: \"2 minutes\"", 'x.conf:1:1: error parsing ping_interval: time: invalid duration "2 minutes"'),
    ("authorization { users: [ {password: x} ] }", "x.conf:1:26: User entry requires a user"),
    ("max_pending: 100\n", "max_payload (1048576) cannot be higher than max_pending (100)"),
    ("max_payload: 3GB", "x.conf:1:1: max_payload value is too big"),
    ("lame_duck_duration: \"5s\"", "x.conf:1:1: invalid lame_duck_duration of 5s, minimum is 30 seconds"),
    ("no_auth_user: ghost", 'no_auth_user: "ghost" not present'),
    ("leafnodes { remotes: [ { account: X } ] }", "x.conf:1:24: leafnode remote needs `url` or `urls`"),
    ("leafnodes { remotes: [ { url: 'nats://h:1', account: X } ] }", 'remote leafnode account "X" not defined'),
    ("leafnodes { remotes: [ { url: 'nats://h:1', nkey: SUNOTASEED } ] }", "x.conf:1:45: Remote leafnode nkey is not"),
    ("port: 1\n  foo {", "x.conf:2"),
    ("server_name: 'a b'", "x.conf:1:1: server name can not contain spaces"),
    ("accounts { $G: {} }", 'x.conf:1:12: "$G" is a Reserved Account'),
    ("accounts: [A, A]", "x.conf:1:15: Duplicate Account Entry: A"),
    ("authorization { user: a, password: b }\naccounts { A { users: [ {user: b} ] } }",
     "Can not have a single user/pass and accounts"),
    ("accounts { A { users: [ {user: u} ] }, B { users: [ {user: u} ] } }", "Duplicate user 'u' detected"),
    ("authorization { users: [ {nkey: UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4, password: x} ] }",
     "Nkey users do not take usernames or passwords"),
    ("authorization { users: [ {nkey: ABAD} ] }", "Not a valid public nkey for a user"),
    ("authorization { users: [ {user: a} ], token: t }", "can not have a single user/pass or token and a users array"),
    ("store_dir: /a\njetstream { store_dir: /b }", "x.conf:2:13: Duplicate 'store_dir' configuration"),
    ("jetstream { max_file: \"10X\" }", "x.conf:1:13: max_file: sizes defined as strings must end in K, M, G, T"),
    ("jetstream: maybe", "x.conf:1:1: Expected 'enabled' or 'disabled' for string value"),
    ("jetstream { cipher: aes }", "x.conf:1:13: jetstream cipher: encryption at rest is not supported"),
    ("tls { handshake_first: sometimes }", "x.conf:1:7: field 'handshake_first''s value 'sometimes' is invalid"),
    ("trusted: [XYZ]", "x.conf:1:1: trust key 'XYZ' required to be a valid public operator nkey"),
    ("resolver: URL(http://h/jwt)", "x.conf:1:1: only `resolver: MEMORY`"),
    ("authorization { users: [ {user: a, permissions: {publish: {allow: x, only: y}}} ] }",
     "unknown field 'only' in publish permissions"),
    ("accounts { A { exports: [ {stream: a, service: b} ] } }", "x.conf:1:27: export entry needs exactly one"),
    ("accounts { A { imports: [ {stream: {subject: a}} ] } }", "x.conf:1:28: stream import needs `account`"),
    ("listen: 'a:b:4222'", "x.conf:1:1: could not parse address string"),
])
def test_errors_name_the_place(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        options_from_text(text, "x.conf")
    assert message in str(e.value)


def test_errors_in_included_files_name_that_file(tmp_path: Path) -> None:
    (tmp_path / "auth.conf").write_text("authorization {\n  users: [ {user: a}, {pass: b} ]\n}\n")
    main = tmp_path / "main.conf"
    main.write_text("port: 4333\ninclude auth.conf\n")
    with pytest.raises(ConfigError, match=rf"{tmp_path / 'auth.conf'}:2:23: User entry requires a user"):
        load_options(str(main))


# ---------------------------------------------------------------------------------------------- durations


@pytest.mark.parametrize("text,secs", [("1s", 1), ("1h30m", 5400), ("500ms", 0.5), ("1.5m", 90), ("0", 0),
                                       ("2h", 7200), ("100us", 1e-4), ("1.s", 1), (".5s", 0.5), ("-2s", -2),
                                       ("1h1m1s1ms", 3661.001), ("3µs", 3e-6), ("10ns", 1e-8)])
def test_go_durations(text: str, secs: float) -> None:
    assert parse_duration(text) == pytest.approx(secs)


@pytest.mark.parametrize("text", ["", "1", "s", "1x", "1 s", "1s2", "--1s", "1h-1m", ".s", "1d"])
def test_invalid_go_durations(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@given(st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(["h", "m", "s", "ms", "us", "ns"])),
                min_size=1, max_size=4))
def test_duration_is_the_sum_of_its_parts(parts: list[tuple[int, str]]) -> None:
    unit = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
    text = "".join(f"{n}{u}" for n, u in parts)
    assert parse_duration(text) == pytest.approx(sum(n * unit[u] for n, u in parts))


# ------------------------------------------------------------------------------------------------- fuzzing


@settings(max_examples=200)
@given(st.text(max_size=120))
def test_any_text_gives_options_or_a_config_error(text: str) -> None:
    try:
        options_from_text(text, "fuzz.conf")
    except ConfigError:
        pass


_SCALARS = st.one_of(st.integers(-3, 70_000).map(str), st.sampled_from(
    ["true", "off", '"2s"', "2m", '"x y"', "'*'", "1G", '"10G"', "always", "enabled", "-1", "1.5", "MEMORY",
     "'[::1]:4222'", "'h:1'", "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"]))
_INNER_KEYS = ["user", "password", "users", "nkey", "permissions", "publish", "subscribe", "allow", "deny",
               "allow_responses", "max", "expires", "remotes", "url", "urls", "account", "credentials", "tls",
               "cert_file", "handshake_first", "timeout", "store_dir", "max_mem", "max_file", "domain", "jetstream",
               "exports", "imports", "stream", "service", "to", "port", "sync_interval", "reconnect", "proxy"]


def _value(depth: int) -> st.SearchStrategy[str]:
    if depth == 0:
        return _SCALARS
    inner = _value(depth - 1)
    block = st.lists(st.tuples(st.sampled_from(_INNER_KEYS), inner), max_size=4).map(
        lambda kv: "{ " + ", ".join(f"{k}: {v}" for k, v in kv) + " }")
    array = st.lists(inner, max_size=3).map(lambda vs: "[ " + ", ".join(vs) + " ]")
    return st.one_of(_SCALARS, block, array)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(sorted(_TOP)), _value(3)), min_size=1, max_size=4))
def test_known_keys_with_any_values_give_options_or_a_config_error(entries: list[tuple[str, str]]) -> None:
    """The mapping layer never fails with anything but a ConfigError naming a place, whatever the types."""
    text = "\n".join(f"{k}: {v}" for k, v in entries)
    try:
        options_from_text(text, "fuzz.conf")
    except ConfigError as e:
        assert str(e).startswith("fuzz.conf:"), (text, str(e))
