"""JetStream as the bridge reaches it: `$JS.API` requests and publishes through the router, on an internal
client of the bridge's account, exactly as a NATS client would make them (and as mirrors do in
edged/jetstream/mirror.py). The bridge so depends on the wire API, not on the engine's insides, and its
consumers are ordinary durables that `nats consumer info` shows.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import msgspec

from edged.routing.accounts import InternalClient

_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
TIMEOUT_S = 5.0


def token(n: int = 12) -> str:
    return "".join(_B62[b % 62] for b in os.urandom(n))


class JSError(Exception):
    """A JetStream API error (its `err_code` kept), no responder, or no answer in time."""

    def __init__(self, text: str, err_code: int = 0) -> None:
        super().__init__(text)
        self.err_code = err_code


def status_of(hdr: bytes | None) -> int:
    """The status code of a `NATS/1.0 408 ...` header block; 0 for a plain message."""
    if not hdr or not hdr.startswith(b"NATS/1.0 "):
        return 0
    code = hdr[9:12]
    return int(code) if code.isdigit() else 0


class JSClient:
    """Requests and replies over one internal client (the bridge's own: it does not get back what it
    publishes, so an `in` rule's message never reaches an `out` rule of the same bridge)."""

    def __init__(self, ic: InternalClient, api_prefix: str = "$JS.API") -> None:
        self.ic = ic
        self.prefix = api_prefix
        self.inbox = f"_INBOX.{token()}"
        self._n = 0

    def new_inbox(self) -> str:
        self._n += 1
        return f"{self.inbox}.{self._n}"

    async def request(self, subject: str, body: bytes = b"", hdr: bytes | None = None,
                      timeout: float = TIMEOUT_S) -> tuple[bytes | None, bytes]:
        """(headers, payload) of the first reply."""
        fut: asyncio.Future[tuple[bytes | None, bytes]] = asyncio.get_running_loop().create_future()
        reply = self.new_inbox()

        def on_reply(sub: Any, subj: str, rep: str, h: bytes | None, payload: bytes) -> None:
            if not fut.done():
                fut.set_result((h, payload))

        sub = self.ic.subscribe(reply, on_reply)
        try:
            if not self.ic.publish(subject, body, reply, hdr):
                raise JSError(f"no responders on {subject}", 503)
            try:
                return await asyncio.wait_for(fut, timeout)
            except TimeoutError:
                raise JSError(f"no answer on {subject} in {timeout:g}s", 408) from None
        finally:
            self.ic.unsubscribe(sub)

    async def api(self, op: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            hdr, payload = await self.request(f"{self.prefix}.{op}", _encode(body) if body is not None else b"")
        except JSError as e:
            if e.err_code == 503:
                raise JSError(f"JetStream is not enabled for account {self.ic.account.name}", 503) from None
            raise
        if status_of(hdr) == 503:
            raise JSError(f"JetStream is not enabled for account {self.ic.account.name}", 503)
        resp = _decode(payload)
        err = resp.get("error") if isinstance(resp, dict) else None
        if err:
            raise JSError(str(err.get("description") or err), int(err.get("err_code") or 0))
        return resp  # type: ignore[no-any-return]
