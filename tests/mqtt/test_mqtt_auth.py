"""MQTT authentication and authorization: users and accounts of the server, the MQTT port's own
authorization {} and no_auth_user, permissions (a denied SUBSCRIBE is a SUBACK failure, a denied
PUBLISH is dropped), accounts isolating MQTT clients, TLS and client certificates; and MQTT connections
in /connz and /varz."""

from __future__ import annotations

import asyncio
import json
import ssl
import urllib.request

import nats
import pytest

from tests.support.aio import run
from tests.support.mqttpeers.clients import Client
from tests.support.servers import ServerProcess, free_port

ACCOUNTS = """
accounts {
  A { jetstream: enabled
      users: [ {user: alice, password: pa, permissions: {publish: ["a.>"], subscribe: ["a.>", "shared.>"]}},
               {user: ann, password: pn} ] }
  B { jetstream: enabled, users: [ {user: bob, password: pb} ] }
}
"""


@pytest.fixture(params=["nats-server", "edged"])
def auth_server(request: pytest.FixtureRequest, mqtt_server) -> ServerProcess:  # type: ignore[no-untyped-def]
    return mqtt_server(request.param, extra=ACCOUNTS)


def test_user_password_and_refusal(auth_server: ServerProcess) -> None:
    port = auth_server.mqtt_port  # type: ignore[attr-defined]
    ok = Client(port, username="alice", password="pa")
    ok.disconnect()
    bad = Client(port, username="alice", password="wrong", connect=False)
    rc = bad.connect(expect_ok=False)
    assert rc.is_failure and rc.getName() == "Not authorized"  # 3.1.1 code 5, as nats-server answers
    bad.c.loop_stop()
    anon = Client(port, connect=False)
    assert anon.connect(expect_ok=False).getName() == "Not authorized"
    anon.c.loop_stop()


def test_permissions(auth_server: ServerProcess) -> None:
    port = auth_server.mqtt_port  # type: ignore[attr-defined]
    alice = Client(port, username="alice", password="pa")
    assert alice.subscribe("b/#", 1) == [0x80]
    assert alice.subscribe("a/#", 1) == [0x80]  # `a/#` is also `a`, which alice may not subscribe to
    assert alice.subscribe("a/+", 1) == [1]
    ann = Client(port, username="ann", password="pn")
    ann.subscribe("#", 0)
    alice.publish("b/x", "denied", 1)  # acknowledged, but dropped
    alice.publish("a/x", "allowed", 1)
    m = ann.get()
    assert (m.topic, m.payload) == ("a/x", b"allowed")
    assert ann.none()
    alice.disconnect()
    ann.disconnect()


def test_accounts_isolate_mqtt_clients(auth_server: ServerProcess) -> None:
    port = auth_server.mqtt_port  # type: ignore[attr-defined]

    async def main() -> None:
        bob = Client(port, username="bob", password="pb")
        bob.subscribe("shared/#", 1)
        ann = Client(port, username="ann", password="pn")
        ann.subscribe("shared/#", 1)
        nc = await nats.connect(auth_server.url, user="bob", password="pb")
        await nc.publish("shared.x", b"for-B")
        await nc.flush()
        assert (await asyncio.to_thread(bob.get)).payload == b"for-B"
        assert ann.none()
        await nc.close()
        bob.disconnect()
        ann.disconnect()

    run(main())


def test_v5_denied_subscribe_and_publish_reason_codes(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    srv = mqtt_server(extra=ACCOUNTS)
    alice = Client(srv.mqtt_port, v5=True, username="alice", password="pa")
    assert alice.subscribe("b/#", 1) == [0x87]
    alice.disconnect()
    bad = Client(srv.mqtt_port, v5=True, username="alice", password="nope", connect=False)
    assert bad.connect(expect_ok=False).value == 0x86
    bad.c.loop_stop()


def test_mqtt_port_authorization_and_no_auth_user(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    srv = mqtt_server(mqtt_extra="authorization { username: dev, password: s3cret }")
    ok = Client(srv.mqtt_port, username="dev", password="s3cret")
    ok.disconnect()
    bad = Client(srv.mqtt_port, username="dev", password="x", connect=False)
    assert bad.connect(expect_ok=False).getName() == "Not authorized"
    bad.c.loop_stop()
    srv2 = mqtt_server(extra=ACCOUNTS, mqtt_extra="no_auth_user: bob")
    anon = Client(srv2.mqtt_port)  # no credentials: bob, in account B

    async def main() -> None:
        anon.subscribe("x/#", 0)
        nc = await nats.connect(srv2.url, user="bob", password="pb")
        await nc.publish("x.y", b"to-bob")
        await nc.flush()
        assert (await asyncio.to_thread(anon.get)).payload == b"to-bob"
        await nc.close()

    run(main())
    anon.disconnect()


def test_tls_and_client_certificates(mqtt_server, pki: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    tls = (f"tls {{ cert_file: '{pki['server_cert']}', key_file: '{pki['server_key']}', "
           f"ca_file: '{pki['ca']}', verify: true }}")
    srv = mqtt_server(mqtt_extra=tls)
    c = Client(srv.mqtt_port, tls={"ca_certs": pki["ca"], "certfile": pki["client_cert"],
                                    "keyfile": pki["client_key"]})
    c.subscribe("tls/#", 1)
    c.publish("tls/x", "secure", 1)
    assert c.get().payload == b"secure"
    c.disconnect()
    nocert = Client(srv.mqtt_port, tls={"ca_certs": pki["ca"]}, connect=False)
    with pytest.raises((ssl.SSLError, OSError, Exception)):
        nocert.connect(expect_ok=False)
    nocert.c.loop_stop()


def test_connz_and_varz(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    http = free_port()
    srv = mqtt_server(http_port=http)
    c = Client(srv.mqtt_port, client_id="monitored-1")
    c.subscribe("m/#", 0)
    connz = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{http}/connz?mqtt_client=monitored-1",
                                              timeout=10).read())
    assert connz["num_connections"] == 1 and connz["connections"][0]["mqtt_client"] == "monitored-1"
    varz = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{http}/varz", timeout=10).read())
    assert varz["mqtt"]["port"] == srv.mqtt_port and varz["mqtt"]["connections"] == 1
    c.disconnect()


def test_account_without_jetstream_is_server_unavailable(mqtt_server) -> None:  # type: ignore[no-untyped-def]
    """MQTT state lives in JetStream: a user of an account without it is told so, and others go on."""
    srv = mqtt_server(extra="accounts { C { users: [ {user: carl, password: pc} ] }, "
                            "D { jetstream: enabled, users: [ {user: dan, password: pd} ] } }")
    carl = Client(srv.mqtt_port, username="carl", password="pc", connect=False)
    assert carl.connect(expect_ok=False).getName() == "Server unavailable"
    carl.c.loop_stop()
    dan = Client(srv.mqtt_port, username="dan", password="pd")
    dan.subscribe("d/#", 1)
    dan.publish("d/1", "fine", 1)
    assert dan.get().payload == b"fine"
    dan.disconnect()


def test_tls_verify_and_map(mqtt_server, pki: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    """The MQTT port's tls { verify_and_map }: the client certificate's subject is the user (with its
    account and permissions)."""
    tls = (f"tls {{ cert_file: '{pki['server_cert']}', key_file: '{pki['server_key']}', "
           f"ca_file: '{pki['ca']}', verify_and_map: true }}")
    accounts = ('accounts { A { jetstream: enabled, users: [ {user: "CN=edged test client", '
                'permissions: {publish: ["cert.>"], subscribe: ["cert.>"]}} ] } }')
    srv = mqtt_server(extra=accounts, mqtt_extra=tls)
    c = Client(srv.mqtt_port, tls={"ca_certs": pki["ca"], "certfile": pki["client_cert"],
                                    "keyfile": pki["client_key"]})
    assert c.subscribe("other/#", 0) == [0x80]
    c.subscribe("cert/+", 1)
    c.publish("cert/x", "mapped", 1)
    assert c.get().payload == b"mapped"
    c.disconnect()
