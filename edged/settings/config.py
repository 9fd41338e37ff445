"""nats-server config files → typed `Options`.

Keys and aliases are nats-server's (server/opts.go), so its configs load unchanged. Settings edged
reads but does not act on become `ConfigWarning`s (logged at start, printed by `edged check`);
wrong types and values raise `ConfigError` naming file:line:col. A key nats-server does not know is
an error (`unknown field "x"`) in every block nats-server checks, as it is there: a typo such as
`store_dri` must not quietly move the store. All the unknown keys of a file are reported together.

Paths: only `include` is relative to the including file (the parser does that). Every other path
(store_dir, credentials, cert/key/CA files, operator JWT files, pid and log files) is used as
written, so a relative one is relative to the working directory: that is what nats-server does, and
keeping it means a config behaves the same under both servers. `credentials` also expands `~` and
`$ENV` as nats-server does.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from typing import Any

from edged.settings.conf import ConfigError, ConfList, ConfMap, Pos, parse, parse_file
from edged.settings.options import (
    AccountConfig,
    ConfigWarning,
    Export,
    JetStreamAccountLimits,
    LeafNodeOpts,
    LeafUser,
    MapDest,
    Mapping,
    MQTTOpts,
    NkeyUser,
    Options,
    Permissions,
    RemoteLeafOpts,
    ResponsePermission,
    ServiceImport,
    StreamImport,
    SubjectPermission,
    TLSConfig,
    User,
    WebsocketOpts,
)

__all__ = ["ConfigError", "load_options", "options_from_dict", "options_from_text", "parse_duration",
           "set_flag_overrides"]

# nats-server top-level keys that edged accepts but does not act on: each gives a warning, never an error.
_UNSUPPORTED = {
    "cluster": "clustering (routes) is not supported: edged is a single server",
    "gateway": "gateways are not supported",
    "https": "monitoring over HTTPS is not supported; use http",
    "https_port": "monitoring over HTTPS is not supported; use http_port",
    "ocsp": "OCSP stapling is not supported",
    "ocsp_cache": "OCSP is not supported",
    "default_sentinel": "auth callout sentinels are not supported",
    "logfile_size_limit": "log rotation by size is not supported; use logrotate and --signal reopen",
    "log_size_limit": "log rotation by size is not supported; use logrotate and --signal reopen",
    "logfile_max_num": "log rotation is not supported; use logrotate and --signal reopen",
    "log_max_num": "log rotation is not supported; use logrotate and --signal reopen",
    "logtime_utc": "log timestamps are always local time",
    "remote_syslog": "remote syslog is not supported; under systemd logs go to journald",
    "prof_port": "the Go profiler port has no meaning for edged",
    "prof_block_rate": "the Go profiler has no meaning for edged",
    "proxy_protocol": "the PROXY protocol is not supported",
    "proxies": "trusted proxies are not supported",
    "max_sub_tokens": "a limit on subject tokens is not supported",
    "max_subscription_tokens": "a limit on subject tokens is not supported",
    "write_timeout": "write_timeout policies are not supported; a slow consumer is closed",
    "resolver_tls": "only the MEMORY resolver is supported",
    "resolver_pinned_accounts": "resolver_pinned_accounts is not supported",
    "server_tags": "server tags have no use on a single server",
    "server_metadata": "server metadata is not supported",
    "feature_flags": "feature flags are not supported",
    "default_js_domain": "default_js_domain is not supported",
    "no_fast_producer_stall": "no_fast_producer_stall is not supported",
    "max_closed_clients": "closed connections are not kept for /connz",
    "max_traced_msg_len": "max_traced_msg_len is ignored",
    "connect_error_reports": "connect_error_reports is ignored",
    "reconnect_error_reports": "reconnect_error_reports is ignored",
}

_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_STORAGE_SHIFT = {"K": 10, "M": 20, "G": 30, "T": 40}

# nats-server's FlagSnapshot: command-line flags re-applied to every config load, so a reload keeps them.
_flag_overrides: Callable[[Options], None] | None = None


def set_flag_overrides(apply: Callable[[Options], None] | None) -> None:
    """Install the command-line flags (a function applying them) that `load_options` puts on top."""
    global _flag_overrides
    _flag_overrides = apply


def parse_duration(text: str) -> float:
    """Seconds from a Go duration ("1h30m", "500ms", "2s") — nats-server's time.ParseDuration."""
    s = text.strip()
    if s in ("0", "+0", "-0"):
        return 0.0
    neg = s.startswith("-")
    body = s[1:] if s[:1] in "+-" and s else s
    pos, total = 0, 0.0
    for m in _GO_DURATION.finditer(body):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_S[m.group(2)]
        pos = m.end()
    if pos != len(body) or not body:
        raise ValueError(f'time: invalid duration "{text}"')
    return -total if neg else total


class _Ctx:
    """Positions, warnings and typed getters for one config load."""

    def __init__(self, opts: Options, filename: str) -> None:
        self.opts = opts
        self.filename = filename
        self.errors: list[ConfigError] = []  # unknown keys, reported together at the end

    def pos(self, m: Any, key: str | int) -> Pos | None:
        if isinstance(m, ConfMap):
            return m.pos.get(str(key))
        if isinstance(m, ConfList) and isinstance(key, int) and key < len(m.pos):
            return m.pos[key]
        return None

    def err(self, m: Any, key: str | int, reason: str) -> ConfigError:
        return ConfigError(reason, self.pos(m, key))

    def warn(self, m: Any, key: str, message: str) -> None:
        p = self.pos(m, key)
        self.opts.warnings.append(ConfigWarning(key, str(p) if p else self.filename, message))

    def unknown(self, m: Any, key: str, reason: str = "unknown field {key}") -> None:
        """A key nats-server does not know: an error, unless it is a variable used as $VAR."""
        if isinstance(m, ConfMap) and key in m.used_vars:
            return
        self.errors.append(self.err(m, key, reason.format(key=_go_quote(key))))

    # -------------------------------------------------------------- typed getters

    def str_(self, m: Any, key: str) -> str:
        v = m[key]
        if isinstance(v, bool) or isinstance(v, dict | list):
            raise self.err(m, key, f"{key}: expected a string, got {_kind(v)}")
        return str(v)

    def int_(self, m: Any, key: str) -> int:
        v = m[key]
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, float) and v.is_integer():
                return int(v)
            raise self.err(m, key, f"{key}: expected an integer, got {v!r}")
        return v

    def bool_(self, m: Any, key: str) -> bool:
        v = m[key]
        if not isinstance(v, bool):
            raise self.err(m, key, f"{key}: expected a boolean, got {v!r}")
        return v

    def size(self, m: Any, key: str) -> int:
        """A storage size: an integer (units like 1G already applied) or a string "10G" (K/M/G/T, binary)."""
        v = m[key]
        if isinstance(v, str):
            s = v.strip()
            if not s:
                return 0
            shift = _STORAGE_SHIFT.get(s[-1])
            if shift is None or not re.fullmatch(r"-?\d+", s[:-1]):
                raise self.err(m, key, f"{key}: sizes defined as strings must end in K, M, G, T, got {v!r}")
            return int(s[:-1]) << shift
        return self.int_(m, key)

    def duration(self, m: Any, key: str, legacy_seconds: bool = True) -> float:
        """A Go duration string, or a number of seconds (nats-server's older form, warned about)."""
        v = m[key]
        raw = m.raw.get(key, "") if isinstance(m, ConfMap) else ""
        if isinstance(v, str):
            try:
                return parse_duration(v)
            except ValueError as e:
                raise self.err(m, key, f"error parsing {key}: {e}") from None
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.err(m, key, f"{key}: expected a duration, got {_kind(v)}")
        if raw and re.search(r"[a-zA-Zµ]", raw):
            # `2m` unquoted lexes as the size 2000000; nats-server then takes it as seconds.
            try:
                secs = parse_duration(raw)
            except ValueError:
                secs = None
            if secs is not None:
                self.warn(m, key, f"{key}: unquoted {raw} is read as the duration {raw!r}; nats-server reads "
                                  f"it as {v} seconds: write \"{raw}\" to mean the same on both")
                return secs
        if legacy_seconds:
            self.warn(m, key, f"{key} should be converted to a duration")
        return float(v)

    def map_(self, m: Any, key: str) -> ConfMap:
        v = m[key]
        if not isinstance(v, dict):
            raise self.err(m, key, f"{key}: expected a block {{ }}, got {_kind(v)}")
        return v  # type: ignore[return-value]

    def strlist(self, m: Any, key: str) -> list[str]:
        v = m[key]
        if isinstance(v, str):
            return [v]
        if isinstance(v, list) and all(isinstance(x, str) for x in v):
            return [str(x) for x in v]
        raise self.err(m, key, f"{key}: expected a string or an array of strings")

    def list_(self, m: Any, key: str) -> ConfList:
        v = m[key]
        if not isinstance(v, list):
            raise self.err(m, key, f"{key}: expected an array, got {_kind(v)}")
        return v  # type: ignore[return-value]


def _go_quote(s: str) -> str:
    """Go's %q of a plain string, as nats-server quotes field names."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, dict):
        return "a block"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, int | float):
        return f"the number {v}"
    return f"{type(v).__name__} {v!r}"


def config_digest(conf: ConfMap) -> str:
    """A digest of the parsed config as nats-server's /varz shows one (sha256 of its JSON): it changes when
    the configuration does. Not the same hex as nats-server's for the same file (Go's JSON of its own
    parse tree)."""
    text = json.dumps(conf, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def load_options(path: str) -> Options:
    """Options from a config file, with the command-line flags (if the CLI installed them) on top."""
    conf = parse_file(path)
    opts = options_from_dict(conf, base_dir=os.path.dirname(os.path.abspath(path)), filename=path)
    opts.config_digest = config_digest(conf)
    if _flag_overrides is not None:
        _flag_overrides(opts)
    return opts


def options_from_text(text: str, filename: str = "<string>") -> Options:
    return options_from_dict(parse(text, filename), filename=filename)


def options_from_dict(conf: dict[str, Any], base_dir: str = ".", filename: str = "") -> Options:
    """Map a parsed config onto `Options`.

    `base_dir` is the config file's directory; `include`s were already resolved against it by the
    parser, and other paths deliberately are not (see the module docstring).
    """
    del base_dir  # paths stay as written, relative to the working directory, as in nats-server
    opts = Options(config_file=os.path.abspath(filename) if filename and not filename.startswith("<") else "")
    cx = _Ctx(opts, filename or "<config>")
    try:
        for key in list(conf):
            lk = key.lower()
            handler = _TOP.get(lk)
            if handler is not None:
                handler(cx, conf, key)
            elif lk in _UNSUPPORTED:
                cx.warn(conf, key, f"{key} is not supported by edged and is ignored: {_UNSUPPORTED[lk]}")
                if lk in _IGNORED_BLOCKS:
                    _check_keys(cx, conf, key, _IGNORED_BLOCKS[lk])
            else:
                cx.unknown(conf, key)
    except ConfigError as e:
        raise ConfigError.combined(cx.errors + e.errors) from None
    if cx.errors:
        raise ConfigError.combined(cx.errors)
    _check(cx, conf)
    return opts


def _check(cx: _Ctx, conf: Any) -> None:
    """Cross-key rules nats-server enforces after reading every key."""
    o = cx.opts
    names = {a.name for a in o.accounts}
    jwt_mode = bool(o.trusted_operators or o.trusted_keys)
    if o.max_payload > o.max_pending:
        raise cx.err(conf, "max_payload" if "max_payload" in conf else "max_pending",
                     f"max_payload ({o.max_payload}) cannot be higher than max_pending ({o.max_pending})")
    if o.system_account and not jwt_mode and o.system_account not in names and o.system_account != "$SYS":
        key = "system_account" if "system_account" in conf else "system"
        raise cx.err(conf, key, f'system_account "{o.system_account}" not defined in accounts')
    if o.no_auth_user:
        known = ({u.username for u in o.users} | {u.nkey for u in o.nkeys}
                 | {u.username for a in o.accounts for u in a.users} | {u.nkey for a in o.accounts for u in a.nkey_users})
        if o.no_auth_user not in known:
            raise cx.err(conf, "no_auth_user", f'no_auth_user: "{o.no_auth_user}" not present as user or nkey in '
                                               "authorization block or account configuration")
    account_users = any(a.users or a.nkey_users for a in o.accounts)
    if account_users and o.username:
        raise cx.err(conf, "authorization", "Can not have a single user/pass and accounts")
    if account_users and o.authorization:
        raise cx.err(conf, "authorization", "Can not have a token and accounts")
    seen: set[str] = set()
    for u in o.users + [u for a in o.accounts for u in a.users]:
        if u.username in seen:
            raise cx.err(conf, "accounts" if "accounts" in conf else "authorization",
                         f"Duplicate user {u.username!r} detected")
        seen.add(u.username)
    for r in o.leafnodes.remotes if o.leafnodes else []:
        if r.account and r.account not in names and r.account != "$G" and not jwt_mode:
            key = "leafnodes" if "leafnodes" in conf else "leaf"
            raise cx.err(conf, key, f'remote leafnode account "{r.account}" not defined in accounts')
    from edged.routing.imports import check_config

    problems = check_config(o)
    if problems:
        raise ConfigError.combined([cx.err(conf, "accounts", p) for p in problems])


# ------------------------------------------------------------------ top level


def _set(attr: str, kind: str) -> Any:
    def h(cx: _Ctx, m: Any, key: str) -> None:
        setattr(cx.opts, attr, getattr(cx, kind)(m, key))
    return h


def valid_port(port: int) -> bool:
    """0 (the default port), -1 (a random one) or a TCP port: what nats-server can listen on."""
    return -1 <= port <= 65535


def port_error(key: str, port: int) -> str:
    """nats-server takes any integer and fails at start with Go's "address N: invalid port"; edged says it
    when the file is read, so `edged check` refuses what `edged run` could not start with."""
    return f"error parsing {key}: address {port}: invalid port (a port is 0 to 65535, or -1 for a random one)"


def _port(cx: _Ctx, m: Any, key: str) -> int:
    v = cx.int_(m, key)
    if not valid_port(v):
        raise cx.err(m, key, port_error(key, v))
    return v


def _client_port(cx: _Ctx, m: Any, key: str) -> None:
    cx.opts.port = _port(cx, m, key)


def _host_port(cx: _Ctx, m: Any, key: str) -> tuple[str, int]:
    """`host:port`, `[v6]:port` or a bare port, as nats-server's parseListen; the port must be one."""
    host, port = _parse_host_port(cx, m, key)
    if not valid_port(port):
        raise cx.err(m, key, port_error(key, port))
    return host, port


def _parse_host_port(cx: _Ctx, m: Any, key: str) -> tuple[str, int]:
    v = m[key]
    if isinstance(v, int) and not isinstance(v, bool):
        return "", v
    s = cx.str_(m, key)
    host, sep, port = s.rpartition(":")
    if not sep:
        raise cx.err(m, key, f"could not parse address string {s!r}")
    if not re.fullmatch(r"-?\d+", port):
        raise cx.err(m, key, f"could not parse port {port!r}")
    if host.startswith("["):
        host = host.strip("[]")
    elif ":" in host:
        raise cx.err(m, key, f"could not parse address string {s!r}")
    return host, int(port)


def _listen(cx: _Ctx, m: Any, key: str) -> None:
    host, port = _host_port(cx, m, key)
    if host:
        cx.opts.host = host
    cx.opts.port = port


def _http(cx: _Ctx, m: Any, key: str) -> None:
    host, port = _host_port(cx, m, key)
    if host:
        cx.opts.http_host = host
    cx.opts.http_port = port


def _server_name(cx: _Ctx, m: Any, key: str) -> None:
    name = cx.str_(m, key)
    if " " in name:
        raise cx.err(m, key, "server name can not contain spaces")
    cx.opts.server_name = name


def _int31(attr: str) -> Any:
    def h(cx: _Ctx, m: Any, key: str) -> None:
        v = cx.int_(m, key)
        if v > 2**31 - 1:
            raise cx.err(m, key, f"{key} value is too big")
        setattr(cx.opts, attr, v)
    return h


def _max_connections(cx: _Ctx, m: Any, key: str) -> None:
    v = cx.int_(m, key)
    cx.opts.max_connections = -1 if v == 0 else v  # nats-server: 0 in a config means no connections


def _trace_flavour(cx: _Ctx, m: Any, key: str) -> None:
    cx.opts.trace = cx.bool_(m, key)  # trace_verbose / trace_headers: edged's trace covers both


def _lame_duck_duration(cx: _Ctx, m: Any, key: str) -> None:
    d = cx.duration(m, key)
    if d < 30:
        raise cx.err(m, key, f"invalid lame_duck_duration of {m[key]}, minimum is 30 seconds")
    cx.opts.lame_duck_duration = d


def _lame_duck_grace(cx: _Ctx, m: Any, key: str) -> None:
    d = cx.duration(m, key)
    if d < 0:
        raise cx.err(m, key, "invalid lame_duck_grace_period, needs to be positive")
    cx.opts.lame_duck_grace_period = d


def _warn_if_true(attr: str, message: str) -> Any:
    def h(cx: _Ctx, m: Any, key: str) -> None:
        v = cx.bool_(m, key)
        setattr(cx.opts, attr, v)
        if v:
            cx.warn(m, key, message)
    return h


def _ports_file_dir(cx: _Ctx, m: Any, key: str) -> None:
    cx.opts.ports_file_dir = cx.str_(m, key)
    cx.warn(m, key, "ports files are not written by edged")


def _top_store_dir(cx: _Ctx, m: Any, key: str) -> None:
    if cx.opts.jetstream.store_dir:
        raise cx.err(m, key, "Duplicate 'store_dir' configuration")
    cx.opts.jetstream.store_dir = cx.str_(m, key)


def _authorization(cx: _Ctx, m: Any, key: str) -> None:
    a = cx.map_(m, key)
    o = cx.opts
    for k in a:
        lk = k.lower()
        if lk in ("user", "username"):
            o.username = cx.str_(a, k)
        elif lk in ("pass", "password"):
            o.password = cx.str_(a, k)
        elif lk == "token":
            o.authorization = cx.str_(a, k)
        elif lk == "timeout":
            o.auth_timeout = cx.duration(a, k, legacy_seconds=False)
        elif lk == "users":
            users, nks = _users(cx, a, k, None)
            o.users.extend(users)
            o.nkeys.extend(nks)
        elif lk in ("default_permission", "default_permissions", "permissions"):
            o.default_permissions = _permissions(cx, a, k)
        elif lk in ("auth_callout", "auth_hook"):
            raise cx.err(a, k, "auth_callout is not supported by edged")
        elif lk == "proxy_required":
            cx.warn(a, k, "proxy_required is not supported and is ignored")
        else:
            cx.unknown(a, k)
    if (o.username or o.authorization) and (o.users or o.nkeys):
        raise cx.err(m, key, "can not have a single user/pass or token and a users array")
    if o.username and o.authorization:
        raise cx.err(m, key, "can not have both a user/pass and a token")


def _users(cx: _Ctx, m: Any, key: str, block_account: str | None) -> tuple[list[User], list[NkeyUser]]:
    arr = cx.list_(m, key)
    users: list[User] = []
    nks: list[NkeyUser] = []
    for i, u in enumerate(arr):
        if not isinstance(u, dict):
            raise cx.err(arr, i, "user entry: expected a block { user: .., password: .. }")
        name = pw = nkey = ""
        account = block_account
        perms: Permissions | None = None
        conn_types: list[str] = []
        for k in u:
            lk = k.lower()
            if lk in ("user", "username"):
                name = cx.str_(u, k)
            elif lk in ("pass", "password"):
                pw = cx.str_(u, k)
            elif lk == "nkey":
                nkey = cx.str_(u, k)
            elif lk in ("permission", "permissions", "authorization"):
                perms = _permissions(cx, u, k)
            elif lk in ("allowed_connection_types", "connection_types", "clients"):
                conn_types = cx.strlist(u, k)
            elif lk == "account":  # edged: a top-level user may name its account
                account = cx.str_(u, k)
            elif lk == "proxy_required":
                cx.warn(u, k, "proxy_required is not supported and is ignored")
            else:
                cx.unknown(u, k)
        if nkey:
            if not (nkey.startswith("U") and len(nkey) == 56):
                raise cx.err(arr, i, f"Not a valid public nkey for a user: {nkey!r}")
            if name or pw:
                raise cx.err(arr, i, "Nkey users do not take usernames or passwords")
            nks.append(NkeyUser(nkey, perms, account, conn_types))
        elif name:
            users.append(User(name, pw, perms, account, conn_types))
        else:
            raise cx.err(arr, i, "User entry requires a user (`user` or `nkey`)")
    return users, nks


def _subject_perm(cx: _Ctx, m: Any, key: str) -> SubjectPermission:
    v = m[key]
    if isinstance(v, dict):
        sp = SubjectPermission()
        for k in v:
            lk = k.lower()
            if lk == "allow":
                sp.allow = cx.strlist(v, k)
            elif lk == "deny":
                sp.deny = cx.strlist(v, k)
            else:
                raise cx.err(v, k, f"unknown field {k!r} in {key} permissions (expected allow or deny)")
        return sp
    if isinstance(v, str | list):
        return SubjectPermission(allow=cx.strlist(m, key))
    raise cx.err(m, key, f"{key}: expected a subject, an array of subjects or {{allow, deny}}")


def _permissions(cx: _Ctx, m: Any, key: str) -> Permissions:
    p = cx.map_(m, key)
    perms = Permissions()
    for k in p:
        lk = k.lower()
        if lk in ("pub", "publish", "import"):
            perms.publish = _subject_perm(cx, p, k)
        elif lk in ("sub", "subscribe", "export"):
            perms.subscribe = _subject_perm(cx, p, k)
        elif lk in ("allow_responses", "publish_allow_responses"):
            perms.allow_responses = _allow_responses(cx, p, k)
        else:
            cx.unknown(p, k, "Unknown field {key} parsing permissions")
    return perms


def _allow_responses(cx: _Ctx, p: Any, k: str) -> ResponsePermission | None:
    v = p[k]
    if isinstance(v, bool):
        return ResponsePermission() if v else None
    if not isinstance(v, dict):
        raise cx.err(p, k, "error parsing response permissions, expected a boolean or a map")
    rp = ResponsePermission()
    for rk in v:
        lrk = rk.lower()
        if lrk in ("max", "max_msgs", "max_messages", "max_responses"):
            rp.max_msgs = cx.int_(v, rk)
        elif lrk in ("expires", "expiration", "ttl"):
            rp.expires = cx.duration(v, rk, legacy_seconds=False)
        else:
            cx.unknown(v, rk, "Unknown field {key} parsing permissions")
    return rp


def _accounts(cx: _Ctx, m: Any, key: str) -> None:
    v = m[key]
    if isinstance(v, list):  # accounts: [A, B] (names only)
        for i, name in enumerate(v):
            if not isinstance(name, str):
                raise cx.err(v, i, "account name must be a string")
            _new_account(cx, v, i, name)
        return
    accs = cx.map_(m, key)
    for name in accs:
        if name in accs.used_vars:
            continue
        body = accs[name]
        if not isinstance(body, dict):
            raise cx.err(accs, name, "Expected map entries for accounts")
        acc = _new_account(cx, accs, name, name)
        for k in body:
            lk = k.lower()
            if lk == "users":
                acc.users, acc.nkey_users = _users(cx, body, k, name)
            elif lk == "jetstream":
                acc.jetstream = _account_js(cx, body, k)
            elif lk == "default_permissions":
                acc.default_permissions = _permissions(cx, body, k)
            elif lk == "nkey":
                acc.nkey = cx.str_(body, k)
                if not (acc.nkey.startswith("A") and len(acc.nkey) == 56):
                    raise cx.err(body, k, f"Not a valid public nkey for an account: {acc.nkey!r}")
            elif lk == "exports":
                acc.exports = _exports(cx, body, k)
            elif lk == "imports":
                acc.stream_imports, acc.service_imports = _imports(cx, body, k)
            elif lk in ("mappings", "maps"):
                acc.mappings = _mappings(cx, body, k)
            elif lk in ("limits", "msg_trace", "trace_dest"):
                cx.warn(body, k, f"account {k} are not supported and are ignored")
                if lk in ("limits", "msg_trace"):
                    _check_keys(cx, body, k, _ACCOUNT_LIMITS if lk == "limits" else _MSG_TRACE)
            else:
                cx.unknown(body, k)


def _new_account(cx: _Ctx, m: Any, where: str | int, name: str) -> AccountConfig:
    if name == "$G":
        raise cx.err(m, where, f'"{name}" is a Reserved Account')
    if any(a.name == name for a in cx.opts.accounts):
        raise cx.err(m, where, f"Duplicate Account Entry: {name}")
    acc = AccountConfig(name=name)
    cx.opts.accounts.append(acc)
    return acc


def _enabled(cx: _Ctx, m: Any, key: str) -> bool | None:
    """`jetstream: true|enabled|disabled`; None when the value is a block."""
    v = m[key]
    if isinstance(v, bool):
        return v
    if isinstance(v, str):
        if v.lower() in ("enabled", "enable"):
            return True
        if v.lower() in ("disabled", "disable"):
            return False
        raise cx.err(m, key, f"Expected 'enabled' or 'disabled' for string value, got {v!r}")
    if isinstance(v, dict):
        return None
    raise cx.err(m, key, f"Expected map, bool or string to define JetStream, got {_kind(v)}")


def _account_js(cx: _Ctx, m: Any, key: str) -> JetStreamAccountLimits | None:
    on = _enabled(cx, m, key)
    if on is not None:
        return JetStreamAccountLimits() if on else None
    b = cx.map_(m, key)
    lim = JetStreamAccountLimits()
    for k in b:
        lk = k.lower()
        if lk in ("max_memory", "max_mem", "mem", "memory"):
            lim.max_memory = cx.size(b, k)
        elif lk in ("max_store", "max_file", "max_disk", "store", "disk"):
            lim.max_file = cx.size(b, k)
        elif lk in ("max_streams", "streams"):
            lim.max_streams = cx.int_(b, k)
        elif lk in ("max_consumers", "consumers"):
            lim.max_consumers = cx.int_(b, k)
        elif lk in ("max_bytes_required", "max_stream_bytes", "max_bytes"):
            lim.max_bytes_required = cx.bool_(b, k)
        elif lk == "max_ack_pending":
            lim.max_ack_pending = cx.int_(b, k)
        elif lk in ("mem_max_stream_bytes", "memory_max_stream_bytes"):
            lim.memory_max_stream_bytes = cx.size(b, k)
        elif lk in ("disk_max_stream_bytes", "store_max_stream_bytes"):
            lim.store_max_stream_bytes = cx.size(b, k)
        elif lk == "cluster_traffic":
            cx.warn(b, k, "cluster_traffic has no meaning on a single server")
        else:
            cx.unknown(b, k)
    return lim


def _exports(cx: _Ctx, m: Any, key: str) -> list[Export]:
    arr = cx.list_(m, key)
    out = []
    for i, e in enumerate(arr):
        if not isinstance(e, dict):
            raise cx.err(arr, i, "export entry: expected a block {stream: ..} or {service: ..}")
        _check_keys(cx, arr, i, _EXPORT)
        stream = cx.str_(e, "stream") if "stream" in e else None
        service = cx.str_(e, "service") if "service" in e else None
        if (stream is None) == (service is None):
            raise cx.err(arr, i, "export entry needs exactly one of `stream` or `service`")
        accounts = cx.strlist(e, "accounts") if "accounts" in e else []
        rkey = "response_type" if "response_type" in e else "response" if "response" in e else ""
        ex = Export(stream=stream, service=service, accounts=accounts,
                    response_type=cx.str_(e, rkey) if rkey else "Singleton")
        for k in ("latency", "account_token_position"):
            if k in e:
                cx.warn(e, k, f"export {k} is not supported and is ignored")
        tkey = "response_threshold" if "response_threshold" in e else "threshold" if "threshold" in e else ""
        if tkey:
            try:
                ex.response_threshold = parse_duration(cx.str_(e, tkey))
            except ValueError as err:
                raise cx.err(e, tkey, str(err)) from None
        out.append(ex)
    return out


def _mappings(cx: _Ctx, m: Any, key: str) -> list[Mapping]:
    """`mappings { src: dest }`, or `src: [{destination: d, weight: 40%}, ...]` (nats-server
    parseAccountMappings); checked further by edged/routing/imports.py."""
    from edged.routing.imports import mapping_problems
    from edged.routing.subjects import is_valid_subject

    b = cx.map_(m, key)
    out: list[Mapping] = []
    for src in b:
        if src in b.used_vars:
            continue
        if not is_valid_subject(src):
            raise cx.err(b, src, f"Subject {_go_quote(src)} is not a valid subject")
        v = b[src]
        entries = v if isinstance(v, list) else [v]
        mp = Mapping(src)
        for i, d in enumerate(entries):
            if isinstance(d, str):
                mp.dests.append(MapDest(d))
                continue
            if not isinstance(d, dict):
                raise cx.err(b, src, f"Unknown type for mapping destination: {d!r}")
            dest = d.get("destination", d.get("dest"))
            if not isinstance(dest, str):
                raise cx.err(entries if isinstance(v, list) else b, i if isinstance(v, list) else src,
                             "Expected a destination for the mapping")
            w = d.get("weight", 100)
            ws = str(w).strip().rstrip("%")
            if not ws.isdigit():
                raise cx.err(d, "weight", f"Invalid weight {w!r} for mapping destination")
            if "cluster" in d:
                cx.warn(d, "cluster", "cluster-scoped mapping destinations never apply on a single server")
                continue
            mp.dests.append(MapDest(dest, int(ws)))
        cx.errors += [cx.err(b, src, why) for why in mapping_problems(mp)]
        out.append(mp)
    return out


def _imports(cx: _Ctx, m: Any, key: str) -> tuple[list[StreamImport], list[ServiceImport]]:
    arr = cx.list_(m, key)
    si: list[StreamImport] = []
    sv: list[ServiceImport] = []
    for i, e in enumerate(arr):
        if not isinstance(e, dict) or ("stream" in e) == ("service" in e):
            raise cx.err(arr, i, "import entry needs exactly one of `stream` or `service`")
        _check_keys(cx, arr, i, _IMPORT)
        kind = "stream" if "stream" in e else "service"
        src = cx.map_(e, kind)
        if "account" not in src or "subject" not in src:
            raise cx.err(e, kind, f"{kind} import needs `account` and `subject`")
        acc, subj = cx.str_(src, "account"), cx.str_(src, "subject")
        if kind == "stream":
            si.append(StreamImport(acc, subj, cx.str_(e, "to") if "to" in e else "",
                                   cx.str_(e, "prefix") if "prefix" in e else ""))
        else:
            imp = ServiceImport(acc, subj, cx.str_(e, "to") if "to" in e else "",
                                cx.bool_(e, "share") if "share" in e else False)
            prev = next((x for x in sv if (x.to or x.subject) == (imp.to or imp.subject)), None)
            if prev is not None:
                cx.errors.append(cx.err(arr, i, f'Duplicate service import subject "{imp.to or imp.subject}", '
                                                f'previously used in import for account "{prev.account}", '
                                                f'subject "{prev.subject}"'))
                continue
            sv.append(imp)
    return si, sv


_TLS_UNSUPPORTED = ("verify_cert_and_check_known_urls", "allow_insecure_cipher_suites", "connection_rate_limit",
                    "cert_store", "cert_match_by", "cert_match", "ca_certs_match", "cert_match_skip_invalid",
                    "ocsp_peer", "certs", "certificates")


def _tls_block(cx: _Ctx, m: Any, key: str) -> TLSConfig:
    b = cx.map_(m, key)
    t = TLSConfig()
    for k in b:
        lk = k.lower()
        if lk in ("cert_file", "key_file", "ca_file"):
            setattr(t, lk, cx.str_(b, k))
        elif lk in ("min_version", "minimum_version"):
            t.min_version = cx.str_(b, k)
        elif lk in ("verify", "verify_and_map", "insecure"):
            setattr(t, lk, cx.bool_(b, k))
        elif lk in ("handshake_first", "first", "immediate"):
            _handshake_first(cx, b, k, t)
        elif lk == "timeout":
            t.timeout = cx.duration(b, k, legacy_seconds=False)
        elif lk in ("cipher_suites", "curve_preferences", "pinned_certs"):
            setattr(t, lk, cx.strlist(b, k))
        elif lk in _TLS_UNSUPPORTED:
            cx.warn(b, k, f"TLS option {k!r} is not supported and is ignored")
        else:
            cx.unknown(b, k, "error parsing tls config, unknown field {key}")
    return t


def _handshake_first(cx: _Ctx, b: Any, k: str, t: TLSConfig) -> None:
    """true/false/on/off, "auto" (50 ms fallback, nats-server's default) or a fallback duration."""
    v = b[k]
    if isinstance(v, bool):
        t.handshake_first = v
        return
    if not isinstance(v, str):
        raise cx.err(b, k, f"field {k!r} should be a boolean or a string, got {_kind(v)}")
    s = v.lower()
    if s in ("true", "on", "false", "off"):
        t.handshake_first = s in ("true", "on")
    elif s in ("auto", "auto_fallback"):
        t.handshake_first, t.handshake_first_fallback = True, 0.05
    else:
        try:
            t.handshake_first, t.handshake_first_fallback = True, parse_duration(v)
        except ValueError:
            raise cx.err(b, k, f"field {k!r}'s value {v!r} is invalid") from None


def _tls(cx: _Ctx, m: Any, key: str) -> None:
    cx.opts.tls = _tls_block(cx, m, key)


def _jetstream(cx: _Ctx, m: Any, key: str) -> None:
    js = cx.opts.jetstream
    on = _enabled(cx, m, key)
    if on is not None:
        js.enabled = on
        return
    b = cx.map_(m, key)
    js.enabled = True
    for k in b:
        lk = k.lower()
        if lk in ("store_dir", "storedir", "store"):
            if js.store_dir:
                raise cx.err(b, k, "Duplicate 'store_dir' configuration")
            js.store_dir = cx.str_(b, k)
        elif lk == "domain":
            js.domain = cx.str_(b, k)
        elif lk in ("max_memory_store", "max_mem_store", "max_mem"):
            js.max_memory_store = cx.size(b, k)
        elif lk in ("max_file_store", "max_file"):
            js.max_file_store = cx.size(b, k)
        elif lk in ("sync_interval", "sync"):
            v2 = b[k]
            if isinstance(v2, str) and v2.lower() == "always":
                js.sync_interval = "always"
            else:
                js.sync_interval = cx.duration(b, k)
        elif lk == "unique_tag":
            js.unique_tag = cx.str_(b, k)
        elif lk in ("enabled", "enable"):
            js.enabled = cx.bool_(b, k)
        elif lk in ("cipher", "key", "ek", "encryption_key", "prev_key", "prev_ek", "prev_encryption_key", "tpm"):
            raise cx.err(b, k, f"jetstream {k}: encryption at rest is not supported by edged")
        elif lk == "strict":
            if not cx.bool_(b, k):
                cx.warn(b, k, "jetstream strict: false is not supported by edged: API requests are always read "
                              "strictly, as nats-server does by default")
        elif lk in ("limits", "max_buffered_msgs", "max_buffered_size", "request_queue_limit",
                    "info_queue_limit", "max_outstanding_catchup", "extension_hint", "meta_compact",
                    "meta_compact_size", "meta_compact_sync", "max_concurrent_io"):
            cx.warn(b, k, f"jetstream {k} is not supported by edged and is ignored")
            if lk == "limits":
                _check_keys(cx, b, k, _JS_LIMITS)
        else:
            cx.unknown(b, k)


def _leafnodes(cx: _Ctx, m: Any, key: str) -> None:
    b = cx.map_(m, key)
    ln = LeafNodeOpts()
    dial_timeout: float | None = None
    for k in b:
        lk = k.lower()
        if lk == "remotes":
            arr = cx.list_(b, k)
            for i, r in enumerate(arr):
                if not isinstance(r, dict):
                    raise cx.err(arr, i, "remote: expected a block")
                ln.remotes.append(_remote(cx, arr, i, r))
        elif lk in ("reconnect", "reconnect_delay", "reconnect_interval"):
            ln.reconnect = cx.duration(b, k)
        elif lk == "dial_timeout":
            dial_timeout = cx.duration(b, k)
        elif lk == "port":
            ln.port = _port(cx, b, k)
        elif lk in ("host", "net"):
            ln.host = cx.str_(b, k)
        elif lk == "listen":
            ln.host, ln.port = _host_port(cx, b, k)
        elif lk in ("advertise", "leafnode_advertise"):
            ln.advertise = cx.str_(b, k)
        elif lk == "no_advertise":
            ln.no_advertise = cx.bool_(b, k)
        elif lk in ("min_version", "minimum_version"):
            ln.min_version = cx.str_(b, k)
        elif lk == "authorization":
            _check_keys(cx, b, k, _LEAF_AUTHZ)
            _leaf_authorization(cx, b, k, ln)
        elif lk == "tls":
            ln.tls = _tls_block(cx, b, k)
            if ln.tls.verify_and_map:
                cx.warn(b, k, "leafnodes tls verify_and_map is not supported: leafs log in with CONNECT credentials")
            if ln.tls.handshake_first_fallback:
                cx.warn(b, k, "leafnodes tls handshake_first with a fallback delay is not supported: TLS comes first")
        elif lk in ("compression", "isolate_leafnode_interest", "isolate", "write_deadline", "write_timeout"):
            cx.warn(b, k, f"leafnodes {k} is not supported and is ignored")
            if lk == "compression":
                _check_keys(cx, b, k, "compression")
        else:
            cx.unknown(b, k)
    if dial_timeout is not None:
        for r, raw in zip(ln.remotes, b.get("remotes") or [], strict=False):
            if "dial_timeout" not in raw:
                r.dial_timeout = dial_timeout
    cx.opts.leafnodes = ln


def _leaf_authorization(cx: _Ctx, m: Any, key: str, ln: LeafNodeOpts) -> None:
    """The leafnode port's own logins (nats-server parseLeafAuthorization): one user, one nkey, or a
    `users` list, each bound to an account; without them leafs log in like clients."""
    a = cx.map_(m, key)
    for k in a:
        lk = k.lower()
        if lk in ("user", "username"):
            ln.username = cx.str_(a, k)
        elif lk in ("pass", "password"):
            ln.password = cx.str_(a, k)
        elif lk == "nkey":
            ln.nkey = cx.str_(a, k)
        elif lk == "account":
            ln.account = cx.str_(a, k)
        elif lk == "timeout":
            v = a[k]  # seconds, as a number (nats-server reads no duration here)
            ln.auth_timeout = float(v) if isinstance(v, int | float) and not isinstance(v, bool) else cx.duration(a, k)
        elif lk == "users":
            arr = cx.list_(a, k)
            for i, u in enumerate(arr):
                if not isinstance(u, dict):
                    raise cx.err(arr, i, "leafnode user: expected a block")
                name = str(u.get("user", u.get("username", "")))
                pw = str(u.get("password", u.get("pass", "")))
                ln.users.append(LeafUser(name, pw, str(u.get("account", ""))))
        elif lk == "proxy_required":
            cx.warn(a, k, "leafnode authorization proxy_required is not supported and is ignored")
    if ln.users and ln.username:
        raise cx.err(m, key, "can not have a single user/pass and a users array")
    ln.authorization = dict(a)


def _remote(cx: _Ctx, arr: Any, index: int, r: Any) -> RemoteLeafOpts:
    ro = RemoteLeafOpts()
    for k in r:
        lk = k.lower()
        if lk in ("url", "urls"):
            ro.urls += cx.strlist(r, k)
        elif lk in ("account", "local"):
            ro.account = cx.str_(r, k)
        elif lk in ("credentials", "creds"):
            if ro.seed:
                raise cx.err(r, k, "Remote leafnode can not have both creds and nkey defined")
            ro.credentials = os.path.expanduser(os.path.expandvars(cx.str_(r, k)))
        elif lk in ("nkey", "seed"):
            if ro.credentials:
                raise cx.err(r, k, "Remote leafnode can not have both creds and nkey defined")
            seed = cx.str_(r, k)
            if not _is_user_seed(seed):
                raise cx.err(r, k, "Remote leafnode nkey is not a valid seed")
            ro.seed = ro.nkey = seed
        elif lk == "tls":
            ro.tls = _tls_block(cx, r, k)
        elif lk in ("no_randomize", "dont_randomize"):
            ro.no_randomize = cx.bool_(r, k)
        elif lk in ("ws_compress", "ws_compression", "websocket_compress", "websocket_compression"):
            ro.ws_compression = cx.bool_(r, k)
        elif lk in ("ws_no_masking", "websocket_no_masking"):
            ro.ws_no_masking = cx.bool_(r, k)
        elif lk in ("disabled", "hub"):
            setattr(ro, lk, cx.bool_(r, k))
        elif lk in ("ignore_discovered_servers", "ignore_discovered_urls"):
            ro.ignore_discovered_urls = cx.bool_(r, k)
        elif lk in ("deny_imports", "deny_import"):
            ro.deny_imports = cx.strlist(r, k)
        elif lk in ("deny_exports", "deny_export"):
            ro.deny_exports = cx.strlist(r, k)
        elif lk in ("first_info_timeout", "dial_timeout"):
            setattr(ro, lk, cx.duration(r, k))
        elif lk == "compression":
            v = r[k]
            if not (v is False or (isinstance(v, str) and v.lower() in ("off", "disabled"))):
                cx.warn(r, k, "leafnode compression is not supported; the link is uncompressed")
            _check_keys(cx, r, k, "compression")
            ro.compression = "off"
        elif lk == "proxy":
            ro.proxy = _proxy(cx, r, k)
        elif lk in ("jetstream_cluster_migrate", "js_cluster_migrate", "isolate_leafnode_interest", "isolate",
                    "request_isolation"):
            cx.warn(r, k, f"leafnode remote {k} is not supported and is ignored")
        else:
            cx.unknown(r, k)
    if not ro.urls:
        raise cx.err(arr, index, "leafnode remote needs `url` or `urls`")
    return ro


def _is_user_seed(seed: str) -> bool:
    try:
        import nkeys

        kp = nkeys.from_seed(seed.encode())
        return kp.public_key.decode().startswith("U")
    except Exception:  # nkeys raises several error types for a bad seed
        return False


def _proxy(cx: _Ctx, r: Any, k: str) -> dict[str, Any]:
    p = cx.map_(r, k)
    out: dict[str, Any] = {}
    for pk in p:
        lpk = pk.lower()
        if lpk in ("url", "username", "password"):
            out[lpk] = cx.str_(p, pk)
        elif lpk == "timeout":
            out["timeout"] = cx.duration(p, pk)
        else:
            cx.unknown(p, pk)
    return out


def _listen_key(cx: _Ctx, b: Any, k: str, lk: str, o: MQTTOpts | WebsocketOpts) -> bool:
    """`port`, `host`/`net`, `listen` and `tls` of an extra listener's block, read alike in each; False for
    another key."""
    if lk == "port":
        o.port = _port(cx, b, k)
    elif lk in ("host", "net"):
        o.host = cx.str_(b, k)
    elif lk == "listen":
        o.host, o.port = _host_port(cx, b, k)
    elif lk == "tls":
        o.tls = _tls_block(cx, b, k)
    else:
        return False
    return True


def _listener_auth(cx: _Ctx, a: Any, o: MQTTOpts | WebsocketOpts, timeout: Callable[[Any, str], float]) -> None:
    """An extra listener's `authorization {}`: one user or a token; `timeout` reads the block's own form of
    the timeout (nats-server reads it differently per block)."""
    for ak in a:
        alk = ak.lower()
        if alk in ("user", "username"):
            o.username = cx.str_(a, ak)
        elif alk in ("pass", "password"):
            o.password = cx.str_(a, ak)
        elif alk == "token":
            o.token = cx.str_(a, ak)
        elif alk == "timeout":
            o.auth_timeout = timeout(a, ak)


def _mqtt(cx: _Ctx, m: Any, key: str) -> None:
    b = cx.map_(m, key)
    mq = MQTTOpts()
    for k in b:
        lk = k.lower()
        if _listen_key(cx, b, k, lk, mq):
            continue
        if lk == "no_auth_user":
            mq.no_auth_user = cx.str_(b, k)
        elif lk in ("ack_wait", "ackwait"):
            mq.ack_wait = cx.duration(b, k)
        elif lk in ("max_ack_pending", "max_pending", "max_inflight"):
            mq.max_ack_pending = cx.int_(b, k)
        elif lk == "js_domain":
            mq.js_domain = cx.str_(b, k)
        elif lk in ("js_api_timeout", "api_timeout"):
            mq.js_api_timeout = cx.duration(b, k)
        elif lk in ("authorization", "authentication"):
            _check_keys(cx, b, k, _MQTT[lk])
            _listener_auth(cx, cx.map_(b, k), mq, cx.duration)
        elif lk in ("stream_replicas", "consumer_replicas"):
            setattr(mq, lk, cx.int_(b, k))
        elif lk in ("consumer_memory_storage", "reject_qos2_publish", "downgrade_qos2_subscribe"):
            setattr(mq, lk, cx.bool_(b, k))
        elif lk == "consumer_inactive_threshold":
            mq.consumer_inactive_threshold = cx.duration(b, k)
        elif lk in _MQTT:
            _check_keys(cx, b, k, _MQTT[lk])
            mq.extra[k] = b[k]
        else:
            cx.unknown(b, k)
    cx.opts.mqtt = mq


def _websocket(cx: _Ctx, m: Any, key: str) -> None:
    b = cx.map_(m, key)
    ws = WebsocketOpts()

    def seconds(a: Any, ak: str) -> float:
        v = a[ak]
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise cx.err(a, ak, f"timeout: expected a number of seconds, got {_kind(v)}")
        return float(v)

    for k in b:
        lk = k.lower()
        if _listen_key(cx, b, k, lk, ws):
            continue
        if lk == "advertise":
            ws.advertise = cx.str_(b, k)
        elif lk == "no_tls":
            ws.no_tls = cx.bool_(b, k)
        elif lk in ("compression", "compress"):
            ws.compression = cx.bool_(b, k)
        elif lk == "same_origin":
            ws.same_origin = cx.bool_(b, k)
        elif lk in ("allowed_origins", "allowed_origin", "allow_origins", "allow_origin", "origins", "origin"):
            ws.allowed_origins = cx.strlist(b, k)
        elif lk == "handshake_timeout":
            ws.handshake_timeout = cx.duration(b, k, legacy_seconds=False)
        elif lk in ("authorization", "authentication"):
            _check_keys(cx, b, k, _SIMPLE_AUTH)
            _listener_auth(cx, cx.map_(b, k), ws, seconds)
        elif lk in ("jwt_cookie", "user_cookie", "pass_cookie", "token_cookie", "no_auth_user"):
            setattr(ws, lk, cx.str_(b, k))
        elif lk == "headers":
            h = cx.map_(b, k)
            for hk in h:
                if not isinstance(h[hk], str):
                    gotype = {bool: "bool", int: "int64", float: "float64", list: "[]interface {}"}.get(
                        type(h[hk]), "map[string]interface {}")  # nats-server names the Go type
                    raise cx.err(h, hk, f"error parsing header key {hk}: unsupported type {gotype}")
                ws.headers[hk] = h[hk]
        elif lk == "ping_interval":
            ws.ping_interval = cx.duration(b, k)
        elif lk in _WEBSOCKET:
            _check_keys(cx, b, k, _WEBSOCKET[lk])
            ws.extra[k] = b[k]
        else:
            cx.unknown(b, k)
    cx.opts.websocket = ws


def _operator(cx: _Ctx, m: Any, key: str) -> None:
    """Operator JWTs, inline or in files (relative to the working directory, as nats-server reads them)."""
    for item in cx.strlist(m, key):
        text = item.strip()
        if text.startswith("eyJ") and text.count(".") == 2 and not os.path.exists(text):
            cx.opts.trusted_operators.append(text)
            continue
        try:
            with open(text, encoding="utf-8") as f:
                data = f.read()
        except OSError as e:
            raise cx.err(m, key, f"error parsing operator JWT: reading {text!r}: {e.strerror}") from None
        jwt = _jwt_in(data)
        if not jwt:
            raise cx.err(m, key, f"error parsing operator JWT: {text!r} holds no JWT")
        cx.opts.trusted_operators.append(jwt)


def _jwt_in(data: str) -> str:
    for line in data.splitlines():
        s = line.strip()
        if s.count(".") == 2 and s.startswith("ey"):
            return s
    return ""


def _trusted(cx: _Ctx, m: Any, key: str) -> None:
    keys = cx.strlist(m, key)
    for k in keys:
        if not (k.startswith("O") and len(k) == 56):
            raise cx.err(m, key, f"trust key {k!r} required to be a valid public operator nkey")
    cx.opts.trusted_keys.extend(keys)


def _resolver(cx: _Ctx, m: Any, key: str) -> None:
    v = m[key]
    if isinstance(v, str) and v.upper() == "MEMORY":
        cx.opts.resolver = "MEMORY"
        return
    raise cx.err(m, key, "only `resolver: MEMORY` (with resolver_preload) is supported by edged")


def _resolver_preload(cx: _Ctx, m: Any, key: str) -> None:
    b = cx.map_(m, key)
    for k in b:
        cx.opts.resolver_preload[k] = cx.str_(b, k)

# ------------------------------------------------------------------ blocks read only to check their keys

# The keys nats-server accepts in blocks edged reads but does not act on (server/opts.go, one parse
# function each), so a typo in them is refused as nats-server refuses it. A value is None (any value),
# a nested schema (checked when the value is a block), [schema] (an array of blocks), or "tls" /
# "perms" / "compression" (parsed by edged's own readers). The "" entry is the unknown-key message.
_Schema = dict[str, Any]


def _keys(*names: str, **nested: Any) -> _Schema:
    out: _Schema = dict.fromkeys(names)
    out.update(nested)
    return out


_SIMPLE_AUTH = _keys("user", "username", "pass", "password", "token", "timeout")
_AUTHZ = _keys("user", "username", "pass", "password", "token", "timeout", "auth_callout", "auth_hook",
               "proxy_required", default_permission="perms", default_permissions="perms", permissions="perms",
               users=[_keys("user", "username", "pass", "password", "nkey", "allowed_connection_types",
                            "connection_types", "clients", "proxy_required", permission="perms",
                            permissions="perms", authorization="perms")])
_LEAF_AUTHZ = _keys("user", "username", "pass", "password", "nkey", "timeout", "account", "proxy_required",
                    users=[_keys("user", "username", "pass", "password", "account", "proxy_required")])
_COMPRESSION = _keys("mode", "rtt_thresholds", "thresholds", "rtts", "rtt")
_CLUSTER = _keys("name", "listen", "port", "host", "net", "routes", "cluster_advertise", "advertise",
                 "no_advertise", "connect_retries", "connect_backoff", "pool_size", "accounts", "ping_interval",
                 "ping_max", "write_deadline", "write_timeout", authorization=_AUTHZ, tls="tls",
                 permissions="perms", compression="compression")
_GATEWAY = _keys("name", "listen", "port", "host", "net", "advertise", "connect_retries", "connect_backoff",
                 "reject_unknown", "reject_unknown_cluster", "write_deadline", "write_timeout",
                 authorization=_AUTHZ, tls="tls", gateways=[_keys("name", "url", "urls", tls="tls")])
_PROXIES = _keys(trusted=[_keys("key", "public_key")])
_JS_LIMITS = _keys("max_ack_pending", "max_ha_assets", "max_request_batch", "duplicate_window",
                   batch=_keys("max_inflight_per_stream", "max_inflight_total", "max_msgs", "timeout"))
_ACCOUNT_LIMITS = _keys("max_conn", "max_connections", "max_leafnodes", "max_leafs", "max_pay", "max_payload",
                        "max_subs", "max_subscriptions", **{"": "Unknown field {key} parsing account limits"})
_MSG_TRACE = _keys("dest", "sampling")
_EXPORT = _keys("stream", "service", "response", "response_type", "threshold", "response_threshold",
                "response_max_time", "response_time", "accounts", "latency", "account_token_position",
                "allow_trace")
_IMPORT_SOURCE = _keys("account", "subject")
_IMPORT = _keys("prefix", "to", "share", "allow_trace", stream=_IMPORT_SOURCE, service=_IMPORT_SOURCE)
_MQTT = _keys("listen", "port", "host", "net", "no_auth_user", "ack_wait", "ackwait", "js_api_timeout",
              "api_timeout", "max_ack_pending", "max_pending", "max_inflight", "js_domain", "stream_replicas",
              "consumer_replicas", "consumer_memory_storage", "consumer_inactive_threshold",
              "consumer_auto_cleanup", "reject_qos2_publish", "downgrade_qos2_subscribe", tls="tls",
              authorization=_SIMPLE_AUTH, authentication=_SIMPLE_AUTH)
_WEBSOCKET = _keys("listen", "port", "host", "net", "advertise", "no_tls", "same_origin", "allowed_origins",
                   "allowed_origin", "allow_origins", "allow_origin", "origins", "origin", "handshake_timeout",
                   "compress", "compression", "jwt_cookie", "user_cookie", "pass_cookie", "token_cookie",
                   "no_auth_user", "headers", "ping_interval", tls="tls", authorization=_SIMPLE_AUTH,
                   authentication=_SIMPLE_AUTH)
# nats-server names the Go type, not the key, for an unknown ocsp field (its %T of the key)
_OCSP = _keys("mode", "urls", "url", **{"": "error parsing ocsp config: unsupported field string"})
_IGNORED_BLOCKS: dict[str, Any] = {"cluster": _CLUSTER, "gateway": _GATEWAY, "proxies": _PROXIES, "ocsp": _OCSP,
                                   "resolver_tls": "tls"}


def _check_keys(cx: _Ctx, m: Any, key: str | int, schema: Any) -> None:
    """Refuse the keys nats-server would refuse in the value of `m[key]`, which edged does not use."""
    v = m[key]
    if schema == "tls":
        _tls_block(cx, m, key)
    elif schema == "perms":
        _permissions(cx, m, key)
    elif schema == "compression":
        if isinstance(v, dict):
            _check_keys(cx, m, key, _COMPRESSION)
    elif isinstance(schema, list):
        if isinstance(v, list):
            for i, item in enumerate(v):
                if isinstance(item, dict):
                    _check_keys(cx, v, i, schema[0])
    elif isinstance(schema, dict) and isinstance(v, dict):
        reason = schema.get("", "unknown field {key}")
        for k in v:
            lk = k.lower()
            if lk not in schema or not lk:
                cx.unknown(v, k, reason)
            elif schema[lk] is not None:
                _check_keys(cx, v, k, schema[lk])


def _edged(cx: _Ctx, m: Any, key: str) -> None:
    b = cx.map_(m, key)
    cx.opts.edged = dict(b)
    for k in b:
        if k.lower() == "mqtt_bridge":
            from bridges.mqtt_bridge.config import parse_bridges

            cx.opts.mqtt_bridges = parse_bridges(cx, b, k, _tls_block)


_TOP: dict[str, Any] = {
    "listen": _listen,
    "host": _set("host", "str_"),
    "net": _set("host", "str_"),
    "port": _client_port,
    "client_advertise": _set("client_advertise", "str_"),
    "server_name": _server_name,
    "http": _http,
    "http_port": _http,
    "monitor_port": _http,
    "http_base_path": _set("http_base_path", "str_"),
    "max_payload": _int31("max_payload"),
    "max_pending": _set("max_pending", "int_"),
    "max_connections": _max_connections,
    "max_conn": _max_connections,
    "max_subscriptions": _set("max_subscriptions", "int_"),
    "max_subs": _set("max_subscriptions", "int_"),
    "max_control_line": _int31("max_control_line"),
    "ping_interval": _set("ping_interval", "duration"),
    "ping_max": _set("ping_max", "int_"),
    "write_deadline": _set("write_deadline", "duration"),
    "no_header_support": _set("no_header_support", "bool_"),
    "disable_sublist_cache": _set("disable_sublist_cache", "bool_"),
    "no_sublist_cache": _set("disable_sublist_cache", "bool_"),
    "debug": _set("debug", "bool_"),
    "trace": _set("trace", "bool_"),
    "trace_verbose": _trace_flavour,
    "trace_headers": _trace_flavour,
    "logtime": _set("logtime", "bool_"),
    "log_file": _set("log_file", "str_"),
    "logfile": _set("log_file", "str_"),
    "syslog": _warn_if_true("syslog", "syslog is not supported; logs go to stderr (journald under systemd)"),
    "pid_file": _set("pid_file", "str_"),
    "pidfile": _set("pid_file", "str_"),
    "ports_file_dir": _ports_file_dir,
    "lame_duck_duration": _lame_duck_duration,
    "lame_duck_grace_period": _lame_duck_grace,
    "authorization": _authorization,
    "accounts": _accounts,
    "mappings": lambda cx, m, key: setattr(cx.opts, "mappings", _mappings(cx, m, key)),
    "maps": lambda cx, m, key: setattr(cx.opts, "mappings", _mappings(cx, m, key)),
    "system_account": _set("system_account", "str_"),
    "system": _set("system_account", "str_"),
    "no_system_account": _set("no_system_account", "bool_"),
    "no_system": _set("no_system_account", "bool_"),
    "no_sys_acc": _set("no_system_account", "bool_"),
    "no_auth_user": _set("no_auth_user", "str_"),
    "operator": _operator,
    "operators": _operator,
    "root": _operator,
    "roots": _operator,
    "root_operator": _operator,
    "root_operators": _operator,
    "trusted": _trusted,
    "trusted_keys": _trusted,
    "resolver": _resolver,
    "account_resolver": _resolver,
    "accounts_resolver": _resolver,
    "resolver_preload": _resolver_preload,
    "tls": _tls,
    "allow_non_tls": _set("allow_non_tls", "bool_"),
    "store_dir": _top_store_dir,
    "storedir": _top_store_dir,
    "jetstream": _jetstream,
    "leafnodes": _leafnodes,
    "leaf": _leafnodes,
    "mqtt": _mqtt,
    "websocket": _websocket,
    "ws": _websocket,
    "edged": _edged,
}
