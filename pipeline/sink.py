"""The `jetstream` sink: rows (`subject`, `data`, optional `headers`, optional `msg_id`) published over NATS.

A row whose subject a stream captures is published with a `Nats-Msg-Id` and its PubAck awaited (up to
`max_in_flight` at once): the row's `msg_id`, or `<write id>-<partition>-<row index>`, where the write id
is fixed on the driver, so a retried task sends the same ids and the stream's duplicate window drops
what the failed attempt had stored already. An error PubAck, or none, fails the task. Other rows are
plain publishes, flushed before the task reports success.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from edged.routing.subjects import subject_matches
from pipeline.headers import encode_headers
from pipeline.natsconn import RawClient, connect, js_api_prefix
from pipeline.options import Conn, PipelineError, write_options
from pipeline.wire import Msg


class Published(WriterCommitMessage):
    def __init__(self, acked: int, duplicates: int, plain: int) -> None:
        self.acked, self.duplicates, self.plain = acked, duplicates, plain


def check_schema(schema: StructType, default_subject: str | None) -> None:
    fields = {f.name: f.dataType for f in schema.fields}
    if "subject" not in fields and not default_subject:
        raise PipelineError("the jetstream sink needs a `subject` column (or option subject)")
    if "subject" in fields and not isinstance(fields["subject"], StringType):
        raise PipelineError("column subject must be a string")
    if "data" not in fields or not isinstance(fields["data"], BinaryType | StringType):
        raise PipelineError("the jetstream sink needs a `data` column, binary or string")
    if "headers" in fields and not isinstance(fields["headers"], MapType):
        raise PipelineError("column headers must be a map<string,string> or map<string,array<string>>")
    if "msg_id" in fields and not isinstance(fields["msg_id"], StringType):
        raise PipelineError("column msg_id must be a string")


class JetStreamWriter(DataSourceWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.conn, self.max_in_flight, self.subject = write_options(options)
        check_schema(schema, self.subject)
        self.write_id = uuid.uuid4().hex  # the same in every attempt of every task of this write

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else 0
        return asyncio.run(_publish_rows(self.conn, iterator, self.max_in_flight, self.subject,
                                         f"{self.write_id}-{part}"))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task's PubAcks are in: nothing is left to make durable."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Published messages cannot be taken back; a rerun of the write publishes under new ids."""


async def stream_subjects(nc: RawClient, conn: Conn) -> list[str]:
    """Every subject filter of every stream the account has (empty without JetStream)."""
    api = js_api_prefix(conn.domain)
    out: list[str] = []
    offset = 0
    while True:
        try:
            msg = await nc.request(f"{api}.STREAM.LIST", json.dumps({"offset": offset}).encode(),
                                   timeout=conn.timeout)
        except Exception:
            return out
        resp = json.loads(msg.data or b"{}")
        if "error" in resp:
            return out
        streams = resp.get("streams") or []
        for s in streams:
            out.extend((s.get("config") or {}).get("subjects") or [])
        offset += len(streams)
        if not streams or offset >= resp.get("total", 0):
            return out


async def _publish_rows(conn: Conn, rows: Iterator[Any], max_in_flight: int, default_subject: str | None,
                        id_prefix: str) -> Published:
    nc = await connect(conn)
    try:
        filters = await stream_subjects(nc, conn)
        in_stream: dict[str, bool] = {}
        loop = asyncio.get_running_loop()
        inbox = nc.new_inbox()
        waiting: dict[bytes, tuple[asyncio.Future[bytes], str]] = {}
        window = asyncio.Semaphore(max_in_flight)
        counts = [0, 0, 0]  # acked, duplicates, plain
        failure: list[str] = []

        def on_replies(msgs: list[Msg]) -> None:
            for subject, _reply, hdr, data in msgs:
                on_reply(subject, hdr, data)

        def on_reply(subject: bytes, hdr: bytes, data: bytes) -> None:
            ent = waiting.pop(subject.rsplit(b".", 1)[-1], None)
            if ent is None:
                return
            window.release()
            fut, subj = ent
            if hdr and hdr[9:12] == b"503":
                failure.append(f"publish to {subj}: no stream answered (503)")
                return
            try:
                ack = json.loads(data)
            except ValueError:
                failure.append(f"publish to {subj}: not a PubAck: {data[:80]!r}")
                return
            if "error" in ack:
                err = ack["error"]
                failure.append(f"publish to {subj}: {err.get('description')} (err_code {err.get('err_code')})")
            elif ack.get("duplicate"):
                counts[1] += 1
            else:
                counts[0] += 1
            if not fut.done():
                fut.set_result(data)

        sub = await nc.raw_subscribe(inbox + ".*", on_replies)
        futures: list[asyncio.Future[bytes]] = []
        lost = f"connection to {', '.join(conn.servers)} lost while publishing"
        for i, row in enumerate(rows):
            if failure:
                break
            if not nc.is_connected:
                raise PipelineError(lost)
            d = row.asDict() if hasattr(row, "asDict") else dict(row)
            subject = d.get("subject") or default_subject
            if not subject:
                raise PipelineError(f"row {i}: no subject")
            data = d.get("data")
            data = b"" if data is None else data.encode() if isinstance(data, str) else bytes(data)
            hdrs: dict[str, Any] = dict(d.get("headers") or {})
            stored = in_stream.get(subject)
            if stored is None:
                stored = in_stream[subject] = any(subject_matches(f, subject) for f in filters)
            if not stored:
                await nc.publish_raw(subject, "", encode_headers(hdrs), data)
                counts[2] += 1
                continue
            hdrs["Nats-Msg-Id"] = d.get("msg_id") or f"{id_prefix}-{i}"
            try:
                await asyncio.wait_for(window.acquire(), conn.timeout)
            except TimeoutError:
                raise PipelineError(lost if not nc.is_connected else
                                    f"{max_in_flight} publishes got no PubAck within {conn.timeout}s") from None
            token = str(i).encode()
            fut = loop.create_future()
            waiting[token] = (fut, subject)
            futures.append(fut)
            await nc.publish_raw(subject, f"{inbox}.{i}", encode_headers(hdrs), data)
            if len(futures) >= 4 * max_in_flight:
                futures = [f for f in futures if not f.done()]
        if not failure and waiting:
            pending = [w[0] for w in waiting.values()]
            done, _ = await asyncio.wait(pending, timeout=conn.timeout)
            if len(done) < len(pending) and not failure:
                failure.append(f"{len(pending) - len(done)} publishes got no PubAck within {conn.timeout}s")
        await nc.flush(timeout=conn.timeout)
        await nc.raw_unsubscribe(sub)
        if failure:
            raise PipelineError(failure[0])
        return Published(*counts)
    finally:
        await nc.close()
