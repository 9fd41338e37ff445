"""Client authentication: users/passwords (plain or bcrypt), tokens, nkeys, TLS cert mapping, and
operator/JWT mode with a MEMORY resolver, following nats-server's rules and order.

The client only ever learns `Authorization Violation` (as from nats-server); the reason goes to the log.
"""

from __future__ import annotations

import base64
import hmac
from dataclasses import dataclass, field
from typing import Any

import bcrypt

from edged.log import log
from edged.routing.accounts import GLOBAL_ACCOUNT
from edged.security import account_jwt
from edged.security import jwt as jwtmod
from edged.settings.options import (
    AccountConfig,
    NkeyUser,
    Options,
    Permissions,
    User,
)

DEFAULT_SYSTEM_ACCOUNT = "$SYS"


class ClaimsUpdateError(Exception):
    """An account JWT pushed to the server that is not applied: nats-server's message and error text."""

    def __init__(self, message: str, err: str) -> None:
        super().__init__(f"{message} - {err}")
        self.message = message
        self.err = err


class AuthError(Exception):
    """Authentication failed; `reason` is for the log, `client_text` is what the client is told."""

    client_text = "Authorization Violation"
    revoked = False  # the account JWT revokes the user (told as such to a client already connected)

    def __init__(self, reason: str, client_text: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        if client_text:
            self.client_text = client_text


@dataclass
class AuthResult:
    account: str | None
    user: str = ""
    permissions: Permissions | None = None
    expires_at: float = 0.0  # epoch seconds; 0 = never
    account_claims: dict[str, Any] | None = None
    tags: list[str] = field(default_factory=list)


def check_password(given: str, configured: str) -> bool:
    """Compare a password or token against a plain or bcrypt (`$2a$`/`$2b$`/`$2y$`) configured value."""
    if configured.startswith(("$2a$", "$2b$", "$2y$")):
        try:
            return bcrypt.checkpw(given.encode(), configured.encode())
        except ValueError:
            return False
    return hmac.compare_digest(given.encode(), configured.encode())


def decode_sig(sig: str) -> bytes:
    """nats clients send the nonce signature base64 raw-URL encoded; raw-std is accepted too, as nats-server does."""
    s = sig.strip()
    pad = "=" * (-len(s) % 4)
    try:
        return base64.urlsafe_b64decode(s + pad)
    except ValueError:
        return base64.b64decode(s + pad)


# user JWT permissions are built as an account JWT's default permissions are (one function)
permissions_from_claims = account_jwt.permissions


class Authenticator:
    """Built from Options once (and again on reload); `authenticate` is called for every CONNECT."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.users: dict[str, tuple[User, str]] = {}
        self.nkeys: dict[str, tuple[NkeyUser, str]] = {}
        self.accounts: dict[str, AccountConfig] = {}
        self.trusted_keys: set[str] = set()
        self.account_jwts: dict[str, str] = {}
        # account JWTs nats-server would refuse to use (a blocking validation issue): key -> why
        self.invalid_accounts: dict[str, str] = {}
        self.preload_issues: list[tuple[str, list[str]]] = []
        self.operator_mode = bool(opts.trusted_operators or opts.trusted_keys)
        for acc in opts.accounts:
            self.accounts[acc.name] = acc
        for u in opts.users:
            self._add_user(u, u.account or GLOBAL_ACCOUNT, opts.default_permissions)
        for n in opts.nkeys:
            self._add_nkey(n, n.account or GLOBAL_ACCOUNT, opts.default_permissions)
        for acc in opts.accounts:
            dp = acc.default_permissions or opts.default_permissions
            for u in acc.users:
                self._add_user(u, acc.name, dp)
            for n in acc.nkey_users:
                self._add_nkey(n, acc.name, dp)
        if self.operator_mode:
            self._load_operators()
        sysacc = opts.system_account
        if self.operator_mode and not sysacc:
            sysacc = self._operator_system_account
        if not sysacc and not opts.no_system_account:
            sysacc = DEFAULT_SYSTEM_ACCOUNT
        self.system_account = sysacc
        self.auth_required = bool(self.operator_mode or self.users or self.nkeys or opts.username
                                  or opts.authorization)
        self.nonce_required = bool(self.operator_mode or self.nkeys)
        if opts.no_auth_user and opts.no_auth_user not in self.users:
            raise ValueError(f'no_auth_user: "{opts.no_auth_user}" not present as user or nkey in authorization '
                             "block or account configuration")

    # ------------------------------------------------------------------ set-up

    def _add_user(self, u: User, account: str, default_perms: Permissions | None) -> None:
        if u.permissions is None and default_perms is not None:
            u = User(u.username, u.password, default_perms, u.account, u.allowed_connection_types)
        self.users[u.username] = (u, account)

    def _add_nkey(self, n: NkeyUser, account: str, default_perms: Permissions | None) -> None:
        try:
            jwtmod.verify_public_key(n.nkey, "U")
        except jwtmod.JWTError:
            raise ValueError(f"Not a valid public nkey for a user: {n.nkey!r}") from None
        if n.permissions is None and default_perms is not None:
            n = NkeyUser(n.nkey, default_perms, n.account, n.allowed_connection_types)
        self.nkeys[n.nkey] = (n, account)

    def _load_operators(self) -> None:
        self._operator_system_account = ""
        self.trusted_keys.update(self.opts.trusted_keys)
        for token in self.opts.trusted_operators:
            try:
                claims = jwtmod.verify(token)
            except jwtmod.JWTError as e:
                raise ValueError(f"operator JWT: {e}") from None
            if jwtmod.claim_type(claims) != "operator":
                raise ValueError("operator JWT: not an operator JWT")
            self.trusted_keys.add(claims["sub"])
            self.trusted_keys.update(jwtmod.signing_keys(claims))
            sa = (claims.get("nats") or {}).get("system_account")
            if sa and not self._operator_system_account:
                self._operator_system_account = str(sa)
        if self.opts.resolver and self.opts.resolver.upper() != "MEMORY":
            raise ValueError(f"resolver {self.opts.resolver!r} is not supported (only MEMORY with resolver_preload)")
        for pub, token in self.opts.resolver_preload.items():
            claims = self._verify_account_jwt(token)
            if claims["sub"] != pub:
                raise ValueError(f"resolver_preload: JWT subject {claims['sub']} does not match key {pub}")
            why = account_jwt.shape_problem(claims)
            if why:  # nats-io/jwt cannot decode it: nats-server refuses to start (validateOptions' preload check)
                raise ValueError(f'preload account error for "{pub}": {why}')
            issues = account_jwt.validation_issues(claims)
            if issues:  # the account cannot be used (verifyAccountClaims); the server logs why when it starts
                self.preload_issues.append((pub, issues))
                self.invalid_accounts[pub] = "account validation failed"
                continue
            self.account_jwts[pub] = token
            self.accounts[pub] = account_jwt.account_config(claims)

    def log_preload_issues(self) -> None:
        """nats-server's checkResolvePreloads: each preloaded account JWT with blocking validation issues."""
        for pub, issues in self.preload_issues:
            log.warning("Account [%s] has validation issues:", pub)
            for why in issues:
                log.warning("  - %s", why)

    def update_account_jwt(self, pub: str, token: str) -> str:
        """An account JWT pushed on `$SYS.REQ.ACCOUNT.<pub>.CLAIMS.UPDATE` (nats-server's accountClaimUpdate
        and updateAccountWithClaimJWT, MEMORY resolver): the message of a success ("jwt updated", or "jwt
        update skipped" for an account not in use), else ClaimsUpdateError. The caller applies the change."""
        if not token.strip():
            raise ClaimsUpdateError("jwt update error", "request body is empty")
        failed = "jwt update resulted in error"
        try:
            claims = jwtmod.verify(token, times=False)
        except jwtmod.JWTError as e:
            raise ClaimsUpdateError(failed, str(e)) from None
        if jwtmod.claim_type(claims) != "account":
            raise ClaimsUpdateError(failed, "not account claim")
        if claims.get("sub") != pub:
            raise ClaimsUpdateError(failed, "subject does not match jwt content")
        if pub not in self.account_jwts:
            return "jwt update skipped"
        if self.account_jwts[pub] == token:
            return "jwt updated"
        why = account_jwt.shape_problem(claims)
        if why:
            raise ClaimsUpdateError(failed, why)
        try:
            jwtmod.verify(token)
        except jwtmod.JWTError:  # expired or not yet valid: a blocking time check
            raise ClaimsUpdateError(failed, "account validation failed") from None
        if claims["iss"] not in self.trusted_keys or account_jwt.validation_issues(claims):
            raise ClaimsUpdateError(failed, "account validation failed")
        self.account_jwts[pub] = token
        self.accounts[pub] = account_jwt.account_config(claims)
        return "jwt updated"

    def _verify_account_jwt(self, token: str) -> dict[str, Any]:
        try:
            claims = jwtmod.verify(token)
        except jwtmod.JWTError as e:
            raise ValueError(f"account JWT: {e}") from None
        if jwtmod.claim_type(claims) != "account":
            raise ValueError("account JWT: not an account JWT")
        if claims["iss"] not in self.trusted_keys:
            raise ValueError(f"account JWT for {claims.get('sub')}: issuer {claims['iss']} is not a trusted operator")
        return claims

    def account_configs(self) -> dict[str, AccountConfig]:
        return dict(self.accounts)

    # ------------------------------------------------------------------ authenticate

    def authenticate(self, connect: dict[str, Any], nonce: str | None, client_cert: bytes | None = None,
                     conn_type: str = "STANDARD") -> AuthResult:
        if not self.auth_required:
            return AuthResult(GLOBAL_ACCOUNT)
        if self.operator_mode:
            if connect.get("jwt"):
                return self._auth_jwt(connect, nonce, conn_type)
            if self.opts.no_auth_user and not _has_credentials(connect):
                return self._user_result(self.opts.no_auth_user, conn_type)
            raise AuthError("missing user JWT in CONNECT (operator mode)")
        nk = connect.get("nkey")
        if nk and self.nkeys:
            return self._auth_nkey(str(nk), connect, nonce, conn_type)
        if client_cert is not None and self.opts.tls is not None and self.opts.tls.verify_and_map:
            return self._auth_cert(client_cert, conn_type)
        user = connect.get("user")
        if user is not None and user != "" and self.users:
            entry = self.users.get(str(user))
            if entry is None:
                raise AuthError(f"user {user!r} not found")
            u, _ = entry
            if not check_password(str(connect.get("pass") or ""), u.password):
                raise AuthError(f"bad password for user {user!r}")
            return self._user_result(str(user), conn_type)
        token = connect.get("auth_token")
        if self.opts.authorization:
            if token is not None and check_password(str(token), self.opts.authorization):
                return AuthResult(GLOBAL_ACCOUNT)
            if not (self.opts.no_auth_user and not _has_credentials(connect)):
                raise AuthError("bad or missing authorization token")
        if self.opts.username:
            if str(user or "") == self.opts.username and check_password(str(connect.get("pass") or ""),
                                                                       self.opts.password):
                return AuthResult(GLOBAL_ACCOUNT, user=self.opts.username,
                                  permissions=self.opts.default_permissions)
            if not (self.opts.no_auth_user and not _has_credentials(connect)):
                raise AuthError(f"bad user/password for {user!r}")
        if self.opts.no_auth_user and not _has_credentials(connect):
            return self._user_result(self.opts.no_auth_user, conn_type)
        raise AuthError("no credentials matched")

    def _user_result(self, name: str, conn_type: str) -> AuthResult:
        entry = self.users.get(name)
        if entry is None:
            raise AuthError(f"user {name!r} not found")
        u, account = entry
        _check_conn_type(u.allowed_connection_types, conn_type)
        return AuthResult(account, user=name, permissions=u.permissions)

    def _auth_nkey(self, nk: str, connect: dict[str, Any], nonce: str | None, conn_type: str) -> AuthResult:
        entry = self.nkeys.get(nk)
        if entry is None:
            raise AuthError(f"nkey {nk} not found")
        if not nonce:
            raise AuthError("no nonce was sent for nkey authentication")
        sig = connect.get("sig")
        if not sig or not jwtmod.verify_signature(nk, nonce.encode(), decode_sig(str(sig))):
            raise AuthError(f"signature verification failed for nkey {nk}")
        n, account = entry
        _check_conn_type(n.allowed_connection_types, conn_type)
        return AuthResult(account, user=nk, permissions=n.permissions)

    def _auth_cert(self, der: bytes, conn_type: str) -> AuthResult:
        from cryptography import x509

        cert = x509.load_der_x509_certificate(der)
        names = [cert.subject.rfc4514_string()]
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            names += san.get_values_for_type(x509.RFC822Name) + san.get_values_for_type(x509.DNSName)
        except x509.ExtensionNotFound:
            pass
        for name in names:
            if name in self.users:
                return self._user_result(name, conn_type)
        raise AuthError(f"no user mapped to client certificate {names[0]!r}")

    def _auth_jwt(self, connect: dict[str, Any], nonce: str | None, conn_type: str) -> AuthResult:
        token = str(connect["jwt"])
        try:
            claims = jwtmod.verify(token)
        except jwtmod.JWTError as e:
            raise AuthError(f"user JWT: {e}") from None
        if jwtmod.claim_type(claims) != "user":
            raise AuthError("JWT is not a user JWT")
        n = claims.get("nats") or {}
        iss = claims["iss"]
        acc_pub = str(n.get("issuer_account") or iss)
        acc_jwt = self.account_jwts.get(acc_pub)
        if acc_jwt is None:
            why = self.invalid_accounts.get(acc_pub, "not found in the resolver")
            raise AuthError(f"account {acc_pub}: {why}")
        try:
            acc_claims = jwtmod.verify(acc_jwt)
        except jwtmod.JWTError as e:
            raise AuthError(f"account JWT for {acc_pub}: {e}") from None
        perms_src: dict[str, Any] = n
        if iss != acc_pub:
            if iss not in jwtmod.signing_keys(acc_claims):
                raise AuthError(f"user JWT issuer {iss} is not a signing key of account {acc_pub}")
            scope = jwtmod.scoped_signing_key(acc_claims, iss)
            if scope is not None:
                perms_src = scope
        revoked = ((acc_claims.get("nats") or {}).get("revocations") or {})
        user_pub = str(claims.get("sub") or "")
        for key in (user_pub, "*"):
            ts = revoked.get(key)
            if ts is not None and int(claims.get("iat") or 0) <= int(ts):
                err = AuthError(f"user {user_pub} has been revoked")
                err.revoked = True
                raise err
        if not n.get("bearer_token"):
            if not nonce:
                raise AuthError("no nonce was sent for JWT authentication")
            sig = connect.get("sig")
            if not sig or not jwtmod.verify_signature(user_pub, nonce.encode(), decode_sig(str(sig))):
                raise AuthError(f"signature verification failed for user {user_pub}")
        _check_conn_type([str(x) for x in n.get("allowed_connection_types") or []], conn_type)
        cfg = self.accounts.get(acc_pub)
        if cfg is None:
            cfg = self.accounts[acc_pub] = account_jwt.account_config(acc_claims)
        # a user JWT that sets no permissions gets its account's default permissions (buildInternalNkeyUser)
        perms = permissions_from_claims(perms_src) or cfg.default_permissions
        return AuthResult(acc_pub, user=user_pub, permissions=perms,
                          expires_at=float(claims.get("exp") or 0), account_claims=acc_claims,
                          tags=[str(t) for t in n.get("tags") or []])


def _has_credentials(connect: dict[str, Any]) -> bool:
    return any(connect.get(k) for k in ("user", "pass", "auth_token", "nkey", "jwt"))


def _check_conn_type(allowed: list[str], conn_type: str) -> None:
    if allowed and conn_type.upper() not in {a.upper() for a in allowed}:
        raise AuthError(f"connection type {conn_type} not allowed for this user")
