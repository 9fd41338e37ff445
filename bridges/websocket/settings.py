"""The `websocket {}` block's checks that nats-server makes when it starts (server/websocket.go
validateWebsocketOptions, auth.go validateNoAuthUser), with its texts, and the authenticator a WebSocket
client is checked by (the block's `authorization {}` / `no_auth_user` override the server's, nats-server's
authOverride; TLS certificate mapping is the block's own `tls { verify_and_map }`)."""

from __future__ import annotations

import dataclasses

from bridges.websocket.handshake import OriginError, parse_allowed_origins
from edged.security.auth import Authenticator
from edged.settings.options import Options, WebsocketOpts

_RESERVED_HEADERS = ("host", "content-length", "connection", "upgrade", "nats-no-masking")


def validate(opts: Options) -> None:
    """Raise ValueError with nats-server's text for a block it refuses to start with."""
    wo = opts.websocket
    if wo is None or wo.port == 0:
        return
    if wo.tls is None and not wo.no_tls:
        raise ValueError("websocket requires TLS configuration")
    try:
        parse_allowed_origins(wo.allowed_origins)
    except OriginError as e:
        raise ValueError(str(e)) from None
    # nats-server counts the users of accounts {} among the server's users
    users = {u.username for u in opts.users} | {n.nkey for n in opts.nkeys}
    for acc in opts.accounts:
        users |= {u.username for u in acc.users} | {n.nkey for n in acc.nkey_users}
    if wo.no_auth_user:
        if opts.trusted_operators or opts.trusted_keys:
            raise ValueError("no_auth_user not compatible with Trusted Operator")
        if not users:
            raise ValueError(f'no_auth_user: "{wo.no_auth_user}" present, but users/nkeys are not defined')
        if wo.no_auth_user not in users:
            raise ValueError(f'no_auth_user: "{wo.no_auth_user}" not present as user or nkey in authorization '
                             "block or account configuration")
    if users:
        if wo.username:
            raise ValueError("websocket authentication username not compatible with presence of users/nkeys")
        if wo.token:
            raise ValueError("websocket authentication token not compatible with presence of users/nkeys")
    if wo.jwt_cookie and not (opts.trusted_operators or opts.trusted_keys):
        raise ValueError("trusted operators or trusted keys configuration is required for JWT authentication "
                         f'via cookie "{wo.jwt_cookie}"')
    for key in wo.headers:
        k = key.lower()
        if k in _RESERVED_HEADERS:
            raise ValueError(f'websocket: invalid header "{key}" not allowed')
        if k.startswith("sec-websocket-"):
            raise ValueError(f'websocket: invalid header "{key}", "Sec-WebSocket-" prefix not allowed')
    authenticator(opts, wo)


def auth_override(wo: WebsocketOpts) -> bool:
    return bool(wo.username or wo.token or wo.no_auth_user)


def authenticator(opts: Options, wo: WebsocketOpts) -> Authenticator:
    """The server's users and accounts, with the block's credentials and TLS mapping in place of the
    server-wide ones."""
    changes: dict[str, object] = {"tls": wo.tls}
    if auth_override(wo):
        changes.update(username=wo.username, password=wo.password, authorization=wo.token,
                       no_auth_user=wo.no_auth_user)
    return Authenticator(dataclasses.replace(opts, **changes))
