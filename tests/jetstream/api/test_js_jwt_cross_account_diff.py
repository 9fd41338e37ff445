"""The seed's "Cross account & domain import" section with its accounts as account JWTs (operator mode,
MEMORY resolver) instead of an `accounts {}` block, on nats-server and then on edged: ACC exports its
JetStream API, deliver and ack subjects; IMPORT_MIRROR mirrors ACC's stream through `JS.acc@hub.API` (a
`local_subject` rename of ACC's `$JS.hub.API`) with the extended delivery prefix; IMPORT_CLIENT pulls from
ACC's durable through its imports (NEXT + ACK). Both servers must end the same, and as with the config."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

import nats

from tests.jetstream.api.test_js_seed_cross_account_diff import scenario
from tests.support.aio import run
from tests.support.identity.jwtaccounts import JS_UNLIMITED, UNLIMITED, JwtAccounts
from tests.support.servers import KINDS, ServerProcess

CONF = """server_name: hub-server
jetstream { store_dir: "./store_server", domain: hub }
"""


def seed_accounts() -> JwtAccounts:
    """The seed's accounts.conf as account JWTs."""
    j = JwtAccounts(tempfile.mkdtemp(prefix="seedjwt-"))
    lim = {**UNLIMITED, **JS_UNLIMITED}
    acc = j.pk("ACC")
    j.add("ACC", limits=lim, exports=[
        {"subject": "$JS.hub.API.CONSUMER.CREATE.*", "type": "service", "response_type": "Stream"},
        {"subject": "deliver.acc.hub.>", "type": "stream"},
        {"subject": "$JS.hub.API.CONSUMER.MSG.NEXT.aggregate-test-leaf.dur", "type": "service",
         "response_type": "Stream"},
        {"subject": "$JS.ACK.aggregate-test-leaf.dur.>", "type": "service"},
        {"subject": "$JS.FC.aggregate-test-leaf.dur.>", "type": "service"},
    ])
    j.add("IMPORT_MIRROR", limits=lim, imports=[
        {"account": acc, "subject": "$JS.hub.API.CONSUMER.CREATE.*",
         "local_subject": "JS.acc@hub.API.CONSUMER.CREATE.*", "type": "service"},
        {"account": acc, "subject": "$JS.FC.aggregate-test-leaf.dur.>", "type": "service"},
        {"account": acc, "subject": "deliver.acc.hub.import_mirror.>", "type": "stream"},
    ])
    j.add("IMPORT_CLIENT", limits=lim, imports=[
        {"account": acc, "subject": "$JS.hub.API.CONSUMER.MSG.NEXT.aggregate-test-leaf.dur",
         "local_subject": "JS.acc@hub.API.CONSUMER.MSG.NEXT.aggregate-test-leaf.dur", "type": "service"},
        {"account": acc, "subject": "$JS.ACK.aggregate-test-leaf.dur.>", "type": "service"},
    ])
    return j


def test_seed_cross_account_imports_from_account_jwts(start_server: Callable[..., ServerProcess]) -> None:
    j = seed_accounts()
    creds = {"acc": j.creds("ACC"), "import_mirror": j.creds("IMPORT_MIRROR"),
             "import_client": j.creds("IMPORT_CLIENT")}
    res = {}
    for kind in KINDS:
        srv = start_server(kind, config=CONF + j.config(), workdir=tempfile.mkdtemp(prefix=f"seedjwt-{kind}-"))

        async def connect(user: str, srv: ServerProcess = srv) -> Any:
            return await nats.connect(srv.url, user_credentials=creds[user])

        res[kind] = run(scenario(srv, connect))
    ref = res["nats-server"]
    assert ref["mirror"] == (3, 1, 3) and ref["pulled"] == [("agg.t", b"m0"), ("agg.t", b"m1")], ref
    assert ref["mirror created"] == (True, None) and ref["dur"] == (2, 2, 1), ref
    assert res["edged"] == ref
