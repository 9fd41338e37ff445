"""Account exports, imports and subject mappings, applied as nats-server applies them (server/accounts.go,
client.go processServiceImport / addShadowSubscriptions / processMsgResults).

They meet the router through receivers, so the router itself stays protocol- and import-free and an
account with none of them pays nothing per message:

- a service import is a `ServiceImport` receiver subscribed in the importer on the import's local subject
  (a leafnode therefore tells the hub about it, as nats-server's leaf smap does); it renames the subject,
  adds `Nats-Request-Info`, gives a request a `_R_.` reply (one `Response` subscription each, under the
  exporter's `_R_.<prefix>.>` interest) and routes into the exporter, whose mappings apply;
- a stream import is a set of shadow subscriptions: each subscription in the importer that meets an
  import gets one in the exporter (`Shadow`), which hands deliveries to the original with the import's
  subject;
- mappings rewrite a client's or leafnode's publish before it is matched: the account's `route*` methods
  are replaced on that account only; a no-op `Interest` subscription on each mapping source makes a
  leafnode advertise it, as nats-server does.
"""

from __future__ import annotations

import json
import random
import time
from typing import TYPE_CHECKING, Any

from edged.log import log
from edged.routing.headers import HDR_LINE, get_header
from edged.routing.receiver import KIND_CLIENT, KIND_SYSTEM, Receiver, Subscription
from edged.routing.subjects import (
    SubjectTransform,
    is_literal,
    is_valid_subject,
    subject_is_subset,
    subject_matches,
    subjects_overlap,
)
from edged.security.account_jwt import activation_expiry, activation_ok, trace_label, untokenize
from edged.settings.options import AccountConfig, Export, Mapping, Options
from edged.settings.options import ServiceImport as ServiceImportConf
from edged.settings.options import StreamImport as StreamImportConf

if TYPE_CHECKING:
    from edged.routing.accounts import Account

GLOBAL = "$G"
_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_JS_ACK = b"$JS.ACK"
SINGLETON, STREAM, CHUNKED = "Singleton", "Stream", "Chunked"
REQUEST_INFO = "Nats-Request-Info"

# the service imports a message is passing through, innermost last (cycle detection; a message that came
# through a service import is never handed on to a stream import, as in nats-server)
_chain: list[Any] = []


def _rand(n: int) -> str:
    return "".join(random.choice(_DIGITS) for _ in range(n))


def _response_type(text: str) -> str:
    t = text.strip().lower()
    return {"stream": STREAM, "chunked": CHUNKED}.get(t, SINGLETON)


# ------------------------------------------------------------------------------------------ transforms


def _tokenize(dest: str) -> str:
    """nats-server's transformTokenize: each `*` in a destination is the next wildcard, `$1`, `$2`, ..."""
    n = 0
    out = []
    for t in dest.split("."):
        if t == "*":
            n += 1
            out.append(f"${n}")
        else:
            out.append(t)
    return ".".join(out)


def _placeholders(dest: str) -> list[int]:
    """The wildcard indexes (1-based) a destination refers to, in order; ValueError for a function edged
    does not implement (partition, split, ...)."""
    out = []
    for t in dest.split("."):
        tt = t.replace(" ", "")
        if tt.startswith("{{") and tt.endswith("}}"):
            if not (tt.startswith("{{wildcard(") and tt.endswith(")}}")) or not tt[11:-3].isdigit():
                raise ValueError(f"mapping function {t!r} is not supported by edged")
            out.append(int(tt[11:-3]))
        elif tt.startswith("$") and tt[1:].isdigit():
            out.append(int(tt[1:]))
    return out


def _check_transform(src: str, dest: str, strict: bool) -> str | None:
    """Why src -> dest is not a mapping nats-server accepts (None when it is; subject_transform.go
    NewSubjectTransformWithStrict, its messages)."""
    if not is_valid_subject(dest) or "*" in dest.split(".") or \
            (src.split(".")[-1] == ">") != (dest.split(".")[-1] == ">"):
        return "invalid subject"
    nw = sum(1 for t in src.split(".") if t == "*")
    used: list[int] = []
    for t in dest.split("."):
        try:
            n = _placeholders(t)
        except ValueError as e:
            return str(e)
        for i in n:
            if i > nw or i < 1:
                return f"invalid mapping destination: wildcard index out of range in {t}" + (f": [{i}]" if nw else "")
        used += n
    if strict and nw and len(used) < nw:
        return f"invalid mapping destination: not using all of the token wildcard(s) in {dest}"
    return None


def _reverse(src: str, dest: str) -> SubjectTransform:
    """The transform that undoes src -> dest (a tokenized dest): dest's placeholders become wildcards and
    src's wildcards take them back, so a subject in dest's space maps to src's."""
    order = _placeholders(dest)
    rsrc = []
    for t in dest.split("."):
        tt = t.replace(" ", "")
        rsrc.append("*" if (tt.startswith("{{") or (tt.startswith("$") and tt[1:].isdigit())) else t)
    rdest = []
    k = 0
    for t in src.split("."):
        if t == "*":
            k += 1
            rdest.append(f"${order.index(k) + 1}" if k in order else "*")
        else:
            rdest.append(t)
    return SubjectTransform(".".join(rsrc), ".".join(rdest))


# ------------------------------------------------------------------------------------------ config checks


def _export_auth(exports: list[Export], kind: str, importer: str, subject: str, token: str = "",
                 exporter: AccountConfig | None = None) -> Export | None:
    """The export of `kind` that lets `importer` import `subject` (exact first, then one the subject is a
    subset of: accounts.go checkStreamExportApproved / checkServiceExportApproved, checkAuth). An account
    JWT's export may ask for an activation `token` signed by the `exporter`, or for the importer's name in
    a subject token."""
    mine = [e for e in exports if getattr(e, kind) is not None]
    for e in mine:
        if getattr(e, kind) == subject:
            return e if _approved(e, kind, importer, None, token, exporter) else None
    for e in mine:
        if subject_is_subset(subject, getattr(e, kind)):
            return e if _approved(e, kind, importer, subject.split("."), token, exporter) else None
    return None


def _approved(e: Export, kind: str, importer: str, tokens: list[str] | None, token: str,
              exporter: AccountConfig | None) -> bool:
    if not e.accounts and not e.token_req and not e.account_token_position:
        return True  # public
    pos = e.account_token_position
    if pos:  # the subject names the importer (an exact match has no tokens to look at: refused, as nats-server)
        return tokens is not None and pos <= len(tokens) and tokens[pos - 1] == importer
    if e.token_req:
        return exporter is not None and activation_ok(exporter, importer, kind, token, e)
    return importer in e.accounts


def check_config(opts: Options) -> list[str]:
    """nats-server's errors for imports it refuses (an account nobody defined, a subject the exporter
    does not export to the importer, a bad prefix or mapping)."""
    accs = {a.name: a for a in opts.accounts}
    out: list[str] = []
    # what was added so far, per importer: (exporter, local subject, exporter subject), in nats-server's order
    streams: dict[str, list[tuple[str, str, str]]] = {}
    services: dict[str, list[tuple[str, str, str]]] = {}
    for a in opts.accounts:
        for si in a.stream_imports:
            exp = accs.get(si.account)
            if exp is None:
                out.append(f'"{si.account}" account not defined for stream import')
                continue
            err = f'Error adding stream import "{si.subject}": '
            if not is_valid_subject(si.subject) or _export_auth(exp.exports, "stream", a.name, si.subject) is None:
                out.append(err + "stream import not authorized")
                continue
            if si.prefix and not is_literal(si.prefix):
                out.append(err + "stream import prefix can not contain wildcard tokens")
                continue
            to = si.prefix.rstrip(".") + "." + si.subject if si.prefix else si.to or si.subject
            if _stream_cycle(accs, streams, a.name, si.account, to) or \
                    _stream_cycle(accs, streams, a.name, si.account, si.subject):
                out.append(err + "import forms a cycle")
                continue
            if si.to and not is_literal(si.subject) and si.to != si.subject:
                why = _check_transform(si.subject, _tokenize(si.to), True)
                if why:
                    out.append(err + f'failed to create mapping transform for stream import subject from '
                               f'"{si.subject}" to "{si.to}": {why}')
                    continue
            mine = streams.setdefault(a.name, [])
            if any(e[0] == si.account and e[2] == si.subject for e in mine):
                out.append(err + "stream import already exists")
                continue
            mine.append((si.account, to, si.subject))
        for sv in a.service_imports:
            exp = accs.get(sv.account)
            if exp is None:
                out.append(f'"{sv.account}" account not defined for service import')
                continue
            err = f'Error adding service import "{sv.subject}": '
            if not is_valid_subject(sv.subject) or _export_auth(exp.exports, "service", a.name, sv.subject) is None:
                out.append(err + "service import not authorized")
                continue
            local = sv.to or sv.subject
            if _service_cycle(services, {a.name}, sv.account, local):
                out.append(err + "import forms a cycle")
                continue
            if sv.to and not is_literal(sv.subject) and sv.to != sv.subject:
                why = _check_transform(sv.subject, _tokenize(sv.to), True)
                if why:
                    out.append(err + f'failed to create mapping transform for service import subject from '
                               f'"{sv.to}" to "{sv.subject}": {why}')
                    continue
            services.setdefault(a.name, []).append((sv.account, local, sv.subject))
    return out


def _service_cycle(services: dict[str, list[tuple[str, str, str]]], visited: set[str], acc: str,
                   subject: str) -> bool:
    """accounts.go checkServiceImportsForCycles: does `acc` import, on a subject meeting `subject`, from
    an account already on the path?"""
    for exp, local, remote in services.get(acc, ()):
        if subjects_overlap(subject, remote):
            if exp in visited or len(visited) >= 8:
                return True
            f = local if subject_is_subset(local, subject) else subject
            if _service_cycle(services, visited | {acc}, exp, f):
                return True
    return False


def _stream_cycle(accs: dict[str, AccountConfig], streams: dict[str, list[tuple[str, str, str]]], importer: str,
                  acc: str, to: str, visited: set[str] | None = None) -> bool:
    """accounts.go checkStreamImportsForCycles."""
    visited = visited or {importer}
    cfg = accs.get(acc)
    if cfg is None or not any(e.stream is not None and subject_is_subset(to, e.stream) for e in cfg.exports):
        return False
    for exp, local, _remote in streams.get(acc, ()):
        if subjects_overlap(to, local):
            if exp in visited or len(visited) >= 8:
                return True
            t = local if subject_is_subset(local, to) else to
            if _stream_cycle(accs, streams, importer, exp, t, visited | {acc}):
                return True
    return False


def mapping_problems(m: Mapping) -> list[str]:
    """nats-server's errors for one mapping (a bad destination, weights over 100)."""
    out = []
    total = 0
    for d in m.dests:
        why = _check_transform(m.src, d.subject, False)
        if why:
            out.append(f'Error adding mapping for "{m.src}" to "{d.subject}" : {why}')
        if d.weight > 100:
            out.append(f'Error adding mapping for "{m.src}" : individual weights need to be <= 100')
        total += d.weight
    if total > 100:
        out.append(f'Error adding mapping for "{m.src}" : total weight needs to be <= 100')
    return out


# ------------------------------------------------------------------------------------------ mappings


class SubjectMapper:
    """An account's mappings, first match wins; weighted destinations are picked at random, the weight
    left under 100 keeps the original subject (accounts.go AddWeightedMappings / selectMappedSubject)."""

    def __init__(self, mappings: list[Mapping]) -> None:
        self.rules: list[tuple[str, bool, list[tuple[int, SubjectTransform | None]]]] = []
        for m in mappings:
            dests = sorted(m.dests, key=lambda d: d.weight)
            total = sum(d.weight for d in dests)
            cum = 0
            table: list[tuple[int, SubjectTransform | None]] = []
            entries: list[tuple[int, str | None]] = [(d.weight, d.subject) for d in dests]
            if total < 100 and not any(d.subject == m.src for d in dests):
                entries.append((100 - total, None))
                entries.sort(key=lambda e: e[0])
            for w, dest in entries:
                cum += w
                table.append((cum, None if dest is None or dest == m.src else
                              SubjectTransform(m.src, _tokenize(dest) if "*" in dest.split(".") else dest)))
            self.rules.append((m.src, not is_literal(m.src), table))

    def map(self, subject: str) -> str | None:
        """The mapped subject, or None when no mapping applies (or the pick keeps the subject)."""
        for src, wc, table in self.rules:
            if (src == subject) if not wc else subject_matches(src, subject):
                if len(table) == 1:
                    tr = table[0][1]
                else:
                    w = int(random.random() * 100)
                    tr = next((t for cum, t in table if w < cum), None)
                return tr(subject) if tr is not None else None
        return None


class Interest(Receiver):
    """A subscription that only shows interest (a mapping's source, so a leafnode advertises it)."""

    kind = KIND_SYSTEM

    def deliver(self, sub: Subscription, subject: bytes, reply: bytes, hdr: bytes | None, payload: bytes) -> None:
        return None

    def auto_unsubscribe(self, sub: Subscription) -> None:
        return None


# ------------------------------------------------------------------------------------------ service imports


class Response(Receiver):
    """One tracked reply of an exporter (`_R_.<prefix>.<token>`): the response goes back to the requester's
    account on its original reply subject; a singleton route ends with its first response, a stream or
    chunked one with an empty message or its threshold. Its subscription is in the exporter's sublist only
    (the wildcard `Interest` on `_R_.<prefix>.>` is what a leafnode advertises), so a JetStream delivery,
    matched on this subject but handed over under its original one, still finds its route."""

    kind = KIND_SYSTEM

    def __init__(self, links: AccountLinks, token: str, dest: Account, to: str, rt: str, threshold: float) -> None:
        self.links = links
        self.dest = dest
        self.to = to
        self.rt = rt
        self.threshold = threshold
        self.ts = time.monotonic()
        self.sub = Subscription(self, token, None, token)
        self.token_b = token.encode()

    def deliver(self, sub: Subscription, subject: bytes, reply: bytes, hdr: bytes | None, payload: bytes) -> None:
        if sub.closed:
            return
        if time.monotonic() - self.ts > self.threshold:  # past the export's response threshold
            self.links.drop_reply(self.sub.subject)
            return
        nrr = b""
        if reply:
            if reply.startswith(_JS_ACK):
                nrr = reply
            else:  # a response that asks for an answer of its own: tracked the other way
                nrr = ex_links(self.dest).new_reply(self.links.account, reply.decode("utf-8", "surrogateescape"),
                                                    SINGLETON, self.threshold).encode()
        framed = None if subject == self.token_b else subject
        delivered = _route(self.dest, self.to, nrr, hdr, payload, self, framed)
        if not delivered or self.rt == SINGLETON or (not payload and hdr is None):
            self.links.drop_reply(self.sub.subject)
        else:
            self.ts = time.monotonic()

    def auto_unsubscribe(self, sub: Subscription) -> None:
        return None


class ServiceImport(Receiver):
    """A service import: subscribed in the importer on its local subject; a request is routed into the
    exporter on the exported subject with a tracked `_R_.` reply (processServiceImport)."""

    kind = KIND_SYSTEM

    def __init__(self, links: AccountLinks, exporter: Account, local: str, remote: str, export: Export) -> None:
        self.links = links
        self.exporter = exporter
        self.local = untokenize(local)  # the subject subscribed: `$n` references cover one token each
        self.remote = remote
        self.export = export
        self.rt = _response_type(export.response_type)
        self.share = False
        self.use_pub = not is_literal(remote) and (not local or local == remote)
        self.tr: SubjectTransform | None = None
        if self.local != local:  # the local subject orders the exporter's wildcards (an account JWT's $n)
            self.tr = _reverse(remote, local)
        elif not is_literal(remote) and local != remote:
            self.tr = SubjectTransform(local, _tokenize(remote))

    def deliver(self, sub: Subscription, subject: bytes, reply: bytes, hdr: bytes | None, payload: bytes) -> None:
        if self in _chain:  # a cycle of imports
            return
        text = subject.decode("utf-8", "surrogateescape")
        to = self.remote
        if self.tr is not None:
            to = self.tr(text)
        elif self.use_pub:
            to = text
        ex = self.exporter
        nrr = b""
        token = ""
        if reply:
            if reply.startswith(_JS_ACK):  # a pull consumer's ack trampolining back: left as it is
                nrr = reply
            else:
                token = ex_links(ex).new_reply(self.links.account, reply.decode("utf-8", "surrogateescape"),
                                               self.rt, self.export.response_threshold)
                nrr = token.encode()
        delivered = _route(ex, to, nrr, self._request_info(hdr), payload, self)
        if not delivered and token:
            ex_links(ex).drop_reply(token)
        if not delivered and reply:
            self.links.account.reading.decline(text, reply.decode("utf-8", "surrogateescape"))

    def _request_info(self, hdr: bytes | None) -> bytes:
        """The request's headers with nats-server's `Nats-Request-Info` (client.go processServiceImport,
        getClientInfo without `share`): the requester's account and RTT; through a chain of imports the
        first one's, with `svc` naming this importer."""
        name = self.links.account.name
        info: Any = None
        if _chain and hdr:
            old = get_header(hdr, REQUEST_INFO)
            if old:
                try:
                    info = json.loads(old)
                except ValueError:
                    info = None
                if isinstance(info, dict):
                    items = [(k, v) for k, v in info.items() if k != "svc"]
                    at = next((i + 1 for i, (k, _) in enumerate(items) if k == "acc"), 0)
                    info = dict(items[:at] + [("svc", name)] + items[at:])
        if not isinstance(info, dict):
            origin = self.links.account.reading.origin
            rtt = int(getattr(origin, "rtt", 0.0) * 1e9) if origin is not None else 0
            if self.share and origin is not None and origin.kind == KIND_CLIENT:
                info = _client_info(origin, name, rtt)
            else:
                info = {"acc": name, "rtt": rtt} if rtt > 0 else {"acc": name}
        line = f"{REQUEST_INFO}: {json.dumps(info, separators=(',', ':'))}\r\n".encode()
        if not hdr:
            return HDR_LINE + b"\r\n" + line + b"\r\n"
        keep = [ln for ln in hdr.split(b"\r\n") if ln and not ln.startswith(REQUEST_INFO.encode() + b":")]
        return b"\r\n".join(keep) + b"\r\n" + line + b"\r\n"

    def auto_unsubscribe(self, sub: Subscription) -> None:
        return None


def _client_info(c: Any, acc: str, rtt: int) -> dict[str, Any]:
    """nats-server's detailed ClientInfo (getClientInfo with `share`), in its field order, empty ones out."""
    from edged.goformat import rfc3339

    d: dict[str, Any] = {"start": rfc3339(c.start), "host": c.host, "id": c.cid, "acc": acc, "user": c.user,
                         "name": c.name, "lang": c.lang, "ver": c.version, "rtt": rtt,
                         "server": c.server.server_name, "kind": c.kind,
                         "client_type": "websocket" if getattr(c, "websocket", False) else "nats"}
    return {k: v for k, v in d.items() if v}


def _route(acc: Account, subject: str, reply: bytes, hdr: bytes | None, payload: bytes, origin: Any,
           framed: bytes | None = None) -> bool:
    """Route into `acc` as an import does: its mappings apply, stream imports are not fed, and a request
    its only receiver turned down counts as not delivered. `framed`: the subject receivers get, when not
    the one matched (a JetStream delivery)."""
    from edged.routing.accounts import Account

    links = acc.links
    if links is not None and links.mapper is not None:
        subject = links.mapper.map(subject) or subject
    _chain.append(origin)
    try:
        delivered = Account.route(acc, subject, framed or subject.encode("utf-8", "surrogateescape"), reply, hdr,
                                  payload, origin)
    finally:
        _chain.pop()
    reading = acc.reading
    if delivered and reply and reading.declined is not None:
        delivered = not reading.take_declined(subject, reply.decode("utf-8", "surrogateescape"))
    return delivered


# ------------------------------------------------------------------------------------------ stream imports


class StreamImportRule:
    def __init__(self, exporter: Account, conf: StreamImportConf) -> None:
        self.exporter = exporter
        self.src = conf.subject
        to = conf.subject
        if conf.prefix:
            to = conf.prefix.rstrip(".") + "." + conf.subject
        elif conf.to:
            to = conf.to
        self.use_pub = not is_literal(self.src) and to == self.src
        self.tr: SubjectTransform | None = None
        self.rtr: SubjectTransform | None = None
        if not is_literal(self.src) and to != self.src:
            dest = _tokenize(to)
            self.tr = SubjectTransform(self.src, dest)
            self.rtr = _reverse(self.src, dest)
            to = ".".join("*" if t.startswith("$") or t.startswith("{{") else t for t in dest.split("."))
        self.to = to  # the local subject space, untokenized

    def shadow_subject(self, subject: str) -> str | None:
        """The exporter-side subject a subscription on `subject` in the importer needs (nats-server
        addShadowSubscriptions / addShadowSub), or None when it does not meet this import."""
        to = self.to
        if subject == to:
            return self.src
        if subject_is_subset(subject, to):
            dyn, overlap = True, ""
        elif not is_literal(subject) and subject_is_subset(to, subject):
            return self.src
        elif not is_literal(subject) and subjects_overlap(subject, to):
            dyn, overlap = True, _overlap(subject, to)
        else:
            return None
        s = overlap or subject
        if self.rtr is not None and not self.use_pub and dyn:
            return self.rtr(s)
        if self.use_pub:
            return s
        return self.src if not overlap else overlap

    def local_subject(self, subject: bytes) -> bytes:
        if self.tr is not None:
            return self.tr(subject.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
        if self.use_pub:
            return subject
        return self.to.encode()


def _overlap(subject: str, to: str) -> str:
    """The narrower of two overlapping patterns, token by token."""
    st, it = subject.split("."), to.split(".")
    out = []
    for i in range(max(len(st), len(it))):
        a = st[i] if i < len(st) else None
        b = it[i] if i < len(it) else None
        if a == ">":
            out += it[i:]
            break
        if b == ">":
            out += st[i:]
            break
        out.append(b if a == "*" else a)  # type: ignore[arg-type]
    return ".".join(out)


class Shadow(Receiver):
    """A subscription of the importer, seen from the exporter: deliveries go to the original subscription
    with the import's subject."""

    def __init__(self, orig: Subscription, rule: StreamImportRule) -> None:
        self.orig = orig
        self.rule = rule
        self.kind = orig.conn.kind
        self.is_spoke = orig.conn.is_spoke
        self.echo = orig.conn.echo
        self.headers = orig.conn.headers

    @property
    def closed(self) -> bool:  # type: ignore[override]
        return self.orig.closed or self.orig.conn.closed

    def deliver(self, sub: Subscription, subject: bytes, reply: bytes, hdr: bytes | None, payload: bytes) -> None:
        if _chain:  # came in through a service import: not exported again as a stream
            return
        orig = self.orig
        if orig.closed:
            return
        conn = orig.conn
        if subject_matches(sub.subject, subject.decode("utf-8", "surrogateescape")):
            subject = self.rule.local_subject(subject)
        # else it was matched on another subject than it carries (a JetStream delivery, handed over under
        # its original subject): nats-server keeps that subject too
        conn.deliver(orig, subject, reply, hdr, payload)
        if orig.max and orig.delivered >= orig.max:
            conn.auto_unsubscribe(orig)

    def auto_unsubscribe(self, sub: Subscription) -> None:
        return None


# ------------------------------------------------------------------------------------------ per account


class AccountLinks:
    """What one account has of imports, exports and mappings, and the subscriptions that carry them."""

    def __init__(self, account: Account) -> None:
        self.account = account
        self.mapper: SubjectMapper | None = None
        self.stream_imports: list[StreamImportRule] = []
        self.shadows: dict[int, list[Subscription]] = {}
        self.own: list[Subscription] = []  # subscriptions made here (service imports, interest, responses)
        self.responses: dict[str, Response] = {}
        self.reply_prefix = ""
        self._pruned = time.monotonic()

    # -- replies
    def new_reply(self, dest: Account, to: str, rt: str, threshold: float) -> str:
        """A `_R_.` reply in this (the exporting) account that routes a response to `to` in `dest`."""
        if not self.reply_prefix:
            self.reply_prefix = f"_R_.{_rand(6)}."
            self._own(self.reply_prefix + ">", Interest())
        now = time.monotonic()
        if now - self._pruned > 1.0:
            self._pruned = now
            for k in [k for k, r in self.responses.items() if now - r.ts > r.threshold]:
                self.drop_reply(k)
        token = self.reply_prefix + _rand(6)
        r = self.responses[token] = Response(self, token, dest, to, rt, threshold)
        self.account.sublist.insert(r.sub)
        return token

    def drop_reply(self, token: str) -> None:
        r = self.responses.pop(token, None)
        if r is not None and self.account.sublist.remove(r.sub):
            r.sub.closed = True

    def _own(self, subject: str, receiver: Receiver) -> None:
        sub = Subscription(receiver, subject, None, f"imp{len(self.own) + 1}")
        self.own.append(sub)
        self.account.subscribe(sub)

    # -- stream imports: called by Account.subscribe / unsubscribe
    def subscribed(self, sub: Subscription) -> None:
        if not self.stream_imports or isinstance(sub.conn, Shadow | ServiceImport | Response | Interest):
            return
        made = []
        for rule in self.stream_imports:
            s = rule.shadow_subject(sub.subject)
            if s is None:
                continue
            nsub = Subscription(Shadow(sub, rule), s, sub.queue, sub.sid)
            nsub.weight = sub.weight
            rule.exporter.subscribe(nsub)
            made.append(nsub)
        if made:
            self.shadows[id(sub)] = made

    def unsubscribed(self, sub: Subscription) -> None:
        made = self.shadows.pop(id(sub), None)
        for nsub in made or ():
            nsub.conn.rule.exporter.unsubscribe(nsub)  # type: ignore[attr-defined]

    def close(self) -> None:
        for token in list(self.responses):
            self.drop_reply(token)
        for sub in self.own:
            self.account.unsubscribe(sub)
        self.own.clear()
        for made in self.shadows.values():
            for nsub in made:
                nsub.conn.rule.exporter.unsubscribe(nsub)  # type: ignore[attr-defined]
        self.shadows.clear()


def _mapped_routes(acc: Account, mapper: SubjectMapper) -> None:
    """Replace `acc`'s route methods with ones that map a client's or leafnode's subject first (never an
    in-process service's publish); only this account pays for it. The run forms go message by message."""
    from edged.routing.accounts import Account

    base = Account.route

    def route(subject: str, subject_b: bytes, reply_b: bytes, hdr: bytes | None, payload: bytes, origin: Any,
              queues: tuple[bytes, ...] | None = None) -> bool:
        if origin.kind != KIND_SYSTEM:
            new = mapper.map(subject)
            if new is not None:
                perms = getattr(origin, "perms", None) if origin.kind == KIND_CLIENT else None
                if perms is not None and not perms.can_publish(new):
                    # nats-server checks a client's publish permission on the mapped subject
                    quoted = new.replace("\\", "\\\\").replace('"', '\\"')
                    origin.send_err(f'Permissions Violation for Publish to "{quoted}"')
                    return True
                subject, subject_b = new, new.encode("utf-8", "surrogateescape")
        return base(acc, subject, subject_b, reply_b, hdr, payload, origin, queues)

    def route_run(subject: str, subject_b: bytes, reply_b: bytes, payloads: list[bytes], origin: Any,
                  payload_bytes: int, queues: tuple[bytes, ...] | None = None) -> None:
        for p in payloads:
            if origin.closed:
                return
            route(subject, subject_b, reply_b, None, p, origin, queues)

    def route_empties(subjects: list[bytes], origin: Any) -> None:
        for s in subjects:
            if origin.closed:
                return
            route(s.decode(), s, b"", None, b"", origin)

    def route_replies(*_: Any) -> bool:
        return False

    acc.route = route  # type: ignore[method-assign]
    acc.route_run = route_run  # type: ignore[method-assign]
    acc.route_empties = route_empties  # type: ignore[method-assign]
    acc.route_replies = route_replies  # type: ignore[method-assign]


def ex_links(acc: Account) -> AccountLinks:
    if acc.links is None:
        acc.links = AccountLinks(acc)
    return acc.links


def install(accounts: dict[str, Account], opts: Options, confs: dict[str, AccountConfig] | None = None,
            missing: dict[str, str] | None = None) -> float:
    """Apply every account's imports and mappings (the server's mappings are the global account's), from
    the config's accounts or from `confs` (operator mode: the account JWTs', `missing` naming the accounts
    nats-server could not look up, and why). Idempotent: a reload drops what the previous config made
    first. Returns when the first activation token in use runs out (0: none does), to apply them again then."""
    for acc in accounts.values():
        if acc.links is not None:
            acc.links.close()
            acc.links = None
        for name in ("route", "route_run", "route_empties", "route_replies"):
            acc.__dict__.pop(name, None)
    jwt_mode = confs is not None
    if confs is None:
        confs = {a.name: a for a in opts.accounts}
    expires: list[float] = []
    # operator mode: the imports added so far (exporter, local subject, exporter's subject), for nats-server's
    # cycle checks when it adds one (a config's cycles are refused with the config, check_config)
    services: dict[str, list[tuple[str, str, str]]] = {}
    streams: dict[str, list[tuple[str, str, str]]] = {}
    for name, acc in accounts.items():
        cfg = confs.get(name)
        mappings = list(cfg.mappings) if cfg is not None else []
        if name == GLOBAL:
            mappings += opts.mappings
        if jwt_mode:
            mappings = [u for u in (_usable_mapping(acc, m) for m in mappings) if u is not None]
        if mappings:
            links = ex_links(acc)
            links.mapper = SubjectMapper(mappings)
            _mapped_routes(acc, links.mapper)
            for m in mappings:
                links._own(m.src, Interest())
    done: set[str] = set()

    def add_imports(name: str) -> None:
        """One account's imports; in operator mode each exporter's own first, as nats-server loads the
        account an import names before adding it (which decides which import of a cycle is refused)."""
        acc, cfg = accounts.get(name), confs.get(name)
        if name in done or acc is None or cfg is None:
            return
        done.add(name)
        for sv in cfg.service_imports:
            if jwt_mode:
                add_imports(sv.account)
                if not _located(accounts, missing, sv.account, sv.subject, "service"):
                    continue
            local = untokenize(sv.to or sv.subject)
            if jwt_mode and _service_cycle(services, {name}, sv.account, local):
                log.debug("Error adding service import to account [%s]: import forms a cycle", trace_label(cfg))
                continue
            if _add_service_import(accounts, confs, acc, sv, jwt_mode):
                services.setdefault(name, []).append((sv.account, local, sv.subject))
                if sv.token:
                    expires.append(activation_expiry(sv.token))
        for si in cfg.stream_imports:
            if jwt_mode:
                add_imports(si.account)
                if not _located(accounts, missing, si.account, si.subject, "stream"):
                    continue
            exp, ec = accounts.get(si.account), confs.get(si.account)
            if exp is None or ec is None or _export_auth(ec.exports, "stream", name, si.subject, si.token,
                                                         ec) is None:
                _refused(cfg, si.subject, si.account, "stream", jwt_mode)
                continue
            if jwt_mode and si.prefix and not is_literal(si.prefix):
                log.debug("Error adding stream import to account [%s]: stream import prefix can not contain "
                          "wildcard tokens", trace_label(cfg))
                continue
            rule = StreamImportRule(exp, si)
            if jwt_mode and (_stream_cycle(confs, streams, name, si.account, rule.to) or
                             _stream_cycle(confs, streams, name, si.account, si.subject)):
                log.debug("Error adding stream import to account [%s]: import forms a cycle", trace_label(cfg))
                continue
            streams.setdefault(name, []).append((si.account, rule.to, si.subject))
            ex_links(acc).stream_imports.append(rule)
            if si.token:
                expires.append(activation_expiry(si.token))

    for name in list(accounts):
        add_imports(name)
    for acc in accounts.values():  # subscriptions made before (a reload) get their shadows
        links = acc.links
        if links is not None and links.stream_imports:
            for sub in acc.sublist.all_subs():
                links.subscribed(sub)
    return min((t for t in expires if t > 0), default=0.0)


def _usable_mapping(acc: Account, m: Mapping) -> Mapping | None:
    """An account JWT's mapping as nats-server applies it: left out when AddWeightedMappings would refuse
    it (nats-server does not look at that error either); cluster-scoped destinations are for a cluster,
    which edged never is in."""
    dests = [d for d in m.dests if not d.cluster]
    why = mapping_problems(Mapping(m.src, dests))
    if why:
        log.debug("Mapping %r of account %s not applied: %s", m.src, acc.name, "; ".join(why))
        return None
    for d in m.dests:
        if d.cluster:
            log.debug("Mapping %r of account %s: destination %r is for cluster %r, ignored (edged runs no "
                      "cluster)", m.src, acc.name, d.subject, d.cluster)
    return Mapping(m.src, dests)


def _located(accounts: dict[str, Account], missing: dict[str, str] | None, account: str, subject: str,
             kind: str) -> bool:
    if account in accounts and not (missing and account in missing):
        return True
    err = (missing or {}).get(account, "account missing")
    log.error("Can't locate account [%s] for import of [%s] %s (err=%s)", account, subject, kind, err)
    return False


def _refused(cfg: AccountConfig, subject: str, account: str, kind: str, jwt_mode: bool) -> None:
    if jwt_mode:  # nats-server's words (updateAccountClaimsWithRefresh), at its level
        log.debug("Error adding %s import to account [%s]: %s import not authorized", kind, trace_label(cfg), kind)
    else:
        log.error("%s import %r from account %r is not authorized", kind, subject, account)


def _add_service_import(accounts: dict[str, Account], confs: dict[str, AccountConfig], acc: Account,
                        sv: ServiceImportConf, jwt_mode: bool = False) -> bool:
    exp, ec = accounts.get(sv.account), confs.get(sv.account)
    export = _export_auth(ec.exports, "service", acc.name, sv.subject, sv.token, ec) if ec is not None else None
    if exp is None or export is None:
        _refused(confs.get(acc.name) or AccountConfig(acc.name), sv.subject, sv.account, "service", jwt_mode)
        return False
    local = sv.to or sv.subject
    si = ServiceImport(ex_links(acc), exp, local, sv.subject, export)
    si.share = sv.share
    ex_links(acc)._own(si.local, si)
    return True
