"""nats-py connections for the pipeline: connect from `Conn` with clear errors, and raw subscriptions.

`RawClient` couples to nats-py internals that are stable through nats-py 2.x: its parser (`_ps`, a
`Parser` whose `parse(data)` the read loop awaits with each read, and whose `buf` it can be handed a
single control line through), `_process_msg(sid, subject, reply, data, headers)` for subscriptions of
its own, and `_send_command`, through which it sends a prebuilt HPUB (nats-py's `publish` takes one
value per header key), then kicks the flusher as `publish` does. The parser is replaced by one that
splits message frames with `pipeline.wire` and hands a raw subscription each run of its messages in
one plain call: the header block as it came (every value of a repeated key), no Msg object, regular
expression or coroutine per message, which is most of what a 200k-message read costs.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any

import nats
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.errors import NoServersError
from nats.errors import ProtocolError as NatsProtocolError
from nats.protocol.parser import Parser

from pipeline.options import Conn, PipelineError
from pipeline.wire import Msg, WireError, split_msgs

RawHandler = Callable[[list[Msg]], None]


class _FrameParser(Parser):
    """nats-py's parser with message frames split by `pipeline.wire`; other ops go to nats-py's own."""

    def __init__(self, nc: RawClient) -> None:
        super().__init__(nc)
        self.raw = nc

    def reset(self) -> None:
        super().reset()
        self._parts: list[bytes] = []
        self._have = 0
        self._need = 0  # bytes the frame waiting in _parts needs before it is worth parsing again

    async def parse(self, data: bytes = b"") -> None:
        self._parts.append(data)
        self._have += len(data)
        if self._have < self._need:
            return
        buf = b"".join(self._parts) if len(self._parts) > 1 else bytes(self._parts[0])
        self._parts, self._have, self._need = [], 0, 0
        pos, n = 0, len(buf)
        while pos < n:
            try:
                runs, pos, need = split_msgs(buf, pos)
            except WireError as e:
                raise NatsProtocolError(str(e)) from None
            if runs:
                await self.raw.deliver_runs(runs)
            if pos >= n or need or buf.startswith((b"MSG ", b"HMSG "), pos):
                self._need = need
                break
            e = buf.find(b"\r\n", pos)
            if e < 0:
                break
            self.buf = bytearray(buf[pos:e + 2])  # one control line (PING, PONG, INFO, +OK, -ERR)
            await super().parse()
            if self.buf:
                raise NatsProtocolError(f"nats: unknown protocol {bytes(self.buf[:80])!r}")
            pos = e + 2
        if pos < n:
            self._parts.append(buf[pos:])
            self._have = n - pos


class RawClient(Client):
    """A nats-py client whose raw subscriptions get each run of their messages in one plain call."""

    def __init__(self) -> None:
        super().__init__()
        self._raw: dict[int, RawHandler] = {}
        self._ps = _FrameParser(self)
        self.errors: list[BaseException] = []  # what the server said (error_cb), for messages

    async def deliver_runs(self, runs: list[tuple[bytes, list[Msg]]]) -> None:
        raw = self._raw
        for sid_b, msgs in runs:
            sid = int(sid_b)
            h = raw.get(sid)
            if h is not None:
                h(msgs)
                continue
            for subject, reply, hdr, data in msgs:  # nats-py's own subscriptions (API replies, inboxes)
                await self._process_msg(sid, subject, reply, data, hdr or None)  # type: ignore[arg-type]

    async def raw_subscribe(self, subject: str, handler: RawHandler) -> Any:
        sub = await self.subscribe(subject)
        self._raw[sub._id] = handler
        return sub

    async def raw_unsubscribe(self, sub: Any) -> None:
        self._raw.pop(sub._id, None)
        await sub.unsubscribe()

    async def publish_raw(self, subject: str, reply: str, hdr: bytes, data: bytes) -> None:
        """PUB or HPUB with a header block built by the caller (repeated keys kept)."""
        if hdr:
            cmd = b"HPUB %s %s %d %d\r\n" % (subject.encode(), reply.encode(), len(hdr), len(hdr) + len(data))
            await self._send_command(cmd + hdr + data + b"\r\n")
        else:
            cmd = b"PUB %s %s %d\r\n" % (subject.encode(), reply.encode(), len(data))
            await self._send_command(cmd + data + b"\r\n")
        if self._flush_queue is not None and self._flush_queue.empty():  # kick the flusher, as publish does
            await self._flush_pending()


async def connect(conn: Conn) -> RawClient:
    """Connected once, without reconnects: a task that loses its server fails, and Spark retries it."""
    nc = RawClient()
    errors = nc.errors

    async def on_error(e: BaseException) -> None:
        errors.append(e)

    kw: dict[str, Any] = {"servers": list(conn.servers), "name": conn.name, "allow_reconnect": False,
                          "max_reconnect_attempts": 0, "connect_timeout": conn.timeout, "error_cb": on_error,
                          "pending_size": 8 * 1024 * 1024}
    if conn.creds:
        kw["user_credentials"] = conn.creds
    if conn.user is not None:
        kw["user"], kw["password"] = conn.user, conn.password
    if conn.token:
        kw["token"] = conn.token
    if conn.tls_ca:
        ctx = ssl.create_default_context(cafile=conn.tls_ca)
        kw["tls"] = ctx
    where = ", ".join(conn.servers)
    try:
        await asyncio.wait_for(nc.connect(**kw), conn.timeout + 5)
    except (NoServersError, OSError, TimeoutError) as e:
        why = "; ".join(str(x) for x in errors if str(x)) or str(e) or type(e).__name__
        if "authorization" in why.lower():
            raise PipelineError(f"NATS server {where} refused the credentials: {why}") from None
        raise PipelineError(f"cannot reach a NATS server at {where}: {why}") from None
    except NatsError as e:
        why = "; ".join(str(x) for x in errors if str(x)) or str(e)
        if "authorization" in why.lower() or "authentication" in why.lower():
            raise PipelineError(f"NATS server {where} refused the credentials: {why}") from None
        raise PipelineError(f"NATS connection to {where} failed: {why}") from None
    if not nc.is_connected:
        raise closed_error(nc, conn)
    return nc


def closed_error(nc: RawClient, conn: Conn) -> PipelineError:
    """The connection closed under us: the server's own words when it gave any (a refused login over TLS
    can close before its -ERR is read, then the client just finds itself closed)."""
    where = ", ".join(conn.servers)
    why = "; ".join(str(x) for x in nc.errors if str(x))
    if "authorization" in why.lower():
        return PipelineError(f"NATS server {where} refused the credentials: {why}")
    return PipelineError(f"NATS server {where} closed the connection" + (f": {why}" if why else
                                                                         " (credentials refused?)"))


def js_api_prefix(domain: str | None) -> str:
    return f"$JS.{domain}.API" if domain else "$JS.API"


def jsm(nc: Client, conn: Conn) -> Any:
    """nats-py's JetStream manager on the option's domain."""
    return nc.jsm(prefix=js_api_prefix(conn.domain), timeout=conn.timeout)


async def stream_info(nc: Client, conn: Conn, stream: str) -> Any:
    """The stream's info, or a PipelineError that names the stream (or JetStream's absence)."""
    try:
        return await jsm(nc, conn).stream_info(stream)
    except nats.js.errors.NotFoundError:
        raise PipelineError(f"stream {stream!r} not found on {', '.join(conn.servers)}"
                            + (f" (domain {conn.domain})" if conn.domain else "")) from None
    except nats.js.errors.ServiceUnavailableError:  # nats-py's name for no responders (503)
        if conn.domain:  # nobody serves the domain here: no leaf of it linked, or a misspelt domain
            raise PipelineError(f"no JetStream answers on {', '.join(conn.servers)} for domain {conn.domain} "
                                "(no server of that domain is connected, or no such domain)") from None
        raise PipelineError(f"JetStream is not enabled on {', '.join(conn.servers)}") from None
    except nats.errors.NoRespondersError:
        raise PipelineError(f"no JetStream answers on {', '.join(conn.servers)}"
                            + (f" for domain {conn.domain}" if conn.domain else "")) from None
    except (TimeoutError, nats.errors.TimeoutError):
        raise PipelineError(f"JetStream on {', '.join(conn.servers)} did not answer within {conn.timeout}s") from None
    except nats.js.errors.APIError as e:
        raise PipelineError(f"stream {stream!r}: {e.description or e}") from None


def run(coro_fn: Callable[[RawClient], Any], conn: Conn) -> Any:
    """Connect, run `coro_fn(nc)` and close, on a loop of its own (the driver's planning calls)."""

    async def main() -> Any:
        nc = await connect(conn)
        try:
            return await coro_fn(nc)
        except (nats.errors.ConnectionClosedError, nats.errors.UnexpectedEOF):
            raise closed_error(nc, conn) from None
        finally:
            await nc.close()

    return asyncio.run(main())
