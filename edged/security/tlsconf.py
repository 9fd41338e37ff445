"""SSL contexts from nats-server style `tls {}` blocks, for the client port and for leafnode remotes."""

from __future__ import annotations

import ssl

from edged.settings.options import TLSConfig

_VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}


class TLSConfigError(ValueError):
    pass


def _min_version(ctx: ssl.SSLContext, tls: TLSConfig) -> None:
    # nats-server refuses anything older than TLS 1.2
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if tls.min_version:
        v = _VERSIONS.get(tls.min_version.strip())
        if v is None:
            raise TLSConfigError(f"unsupported TLS min_version {tls.min_version!r} (use 1.2 or 1.3)")
        ctx.minimum_version = v


def _load_chain(ctx: ssl.SSLContext, tls: TLSConfig) -> None:
    try:
        ctx.load_cert_chain(tls.cert_file, tls.key_file or None)
    except (OSError, ssl.SSLError) as e:
        raise TLSConfigError(f"error parsing X509 certificate/key pair ({tls.cert_file}, {tls.key_file}): {e}") from None


def _load_ca(ctx: ssl.SSLContext, tls: TLSConfig) -> None:
    try:
        ctx.load_verify_locations(cafile=tls.ca_file)
    except (OSError, ssl.SSLError) as e:
        raise TLSConfigError(f"failed to parse root ca certificate {tls.ca_file}: {e}") from None


def server_ssl_context(tls: TLSConfig) -> ssl.SSLContext:
    """The client port's context: our cert, and with `verify` a client cert signed by `ca_file` is required."""
    if not tls.cert_file:
        raise TLSConfigError("missing 'cert_file' in TLS configuration")
    if not tls.key_file:
        raise TLSConfigError("missing 'key_file' in TLS configuration")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _min_version(ctx, tls)
    _load_chain(ctx, tls)
    if tls.ca_file:
        _load_ca(ctx, tls)
    if tls.verify or tls.verify_and_map:
        if not tls.ca_file:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.verify_mode = ssl.CERT_NONE
    if tls.cipher_suites:
        try:
            ctx.set_ciphers(":".join(tls.cipher_suites))
        except ssl.SSLError:
            pass  # Go cipher suite names; OpenSSL's defaults are what nats-server would pick anyway
    return ctx


def client_ssl_context(tls: TLSConfig | None) -> ssl.SSLContext:
    """A context for dialing out (leafnode remotes): verify the hub against `ca_file` unless `insecure`."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if tls is None:
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        return ctx
    _min_version(ctx, tls)
    if tls.ca_file:
        _load_ca(ctx, tls)
    if tls.cert_file:
        _load_chain(ctx, tls)
    if tls.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx
