"""Operator-mode material for tests, as `nsc` would make it: an operator, a system account and named accounts
whose JWTs carry exports, imports (with activation tokens), mappings and limits; user `.creds` per account;
the `operator` / `resolver: MEMORY` / `resolver_preload` config lines both nats-server and edged take."""

from __future__ import annotations

import os
import time
from typing import Any

import nkeys

from edged.security import jwt as jwtmod
from edged.security.creds import format_creds

UNLIMITED = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True, "conn": -1,
             "leaf": -1}
JS_UNLIMITED = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}


def pub(kp: Any) -> str:
    return kp.public_key.decode()


class JwtAccounts:
    """`add(name, ...)` an account (claims under `nats`), then `jwt(name)` signs it; `creds(name)` is a user
    of it; `activation(exporter, importer, subject, kind)` an activation token."""

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir
        self.op = jwtmod.new_keypair(nkeys.PREFIX_BYTE_OPERATOR)
        self.keys: dict[str, Any] = {}
        self.claims: dict[str, dict[str, Any]] = {}
        self.add("SYS")
        self.op_jwt = jwtmod.encode({"sub": pub(self.op), "name": "OP",
                                     "nats": {"type": "operator", "version": 2, "system_account": self.pk("SYS")}},
                                    self.op)

    def variant(self) -> JwtAccounts:
        """The same operator and account keys with claims of their own: another server's view of the same
        accounts (a hub and a leaf, each preloading different JWTs of one account)."""
        other = JwtAccounts.__new__(JwtAccounts)
        other.workdir, other.op, other.op_jwt, other.keys = self.workdir, self.op, self.op_jwt, self.keys
        other.claims = {"SYS": dict(self.claims["SYS"])}
        return other

    def add(self, name: str, limits: dict[str, Any] | None = None, **nats: Any) -> str:
        kp = self.keys.get(name) or jwtmod.new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
        self.keys[name] = kp
        self.claims[name] = {"type": "account", "version": 2, "limits": dict(limits or UNLIMITED), **nats}
        return pub(kp)

    def key(self, name: str) -> Any:
        """The account's key pair, made now if the account is not added yet (to name it in another's JWT)."""
        if name not in self.keys:
            self.keys[name] = jwtmod.new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
        return self.keys[name]

    def pk(self, name: str) -> str:
        return pub(self.key(name))

    def jwt(self, name: str) -> str:
        return jwtmod.encode({"sub": self.pk(name), "name": name, "nats": self.claims[name]}, self.op)

    def activation(self, exporter: str, importer: str, subject: str, kind: str, signer: Any = None,
                   issuer_account: str = "", iat: int | None = None, exp: int = 0) -> str:
        """A token of `exporter` (or of `signer`, naming `issuer_account`) letting `importer` import."""
        n: dict[str, Any] = {"type": "activation", "version": 2, "subject": subject, "kind": kind}
        if issuer_account:
            n["issuer_account"] = issuer_account
        claims: dict[str, Any] = {"sub": self.pk(importer), "name": subject, "nats": n}
        if exp:
            claims["exp"] = exp
        return jwtmod.encode(claims, signer or self.key(exporter), iat=iat)

    def creds(self, account: str, user: str = "", **perms: Any) -> str:
        u = jwtmod.new_keypair(nkeys.PREFIX_BYTE_USER)
        name = user or account.lower()
        token = jwtmod.encode({"sub": pub(u), "name": name,
                               "nats": {"type": "user", "version": 2, "subs": -1, "data": -1, "payload": -1,
                                        **perms}}, self.key(account))
        path = os.path.join(self.workdir, f"{name}-{time.monotonic_ns()}.creds")
        with open(path, "w") as f:
            f.write(format_creds(token, u.seed))
        return path

    def config(self, *names: str) -> str:
        """The operator-mode lines, preloading SYS and the named accounts (every added one by default)."""
        names = names or tuple(self.claims)
        pre = "".join(f"  {self.pk(n)}: {self.jwt(n)}\n" for n in dict.fromkeys(("SYS", *names)))
        return (f"operator: {self.op_jwt}\nsystem_account: {self.pk('SYS')}\nresolver: MEMORY\n"
                f"resolver_preload: {{\n{pre}}}\n")
