"""edged/security/account_jwt.py: account JWT claims to account config, nats-io/jwt's validation, activation tokens;
random and truncated input never raises anything but the documented errors."""

from __future__ import annotations

import time
from typing import Any

import nkeys
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edged.routing.imports import _export_auth
from edged.security import account_jwt as aj
from edged.security import jwt as jwtmod
from edged.settings.options import AccountConfig, Export

OP = jwtmod.new_keypair(nkeys.PREFIX_BYTE_OPERATOR)
A = jwtmod.new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
A_SIGNER = jwtmod.new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
B = jwtmod.new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
ROGUE = jwtmod.new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
LIM = {"imports": -1, "exports": -1, "wildcards": True}


def pk(kp: Any) -> str:
    return kp.public_key.decode()


def token(subject: str = "priv.>", kind: str = "stream", signer: Any = A, importer: Any = B, issuer_account: str = "",
          **claims: Any) -> str:
    n: dict[str, Any] = {"type": "activation", "subject": subject, "kind": kind}
    if issuer_account:
        n["issuer_account"] = issuer_account
    return jwtmod.encode({"sub": pk(importer), "nats": n, **claims}, signer)


def exporter(**kw: Any) -> AccountConfig:
    return AccountConfig(name=pk(A), signing_keys=[pk(A_SIGNER)], **kw)


def account(**nats: Any) -> dict[str, Any]:
    return {"sub": pk(B), "iss": pk(OP), "name": "B", "nats": {"type": "account", "version": 2, **nats}}


PRIVATE = Export(stream="priv.>", token_req=True)


def test_activation_signed_by_the_exporter_or_its_signing_key() -> None:
    ex = exporter()
    assert aj.activation_ok(ex, pk(B), "stream", token(), PRIVATE)
    assert aj.activation_ok(ex, pk(B), "stream", token(signer=A_SIGNER, issuer_account=pk(A)), PRIVATE)


def test_activation_refused() -> None:
    ex, now = exporter(), int(time.time())
    assert not aj.activation_ok(ex, pk(B), "stream", "", PRIVATE)
    assert not aj.activation_ok(ex, pk(B), "stream", token(signer=ROGUE, issuer_account=pk(A)), PRIVATE)
    assert not aj.activation_ok(ex, pk(B), "stream", token(signer=ROGUE), PRIVATE)
    assert not aj.activation_ok(ex, pk(B), "stream", token(signer=A_SIGNER), PRIVATE)  # no issuer_account
    assert not aj.activation_ok(ex, pk(ROGUE), "stream", token(), PRIVATE)  # for another account
    assert not aj.activation_ok(ex, pk(B), "service", token(), PRIVATE)  # of another kind
    assert not aj.activation_ok(ex, pk(B), "stream", token(exp=now - 1), PRIVATE)
    assert not aj.activation_ok(ex, pk(B), "stream", token(nbf=now + 60), PRIVATE)


def test_activation_revocations_by_issue_time() -> None:
    ex, now = exporter(), int(time.time())
    old = jwtmod.encode({"sub": pk(B), "nats": {"type": "activation", "subject": "priv.>", "kind": "stream"}}, A,
                        iat=now - 100)
    assert not aj.activation_ok(ex, pk(B), "stream", old, Export(stream="priv.>", token_req=True,
                                                                 revocations={pk(B): now - 50}))
    assert aj.activation_ok(ex, pk(B), "stream", old, Export(stream="priv.>", token_req=True,
                                                             revocations={pk(B): now - 150}))
    assert not aj.activation_ok(ex, pk(B), "stream", old, Export(stream="priv.>", token_req=True,
                                                                 revocations={"*": now - 100}))


def test_export_auth_account_token_position() -> None:
    exports = [Export(stream="acct.*.>", account_token_position=2)]
    assert _export_auth(exports, "stream", pk(B), f"acct.{pk(B)}.>") is exports[0]
    assert _export_auth(exports, "stream", pk(B), f"acct.{pk(ROGUE)}.>") is None
    assert _export_auth(exports, "stream", pk(B), "acct.*.>") is None  # the exact subject names no one


def test_export_auth_with_token() -> None:
    ex = exporter(exports=[PRIVATE])
    assert _export_auth(ex.exports, "stream", pk(B), "priv.a", token(), ex) is PRIVATE
    assert _export_auth(ex.exports, "stream", pk(B), "priv.a", "", ex) is None
    assert _export_auth(ex.exports, "stream", pk(B), "priv.a", token()) is None  # no exporter to check against


def test_validation_issues_as_nats_io_jwt() -> None:
    imp = {"account": pk(A), "subject": "pub.>", "type": "stream"}
    assert aj.validation_issues(account(limits=LIM, imports=[imp])) == []
    # limits absent: zero imports allowed, and nats-io/jwt says so twice
    assert aj.validation_issues(account(limits={"subs": -1}, imports=[imp])) == [
        "the account contains more imports than allowed by the operator"] * 2
    assert aj.validation_issues(account(limits={"exports": -1}, exports=[
        {"subject": "a.>", "type": "stream"}, {"subject": "a.b", "type": "stream"}])) == [
        'stream export subject "a.>" already exports "a.b"']
    assert aj.validation_issues(account(limits={"imports": -1, "exports": 2}, exports=[
        {"subject": "a.>", "type": "stream"}])) == [
        "the account contains wildcard exports that are not allowed by the operator"]
    bad = {**imp, "token": token("pub.>", importer=ROGUE)}
    assert aj.validation_issues(account(limits=LIM, imports=[bad])) == [
        "activation token doesn't match account it is being included in, \"pub.>\""]
    both = {**imp, "to": "x", "local_subject": "y.>"}
    assert "Local Subject replaces To" in aj.validation_issues(account(limits=LIM, imports=[both]))
    svc = [{"account": pk(A), "subject": "s.>", "type": "service"}, {"account": pk(A), "subject": "s.a",
                                                                     "type": "service"}]
    assert aj.validation_issues(account(limits=LIM, imports=svc)) == [
        f'overlapping subject namespace for "s.a" and "s.>" in same account "{pk(A)}"']
    assert aj.validation_issues(account(limits=LIM, mappings={"m": [{"subject": "x", "weight": 60},
                                                                    {"subject": "y", "weight": 60}]})) == [
        "Mapping \"m\" exceeds 100% among all of it's weighted to mappings"]


def test_claims_become_the_config_the_accounts_block_gives() -> None:
    cfg = aj.account_config(account(limits=LIM, exports=[
        {"subject": "svc.>", "type": "service", "response_type": "Stream", "response_threshold": 2_000_000_000},
        {"subject": "priv.>", "type": "stream", "token_req": True, "revocations": {pk(A): 5}},
    ], imports=[
        {"account": pk(A), "subject": "old.a", "to": "svc.old", "type": "service"},
        {"account": pk(A), "subject": "svc.*.*", "local_subject": "sw.$2.$1", "type": "service", "share": True},
        {"account": pk(A), "subject": "pub.>", "to": "from_a", "type": "stream"},
        {"account": pk(A), "subject": "ev.*", "local_subject": "evt.$1", "type": "stream", "token": "t"},
    ], mappings={"in.*": [{"subject": "out.$1"}, {"subject": "elsewhere", "weight": 10, "cluster": "c"}]},
        default_permissions={"pub": {"deny": ["no.>"]}}))
    assert [(e.service, e.stream, e.response_type, e.response_threshold, e.token_req) for e in cfg.exports] == [
        ("svc.>", None, "Stream", 2.0, False), (None, "priv.>", "Singleton", 120.0, True)]
    assert cfg.exports[1].revocations == {pk(A): 5}
    # a service import's subject is the importer's, its deprecated `to` the exporter's
    assert [(s.subject, s.to, s.share) for s in cfg.service_imports] == [("svc.old", "old.a", False),
                                                                          ("svc.*.*", "sw.$2.$1", True)]
    # a stream import's deprecated `to` is a prefix
    assert [(s.subject, s.to, s.prefix, s.token) for s in cfg.stream_imports] == [("pub.>", "", "from_a", ""),
                                                                                   ("ev.*", "evt.$1", "", "t")]
    assert [(m.src, [(d.subject, d.weight, d.cluster) for d in m.dests]) for m in cfg.mappings] == [
        ("in.*", [("out.$1", 100, ""), ("elsewhere", 10, "c")])]
    assert cfg.default_permissions is not None and cfg.default_permissions.publish is not None
    assert cfg.default_permissions.publish.deny == ["no.>"]
    assert cfg.name_tag == "B" and cfg.name == pk(B)


def test_a_field_of_the_wrong_type_is_a_decode_error() -> None:
    assert aj.shape_problem(account(imports="x")) == "imports: not an array"
    assert aj.shape_problem(account(imports=[{"type": "both"}])) == 'imports[0].type: unknown export type "both"'
    assert aj.shape_problem(account(limits={"imports": "many"})) == "limits.imports: not an integer"
    assert aj.shape_problem(account(mappings={"a": [{"subject": "b", "weight": 300}]})) == \
        "mappings.a: not a weighted mapping"
    assert aj.shape_problem(account(limits=LIM)) is None


JSON = st.recursive(st.none() | st.booleans() | st.integers(-5, 300) | st.text(".*>$ab1", max_size=8),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(
                        ["subject", "type", "account", "to", "local_subject", "token", "weight", "cluster",
                         "imports", "exports", "limits", "mappings", "allow", "deny", "pub", "sub",
                         "response_type", "token_req", "revocations", "account_token_position", "stream",
                         "service", "a.*", "wildcards"]), c, max_size=4), max_leaves=20)
NATS = st.fixed_dictionaries({}, optional={
    "imports": st.lists(st.fixed_dictionaries({}, optional={
        "account": st.sampled_from([pk(A), "", 3]), "subject": st.sampled_from(["a.>", "a.*", "a", "", "a..b", 1]),
        "type": st.sampled_from(["stream", "service", "x"]), "to": st.sampled_from(["p", "", "x.>"]),
        "local_subject": st.sampled_from(["l.$1", "l.>", "l", "$2"]),
        "token": st.sampled_from([token(), token(kind="service"), "x.y.z", ""]), "share": st.booleans()}) | JSON,
        max_size=3),
    "exports": st.lists(st.fixed_dictionaries({}, optional={
        "subject": st.sampled_from(["a.>", "a.*", "a", "", "*.b"]), "type": st.sampled_from(["stream", "service"]),
        "response_type": st.sampled_from(["Stream", "Chunked", "", "x"]), "token_req": st.booleans(),
        "account_token_position": st.integers(0, 4), "revocations": JSON}) | JSON, max_size=3),
    "limits": JSON, "mappings": JSON, "default_permissions": JSON, "signing_keys": JSON,
})


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(NATS)
def test_random_claims_never_raise_anything_else(n: dict[str, Any]) -> None:
    claims = account(**n)
    if aj.shape_problem(claims) is not None:
        return
    if aj.validation_issues(claims):
        return
    cfg = aj.account_config(claims)
    assert cfg.name == pk(B)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.integers(0, 400))
def test_random_and_truncated_tokens_are_refused(text: str, cut: int) -> None:
    ex = exporter()
    assert not aj.activation_ok(ex, pk(B), "stream", text, PRIVATE)
    good = token()
    if cut < len(good):
        assert not aj.activation_ok(ex, pk(B), "stream", good[:cut], PRIVATE)
    assert aj.activation_expiry(text) == 0.0
