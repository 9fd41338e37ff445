"""Account JWT claims (operator mode) turned into the account config an `accounts {}` block gives, so that
one path (edged/routing/imports.py) applies both: exports, imports with activation tokens, mappings and default
permissions. The checks are nats-io/jwt v2's (AccountClaims.Validate: a claim with a blocking issue makes
the whole account unusable) and nats-server's (accounts.go updateAccountClaimsWithRefresh, checkActivation).

Field names and meanings as jwt v2 has them: an import's `subject` is the importer's subject for a service
(the exporter's with a deprecated `to`) and the exporter's for a stream (`to` then being a prefix);
`local_subject` is the importer's subject either way.
"""

from __future__ import annotations

import json
import time
from typing import Any

from edged.log import log
from edged.security import jwt as jwtmod
from edged.settings.options import (
    AccountConfig,
    Export,
    JetStreamAccountLimits,
    MapDest,
    Mapping,
    Permissions,
    ResponsePermission,
    ServiceImport,
    StreamImport,
    SubjectPermission,
)

STREAM, SERVICE = "stream", "service"
NO_LIMIT = -1
_RESPONSE_TYPES = {"": "Singleton", "Singleton": "Singleton", "Stream": "Stream", "Chunked": "Chunked"}


def _nats(claims: dict[str, Any]) -> dict[str, Any]:
    n = claims.get("nats")
    return n if isinstance(n, dict) else {}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def q(s: Any) -> str:
    """Go's %q of a string, as nats-io/jwt quotes subjects in its messages."""
    return json.dumps(str(s), ensure_ascii=False)


def trace_label(cfg: AccountConfig) -> str:
    """How nats-server names an account in its logs: `<public key>/<name in the JWT>`."""
    return f"{cfg.name}/{cfg.name_tag}" if cfg.name_tag else cfg.name


# ------------------------------------------------------------------------------------------ JSON shape


class ClaimsError(ValueError):
    """An account JWT nats-io/jwt cannot even decode (a field of the wrong JSON type): nats-server refuses
    to start with it preloaded."""


def _is_int(v: Any, lo: int = -(2 ** 63), hi: int = 2 ** 63 - 1) -> bool:
    return not isinstance(v, bool) and isinstance(v, int | float) and v == int(v) and lo <= v <= hi


_INT_FIELDS = ("response_threshold", "account_token_position")
_STR_FIELDS = ("name", "subject", "account", "token", "to", "local_subject", "response_type", "description",
               "info_url")
_BOOL_FIELDS = ("share", "allow_trace", "token_req", "advertise")


def _entry_problem(where: str, e: Any) -> str | None:
    if e is None:
        return None
    if not isinstance(e, dict):
        return f"{where}: not an object"
    for k in _STR_FIELDS:
        if k in e and e[k] is not None and not isinstance(e[k], str):
            return f"{where}.{k}: not a string"
    for k in _BOOL_FIELDS:
        if k in e and e[k] is not None and not isinstance(e[k], bool):
            return f"{where}.{k}: not a boolean"
    for k in _INT_FIELDS:
        if k in e and e[k] is not None and not _is_int(e[k], 0 if k == "account_token_position" else -(2 ** 63)):
            return f"{where}.{k}: not an integer"
    if "type" in e and e["type"] not in (STREAM, SERVICE):
        return f"{where}.type: unknown export type {q(e['type'])}"
    revs = e.get("revocations")
    if revs is not None and not (isinstance(revs, dict) and all(_is_int(v) for v in revs.values())):
        return f"{where}.revocations: not a map of times"
    lat = e.get("service_latency")
    if lat is not None and not isinstance(lat, dict):
        return f"{where}.service_latency: not an object"
    return None


def shape_problem(claims: dict[str, Any]) -> str | None:
    """Why nats-io/jwt could not decode these account claims (a field of the wrong JSON type), or None."""
    n = claims.get("nats")
    if n is None:
        return None
    if not isinstance(n, dict):
        return "nats: not an object"
    for key in ("imports", "exports"):
        v = n.get(key)
        if v is None:
            continue
        if not isinstance(v, list):
            return f"{key}: not an array"
        for i, e in enumerate(v):
            why = _entry_problem(f"{key}[{i}]", e)
            if why:
                return why
    lim = n.get("limits")
    if lim is not None:
        if not isinstance(lim, dict):
            return "limits: not an object"
        for k, v in lim.items():
            if k in ("wildcards", "disallow_bearer", "max_bytes_required"):
                if v is not None and not isinstance(v, bool):
                    return f"limits.{k}: not a boolean"
            elif k != "tiered_limits" and v is not None and not _is_int(v):
                return f"limits.{k}: not an integer"
    maps = n.get("mappings")
    if maps is not None:
        if not isinstance(maps, dict):
            return "mappings: not an object"
        for src, dests in maps.items():
            if dests is None:
                continue
            if not isinstance(dests, list):
                return f"mappings.{src}: not an array"
            for d in dests:
                if not isinstance(d, dict) or not isinstance(d.get("subject", ""), str) or \
                        not isinstance(d.get("cluster", ""), str) or \
                        ("weight" in d and not _is_int(d["weight"], 0, 255)):
                    return f"mappings.{src}: not a weighted mapping"
    sk = n.get("signing_keys")
    if sk is not None and not (isinstance(sk, list) and all(
            isinstance(k, str) or (isinstance(k, dict) and isinstance(k.get("key"), str)) for k in sk)):
        return "signing_keys: not a list of keys"
    dp = n.get("default_permissions")
    if dp is not None:
        if not isinstance(dp, dict):
            return "default_permissions: not an object"
        for k in ("pub", "sub"):
            p = dp.get(k)
            if p is None:
                continue
            if not isinstance(p, dict) or any(p.get(x) is not None and not (
                    isinstance(p[x], list) and all(isinstance(s, str) for s in p[x])) for x in ("allow", "deny")):
                return f"default_permissions.{k}: not a permission"
        r = dp.get("resp")
        if r is not None and not (isinstance(r, dict) and all(_is_int(r.get(x) or 0) for x in ("max", "ttl"))):
            return "default_permissions.resp: not a response permission"
    return None


# ------------------------------------------------------------------------------------------ subjects (jwt v2)


def _subject_issues(s: Any) -> list[str]:
    """jwt's Subject.Validate."""
    v = s if isinstance(s, str) else ""
    if not v:
        return ["subject cannot be empty"]
    out = []
    if " " in v:
        out.append(f"subject {q(v)} cannot have spaces")
    if v[0] == "." or v[-1] == ".":
        out.append(f"subject {q(v)} cannot start or end with a `.`")
    if ".." in v:
        out.append(f"subject {q(v)} cannot contain consecutive `.`")
    return out


def has_wildcards(s: str) -> bool:
    """jwt's Subject.HasWildCards."""
    return s.endswith(".>") or ".*." in s or s.endswith(".*") or s.startswith("*.") or s in ("*", ">")


def contained_in(s: str, other: str) -> bool:
    """jwt's Subject.IsContainedIn: every subject `s` matches is matched by `other`."""
    mine, theirs = s.split("."), other.split(".")
    if len(mine) > len(theirs) and theirs[-1] != ">":
        return False
    if len(mine) < len(theirs):
        return False
    for i, tok in enumerate(theirs):
        if i == len(theirs) - 1 and tok == ">":
            return True
        if tok != mine[i] and tok != "*":
            return False
    return True


def _renaming_issues(s: str, frm: str) -> list[str]:
    """jwt's RenamingSubject.Validate: `$n` references and `*` together stand for every `*` of `frm`."""
    out = _subject_issues(s)
    if not frm:
        out.append("subject cannot be empty")
    if (s == ">" or s.endswith(".>")) != (frm == ">" or frm.endswith(".>")):
        out.append("both, renaming subject and subject, need to end or not end in >")
    from_cnt = 1 if frm == "*" else sum(1 for t in frm.split(".") if t == "*")
    ref = 0
    for tk in s.split("."):
        if tk == "*":
            ref += 1
        if len(tk) >= 2 and tk[0] == "$" and tk[1:].isdigit():
            if int(tk[1:]) > from_cnt:
                out.append(f"Reference ${int(tk[1:])} in {q(s)} reference * in {q(frm)} that do not exist")
            else:
                ref += 1
    if ref != from_cnt:
        out.append("subject does not contain enough * or reference wildcards $[0-9]")
    return out


def untokenize(s: str) -> str:
    """`$n` reference tokens as `*` (jwt's RenamingSubject.ToSubject): the subject space they cover."""
    return ".".join("*" if len(t) > 1 and t[0] == "$" and t[1:].isdigit() else t for t in s.split("."))


# ------------------------------------------------------------------------------------------ activations


def _activation(token: str) -> dict[str, Any] | None:
    """The claims of an activation token whose signature holds (times not checked), or None."""
    try:
        claims = jwtmod.verify(token, times=False)
    except jwtmod.JWTError:
        return None
    if jwtmod.claim_type(claims) != "activation":
        return None
    iss = claims.get("iss", "")
    if not isinstance(iss, str) or iss[:1] not in ("A", "O"):
        return None
    n = claims.get("nats")
    if not isinstance(n, dict) or any(not isinstance(n.get(k, ""), str) for k in ("subject", "kind", "issuer_account")):
        return None
    if any(k in claims and not _is_int(claims[k]) for k in ("exp", "nbf", "iat")) or \
            not isinstance(claims.get("sub", ""), str):
        return None
    return claims


def _token_issues(imp: dict[str, Any], importer: str) -> list[str]:
    """The activation token part of jwt's Import.Validate."""
    token = imp.get("token")
    if not token:
        return []
    subject = str(imp.get("subject") or "")
    act = _activation(str(token))
    if act is None:
        return [f"import {q(subject)} contains an invalid activation token"]
    n = _nats(act)
    out = []
    account = imp.get("account")
    if not (act.get("iss") == account or n.get("issuer_account") == account):
        out.append(f"activation token doesn't match account for import {q(subject)}")
    if act.get("sub") != importer:
        out.append(f"activation token doesn't match account it is being included in, {q(subject)}")
    if n.get("kind") != imp.get("type"):
        out.append(f"mismatch between token import type {n.get('kind')} and type of import {imp.get('type')}")
    if n.get("kind") not in (STREAM, SERVICE):
        out.append(f"invalid import type: {q(n.get('kind'))}")
    out += _subject_issues(n.get("subject"))
    ia = n.get("issuer_account")
    if ia:
        try:
            jwtmod.verify_public_key(str(ia), "A")
        except jwtmod.JWTError:
            out.append("account_id is not an account public key")
    subj = str(imp.get("to") or "") if imp.get("type") == SERVICE and imp.get("to") else subject
    if not contained_in(subj, str(n.get("subject") or "")):
        out.append(f"activation token import subject {q(n.get('subject'))} doesn't match import {q(subject)}")
    return out


def activation_ok(exporter: AccountConfig, importer: str, kind: str, token: str, export: Export,
                  now: float | None = None) -> bool:
    """nats-server's checkActivation: a token for `importer`, signed by the exporter or one of its signing
    keys, of the import's kind, in its validity window, not revoked by the export."""
    if not token:
        return False
    act = _activation(token)
    if act is None or act.get("sub") != importer or _nats(act).get("kind") != kind:
        return False
    n = _nats(act)
    iss = act.get("iss")
    ia = n.get("issuer_account") or ""
    if ia:
        if ia != exporter.name:
            log.error('Invalid issuer account "%s" in activation claim (subject: "%s" - type: "%s") for account '
                      '"%s"', ia, n.get("subject", ""), kind, exporter.name)
            return False
        if iss != exporter.name and iss not in exporter.signing_keys:
            return False
    elif iss != exporter.name:
        return False
    now = time.time() if now is None else now
    exp, nbf = act.get("exp") or 0, act.get("nbf") or 0
    if (exp and int(exp) <= now) or (nbf and now < int(nbf)):
        return False
    iat = int(act.get("iat") or 0)
    for key in (str(act.get("sub")), "*"):
        t = export.revocations.get(key)
        if t is not None and t >= iat:
            return False
    return True


def activation_expiry(token: str) -> float:
    """When an activation token runs out (0: never), so its import can be dropped then."""
    act = _activation(token) if token else None
    return float(act.get("exp") or 0) if act is not None else 0.0


# ------------------------------------------------------------------------------------------ validation


def _import_issues(imp: Any, importer: str) -> list[str]:
    if not isinstance(imp, dict):
        return ["null import is not allowed"]
    out = []
    kind = imp.get("type")
    if kind not in (STREAM, SERVICE):
        out.append(f"invalid import type: {q(kind)}")
    if kind == SERVICE and imp.get("allow_trace"):
        out.append("AllowTrace only valid for stream import")
    if not imp.get("account"):
        out.append("account to import from is not specified")
    subject = str(imp.get("subject") or "")
    out += _subject_issues(subject)
    local = imp.get("local_subject")
    if local:
        out += _renaming_issues(str(local), subject)
        if imp.get("to"):
            out.append("Local Subject replaces To")
    if imp.get("share") and kind != SERVICE:
        out.append(f"sharing information (for latency tracking) is only valid for services: {q(subject)}")
    return out + _token_issues(imp, importer)


def _export_issues(e: Any) -> list[str]:
    if not isinstance(e, dict):
        return ["null export is not allowed"]
    out = []
    kind = e.get("type")
    rt = e.get("response_type") or ""
    if kind not in (STREAM, SERVICE):
        out.append(f"invalid export type: {q(kind)}")
    if kind == SERVICE and rt not in _RESPONSE_TYPES:
        out.append(f"invalid response type for service: {q(rt)}")
    if kind == STREAM:
        if rt:
            out.append(f"invalid response type for stream: {q(rt)}")
        if e.get("allow_trace"):
            out.append("AllowTrace only valid for service export")
    if e.get("service_latency") is not None and kind != SERVICE:
        out.append("latency tracking only permitted for services")
    thr = int(e.get("response_threshold") or 0)
    if thr < 0:
        out.append("negative response threshold is invalid")
    if thr > 0 and kind != SERVICE:
        out.append("response threshold only valid for services")
    subject = str(e.get("subject") or "")
    out += _subject_issues(subject)
    pos = int(e.get("account_token_position") or 0)
    if pos > 0:
        toks = subject.split(".")
        if not has_wildcards(subject):
            out.append(f"Account Token Position can only be used with wildcard subjects: {subject}")
        elif pos > len(toks):
            out.append(f"Account Token Position {pos} exceeds length of subject '{subject}'")
        elif toks[pos - 1] != "*":
            out.append(f"Account Token Position {pos} matches '{toks[pos - 1]}' but must match a * in: {subject}")
    return out


def validation_issues(claims: dict[str, Any]) -> list[str]:
    """The blocking issues nats-io/jwt finds in an account JWT's imports, exports, limits and mappings; any
    one makes nats-server refuse the account (verifyAccountClaims: "account validation failed")."""
    n = _nats(claims)
    me = str(claims.get("sub") or "")
    imports, exports = _list(n.get("imports")), _list(n.get("exports"))
    out: list[str] = []
    seen: dict[str, set[str]] = {}
    for imp in imports:
        if isinstance(imp, dict) and imp.get("type") == SERVICE:
            sub = str(imp.get("to") or "") or untokenize(str(imp.get("local_subject") or "")) or \
                str(imp.get("subject") or "")
            acc = str(imp.get("account") or "")
            mine = seen.setdefault(acc, set())
            for other in mine:
                if contained_in(sub, other) or contained_in(other, sub):
                    out.append(f"overlapping subject namespace for {q(sub)} and {q(other)} in same account {q(acc)}")
            if sub in mine:
                out.append(f"overlapping subject namespace for {q(sub)} in account {q(acc)}")
            mine.add(sub)
        out += _import_issues(imp, me)
    for e in exports:
        out += _export_issues(e)
    for kind in (SERVICE, STREAM):
        subjects = [str(e.get("subject") or "") for e in exports if isinstance(e, dict) and
                    (e.get("type") == SERVICE) == (kind == SERVICE)]
        for i, a in enumerate(subjects):
            for j, b in enumerate(subjects):
                if i != j and contained_in(a, b):
                    out.append(f"{kind} export subject {q(b)} already exports {q(a)}")
    lim = n.get("limits") if isinstance(n.get("limits"), dict) else {}
    max_imports, max_exports = int(lim.get("imports") or 0), int(lim.get("exports") or 0)
    if any(lim.values()) and max_imports >= 0 and len(imports) > max_imports:  # jwt checks it twice, and says it twice
        out.append("the account contains more imports than allowed by the operator")
    if max_imports != NO_LIMIT and len(imports) > max_imports:
        out.append("the account contains more imports than allowed by the operator")
    if max_exports != NO_LIMIT:
        if len(exports) > max_exports:
            out.append("the account contains more exports than allowed by the operator")
        if not lim.get("wildcards") and any(isinstance(e, dict) and has_wildcards(str(e.get("subject") or ""))
                                            for e in exports):
            out.append("the account contains wildcard exports that are not allowed by the operator")
    mappings = n.get("mappings")
    for src, dests in (mappings.items() if isinstance(mappings, dict) else ()):
        out += _subject_issues(src)
        total, per_cluster = 0, {}
        for d in _list(dests):
            d = d if isinstance(d, dict) else {}
            out += _subject_issues(d.get("subject"))
            w = int(d.get("weight") or 0) or 100
            if w > 100:
                out.append(f"Mapping {q(src)} has a weight {w} that exceeds 100")
            if d.get("cluster"):
                c = str(d["cluster"])
                per_cluster[c] = per_cluster.get(c, 0) + w
                if per_cluster[c] > 100:
                    out.append(f"Mapping {q(src)} in cluster {q(c)} exceeds 100% among all of it's weighted to "
                               "mappings")
            else:
                total += w
        if total > 100:
            out.append(f"Mapping {q(src)} exceeds 100% among all of it's weighted to mappings")
    return out


# ------------------------------------------------------------------------------------------ claims -> config


def _subject_permission(d: Any) -> SubjectPermission | None:
    if not isinstance(d, dict):
        return None
    allow, deny = [str(x) for x in _list(d.get("allow"))], [str(x) for x in _list(d.get("deny"))]
    return SubjectPermission(allow=allow, deny=deny) if allow or deny else None


def permissions(n: dict[str, Any]) -> Permissions | None:
    """Permissions from a `pub`/`sub`/`resp` set (a user JWT's, a scoped signing key's template, an account
    JWT's `default_permissions`): None when it sets nothing."""
    pub, sub = _subject_permission(n.get("pub")), _subject_permission(n.get("sub"))
    resp = None
    r = n.get("resp")
    if isinstance(r, dict) and (r.get("max") or r.get("ttl")):
        resp = ResponsePermission(max_msgs=int(r.get("max") or 0), expires=float(r.get("ttl") or 0) / 1e9)
    if pub is None and sub is None and resp is None:
        return None
    return Permissions(publish=pub, subscribe=sub, allow_responses=resp)


def js_limits(claims: dict[str, Any]) -> JetStreamAccountLimits | None:
    lim = _nats(claims).get("limits") or {}
    mem, disk = int(lim.get("mem_storage", 0) or 0), int(lim.get("disk_storage", 0) or 0)
    if mem == 0 and disk == 0:
        return None
    return JetStreamAccountLimits(max_memory=mem, max_file=disk, max_streams=int(lim.get("streams", -1) or -1),
                                  max_consumers=int(lim.get("consumer", -1) or -1))


def _export(e: dict[str, Any]) -> Export:
    subject = str(e["subject"])
    revs = e.get("revocations") if isinstance(e.get("revocations"), dict) else {}
    common: dict[str, Any] = {"token_req": bool(e.get("token_req")),
                              "revocations": {str(k): int(v) for k, v in revs.items()},
                              "account_token_position": int(e.get("account_token_position") or 0),
                              "allow_trace": bool(e.get("allow_trace"))}
    if e.get("type") == STREAM:
        return Export(stream=subject, **common)
    thr = int(e.get("response_threshold") or 0) / 1e9
    return Export(service=subject, response_type=_RESPONSE_TYPES.get(str(e.get("response_type") or ""), "Singleton"),
                  response_threshold=thr or 120.0, **common)


def _mapping(src: str, dests: list[Any]) -> Mapping:
    out = []
    for d in dests:
        if isinstance(d, dict) and isinstance(d.get("subject"), str):
            out.append(MapDest(d["subject"], int(d.get("weight") or 0) or 100, str(d.get("cluster") or "")))
    return Mapping(src, out)


def account_config(claims: dict[str, Any]) -> AccountConfig:
    """The config of a verified account JWT with no validation issues (`validation_issues`)."""
    n = _nats(claims)
    pub = str(claims["sub"])
    cfg = AccountConfig(name=pub, nkey=pub, jetstream=js_limits(claims), name_tag=str(claims.get("name") or ""),
                        issuer=str(claims.get("iss") or ""), signing_keys=sorted(jwtmod.signing_keys(claims)))
    dp = n.get("default_permissions")
    cfg.default_permissions = permissions(dp) if isinstance(dp, dict) else None
    cfg.exports = [_export(e) for e in _list(n.get("exports"))]
    for imp in _list(n.get("imports")):
        account, subject = str(imp["account"]), str(imp.get("subject") or "")
        to, local, token = str(imp.get("to") or ""), str(imp.get("local_subject") or ""), str(imp.get("token") or "")
        if imp.get("type") == STREAM:
            if local:
                cfg.stream_imports.append(StreamImport(account, subject, to=local, token=token,
                                                       allow_trace=bool(imp.get("allow_trace"))))
            else:  # the deprecated `to` of a stream import is a prefix (AddStreamImportWithClaim)
                cfg.stream_imports.append(StreamImport(account, subject, prefix=to, token=token,
                                                       allow_trace=bool(imp.get("allow_trace"))))
        elif local:  # a service's `subject` is the exporter's when `local_subject` renames it
            cfg.service_imports.append(ServiceImport(account, subject, to=local, share=bool(imp.get("share")),
                                                     token=token))
        else:  # else `subject` is the importer's and the deprecated `to` the exporter's
            cfg.service_imports.append(ServiceImport(account, to or subject, to=subject if to else "",
                                                     share=bool(imp.get("share")), token=token))
    mappings = n.get("mappings")
    for src, dests in (mappings.items() if isinstance(mappings, dict) else ()):
        cfg.mappings.append(_mapping(str(src), _list(dests)))
    return cfg
