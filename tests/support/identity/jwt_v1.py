"""Minting v1-format NATS JWTs, as the older nats-io/jwt (v1) and nsc wrote them: `typ: jwt`, `alg:
ed25519`, `type` (and `issuer_account`) at the top level of the claims, no `nats.version`, and a
signature over the claims part only. edged itself only writes v2; these exist to test reading v1."""

from __future__ import annotations

import base64
import json
import os
import time
from typing import Any

import nkeys


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def keypair(prefix: int) -> Any:
    return nkeys.from_seed(bytearray(nkeys.encode_seed(os.urandom(32), prefix)))


def pub(kp: Any) -> str:
    return kp.public_key.decode()


def v1_jwt(kind: str, subject: str, signer: Any, nats_claims: dict[str, Any] | None = None,
           **top: Any) -> str:
    claims: dict[str, Any] = {"jti": b64(os.urandom(24)).upper(), "iat": int(time.time()), "iss": pub(signer),
                              "name": top.pop("name", kind), "sub": subject, "type": kind, **top}
    if nats_claims:
        claims["nats"] = nats_claims
    header = b64(json.dumps({"typ": "jwt", "alg": "ed25519"}).encode())
    body = b64(json.dumps(claims).encode())
    return f"{header}.{body}.{b64(signer.sign(body.encode()))}"


V1_ACCOUNT_LIMITS = {"subs": -1, "conn": -1, "leaf": -1, "imports": -1, "exports": -1, "data": -1, "payload": -1,
                     "wildcards": True}


class V1Operator:
    """An operator, a system account and an APP account (with a signing key), all v1 JWTs."""

    def __init__(self) -> None:
        self.op = keypair(nkeys.PREFIX_BYTE_OPERATOR)
        self.sys = keypair(nkeys.PREFIX_BYTE_ACCOUNT)
        self.app = keypair(nkeys.PREFIX_BYTE_ACCOUNT)
        self.app_signer = keypair(nkeys.PREFIX_BYTE_ACCOUNT)
        self.op_jwt = v1_jwt("operator", pub(self.op), self.op, name="OP")
        self.sys_jwt = v1_jwt("account", pub(self.sys), self.op, {"limits": V1_ACCOUNT_LIMITS}, name="SYS")
        self.app_jwt = v1_jwt("account", pub(self.app), self.op,
                              {"limits": V1_ACCOUNT_LIMITS, "signing_keys": [pub(self.app_signer)]}, name="APP")

    def config(self) -> str:
        return (f"operator: {self.op_jwt}\nsystem_account: {pub(self.sys)}\nresolver: MEMORY\n"
                f"resolver_preload: {{\n  {pub(self.sys)}: {self.sys_jwt}\n  {pub(self.app)}: {self.app_jwt}\n}}\n")

    def user(self, signer: Any = None, **nats_claims: Any) -> tuple[str, Any]:
        """A v1 user JWT of APP (signed by APP, or by its signing key with issuer_account) and its keys."""
        u = keypair(nkeys.PREFIX_BYTE_USER)
        top = {"issuer_account": pub(self.app)} if signer is not None else {}
        token = v1_jwt("user", pub(u), signer or self.app, {"pub": {}, "sub": {}, **nats_claims}, name="u", **top)
        return token, u
