"""NATS JWTs (operator, account, user): decode, verify, encode.

A NATS JWT is `header.claims.signature`, each part base64url without padding; the signature is an
ed25519 signature by the issuer's nkey over `header.claims`. The header's `alg` is `ed25519-nkey` (v2)
or `ed25519` (v1). Keys are nkeys public keys, whose first letter names the role (O operator,
A account, U user), which is how the issuer chain is checked.
"""

from __future__ import annotations

import base64
import json
import os
import time
from typing import Any

import nkeys
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

ALGS = ("ed25519-nkey", "ed25519")


class JWTError(ValueError):
    """A JWT that cannot be trusted: malformed, badly signed, expired, or of the wrong kind."""


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    pad = "=" * (-len(text) % 4)
    try:
        return base64.urlsafe_b64decode(text + pad)
    except (ValueError, TypeError) as e:
        raise JWTError(f"invalid base64: {e}") from None


def decode(token: str) -> dict[str, Any]:
    """The claims of a JWT, without checking the signature."""
    parts = token.strip().split(".")
    if len(parts) != 3:
        raise JWTError("expected 3 chunks")
    try:
        header = json.loads(b64url_decode(parts[0]))
        claims = json.loads(b64url_decode(parts[1]))
    except ValueError as e:
        raise JWTError(f"invalid JSON: {e}") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise JWTError("header and claims must be objects")
    if str(header.get("typ", "")).upper() != "JWT" or header.get("alg") not in ALGS:
        raise JWTError(f"not a NATS JWT (typ={header.get('typ')!r}, alg={header.get('alg')!r})")
    return claims


def public_key_bytes(key: str) -> bytes | None:
    """The raw ed25519 key inside an nkeys public key, or None if it is not a valid one."""
    if not isinstance(key, str) or len(key) != 56:
        return None
    try:
        raw = base64.b32decode(key)
    except ValueError:
        return None
    if len(raw) != 35 or nkeys.crc16(raw[:-2]) != int.from_bytes(raw[-2:], "little"):
        return None
    return raw[1:33]


def verify_public_key(key: str, prefix: str) -> None:
    """Raise unless `key` is a well-formed nkeys public key of the given role letter(s)."""
    if not isinstance(key, str) or not key or key[0] not in prefix or public_key_bytes(key) is None:
        raise JWTError(f"{key!r} is not a valid public key of kind {prefix!r}")


def verify_signature(public_key: str, data: bytes, sig: bytes) -> bool:
    """True when `sig` is `public_key`'s ed25519 signature of `data`."""
    raw = public_key_bytes(public_key)
    if raw is None:
        return False
    try:
        VerifyKey(raw).verify(data, sig)
        return True
    except (BadSignatureError, ValueError, TypeError):
        return False


def verify(token: str, now: float | None = None) -> dict[str, Any]:
    """Claims of a JWT whose signature is by its `iss` and which is in its validity window."""
    claims = decode(token)
    head, body, sig = token.strip().split(".")
    iss = claims.get("iss")
    if not isinstance(iss, str):
        raise JWTError("missing issuer")
    verify_public_key(iss, "OA")
    if not verify_signature(iss, f"{head}.{body}".encode(), b64url_decode(sig)):
        raise JWTError("signature verification failed")
    now = time.time() if now is None else now
    exp = claims.get("exp")
    if exp and now > float(exp):
        raise JWTError("expired")
    nbf = claims.get("nbf")
    if nbf and now < float(nbf):
        raise JWTError("not yet valid")
    return claims


def claim_type(claims: dict[str, Any]) -> str:
    nats_ = claims.get("nats") or {}
    return str(nats_.get("type") or claims.get("type") or "")


def signing_keys(claims: dict[str, Any]) -> set[str]:
    """An operator's or account's signing keys (plain keys or `{key: ...}` scoped entries)."""
    out: set[str] = set()
    for k in (claims.get("nats") or {}).get("signing_keys") or []:
        if isinstance(k, str):
            out.add(k)
        elif isinstance(k, dict) and isinstance(k.get("key"), str):
            out.add(k["key"])
    return out


def scoped_signing_key(claims: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The `user_scope` template for a scoped account signing key, if `key` is one."""
    for k in (claims.get("nats") or {}).get("signing_keys") or []:
        if isinstance(k, dict) and k.get("key") == key and k.get("kind") == "user_scope":
            return k.get("template") or {}
    return None


def encode(claims: dict[str, Any], signer: Any, *, iat: int | None = None) -> str:
    """A signed v2 JWT: `signer` is an nkeys KeyPair (with seed); it becomes the issuer."""
    header = b64url(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    c = dict(claims)
    c.setdefault("iat", int(time.time()) if iat is None else iat)
    c["iss"] = signer.public_key.decode()
    c.setdefault("jti", b64url(os.urandom(24)))
    body = b64url(json.dumps(c, separators=(",", ":")).encode())
    sig = signer.sign(f"{header}.{body}".encode())
    return f"{header}.{body}.{b64url(sig)}"


def new_keypair(prefix: int) -> Any:
    """A fresh nkeys KeyPair of a role (nkeys.PREFIX_BYTE_OPERATOR / _ACCOUNT / _USER / _SERVER)."""
    return nkeys.from_seed(bytearray(nkeys.encode_seed(os.urandom(32), prefix)))
