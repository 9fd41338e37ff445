"""Pure parts of auth: JWT encode/verify, creds files, permission rules (checked against a naive model)."""

from __future__ import annotations

import time

import nkeys
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edged.routing.subjects import subject_is_subset, subject_matches
from edged.security import jwt as jwtmod
from edged.security.auth import Authenticator, AuthError, check_password, permissions_from_claims
from edged.security.creds import CredsError, format_creds, parse_creds
from edged.security.permissions import PermissionChecker
from edged.settings.options import NkeyUser, Options, Permissions, ResponsePermission, SubjectPermission, User


def kp(prefix: int = nkeys.PREFIX_BYTE_ACCOUNT):
    return jwtmod.new_keypair(prefix)


def test_jwt_roundtrip_and_tamper() -> None:
    k = kp()
    token = jwtmod.encode({"sub": k.public_key.decode(), "nats": {"type": "account"}}, k)
    claims = jwtmod.verify(token)
    assert claims["iss"] == claims["sub"] == k.public_key.decode()
    head, body, sig = token.split(".")
    forged = jwtmod.b64url(b'{"sub":"x","iss":"%s","nats":{"type":"account"}}' % k.public_key)
    with pytest.raises(jwtmod.JWTError, match="signature"):
        jwtmod.verify(f"{head}.{forged}.{sig}")
    with pytest.raises(jwtmod.JWTError):
        jwtmod.verify("a.b")


def test_jwt_expiry_and_not_before() -> None:
    k = kp()
    now = time.time()
    expired = jwtmod.encode({"sub": "x", "exp": int(now) - 5}, k)
    future = jwtmod.encode({"sub": "x", "nbf": int(now) + 100}, k)
    with pytest.raises(jwtmod.JWTError, match="expired"):
        jwtmod.verify(expired)
    with pytest.raises(jwtmod.JWTError, match="not yet"):
        jwtmod.verify(future)
    assert jwtmod.verify(future, now=now + 200)["sub"] == "x"


@given(st.text(max_size=200))
def test_jwt_decode_never_crashes(text: str) -> None:
    try:
        jwtmod.verify(text)
    except jwtmod.JWTError:
        pass


def test_public_key_checks() -> None:
    u = kp(nkeys.PREFIX_BYTE_USER).public_key.decode()
    jwtmod.verify_public_key(u, "U")
    with pytest.raises(jwtmod.JWTError):
        jwtmod.verify_public_key(u, "A")
    bad = u[:-1] + ("A" if u[-1] != "A" else "B")
    with pytest.raises(jwtmod.JWTError):
        jwtmod.verify_public_key(bad, "U")


def test_creds_roundtrip_and_errors() -> None:
    u = kp(nkeys.PREFIX_BYTE_USER)
    text = format_creds("aaa.bbb.ccc", u.seed)
    jwt, seed = parse_creds(text)
    assert jwt == "aaa.bbb.ccc" and seed == bytes(u.seed)
    with pytest.raises(CredsError):
        parse_creds("-----BEGIN NATS USER JWT-----\naaa.bbb.ccc\n------END NATS USER JWT------\n")


def test_password_compare_plain_and_bcrypt() -> None:
    import bcrypt

    h = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()
    assert check_password("pw", h) and not check_password("px", h)
    assert check_password("pw", "pw") and not check_password("pw", "pw ")


def test_authenticator_rules() -> None:
    o = Options(users=[User("a", "b")], no_auth_user="a")
    a = Authenticator(o)
    assert a.auth_required and not a.nonce_required and a.system_account == "$SYS"
    assert a.authenticate({}, None).user == "a"
    assert a.authenticate({"user": "a", "pass": "b"}, None).account == "$G"
    with pytest.raises(AuthError) as e:
        a.authenticate({"user": "a", "pass": "x"}, None)
    assert e.value.client_text == "Authorization Violation"
    with pytest.raises(ValueError, match="no_auth_user"):
        Authenticator(Options(users=[User("a", "b")], no_auth_user="zz"))


def test_nkey_signature_checked() -> None:
    u = kp(nkeys.PREFIX_BYTE_USER)
    a = Authenticator(Options(nkeys=[NkeyUser(u.public_key.decode())]))
    assert a.nonce_required
    sig = jwtmod.b64url(u.sign(b"nonce1"))
    assert a.authenticate({"nkey": u.public_key.decode(), "sig": sig}, "nonce1").user == u.public_key.decode()
    with pytest.raises(AuthError):
        a.authenticate({"nkey": u.public_key.decode(), "sig": sig}, "nonce2")


def test_permissions_from_claims() -> None:
    p = permissions_from_claims({"pub": {"allow": ["a"]}, "sub": {}, "resp": {"max": 2, "ttl": 2_000_000_000}})
    assert p is not None and p.publish is not None and p.publish.allow == ["a"] and p.subscribe is None
    assert p.allow_responses == ResponsePermission(max_msgs=2, expires=2.0)
    assert permissions_from_claims({"pub": {}, "sub": {}}) is None


# ------------------------------------------------------------------------------------ permissions model

TOKENS = st.sampled_from(["a", "b", "c"])
LITERAL = st.lists(TOKENS, min_size=1, max_size=3).map(".".join)
PATTERN = st.lists(st.sampled_from(["a", "b", "*"]), min_size=1, max_size=3).map(".".join) | \
    st.lists(TOKENS, min_size=0, max_size=2).map(lambda t: ".".join([*t, ">"]))


@settings(max_examples=300)
@given(st.lists(PATTERN, max_size=3), st.lists(PATTERN, max_size=3), LITERAL)
def test_publish_model(allow: list[str], deny: list[str], subject: str) -> None:
    c = PermissionChecker(Permissions(publish=SubjectPermission(allow=allow, deny=deny)))
    expect = (not allow or any(subject_matches(p, subject) for p in allow)) and not any(
        subject_matches(p, subject) for p in deny)
    assert c.can_publish(subject) == expect
    assert c.can_publish(subject) == expect  # cached answer is the same


@settings(max_examples=300)
@given(st.lists(PATTERN, max_size=3), st.lists(PATTERN, max_size=3), PATTERN)
def test_subscribe_model(allow: list[str], deny: list[str], subject: str) -> None:
    c = PermissionChecker(Permissions(subscribe=SubjectPermission(allow=allow, deny=deny)))
    expect = (not allow or any(subject_is_subset(subject, p) for p in allow)) and not any(
        subject_is_subset(subject, p) for p in deny)
    assert c.can_subscribe(subject) == expect


def test_queue_permissions() -> None:
    c = PermissionChecker(Permissions(subscribe=SubjectPermission(allow=["foo.> workers"], deny=["foo.x q2"])))
    assert c.can_subscribe("foo.a", "workers")
    assert not c.can_subscribe("foo.a")
    assert not c.can_subscribe("foo.a", "other")


def test_responses_allowed_once() -> None:
    c = PermissionChecker(Permissions(allow_responses=ResponsePermission(max_msgs=1)))
    assert not c.can_publish("_INBOX.x")
    c.note_reply("_INBOX.x")
    assert c.can_publish("_INBOX.x")
    assert not c.can_publish("_INBOX.x")
