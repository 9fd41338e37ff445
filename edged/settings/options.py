"""Typed server options: the contract between the config parser, the CLI and the server.

Field names follow nats-server's config keys so a reader of a nats-server config can find them.
Defaults are nats-server's defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DEFAULT_PORT = 4222
DEFAULT_HTTP_PORT = 8222
DEFAULT_MAX_PAYLOAD = 1024 * 1024
DEFAULT_MAX_PENDING = 64 * 1024 * 1024
DEFAULT_MAX_CONTROL_LINE = 4096
DEFAULT_MAX_CONNECTIONS = 64 * 1024
DEFAULT_PING_INTERVAL = 120.0
DEFAULT_PING_MAX = 2
DEFAULT_AUTH_TIMEOUT = 2.0
DEFAULT_TLS_TIMEOUT = 2.0
DEFAULT_WRITE_DEADLINE = 10.0
DEFAULT_LAME_DUCK_DURATION = 120.0
DEFAULT_LAME_DUCK_GRACE = 10.0


@dataclass
class SubjectPermission:
    allow: list[str] = field(default_factory=list)
    deny: list[str] = field(default_factory=list)


@dataclass
class ResponsePermission:
    max_msgs: int = 1
    expires: float = 0.0  # seconds, 0 = never


@dataclass
class Permissions:
    publish: SubjectPermission | None = None
    subscribe: SubjectPermission | None = None
    allow_responses: ResponsePermission | None = None


@dataclass
class User:
    username: str
    password: str = ""  # plain text or a bcrypt hash ("$2a$..")
    permissions: Permissions | None = None
    account: str | None = None  # None = the global account ($G) or the block's account
    allowed_connection_types: list[str] = field(default_factory=list)


@dataclass
class NkeyUser:
    nkey: str  # public user nkey, "U..."
    permissions: Permissions | None = None
    account: str | None = None
    allowed_connection_types: list[str] = field(default_factory=list)


@dataclass
class StreamImport:
    account: str
    subject: str
    to: str = ""  # the local subject (a mapping of `subject`)
    prefix: str = ""  # or a literal prefix put before `subject`
    token: str = ""  # an account JWT's activation token for a private export (edged/security/account_jwt.py)
    allow_trace: bool = False


@dataclass
class ServiceImport:
    account: str
    subject: str
    to: str = ""
    share: bool = False  # the exporter sees who asks in detail (Nats-Request-Info)
    token: str = ""  # an account JWT's activation token for a private export


@dataclass
class Export:
    stream: str | None = None
    service: str | None = None
    accounts: list[str] = field(default_factory=list)  # empty = public
    response_type: str = "Singleton"
    response_threshold: float = 120.0  # seconds a stream/chunked response route stays without traffic
    # account JWT exports: importers need an activation token; revoked activations (importer -> iat);
    # the subject token that must be the importer's account
    token_req: bool = False
    revocations: dict[str, int] = field(default_factory=dict)
    account_token_position: int = 0
    allow_trace: bool = False


@dataclass
class MapDest:
    subject: str
    weight: int = 100  # percent
    cluster: str = ""  # an account JWT's cluster-scoped destination (never used: edged runs no cluster)


@dataclass
class Mapping:
    """A subject mapping: `src` to one destination, or to several by weight (see edged/routing/imports.py)."""
    src: str
    dests: list[MapDest] = field(default_factory=list)


@dataclass
class JetStreamAccountLimits:
    max_memory: int = -1
    max_file: int = -1
    max_streams: int = -1
    max_consumers: int = -1
    max_bytes_required: bool = False
    max_ack_pending: int = -1
    memory_max_stream_bytes: int = -1
    store_max_stream_bytes: int = -1


@dataclass
class AccountConfig:
    name: str
    users: list[User] = field(default_factory=list)
    nkey_users: list[NkeyUser] = field(default_factory=list)
    exports: list[Export] = field(default_factory=list)
    stream_imports: list[StreamImport] = field(default_factory=list)
    service_imports: list[ServiceImport] = field(default_factory=list)
    jetstream: JetStreamAccountLimits | None = None  # None = JetStream not enabled for the account
    mappings: list[Mapping] = field(default_factory=list)
    default_permissions: Permissions | None = None
    nkey: str = ""  # account public key (when configured with one)
    # operator mode: the account JWT's name, issuer (operator key) and signing keys (who may sign its
    # activation tokens)
    name_tag: str = ""
    issuer: str = ""
    signing_keys: list[str] = field(default_factory=list)


@dataclass
class TLSConfig:
    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    verify: bool = False
    verify_and_map: bool = False
    insecure: bool = False
    timeout: float = DEFAULT_TLS_TIMEOUT
    handshake_first: bool = False
    handshake_first_fallback: float = 0.0  # >0: wait that long for a ClientHello, then plain INFO
    cipher_suites: list[str] = field(default_factory=list)
    curve_preferences: list[str] = field(default_factory=list)
    pinned_certs: list[str] = field(default_factory=list)
    min_version: str = ""


@dataclass
class JetStreamConfig:
    enabled: bool = False
    store_dir: str = ""
    domain: str = ""
    max_memory_store: int = -1
    max_file_store: int = -1
    sync_interval: float | str = 120.0  # seconds, or "always"
    unique_tag: str = ""


@dataclass
class RemoteLeafOpts:
    urls: list[str] = field(default_factory=list)
    account: str = ""
    credentials: str = ""
    nkey: str = ""
    seed: str = ""
    tls: TLSConfig | None = None
    ws_compression: bool = False
    ws_no_masking: bool = False
    deny_imports: list[str] = field(default_factory=list)
    deny_exports: list[str] = field(default_factory=list)
    no_randomize: bool = False
    first_info_timeout: float = 1.0
    dial_timeout: float = 1.0
    disabled: bool = False
    compression: str = "off"
    proxy: dict[str, Any] | None = None
    hub: bool = False
    ignore_discovered_urls: bool = False


@dataclass
class LeafUser:
    """One entry of `leafnodes { authorization { users: [...] } }`: a leaf login bound to an account."""

    username: str
    password: str
    account: str = ""


@dataclass
class LeafNodeOpts:
    host: str = ""
    port: int = 0  # accept side: 0 = no leafnode port, -1 = any free port
    advertise: str = ""
    no_advertise: bool = False
    remotes: list[RemoteLeafOpts] = field(default_factory=list)
    reconnect: float = 1.0
    tls: TLSConfig | None = None
    authorization: dict[str, Any] | None = None
    # accept side `authorization { user, password, nkey, account, timeout, users }`
    username: str = ""
    password: str = ""
    nkey: str = ""
    account: str = ""
    auth_timeout: float = 0.0  # 0 = default (2 s, or TLS timeout + 1 s with TLS)
    users: list[LeafUser] = field(default_factory=list)
    min_version: str = ""

    def effective_auth_timeout(self) -> float:
        if self.auth_timeout > 0:
            return self.auth_timeout
        if self.tls is not None:
            return self.tls.timeout + 1.0
        return DEFAULT_AUTH_TIMEOUT


@dataclass
class MQTTOpts:
    host: str = ""
    port: int = 0
    tls: TLSConfig | None = None
    no_auth_user: str = ""
    ack_wait: float = 30.0
    max_ack_pending: int = 1024
    js_domain: str = ""
    js_api_timeout: float = 5.0
    # authorization {} of the MQTT port: one user/password or a token for every MQTT client
    username: str = ""
    password: str = ""
    token: str = ""
    auth_timeout: float = 0.0
    stream_replicas: int = 0
    consumer_replicas: int = 0
    consumer_memory_storage: bool = False
    consumer_inactive_threshold: float = 0.0
    reject_qos2_publish: bool = False
    downgrade_qos2_subscribe: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class WebsocketOpts:
    """`websocket {}` as nats-server reads it (served by bridges/websocket)."""

    host: str = ""
    port: int = 0
    advertise: str = ""
    no_tls: bool = False
    tls: TLSConfig | None = None
    compression: bool = False
    same_origin: bool = False
    allowed_origins: list[str] = field(default_factory=list)
    handshake_timeout: float = 0.0  # 0: nats-server sets none; edged gives the upgrade 2 s (README)
    # authorization {} of the block: overrides the server's for WebSocket clients when user, token or
    # no_auth_user is set (nats-server's authOverride)
    username: str = ""
    password: str = ""
    token: str = ""
    auth_timeout: float = 0.0
    no_auth_user: str = ""
    jwt_cookie: str = ""
    user_cookie: str = ""
    pass_cookie: str = ""
    token_cookie: str = ""
    headers: dict[str, str] = field(default_factory=dict)  # added to the 101 answer
    ping_interval: float = 0.0  # 0: the server's
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class BridgeOutRule:
    """`out`: a local subject (core NATS, at most once) or a stream's durable consumer (at least once) to an
    upstream topic. `topic` is a template in topic form; its `{{wildcard(n)}}` / `$n` take the source's
    wildcards; empty = the subject with `.` as `/`."""

    subject: str = ""
    stream: str = ""
    filter_subject: str = ""
    durable: str = ""
    deliver: str = "all"  # where a new durable starts: all / new
    topic: str = ""
    qos: int = 1
    retain: bool = False


@dataclass
class BridgeInRule:
    """`in`: an upstream topic filter to a local subject; with `stream`, the upstream PUBACK waits for the
    stream's PubAck. `subject` is a template in subject form; empty = the topic with `/` as `.`."""

    topic: str = ""
    subject: str = ""
    stream: str = ""
    qos: int = 1


@dataclass
class MQTTBridgeOpts:
    """One `edged { mqtt_bridge [ ... ] }` entry: a connection to an upstream MQTT broker and its rules."""

    name: str = ""
    urls: list[str] = field(default_factory=list)  # mqtt://host:port, mqtts://host:port
    client_id: str = ""
    username: str = ""
    password: str = ""
    tls: TLSConfig | None = None  # ca_file, cert_file/key_file, insecure
    protocol: int = 4  # 4 = MQTT 3.1.1, 5 = MQTT 5
    keepalive: float = 30.0
    clean_session: bool = False
    account: str = "$G"
    max_inflight: int = 100  # per out rule: messages handed to the broker and not yet acknowledged
    reconnect_max: float = 30.0  # backoff ceiling between connection attempts
    out: list[BridgeOutRule] = field(default_factory=list)
    in_: list[BridgeInRule] = field(default_factory=list)


@dataclass
class ConfigWarning:
    """A setting that was read but that edged does not act on (yet)."""

    key: str
    where: str  # "file:line:col"
    message: str


@dataclass
class Options:
    # identity and listen
    server_name: str = ""
    host: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    client_advertise: str = ""
    http_host: str = ""  # "" = the client port's host (`monitor_host`)
    http_port: int = 0  # 0 = monitoring off; -1 = random
    http_base_path: str = ""
    # limits
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_subscriptions: int = 0  # 0 = unlimited
    max_payload: int = DEFAULT_MAX_PAYLOAD
    max_pending: int = DEFAULT_MAX_PENDING
    max_control_line: int = DEFAULT_MAX_CONTROL_LINE
    ping_interval: float = DEFAULT_PING_INTERVAL
    ping_max: int = DEFAULT_PING_MAX
    write_deadline: float = DEFAULT_WRITE_DEADLINE
    no_header_support: bool = False
    disable_sublist_cache: bool = False
    # logging
    debug: bool = False
    trace: bool = False
    logtime: bool = True
    log_file: str = ""
    syslog: bool = False
    pid_file: str = ""
    ports_file_dir: str = ""
    # lame duck
    lame_duck_duration: float = DEFAULT_LAME_DUCK_DURATION
    lame_duck_grace_period: float = DEFAULT_LAME_DUCK_GRACE
    # auth (top-level `authorization {}` and CLI)
    username: str = ""
    password: str = ""
    authorization: str = ""  # token
    users: list[User] = field(default_factory=list)
    nkeys: list[NkeyUser] = field(default_factory=list)
    auth_timeout: float = 0.0  # 0 = default (2 s, or TLS timeout + 1 s with TLS)
    default_permissions: Permissions | None = None
    no_auth_user: str = ""
    accounts: list[AccountConfig] = field(default_factory=list)
    mappings: list[Mapping] = field(default_factory=list)  # server level: the global account's
    system_account: str = ""
    no_system_account: bool = False
    # operator / JWT mode
    trusted_operators: list[str] = field(default_factory=list)  # operator JWT strings (already read)
    trusted_keys: list[str] = field(default_factory=list)
    resolver: str = ""  # "MEMORY" supported
    resolver_preload: dict[str, str] = field(default_factory=dict)  # account pubkey -> JWT
    # TLS on the client port
    tls: TLSConfig | None = None
    allow_non_tls: bool = False
    # subsystems
    jetstream: JetStreamConfig = field(default_factory=JetStreamConfig)
    leafnodes: LeafNodeOpts | None = None
    mqtt: MQTTOpts | None = None
    websocket: WebsocketOpts | None = None
    # edged-only block (`edged { ... }`): hardware, systemd, etc.
    edged: dict[str, Any] = field(default_factory=dict)
    mqtt_bridges: list[MQTTBridgeOpts] = field(default_factory=list)  # edged { mqtt_bridge [...] }
    # where options came from
    config_file: str = ""
    config_digest: str = ""  # /varz config_digest: "sha256:<hex>" of the parsed file (config.load_options)
    warnings: list[ConfigWarning] = field(default_factory=list)

    def monitor_host(self) -> str:
        """Where the monitoring port listens: its own host, else the client port's, as nats-server's
        setBaselineOptions does (`-a 127.0.0.1 -m 8222` keeps monitoring on the loopback too)."""
        return self.http_host or self.host or "0.0.0.0"

    def effective_auth_timeout(self) -> float:
        if self.auth_timeout > 0:
            return self.auth_timeout
        if self.tls is not None:
            return self.tls.timeout + 1.0
        return DEFAULT_AUTH_TIMEOUT
