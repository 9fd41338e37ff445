"""nats-server config files → typed `Options`.

Keys and aliases are nats-server's (server/opts.go), so its configs load unchanged. Settings edged
reads but does not act on become `ConfigWarning`s (logged at start, printed by `edged check`);
wrong types and values raise `ConfigError` naming file:line:col. Relative paths (store_dir,
credentials, certificates) are used as given, relative to the working directory, as nats-server does;
only `include` is relative to the including file.
"""

from __future__ import annotations

import os
import re
from typing import Any

from edged.conf import ConfigError, ConfList, ConfMap, Pos, parse, parse_file
from edged.options import (
    AccountConfig,
    Export,
    JetStreamAccountLimits,
    LeafNodeOpts,
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

__all__ = ["ConfigError", "load_options", "options_from_dict", "parse_duration"]

_UNSUPPORTED = {
    "cluster": "clustering (routes) is not supported: edged is a single server",
    "gateway": "gateways are not supported",
    "gateways": "gateways are not supported",
    "routes": "clustering (routes) is not supported",
    "https": "monitoring over HTTPS is not supported; use http",
    "https_port": "monitoring over HTTPS is not supported; use http_port",
    "ocsp": "OCSP stapling is not supported",
    "mappings": "subject mappings are not supported yet",
    "jetstream_max_memory": "use jetstream { max_memory_store }",
    "system": "use system_account",
    "accounts_resolver": "use resolver",
}

_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds from a Go duration ("1h30m", "500ms", "2s") — nats-server's time.ParseDuration."""
    s = text.strip()
    if s in ("0", ""):
        return 0.0
    neg = s.startswith("-")
    s = s.lstrip("+-")
    pos, total = 0, 0.0
    for m in _GO_DURATION.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_S[m.group(2)]
        pos = m.end()
    if pos != len(s) or not s:
        raise ValueError(f'time: invalid duration "{text}"')
    return -total if neg else total


class _Ctx:
    def __init__(self, opts: Options, filename: str) -> None:
        self.opts = opts
        self.filename = filename

    def pos(self, m: Any, key: str | int) -> Pos | None:
        if isinstance(m, ConfMap):
            return m.pos.get(str(key))
        if isinstance(m, ConfList) and isinstance(key, int) and key < len(m.pos):
            return m.pos[key]
        return None

    def err(self, m: Any, key: str | int, reason: str) -> ConfigError:
        return ConfigError(reason, self.pos(m, key))

    def warn(self, m: Any, key: str, message: str) -> None:
        from edged.options import ConfigWarning

        p = self.pos(m, key)
        self.opts.warnings.append(ConfigWarning(key, str(p) if p else self.filename, message))

    # -------------------------------------------------------------- typed getters

    def str_(self, m: Any, key: str) -> str:
        v = m[key]
        if isinstance(v, bool) or isinstance(v, dict | list):
            raise self.err(m, key, f"{key}: expected a string, got {type(v).__name__}")
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

    def float_(self, m: Any, key: str) -> float:
        v = m[key]
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.err(m, key, f"{key}: expected a number, got {v!r}")
        return float(v)

    def duration(self, m: Any, key: str) -> float:
        """A Go duration string, or a bare number of seconds (nats-server's legacy form)."""
        v = m[key]
        raw = m.raw.get(key) if isinstance(m, ConfMap) else None
        if isinstance(v, str) or (raw and re.search(r"[a-zµ]", raw.strip('"\''))):
            text = v if isinstance(v, str) else str(raw).strip('"\'')
            try:
                return parse_duration(text)
            except ValueError as e:
                raise self.err(m, key, f"{key}: {e}") from None
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.err(m, key, f"{key}: expected a duration, got {v!r}")
        return float(v)

    def map_(self, m: Any, key: str) -> ConfMap:
        v = m[key]
        if not isinstance(v, dict):
            raise self.err(m, key, f"{key}: expected a block {{ }}, got {type(v).__name__}")
        return v  # type: ignore[return-value]

    def strlist(self, m: Any, key: str) -> list[str]:
        v = m[key]
        if isinstance(v, str):
            return [v]
        if isinstance(v, list) and all(isinstance(x, str) for x in v):
            return [str(x) for x in v]
        raise self.err(m, key, f"{key}: expected a string or an array of strings")


def load_options(path: str) -> Options:
    conf = parse_file(path)
    return options_from_dict(conf, filename=path)


def options_from_text(text: str, filename: str = "<string>") -> Options:
    return options_from_dict(parse(text, filename), filename=filename)


def options_from_dict(conf: dict[str, Any], base_dir: str = ".", filename: str = "") -> Options:
    opts = Options(config_file=os.path.abspath(filename) if filename and not filename.startswith("<") else "")
    cx = _Ctx(opts, filename or "<config>")
    for key in list(conf):
        lk = key.lower()
        handler = _TOP.get(lk)
        if handler is not None:
            handler(cx, conf, key)
        elif lk in _UNSUPPORTED:
            cx.warn(conf, key, f"{key} is not supported by edged and is ignored: {_UNSUPPORTED[lk]}")
        elif isinstance(conf, ConfMap) and key in conf.used_vars:
            continue  # a variable definition used as $VAR elsewhere
        else:
            cx.warn(conf, key, f"unknown field {key!r} is ignored")
    _check(cx, conf)
    return opts


def _check(cx: _Ctx, conf: Any) -> None:
    o = cx.opts
    names = {a.name for a in o.accounts}
    if o.max_payload > o.max_pending:
        raise cx.err(conf, "max_payload" if "max_payload" in conf else "max_pending",
                     f"max_payload ({o.max_payload}) cannot be higher than max_pending ({o.max_pending})")
    if "lame_duck_duration" in conf and o.lame_duck_duration < 30:
        raise cx.err(conf, "lame_duck_duration",
                     f"invalid lame_duck_duration of {conf['lame_duck_duration']}, minimum is 30 seconds")
    if o.system_account and not (o.trusted_operators or o.trusted_keys) and o.system_account not in names \
            and o.system_account != "$SYS":
        raise cx.err(conf, "system_account", f'system_account "{o.system_account}" not defined in accounts')
    if o.no_auth_user:
        known = {u.username for u in o.users} | {u.username for a in o.accounts for u in a.users}
        if o.no_auth_user not in known:
            raise cx.err(conf, "no_auth_user", f'no_auth_user: "{o.no_auth_user}" not present as user or nkey in '
                                               "authorization block or account configuration")
    for r in o.leafnodes.remotes if o.leafnodes else []:
        if r.account and r.account not in names and r.account != "$G" and not (o.trusted_operators or o.trusted_keys):
            raise cx.err(conf, "leafnodes", f'remote leafnode account "{r.account}" not defined in accounts')


# ------------------------------------------------------------------ top level


def _set(attr: str, kind: str) -> Any:
    def h(cx: _Ctx, m: Any, key: str) -> None:
        getter = getattr(cx, kind)
        setattr(cx.opts, attr, getter(m, key))
    return h


def _listen(cx: _Ctx, m: Any, key: str) -> None:
    v = cx.str_(m, key)
    host, _, port = v.rpartition(":")
    if not port.isdigit():
        raise cx.err(m, key, f"could not parse address string {v!r}")
    if host:
        cx.opts.host = host.strip("[]")
    cx.opts.port = int(port)


def _http(cx: _Ctx, m: Any, key: str) -> None:
    v = m[key]
    if isinstance(v, int) and not isinstance(v, bool):
        cx.opts.http_port = v
        return
    s = cx.str_(m, key)
    host, _, port = s.rpartition(":")
    if not port.isdigit():
        raise cx.err(m, key, f"could not parse address string {s!r}")
    if host:
        cx.opts.http_host = host
    cx.opts.http_port = int(port)


def _log_flag(attr: str) -> Any:
    return _set(attr, "bool_")


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
            o.auth_timeout = cx.duration(a, k)
        elif lk == "users":
            users, nks = _users(cx, a, k, None)
            o.users.extend(users)
            o.nkeys.extend(nks)
        elif lk == "default_permissions":
            o.default_permissions = _permissions(cx, a, k)
        elif lk == "auth_callout":
            raise cx.err(a, k, "auth_callout is not supported")
        else:
            cx.warn(a, k, f"unknown field {k!r} in authorization is ignored")
    if (o.username or o.authorization) and (o.users or o.nkeys):
        raise cx.err(m, key, "can not have a single user/pass or token and a users array")


def _users(cx: _Ctx, m: Any, key: str, account: str | None) -> tuple[list[User], list[NkeyUser]]:
    arr = m[key]
    if not isinstance(arr, list):
        raise cx.err(m, key, f"{key}: expected an array of users")
    users: list[User] = []
    nks: list[NkeyUser] = []
    for i, u in enumerate(arr):
        if not isinstance(u, dict):
            raise cx.err(arr, i, "user entry: expected a block { user: .., password: .. }")
        name = pw = nkey = ""
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
            elif lk in ("permission", "permissions"):
                perms = _permissions(cx, u, k)
            elif lk == "allowed_connection_types":
                conn_types = cx.strlist(u, k)
            elif lk == "account":
                account = cx.str_(u, k)
            else:
                cx.warn(u, k, f"unknown field {k!r} in user is ignored")
        if nkey:
            if not nkey.startswith("U"):
                raise cx.err(arr, i, f"Not a valid public nkey for a user: {nkey!r}")
            nks.append(NkeyUser(nkey, perms, account, conn_types))
        elif name:
            users.append(User(name, pw, perms, account, conn_types))
        else:
            raise cx.err(arr, i, "user entry needs `user` or `nkey`")
    return users, nks


def _subject_perm(cx: _Ctx, m: Any, key: str) -> SubjectPermission:
    v = m[key]
    if isinstance(v, str | list) and not isinstance(v, dict):
        return SubjectPermission(allow=cx.strlist(m, key))
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
        elif lk in ("allow_responses", "allow_response"):
            v = p[k]
            if isinstance(v, bool):
                perms.allow_responses = ResponsePermission() if v else None
            elif isinstance(v, dict):
                rp = ResponsePermission()
                for rk in v:
                    if rk.lower() in ("max", "max_msgs", "max_messages", "max_responses"):
                        rp.max_msgs = cx.int_(v, rk)
                    elif rk.lower() in ("expires", "expiration", "ttl"):
                        rp.expires = cx.duration(v, rk)
                    else:
                        raise cx.err(v, rk, f"unknown field {rk!r} in allow_responses")
                perms.allow_responses = rp
            else:
                raise cx.err(p, k, "allow_responses: expected a boolean or {max, expires}")
        else:
            raise cx.err(p, k, f"unknown field {k!r} in permissions")
    return perms


def _accounts(cx: _Ctx, m: Any, key: str) -> None:
    v = m[key]
    if isinstance(v, list):  # accounts: [A, B] (names only)
        for i, name in enumerate(v):
            if not isinstance(name, str):
                raise cx.err(v, i, "account name must be a string")
            cx.opts.accounts.append(AccountConfig(name=name))
        return
    accs = cx.map_(m, key)
    for name in accs:
        body = accs[name]
        acc = AccountConfig(name=name)
        if not isinstance(body, dict):
            raise cx.err(accs, name, f"account {name}: expected a block")
        for k in body:
            lk = k.lower()
            if lk == "users":
                users, nks = _users(cx, body, k, name)
                acc.users, acc.nkey_users = users, nks
            elif lk == "jetstream":
                acc.jetstream = _account_js(cx, body, k)
            elif lk == "default_permissions":
                acc.default_permissions = _permissions(cx, body, k)
            elif lk == "nkey":
                acc.nkey = cx.str_(body, k)
            elif lk == "exports":
                acc.exports = _exports(cx, body, k)
                cx.warn(body, k, "account exports are parsed but not applied yet (accounts are isolated)")
            elif lk == "imports":
                acc.stream_imports, acc.service_imports = _imports(cx, body, k)
                cx.warn(body, k, "account imports are parsed but not applied yet (accounts are isolated)")
            elif lk in ("mappings", "limits", "msg_trace"):
                cx.warn(body, k, f"account {k} are not supported and are ignored")
            else:
                cx.warn(body, k, f"unknown field {k!r} in account {name} is ignored")
        cx.opts.accounts.append(acc)


def _account_js(cx: _Ctx, m: Any, key: str) -> JetStreamAccountLimits | None:
    v = m[key]
    if isinstance(v, bool):
        return JetStreamAccountLimits() if v else None
    if isinstance(v, str):
        if v.lower() in ("enabled", "enable", "true"):
            return JetStreamAccountLimits()
        if v.lower() in ("disabled", "disable", "false"):
            return None
        raise cx.err(m, key, f"jetstream: expected enabled/disabled or a block, got {v!r}")
    b = cx.map_(m, key)
    lim = JetStreamAccountLimits()
    for k in b:
        lk = k.lower()
        if lk in ("max_mem", "max_memory", "mem", "memory", "max_memory_store"):
            lim.max_memory = cx.int_(b, k)
        elif lk in ("max_file", "max_store", "file", "store", "max_file_store", "max_disk"):
            lim.max_file = cx.int_(b, k)
        elif lk in ("max_streams", "streams"):
            lim.max_streams = cx.int_(b, k)
        elif lk in ("max_consumers", "consumers"):
            lim.max_consumers = cx.int_(b, k)
        elif lk in ("max_bytes_required", "max_stream_bytes_required"):
            lim.max_bytes_required = cx.bool_(b, k)
        elif lk == "max_ack_pending":
            lim.max_ack_pending = cx.int_(b, k)
        elif lk in ("mem_max_stream_bytes", "memory_max_stream_bytes"):
            lim.memory_max_stream_bytes = cx.int_(b, k)
        elif lk in ("disk_max_stream_bytes", "store_max_stream_bytes"):
            lim.store_max_stream_bytes = cx.int_(b, k)
        else:
            cx.warn(b, k, f"unknown field {k!r} in account jetstream is ignored")
    return lim


def _exports(cx: _Ctx, m: Any, key: str) -> list[Export]:
    out = []
    for e in m[key] if isinstance(m[key], list) else []:
        if isinstance(e, dict):
            out.append(Export(stream=e.get("stream"), service=e.get("service"),
                              accounts=[str(a) for a in e.get("accounts") or []],
                              response_type=str(e.get("response_type") or e.get("response") or "Singleton")))
    return out


def _imports(cx: _Ctx, m: Any, key: str) -> tuple[list[StreamImport], list[ServiceImport]]:
    si: list[StreamImport] = []
    sv: list[ServiceImport] = []
    for e in m[key] if isinstance(m[key], list) else []:
        if not isinstance(e, dict):
            continue
        if isinstance(e.get("stream"), dict):
            s = e["stream"]
            si.append(StreamImport(str(s.get("account", "")), str(s.get("subject", "")),
                                   str(e.get("prefix") or e.get("to") or "")))
        elif isinstance(e.get("service"), dict):
            s = e["service"]
            sv.append(ServiceImport(str(s.get("account", "")), str(s.get("subject", "")), str(e.get("to") or "")))
    return si, sv


def _tls_block(cx: _Ctx, m: Any, key: str) -> TLSConfig:
    b = cx.map_(m, key)
    t = TLSConfig()
    for k in b:
        lk = k.lower()
        if lk in ("cert_file", "key_file", "ca_file", "min_version"):
            setattr(t, lk, cx.str_(b, k))
        elif lk in ("verify", "verify_and_map", "insecure", "handshake_first"):
            v = b[k]
            if lk == "handshake_first" and not isinstance(v, bool):
                t.handshake_first = True
                t.handshake_first_fallback = cx.duration(b, k)
            else:
                setattr(t, lk, cx.bool_(b, k))
        elif lk == "timeout":
            t.timeout = cx.duration(b, k)
        elif lk in ("cipher_suites", "curve_preferences", "pinned_certs"):
            setattr(t, lk, cx.strlist(b, k))
        elif lk in ("first", "tls_first"):
            t.handshake_first = cx.bool_(b, k)
        else:
            cx.warn(b, k, f"TLS option {k!r} is not supported and is ignored")
    return t


def _tls(cx: _Ctx, m: Any, key: str) -> None:
    cx.opts.tls = _tls_block(cx, m, key)


def _jetstream(cx: _Ctx, m: Any, key: str) -> None:
    v = m[key]
    js = cx.opts.jetstream
    if isinstance(v, bool):
        js.enabled = v
        return
    if isinstance(v, str):
        if v.lower() in ("enabled", "enable", "true"):
            js.enabled = True
            return
        if v.lower() in ("disabled", "disable", "false"):
            js.enabled = False
            return
        raise cx.err(m, key, f"jetstream: expected enabled/disabled or a block, got {v!r}")
    b = cx.map_(m, key)
    js.enabled = True
    for k in b:
        lk = k.lower()
        if lk in ("store_dir", "storedir", "store"):
            js.store_dir = cx.str_(b, k)
        elif lk == "domain":
            js.domain = cx.str_(b, k)
        elif lk in ("max_memory_store", "max_mem_store", "max_mem"):
            js.max_memory_store = cx.int_(b, k)
        elif lk in ("max_file_store", "max_file"):
            js.max_file_store = cx.int_(b, k)
        elif lk == "sync_interval":
            v2 = b[k]
            if isinstance(v2, str) and v2.lower() == "always":
                js.sync_interval = "always"
            else:
                js.sync_interval = cx.duration(b, k)
        elif lk == "unique_tag":
            js.unique_tag = cx.str_(b, k)
        elif lk == "enabled":
            js.enabled = cx.bool_(b, k)
        elif lk in ("cipher", "key", "prev_key", "limits", "max_buffered_msgs", "max_buffered_size",
                    "request_queue_limit", "max_outstanding_catchup", "strict", "extension_hint",
                    "max_ack_pending", "max_catchup"):
            cx.warn(b, k, f"jetstream {k} is not supported by edged and is ignored")
        else:
            cx.warn(b, k, f"unknown field {k!r} in jetstream is ignored")


def _leafnodes(cx: _Ctx, m: Any, key: str) -> None:
    b = cx.map_(m, key)
    ln = LeafNodeOpts()
    for k in b:
        lk = k.lower()
        if lk == "remotes":
            arr = b[k]
            if not isinstance(arr, list):
                raise cx.err(b, k, "remotes: expected an array")
            for i, r in enumerate(arr):
                if not isinstance(r, dict):
                    raise cx.err(arr, i, "remote: expected a block")
                ln.remotes.append(_remote(cx, r))
        elif lk == "reconnect":
            ln.reconnect = cx.duration(b, k)
        elif lk in ("port", "listen", "host", "advertise"):
            cx.warn(b, k, "the leafnode accept side is not supported (edged only connects out to hubs)")
        elif lk == "tls":
            ln.tls = _tls_block(cx, b, k)
        elif lk == "authorization":
            cx.warn(b, k, "leafnode authorization applies to the accept side, which edged does not have")
        else:
            cx.warn(b, k, f"unknown field {k!r} in leafnodes is ignored")
    cx.opts.leafnodes = ln


def _remote(cx: _Ctx, r: Any) -> RemoteLeafOpts:
    ro = RemoteLeafOpts()
    for k in r:
        lk = k.lower()
        if lk in ("url", "urls"):
            ro.urls += cx.strlist(r, k)
        elif lk in ("account", "local"):
            ro.account = cx.str_(r, k)
        elif lk in ("credentials", "creds"):
            ro.credentials = cx.str_(r, k)
        elif lk == "nkey":
            ro.nkey = cx.str_(r, k)
        elif lk == "seed":
            ro.seed = cx.str_(r, k)
        elif lk == "tls":
            ro.tls = _tls_block(cx, r, k)
        elif lk in ("ws_compression", "ws_no_masking", "no_randomize", "disabled", "hub",
                    "ignore_discovered_urls"):
            setattr(ro, lk, cx.bool_(r, k))
        elif lk in ("deny_imports", "deny_import"):
            ro.deny_imports = cx.strlist(r, k)
        elif lk in ("deny_exports", "deny_export"):
            ro.deny_exports = cx.strlist(r, k)
        elif lk in ("first_info_timeout", "dial_timeout"):
            setattr(ro, lk, cx.duration(r, k))
        elif lk == "compression":
            v = r[k]
            mode = "off" if v is False else str(v)
            if mode not in ("off", "disabled"):
                cx.warn(r, k, "leafnode compression is not supported; the link is uncompressed")
            ro.compression = "off"
        elif lk == "proxy":
            ro.proxy = dict(cx.map_(r, k))
        else:
            cx.warn(r, k, f"unknown field {k!r} in leafnode remote is ignored")
    if not ro.urls:
        raise ConfigError("leafnode remote needs `url` or `urls`", r.start if isinstance(r, ConfMap) else None)
    return ro


def _mqtt(cx: _Ctx, m: Any, key: str) -> None:
    b = cx.map_(m, key)
    mq = MQTTOpts()
    for k in b:
        lk = k.lower()
        if lk == "port":
            mq.port = cx.int_(b, k)
        elif lk in ("host", "net"):
            mq.host = cx.str_(b, k)
        elif lk == "listen":
            host, _, port = cx.str_(b, k).rpartition(":")
            mq.host, mq.port = host, int(port) if port.isdigit() else 0
        elif lk == "tls":
            mq.tls = _tls_block(cx, b, k)
        elif lk == "no_auth_user":
            mq.no_auth_user = cx.str_(b, k)
        elif lk == "ack_wait":
            mq.ack_wait = cx.duration(b, k)
        elif lk == "max_ack_pending":
            mq.max_ack_pending = cx.int_(b, k)
        else:
            mq.extra[k] = b[k]
    cx.opts.mqtt = mq
    cx.warn(m, key, "MQTT is not supported yet; the mqtt block is ignored")


def _websocket(cx: _Ctx, m: Any, key: str) -> None:
    b = cx.map_(m, key)
    ws = WebsocketOpts()
    for k in b:
        lk = k.lower()
        if lk == "port":
            ws.port = cx.int_(b, k)
        elif lk in ("host", "net"):
            ws.host = cx.str_(b, k)
        elif lk == "no_tls":
            ws.no_tls = cx.bool_(b, k)
        elif lk == "tls":
            ws.tls = _tls_block(cx, b, k)
        elif lk == "compression":
            ws.compression = cx.bool_(b, k)
        elif lk == "same_origin":
            ws.same_origin = cx.bool_(b, k)
        elif lk == "allowed_origins":
            ws.allowed_origins = cx.strlist(b, k)
        else:
            ws.extra[k] = b[k]
    cx.opts.websocket = ws
    cx.warn(m, key, "NATS over WebSocket is not supported yet; the websocket block is ignored")


def _operator(cx: _Ctx, m: Any, key: str) -> None:
    for item in cx.strlist(m, key):
        text = item.strip()
        if text.count(".") == 2 and not os.path.exists(text):
            cx.opts.trusted_operators.append(text)
            continue
        try:
            with open(text, encoding="utf-8") as f:
                data = f.read()
        except OSError as e:
            raise cx.err(m, key, f"error reading operator JWT file {text!r}: {e.strerror}") from None
        jwt = _jwt_in(data)
        if not jwt:
            raise cx.err(m, key, f"operator file {text!r} holds no JWT")
        cx.opts.trusted_operators.append(jwt)


def _jwt_in(data: str) -> str:
    for line in data.splitlines():
        s = line.strip()
        if s.count(".") == 2 and s.startswith("ey"):
            return s
    return ""


def _resolver(cx: _Ctx, m: Any, key: str) -> None:
    v = m[key]
    if isinstance(v, str) and v.upper() == "MEMORY":
        cx.opts.resolver = "MEMORY"
        return
    raise cx.err(m, key, "only `resolver: MEMORY` (with resolver_preload) is supported")


def _resolver_preload(cx: _Ctx, m: Any, key: str) -> None:
    b = cx.map_(m, key)
    for k in b:
        cx.opts.resolver_preload[k] = cx.str_(b, k)


def _edged(cx: _Ctx, m: Any, key: str) -> None:
    cx.opts.edged = dict(cx.map_(m, key))


def _ignore_with_warning(msg: str) -> Any:
    def h(cx: _Ctx, m: Any, key: str) -> None:
        cx.warn(m, key, msg)
    return h


_TOP: dict[str, Any] = {
    "listen": _listen,
    "host": _set("host", "str_"),
    "net": _set("host", "str_"),
    "port": _set("port", "int_"),
    "client_advertise": _set("client_advertise", "str_"),
    "server_name": _set("server_name", "str_"),
    "http": _http,
    "http_port": _http,
    "monitor_port": _http,
    "http_base_path": _set("http_base_path", "str_"),
    "max_payload": _set("max_payload", "int_"),
    "max_pending": _set("max_pending", "int_"),
    "max_connections": _set("max_connections", "int_"),
    "max_conn": _set("max_connections", "int_"),
    "max_subscriptions": _set("max_subscriptions", "int_"),
    "max_subs": _set("max_subscriptions", "int_"),
    "max_control_line": _set("max_control_line", "int_"),
    "ping_interval": _set("ping_interval", "duration"),
    "ping_max": _set("ping_max", "int_"),
    "write_deadline": _set("write_deadline", "duration"),
    "no_header_support": _set("no_header_support", "bool_"),
    "disable_sublist_cache": _set("disable_sublist_cache", "bool_"),
    "no_sublist_cache": _set("disable_sublist_cache", "bool_"),
    "debug": _log_flag("debug"),
    "trace": _log_flag("trace"),
    "logtime": _log_flag("logtime"),
    "log_file": _set("log_file", "str_"),
    "logfile": _set("log_file", "str_"),
    "syslog": _log_flag("syslog"),
    "pid_file": _set("pid_file", "str_"),
    "pidfile": _set("pid_file", "str_"),
    "ports_file_dir": _set("ports_file_dir", "str_"),
    "lame_duck_duration": _set("lame_duck_duration", "duration"),
    "lame_duck_grace_period": _set("lame_duck_grace_period", "duration"),
    "authorization": _authorization,
    "accounts": _accounts,
    "system_account": _set("system_account", "str_"),
    "system": _set("system_account", "str_"),
    "no_system_account": _set("no_system_account", "bool_"),
    "no_auth_user": _set("no_auth_user", "str_"),
    "operator": _operator,
    "operators": _operator,
    "root": _operator,
    "roots": _operator,
    "trusted": lambda cx, m, k: cx.opts.trusted_keys.extend(cx.strlist(m, k)),
    "trusted_keys": lambda cx, m, k: cx.opts.trusted_keys.extend(cx.strlist(m, k)),
    "resolver": _resolver,
    "resolver_preload": _resolver_preload,
    "tls": _tls,
    "allow_non_tls": _set("allow_non_tls", "bool_"),
    "jetstream": _jetstream,
    "leafnodes": _leafnodes,
    "leaf": _leafnodes,
    "mqtt": _mqtt,
    "websocket": _websocket,
    "ws": _websocket,
    "edged": _edged,
    "max_traced_msg_len": _ignore_with_warning("max_traced_msg_len is ignored"),
    "connect_error_reports": _ignore_with_warning("connect_error_reports is ignored"),
    "reconnect_error_reports": _ignore_with_warning("reconnect_error_reports is ignored"),
    "logfile_size_limit": _ignore_with_warning("log rotation by size is not supported; use logrotate + SIGUSR1"),
    "log_size_limit": _ignore_with_warning("log rotation by size is not supported; use logrotate + SIGUSR1"),
}
