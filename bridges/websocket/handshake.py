"""The upgrade request's rules as nats-server's WebSocket listener applies them (server/websocket.go
wsUpgrade, checkOrigin, wsPMCExtensionSupport), sans-I/O: a parsed HTTP request in, a verdict out.

nats-server checks in a fixed order and answers each failure with one HTTP status (404 for MQTT when
nothing serves it, 405 for another method than GET, 400 for a missing Host/Upgrade/Connection/key/version,
403 for an origin it does not allow); edged answers the same. The `websockets` library then builds the
101 answer (accept key, extension negotiation).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from websockets.datastructures import Headers

LEAF_PATH = "/leafnode"
MQTT_PATH = "/mqtt"
KIND_CLIENT, KIND_MQTT, KIND_LEAF = "client", "mqtt", "leaf"
NO_MASKING_HEADER = "Nats-No-Masking"


class OriginError(ValueError):
    """An origin nats-server would not accept (text as its log says it)."""


@dataclass(frozen=True)
class AllowedOrigin:
    scheme: str
    host: str
    port: str


def host_and_port(tls: bool, hostport: str) -> tuple[str, str]:
    """nats-server's wsGetHostAndPort: a missing port is the scheme's default; the host lower-cased."""
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0:
            raise OriginError(f"address {hostport}: missing ']' in address")
        host, rest = hostport[1:end], hostport[end + 1:]
        if rest and not rest.startswith(":"):
            raise OriginError(f"address {hostport}: unexpected characters after ']'")
        port = rest[1:] if rest else ""
    elif hostport.count(":") > 1:
        raise OriginError(f"address {hostport}: too many colons in address")
    else:
        host, sep, port = hostport.partition(":")
        if not sep:
            port = ""
    if not port:
        port = "443" if tls else "80"
    return host.lower(), port


def _parse_origin_url(text: str) -> tuple[str, str]:
    """(scheme, host[:port]) of an absolute URL, as Go's url.ParseRequestURI accepts it."""
    u = urlsplit(text)
    if not u.scheme or not text[len(u.scheme) + 1:].startswith("//"):
        raise OriginError(f'parse "{text}": invalid URI for request')
    return u.scheme, u.netloc.rpartition("@")[2]


def parse_allowed_origins(origins: list[str]) -> list[AllowedOrigin]:
    """The configured list, checked as nats-server's validateWebsocketOptions does."""
    out = []
    for ao in origins:
        try:
            scheme, netloc = _parse_origin_url(ao)
        except OriginError as e:
            raise OriginError(f"unable to parse allowed origin: {e}") from None
        if scheme not in ("http", "https"):
            raise OriginError(f'unable to parse allowed origin "{ao}": allowed origins must be absolute URLs '
                              "with http or https scheme")
        if not netloc:
            raise OriginError(f'unable to parse allowed origin "{ao}": host is required')
        try:
            host, port = host_and_port(scheme == "https", netloc)
        except OriginError as e:
            raise OriginError(f"unable to parse allowed origin: {e}") from None
        out.append(AllowedOrigin(scheme, host, port))
    return out


def check_origin(headers: Headers, same_origin: bool, allowed: list[AllowedOrigin], tls: bool) -> None:
    """nats-server's checkOrigin: nothing to check without same_origin or a list, or without an Origin
    header (a non-browser client can send any); raises OriginError when refused."""
    if not same_origin and not allowed:
        return
    origin = first(headers, "Origin") or first(headers, "Sec-WebSocket-Origin")
    if not origin:
        return
    scheme, netloc = _parse_origin_url(origin)
    oh, op = host_and_port(scheme == "https", netloc)
    if same_origin:
        rh, rp = host_and_port(tls, first(headers, "Host"))
        if oh != rh or op != rp or scheme.lower() != ("https" if tls else "http"):
            raise OriginError("not same origin")
    if allowed and not any(a.host == oh and a.scheme == scheme and a.port == op for a in allowed):
        raise OriginError("not in the allowed list")


def first(headers: Headers, name: str) -> str:
    """The header's first value, "" if absent (Go's Header.Get; websockets' get() refuses repeated ones)."""
    values = headers.get_all(name)
    return values[0] if values else ""


def header_contains(headers: Headers, name: str, value: str) -> bool:
    """A comma-separated header (any of its lines) has the token, case-insensitively."""
    v = value.lower()
    return any(t.strip(" \t").lower() == v for line in headers.get_all(name) for t in line.split(","))


def offers_deflate(headers: Headers) -> bool:
    return any(p.strip(" \t").lower() == "permessage-deflate"
               for line in headers.get_all("Sec-WebSocket-Extensions")
               for ext in line.split(",") for p in ext.split(";"))


def kind_of(path: str) -> str:
    """What the request path asks for (nats-server matches the path's end, query aside)."""
    p = path.partition("?")[0]
    if p.endswith(LEAF_PATH):
        return KIND_LEAF
    if p.endswith(MQTT_PATH):
        return KIND_MQTT
    return KIND_CLIENT


def cookies(headers: Headers) -> dict[str, str]:
    """`Cookie: a=1; b="2"` -> {a: 1, b: 2} (the first of a repeated name, as Go's Request.Cookies)."""
    out: dict[str, str] = {}
    for line in headers.get_all("Cookie"):
        for part in line.split(";"):
            name, sep, value = part.strip().partition("=")
            if not sep or not name:
                continue
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            out.setdefault(name, value)
    return out


@dataclass
class Verdict:
    """What nats-server would answer: `status` 0 to upgrade, else the HTTP status and the log's reason."""

    kind: str = KIND_CLIENT
    status: int = 0
    reason: str = ""
    compress: bool = False
    no_masking: bool = False
    cookies: dict[str, str] = field(default_factory=dict)
    browser: bool = False
    no_compressed_fragments: bool = False


@dataclass
class Policy:
    """The listener's settings the rules need."""

    tls: bool = False
    compression: bool = False
    same_origin: bool = False
    allowed: list[AllowedOrigin] = field(default_factory=list)
    kinds: frozenset[str] = frozenset({KIND_CLIENT})  # what this listener serves


def judge(method: str, path: str, headers: Headers, policy: Policy) -> Verdict:
    kind = kind_of(path)
    v = Verdict(kind)
    if kind == KIND_MQTT and KIND_MQTT not in policy.kinds:
        return _refuse(v, 404, "mqtt websocket endpoint not enabled")
    if method != "GET":
        return _refuse(v, 405, "request method must be GET")
    if not first(headers, "Host"):
        return _refuse(v, 400, "'Host' missing in request")
    if not header_contains(headers, "Upgrade", "websocket"):
        return _refuse(v, 400, "invalid value for header 'Upgrade'")
    if not header_contains(headers, "Connection", "Upgrade"):
        return _refuse(v, 400, "invalid value for header 'Connection'")
    key = first(headers, "Sec-WebSocket-Key")
    if not key:
        return _refuse(v, 400, "key missing")
    try:
        if len(base64.b64decode(key, validate=True)) != 16:
            raise ValueError(key)
    except (binascii.Error, ValueError):
        return _refuse(v, 400, "invalid websocket key")
    if not header_contains(headers, "Sec-WebSocket-Version", "13"):
        return _refuse(v, 400, "invalid version")
    try:
        check_origin(headers, policy.same_origin, policy.allowed, policy.tls)
    except OriginError as e:
        return _refuse(v, 403, f"origin not allowed: {e}")
    v.compress = policy.compression and offers_deflate(headers)
    v.no_masking = first(headers, NO_MASKING_HEADER) == "true"
    if kind != KIND_LEAF:
        v.cookies = cookies(headers)
        ua = first(headers, "User-Agent")
        v.browser = ua.startswith("Mozilla/")
        # Safari takes no fragmented compressed message (nats-server: Chrome on macOS also says Safari/)
        v.no_compressed_fragments = v.browser and v.compress and "Version/" in ua and "Safari/" in ua
    return v


def _refuse(v: Verdict, status: int, reason: str) -> Verdict:
    v.status, v.reason = status, reason
    return v
