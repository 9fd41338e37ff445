"""The MQTT service's JetStream client: `$JS.API` requests and stream publishes over the router, as
nats-server's MQTT code makes them (replies to `$MQTT.JSA.<id>.<n>`), so MQTT state lives in ordinary
streams that any JetStream tool can read, and the router and JetStream learn nothing of MQTT."""

from __future__ import annotations

import asyncio
import base64
import os
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from edged.routing.accounts import Account, InternalClient
    from edged.routing.receiver import Subscription

REPLY_PREFIX = "$MQTT.JSA."
API_TIMEOUT = 5.0  # nats-server's mqttDefaultJSAPITimeout

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


class JSApiFailure(Exception):
    """A JetStream API request failed: its error (code, err_code, description) or a timeout."""

    def __init__(self, description: str, err_code: int = 0) -> None:
        super().__init__(description)
        self.err_code = err_code


class StoredMessage(msgspec.Struct):
    subject: str
    seq: int
    hdrs: str | None = None
    data: str | None = None

    @property
    def payload(self) -> bytes:
        return base64.b64decode(self.data) if self.data else b""

    @property
    def header(self) -> bytes | None:
        return base64.b64decode(self.hdrs) if self.hdrs else None


class JSApi:
    """Requests to one account's JetStream (optionally in another domain, `js_domain`)."""

    def __init__(self, account: Account, domain: str = "", timeout: float = API_TIMEOUT) -> None:
        self.account = account
        self.client: InternalClient = account.internal
        self.prefix = f"$JS.{domain}.API." if domain else "$JS.API."
        self.timeout = timeout
        self.id = os.urandom(6).hex()
        self._n = 0
        self._waiting: dict[str, asyncio.Future[tuple[bytes | None, bytes]]] = {}
        self._reply_prefix = f"{REPLY_PREFIX}{self.id}."
        self._sub = self.client.subscribe(self._reply_prefix + "*", self._on_reply)

    def close(self) -> None:
        self.client.unsubscribe(self._sub)
        for f in self._waiting.values():
            if not f.done():
                f.cancel()
        self._waiting.clear()

    def _on_reply(self, sub: Subscription, subject: str, reply: str, hdr: bytes | None, payload: bytes) -> None:
        f = self._waiting.pop(subject, None)
        if f is not None and not f.done():
            f.set_result((hdr, payload))

    def _inbox(self) -> tuple[str, asyncio.Future[tuple[bytes | None, bytes]]]:
        self._n += 1
        inbox = f"{self._reply_prefix}{self._n}"
        f: asyncio.Future[tuple[bytes | None, bytes]] = asyncio.get_running_loop().create_future()
        self._waiting[inbox] = f
        return inbox, f

    async def _wait(self, inbox: str, f: asyncio.Future[tuple[bytes | None, bytes]]) -> tuple[bytes | None, bytes]:
        try:
            return await asyncio.wait_for(f, self.timeout)
        except TimeoutError:
            raise JSApiFailure("JetStream API request timed out") from None
        finally:
            self._waiting.pop(inbox, None)

    async def request(self, api: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One `$JS.API.<api>` request; its JSON answer, or JSApiFailure with its error."""
        inbox, f = self._inbox()
        if not self.client.publish(self.prefix + api, _encode(body) if body is not None else b"", inbox):
            self._waiting.pop(inbox, None)
            raise JSApiFailure("JetStream not enabled")
        _, data = await self._wait(inbox, f)
        doc = _decode(data)
        err = doc.get("error")
        if err:
            raise JSApiFailure(err.get("description", "error"), int(err.get("err_code", 0)))
        return doc

    def publish_wait(self, subject: str, payload: bytes, hdr: bytes | None = None
                     ) -> asyncio.Future[tuple[bytes | None, bytes]] | None:
        """Publish to a stream's subject with a reply: the future of its PubAck (sent once stored), or None
        when no stream took it."""
        inbox, f = self._inbox()
        if not self.client.publish(subject, payload, inbox, hdr):
            self._waiting.pop(inbox, None)
            return None
        return f

    async def store(self, subject: str, payload: bytes, hdr: bytes | None = None) -> int:
        """Store one message and wait for its PubAck: its sequence."""
        inbox, f = self._inbox()
        if not self.client.publish(subject, payload, inbox, hdr):
            self._waiting.pop(inbox, None)
            raise JSApiFailure(f"no stream for {subject}")
        _, data = await self._wait(inbox, f)
        doc = _decode(data)
        err = doc.get("error")
        if err:
            raise JSApiFailure(err.get("description", "error"), int(err.get("err_code", 0)))
        return int(doc.get("seq", 0))

    def publish(self, subject: str, payload: bytes, hdr: bytes | None = None) -> None:
        """Fire and forget (an ack to a consumer)."""
        self.client.publish(subject, payload, "", hdr)

    # ------------------------------------------------------------------ the calls the MQTT service makes

    async def ensure_stream(self, cfg: dict[str, Any]) -> None:
        try:
            await self.request(f"STREAM.INFO.{cfg['name']}")
            return
        except JSApiFailure as e:
            if e.err_code != 10059:  # stream not found
                raise
        try:
            await self.request(f"STREAM.CREATE.{cfg['name']}", cfg)
        except JSApiFailure as e:
            if e.err_code != 10058:  # created by someone else meanwhile
                raise

    async def last_msg(self, stream: str, subject: str) -> StoredMessage | None:
        try:
            doc = await self.request(f"STREAM.MSG.GET.{stream}", {"last_by_subj": subject})
        except JSApiFailure as e:
            if e.err_code in (10037, 10059):  # no message found, no stream
                return None
            raise
        return msgspec.convert(doc["message"], StoredMessage)

    async def subjects(self, stream: str, filt: str = ">") -> dict[str, int]:
        doc = await self.request(f"STREAM.INFO.{stream}", {"subjects_filter": filt})
        return dict(doc.get("state", {}).get("subjects") or {})

    async def delete_msg(self, stream: str, seq: int) -> None:
        try:
            await self.request(f"STREAM.MSG.DELETE.{stream}", {"seq": seq, "no_erase": True})
        except JSApiFailure as e:
            if e.err_code not in (10037, 10057):  # already gone
                raise

    async def purge_subject(self, stream: str, subject: str) -> None:
        await self.request(f"STREAM.PURGE.{stream}", {"filter": subject})

    async def create_consumer(self, stream: str, cfg: dict[str, Any]) -> dict[str, Any]:
        name = cfg.get("durable_name") or cfg.get("name")
        return await self.request(f"CONSUMER.CREATE.{stream}.{name}", {"stream_name": stream, "config": cfg})

    async def consumer_info(self, stream: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.request(f"CONSUMER.INFO.{stream}.{name}")
        except JSApiFailure as e:
            if e.err_code == 10014:  # consumer not found
                return None
            raise

    async def delete_consumer(self, stream: str, name: str) -> None:
        try:
            await self.request(f"CONSUMER.DELETE.{stream}.{name}")
        except JSApiFailure as e:
            if e.err_code not in (10014, 10059):
                raise
