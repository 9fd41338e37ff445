"""v1-format NATS JWTs (the older nats-io/jwt and nsc): told apart by their claims, their signature
over the claims part only, their claims read in the v2 layout."""

from __future__ import annotations

import json

import nkeys
import pytest

from edged.security import jwt as jwtmod
from tests.support.identity.jwt_v1 import V1Operator, b64, keypair, pub, v1_jwt


def test_v1_operator_account_user_verify_in_the_v2_layout() -> None:
    op = V1Operator()
    o = jwtmod.verify(op.op_jwt)
    assert jwtmod.claim_type(o) == "operator" and o["nats"]["version"] == 1 and "type" not in o
    a = jwtmod.verify(op.app_jwt)
    assert jwtmod.claim_type(a) == "account" and jwtmod.signing_keys(a) == {pub(op.app_signer)}
    token, _ = op.user(signer=op.app_signer)
    u = jwtmod.verify(token)
    assert u["nats"]["issuer_account"] == pub(op.app) and u["iss"] == pub(op.app_signer)
    assert (u["nats"]["subs"], u["nats"]["data"], u["nats"]["payload"]) == (-1, -1, -1)


def test_v1_signature_covers_the_claims_only() -> None:
    k = keypair(nkeys.PREFIX_BYTE_OPERATOR)
    good = v1_jwt("operator", pub(k), k)
    head, body, _ = good.split(".")
    v2_style = f"{head}.{body}.{b64(k.sign(f'{head}.{body}'.encode()))}"
    with pytest.raises(jwtmod.JWTError, match="V1 signature"):
        jwtmod.verify(v2_style)
    assert jwtmod.verify(good)["sub"] == pub(k)


def test_the_claims_not_the_alg_decide_the_version() -> None:
    k = keypair(nkeys.PREFIX_BYTE_OPERATOR)
    body = b64(json.dumps({"iss": pub(k), "sub": pub(k), "nats": {"type": "operator", "version": 2}}).encode())
    head = b64(json.dumps({"typ": "JWT", "alg": "ed25519"}).encode())
    token = f"{head}.{body}.{b64(k.sign(f'{head}.{body}'.encode()))}"
    assert jwtmod.verify(token)["nats"]["version"] == 2
    newer = b64(json.dumps({"iss": pub(k), "sub": pub(k), "nats": {"type": "operator", "version": 3}}).encode())
    with pytest.raises(jwtmod.JWTError, match="newer version"):
        jwtmod.verify(f"{head}.{newer}.{b64(k.sign(f'{head}.{newer}'.encode()))}")


def test_v1_account_carries_no_jetstream_limits() -> None:
    k = keypair(nkeys.PREFIX_BYTE_OPERATOR)
    a = keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    token = v1_jwt("account", pub(a), k, {"limits": {"subs": 5, "mem_storage": 1024, "disk_storage": 2048}})
    lim = jwtmod.verify(token)["nats"]["limits"]
    assert lim == {"subs": 5}


def test_encode_writes_v2_that_verifies_as_v2() -> None:
    k = keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    c = jwtmod.verify(jwtmod.encode({"sub": pub(k), "nats": {"type": "account"}}, k))
    assert c["nats"] == {"type": "account", "version": 2}
