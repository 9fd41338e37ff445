"""The leafnode accept side, pure parts: `leafnodes { ... }` settings as nats-server reads them, and the
CONNECT a leaf sends parsed by the shared leafnode codec."""

from __future__ import annotations

import pytest

from edged.leafnode.accept import _version_at_least
from edged.leafnode.codec import OP_CONNECT, OP_ERROR, OP_LSUB, LeafParser
from edged.settings.conf import ConfigError
from edged.settings.config import options_from_text
from edged.settings.options import LeafUser


def test_listen_advertise_and_authorization_users() -> None:
    o = options_from_text("""
leafnodes {
  listen: "127.0.0.1:7422"
  advertise: "edge.example:17422"
  no_advertise: true
  min_version: "2.10.0"
  authorization { users: [ {user: a, password: b, account: APP}, {user: c, pass: d} ], timeout: 3 }
}
accounts { APP {} }
""")
    ln = o.leafnodes
    assert ln is not None
    assert (ln.host, ln.port, ln.advertise, ln.no_advertise, ln.min_version) == (
        "127.0.0.1", 7422, "edge.example:17422", True, "2.10.0")
    assert ln.users == [LeafUser("a", "b", "APP"), LeafUser("c", "d", "")]
    assert ln.effective_auth_timeout() == 3.0
    assert o.warnings == []


def test_single_user_bound_to_an_account_and_default_timeout() -> None:
    o = options_from_text("leafnodes { port: 7422, authorization { user: leaf, password: s3cret, account: APP } }"
                          "\naccounts { APP {} }")
    ln = o.leafnodes
    assert ln is not None
    assert (ln.port, ln.username, ln.password, ln.account) == (7422, "leaf", "s3cret", "APP")
    assert ln.effective_auth_timeout() == 2.0


@pytest.mark.parametrize("text,message", [
    ("leafnodes { port: 70000 }", "port"),
    ("leafnodes { authorization { user: a, password: b, users: [ {user: c, password: d} ] } }",
     "can not have a single user/pass and a users array"),
    ("leafnodes { authorization { bogus: 1 } }", "bogus"),
])
def test_bad_settings_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        options_from_text(text)


def test_compression_still_reported_as_not_supported() -> None:
    o = options_from_text("leafnodes { port: 7422, compression: s2_auto }")
    assert [w.key for w in o.warnings] == ["compression"]


def test_connect_parsed_then_interest() -> None:
    p = LeafParser()
    evs = p.feed(b'CONNECT {"name":"leaf1","headers":true,"remote_account":"APP"}\r\nLS+ foo.>\r\n')
    assert evs == [(OP_CONNECT, {"name": "leaf1", "headers": True, "remote_account": "APP"}),
                   (OP_LSUB, "foo.>", None, 1)]


def test_connect_that_is_not_json_is_a_protocol_error() -> None:
    assert LeafParser().feed(b"CONNECT {nope\r\n")[-1][0] == OP_ERROR


@pytest.mark.parametrize("version,minimum,ok", [
    ("2.10.0", "2.10.0", True), ("2.9.21", "2.10.0", False), ("2.15.1", "2.10.0", True), ("", "2.8.0", False),
    ("2.11.0-beta.1", "2.11.0", True),
])
def test_min_version(version: str, minimum: str, ok: bool) -> None:
    assert _version_at_least(version or "0.0.0", minimum) is ok


def test_hub_out_deny() -> None:
    from edged.jetstream.wire.domain import LOCAL_ONLY_PREFIXES, hub_out_deny

    assert hub_out_deny("hub", "leaf") == LOCAL_ONLY_PREFIXES + (b"$JS.hub.API.",)
    assert hub_out_deny("hub", "") == LOCAL_ONLY_PREFIXES + (b"$JS.hub.API.",)
    assert hub_out_deny("hub", "hub") == LOCAL_ONLY_PREFIXES  # the leaf extends the hub's domain
    assert hub_out_deny("", "leaf") == LOCAL_ONLY_PREFIXES


def test_tls_settings_not_supported_on_the_leafnode_port_are_reported() -> None:
    o = options_from_text('leafnodes { port: 7422, tls { cert_file: "c", key_file: "k", verify_and_map: true, '
                          'handshake_first: "300ms" } }')
    assert [w.key for w in o.warnings] == ["tls", "tls"]
    assert "verify_and_map" in o.warnings[0].message and "fallback" in o.warnings[1].message
