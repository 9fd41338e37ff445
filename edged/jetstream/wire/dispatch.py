"""`$JS.API` request routing: the API subscriptions, a request's way to its handler, the reply with the
fields nats-server's response structs always carry, the API counters and audit advisories.

Handlers (api.py, consumer_api.py, direct.py) are marked with `handler`, which records what the
dispatcher reads of them, and register under their subject prefix.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import msgspec

from edged.goformat import rfc3339ns
from edged.jetstream.wire.domain import API_PREFIX, api_prefix
from edged.jetstream.wire.errors import JSApiError, api_error
from edged.jetstream.wire.gojson import body_values, decode_fields, go_kind, merge
from edged.jetstream.wire.versioning import refuses_required_level
from edged.log import log
from edged.routing.accounts import Account
from edged.routing.receiver import KIND_CLIENT
from storage import StoreError, StoreFullError

if TYPE_CHECKING:
    from edged.jetstream.account import JSAccount
    from edged.jetstream.engine import JetStream

AUDIT_SUBJECT = "$JS.EVENT.ADVISORY.API"
# nats-server's JetStream API import leaves requests on subjects starting so to the streams' and consumers'
# own subscriptions (client.go, processServiceImport): with none, nobody answers
_OWN_LISTENERS = ("DIRECT.GET", "CONSUMER.MSG.NEXT.")
TYPE_PREFIX = "io.nats.jetstream.api.v1."  # of every response's `type`
NAMES_LIMIT = 1024  # a page of a NAMES response, as nats-server's JSApiNamesLimit
LIST_LIMIT = 256  # a page of a LIST response (JSApiListLimit)
_encode = msgspec.json.Encoder().encode
_decoder = msgspec.json.Decoder()


def handler(prefix: str, rtype: str = "", arity: tuple[int, int] | None = None,
            err_fields: dict[str, Any] | None = None, count_ok: bool = True,
            level_gate: str = "first") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark the handler of `$JS.API.<prefix>...`. `rtype`: its response's type (TYPE_PREFIX + rtype);
    none for a handler that answers on its own (a direct get, a pull request), which needs a reply
    subject to run. `arity`: the tokens allowed after the prefix (nats-server subscribes e.g.
    `STREAM.INFO.*`, so other forms get no reply). `err_fields`: fields nats-server's response struct
    always marshals, also next to an error. `count_ok`: false where nats-server sends a success
    without counting it in the API stats. `level_gate`: where nats-server checks `Nats-Required-Api-Level`
    (10185): "first" before anything else, "handler" where the handler calls ApiRequest.check_level, ""
    never (a request nats-server turns down before it, or does not check)."""
    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        f.prefix = prefix  # type: ignore[attr-defined]
        f.resp_type = TYPE_PREFIX + rtype if rtype else ""  # type: ignore[attr-defined]
        f.arity = arity  # type: ignore[attr-defined]
        f.err_fields = err_fields  # type: ignore[attr-defined]
        f.count_ok = count_ok  # type: ignore[attr-defined]
        f.level_gate = level_gate if rtype else ""  # type: ignore[attr-defined]
        return f
    return deco


class ApiRequest:
    """A `$JS.API` request as its handler gets it: the account's JetStream, the tokens after the handler's
    prefix, the reply subject and the body, with nats-server's ways of reading the body."""

    __slots__ = ("js", "account", "jsa", "subject", "tokens", "reply", "hdr", "data", "client_info", "resp_hdr")

    def __init__(self, js: JetStream, account: Account, jsa: JSAccount | None, subject: str, tokens: list[str],
                 reply: str, hdr: bytes | None, data: bytes) -> None:
        self.js, self.account, self.jsa = js, account, jsa
        self.subject, self.tokens, self.reply, self.hdr, self.data = subject, tokens, reply, hdr, data
        self.client_info = None
        # headers of a successful response, set by a synchronous handler (a consumer create's
        # Nats-Stream-Identity)
        self.resp_hdr: bytes | None = None

    def check_level(self) -> None:
        """nats-server's errorOnRequiredApiLevel, at the handler's own point in its order of checks."""
        if refuses_required_level(self.hdr):
            raise api_error("JSRequiredApiLevelErr")

    def values(self, struct: str) -> Iterator[tuple[dict[str, Any], bytes]]:
        """The body's JSON values one after another, each with the text it was decoded from, as
        nats-server's strict decoding (its default) reads a request struct: a malformed value is its 10025
        answer, a `null` is nothing, another value than an object cannot go into the struct."""
        for v in body_values(self.data):
            if isinstance(v, str):
                raise api_error("JSInvalidJSONErr", err=v)
            try:
                doc = _decoder.decode(v)
            except msgspec.DecodeError as e:
                raise api_error("JSInvalidJSONErr", err=str(e)) from None
            if doc is None:
                continue
            if not isinstance(doc, dict):
                raise api_error("JSInvalidJSONErr", err=f"json: cannot unmarshal {go_kind(doc)} into Go value of "
                                                       f"type server.{struct}")
            yield doc, v

    def is_empty(self) -> bool:
        """nats-server's isEmptyRequest: no body, or an empty JSON object."""
        data = self.data
        if not data or data == b"{}":
            return True
        try:
            v = _decoder.decode(data)
        except msgspec.DecodeError:
            return False
        return isinstance(v, dict) and not v

    def has_options(self) -> bool:
        """nats-server parses an optional request body only when it starts with `{` or `[`; anything else
        (empty, garbage) means "no options"."""
        b = self.data.lstrip(b" \t\r\n")
        return bool(b) and b[:1] in (b"{", b"[")

    def options(self, struct: str, types: dict[str, Any]) -> dict[str, Any]:
        """An optional body (see has_options) decoded as `decode` does; none is {}."""
        return self.decode(struct, types) if self.has_options() else {}

    def decode(self, struct: str, types: dict[str, Any]) -> dict[str, Any]:
        """The body as nats-server reads the request struct `struct` (fields' JSON names and Go types in
        `types`): every value decoded over the ones before with Go's rules, a key the struct has no
        field for refused; the first fault is the 10025 answer. Empty = {}."""
        out: dict[str, Any] = {}
        for doc, raw in self.values(struct):
            merge(out, decode_fields(doc, types, struct, raw=raw))
        return out


class Dispatcher:
    """Routes the `$JS.API` requests of every account to the registered handlers and answers them."""

    def __init__(self, js: JetStream) -> None:
        self.js = js
        self.pubacks = js.pubacks
        self.handlers: dict[str, Callable[[ApiRequest], Any]] = {}
        self._api_subs: list[tuple[Account, Any]] = []
        self.api_total = 0
        self.api_errors = 0
        self.api_inflight = 0

    def register(self, prefix: str, fn: Callable[[ApiRequest], Any]) -> None:
        self.handlers[prefix] = fn

    def subscribe(self, acc: Account) -> None:
        ic = acc.internal
        domain = self.js.domain
        self._api_subs.append((acc, ic.subscribe(API_PREFIX + ">", self._on_api, passive=True)))
        if domain:
            self._api_subs.append((acc, ic.subscribe(api_prefix(domain) + ">", self._on_api, passive=True)))

    def set_domain(self, domain: str) -> None:
        """Listen on the new domain's API prefix instead of the old one, in every account that has JetStream."""
        accounts = list(dict.fromkeys(acc for acc, _ in self._api_subs))
        self.unsubscribe()
        for acc in accounts:
            self.subscribe(acc)

    def unsubscribe(self) -> None:
        for acc, sub in self._api_subs:
            acc.internal.unsubscribe(sub)
        self._api_subs.clear()

    def _listened(self, acc: Account, rest: str) -> bool:
        """Is there what nats-server would have listening for this direct get or pull request: a stream
        with `allow_direct` (`DIRECT.GET.<stream>` and below), a consumer (`CONSUMER.MSG.NEXT.<stream>.
        <consumer>` exactly)? Its API import does not carry these subjects, only such a subscription."""
        jsa = self.js.accounts.get(acc.name)
        if jsa is None:
            return False
        tokens = rest.split(".")
        if tokens[0] == "DIRECT":
            if len(tokens) < 3 or tokens[1] != "GET":
                return False
            return jsa.direct_stream(tokens[2]) is not None
        if len(tokens) != 5:
            return False
        stream = jsa.streams.get(tokens[3])
        return stream is not None and tokens[4] in stream.consumers

    def _unheard(self, acc: Account, subject: str, reply: str) -> None:
        """Nobody answers this request: its publisher gets "no responders", as from nats-server, unless a
        subscriber of its own took it (see ReadContext.decline)."""
        if not reply:
            return
        psubs, qgroups = acc.sublist.match(subject)
        ours = {s for a, s in self._api_subs if a is acc}
        if not qgroups and all(s in ours for s in psubs):
            self.js.server.reading.decline(subject, reply)

    def _on_api(self, sub: Any, subject: str, reply: str, hdr: bytes | None, payload: bytes) -> None:
        if subject.startswith(API_PREFIX):
            rest = subject[len(API_PREFIX):]
        else:
            # $JS.<domain>.API.<rest>
            parts = subject.split(".", 3)
            if len(parts) < 4:
                return
            rest = parts[3]
        if rest.startswith(_OWN_LISTENERS) and not self._listened(sub.conn.account, rest):
            self._unheard(sub.conn.account, subject, reply)
            return
        reading = self.js.server.reading
        if reading.work and not rest.startswith("CONSUMER.MSG.NEXT."):
            # a pull request may go ahead of the acks before it (nats-server's order too); anything
            # else sees them done
            reading.run()
        tokens = rest.split(".")
        handler = None
        for n in range(min(len(tokens), 4), 0, -1):
            handler = self.handlers.get(".".join(tokens[:n]))
            if handler is not None:
                tokens = tokens[n:]
                break
        # nats-server subscribes each API subject with its exact token count (`STREAM.INFO.*`, ...):
        # anything else gets no response at all. A JSON API request without a reply subject is carried
        # out all the same (and audited), only unanswered; a pull request or direct get needs one.
        if handler is None or (not reply and not getattr(handler, "resp_type", "")):
            return
        arity = getattr(handler, "arity", None)
        if arity is not None and not (arity[0] <= len(tokens) <= arity[1] and all(tokens)):
            return
        acc: Account = sub.conn.account
        jsa = self.js.accounts.get(acc.name)
        # what the audit advisory reports: the request and the client it came from (the connection whose
        # read is being processed; kept for a handler that answers later)
        audit = (subject, payload, reading.origin)
        if getattr(handler, "level_gate", "") == "first" and refuses_required_level(hdr):
            self._reply(acc, jsa, reply, {"error": api_error("JSRequiredApiLevelErr").to_dict()}, handler,
                        audit=audit)
            return
        if jsa is None:
            if getattr(handler, "resp_type", ""):  # JSON APIs say so; a direct get has no one listening
                self._reply(acc, None, reply, {"error": api_error("JSNotEnabledForAccountErr").to_dict()}, handler,
                            audit=audit)
            return
        req = ApiRequest(self.js, acc, jsa, subject, tokens, reply, hdr, payload)
        try:
            res = handler(req)
        except JSApiError as e:
            self._reply(acc, jsa, reply, {"error": e.to_dict()}, handler, e.counted_ok, audit)
            return
        except Exception as e:  # a handler bug must not take the client's connection down with it
            log.exception("JetStream API handler failed")
            self._reply(acc, jsa, reply, {"error": api_error("JSStreamGeneralErrorF", err=str(e)).to_dict()}, handler,
                        audit=audit)
            return
        if inspect.isawaitable(res):
            self.js.loop_task(self._finish(acc, jsa, reply, handler, res, audit))
        elif res is not None:
            self._reply(acc, jsa, reply, res, handler, audit=audit, hdr=req.resp_hdr)

    async def _finish(self, acc: Account, jsa: JSAccount, reply: str, handler: Any, aw: Any,
                      audit: tuple[str, bytes, Any] | None = None) -> None:
        self.api_inflight += 1
        ok = False
        try:
            res = await aw
        except JSApiError as e:
            res = {"error": e.to_dict()}
            ok = e.counted_ok
        except StoreError as e:
            if isinstance(e, StoreFullError):
                self.js.space.note_store_full()
            log.error("JetStream API request failed in the store: %s", e)
            res = {"error": api_error("JSStreamGeneralErrorF", err=str(e)).to_dict()}
        except Exception as e:  # a bug must not kill the API; report it as nats-server would a store error
            log.exception("JetStream API handler failed")
            res = {"error": api_error("JSStreamGeneralErrorF", err=str(e)).to_dict()}
        finally:
            self.api_inflight -= 1
        if res is not None:
            self._reply(acc, jsa, reply, res, handler, ok, audit)

    def _reply(self, acc: Account, jsa: JSAccount | None, reply: str, body: dict[str, Any], handler: Any,
               counted_ok: bool = False, audit: tuple[str, bytes, Any] | None = None,
               hdr: bytes | None = None) -> None:
        """Send an API response: `type` first, as nats-server's structs marshal; an error reply also carries
        the fields its response struct always has (`total/offset/limit`, `purged`...). Counted afterwards,
        so `$JS.API.INFO` reports the calls before itself, as nats-server does. What is counted is also
        audited (`audit`: subject, request, client connection), when anyone listens."""
        rtype = getattr(handler, "resp_type", "")
        err = "error" in body
        if err:
            extra = getattr(handler, "err_fields", None)
            head = {"type": rtype} if rtype and "type" not in body else {}
            body = {**head, **body, **extra} if extra else ({**head, **body} if head else body)
        elif rtype and "type" not in body:
            body = {"type": rtype, **body}
        resp = _encode(body)
        if reply:
            acc.internal.publish(reply, resp, hdr=hdr)
            self.pubacks.spin()
        if counted_ok:
            err = False
        if err or getattr(handler, "count_ok", True):
            if audit is not None and acc.sublist.has_interest(AUDIT_SUBJECT):
                self._audit(acc, audit, resp)
            self.api_total += 1
            if err:
                self.api_errors += 1
            if jsa is not None:
                jsa.api_total += 1
                if err:
                    jsa.api_errors += 1

    def _audit(self, acc: Account, audit: tuple[str, bytes, Any], response: bytes) -> None:
        """nats-server's API audit advisory (`io.nats.jetstream.advisory.v1.api_audit`) for an answered
        API call, in its field order: the server, the client the request came from, the request subject
        and body, the response as sent."""
        subject, request, conn = audit
        name = self.js.server.server_name
        client: dict[str, Any] | None = None
        if conn is not None and conn.kind == KIND_CLIENT:
            client = {"start": rfc3339ns(int(conn.start * 1e9)), "host": conn.host, "id": conn.cid,
                      "acc": conn.account.name if conn.account is not None else ""}
            for key, v in (("user", conn.user), ("name", conn.name), ("lang", conn.lang), ("ver", conn.version),
                           ("rtt", int(conn.rtt * 1e9)), ("server", name), ("kind", conn.kind),
                           ("client_type", "websocket" if conn.websocket else "nats")):
                if v:
                    client[key] = v
        adv: dict[str, Any] = {"type": "io.nats.jetstream.advisory.v1.api_audit", "id": os.urandom(11).hex(),
                               "timestamp": rfc3339ns(time.time_ns()), "server": name, "client": client,
                               "subject": subject}
        if request:
            adv["request"] = request.decode("utf-8", "replace")
        adv["response"] = response.decode("utf-8", "replace")
        if self.js.domain:
            adv["domain"] = self.js.domain
        acc.internal.publish(AUDIT_SUBJECT, _encode(adv))

