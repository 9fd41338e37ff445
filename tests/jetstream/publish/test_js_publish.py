"""The publish path through nats-py, differential (nats-server and edged, same assertions): the dedupe
window expiring, publishes without a reply subject, subject transforms, interest retention without
consumers, messages at the size limits, a deleted stream, per-message TTL expiry on its own timer."""

from __future__ import annotations

import asyncio
from typing import Any

import nats
from nats.js.errors import NoStreamResponseError

from tests.support.aio import run
from tests.support.jsutil import err, session
from tests.support.servers import ServerProcess


def test_duplicate_window_expires(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="DW", subjects=["dw"], duplicate_window=1.0)
        a = await js.publish("dw", b"1", headers={"Nats-Msg-Id": "x"})
        b = await js.publish("dw", b"2", headers={"Nats-Msg-Id": "x"})
        await asyncio.sleep(2.5)
        c = await js.publish("dw", b"3", headers={"Nats-Msg-Id": "x"})
        d = await js.publish("dw", b"4", headers={"Nats-Msg-Id": "x"})
        si = await js.stream_info("DW")
        return [(a.seq, a.duplicate), (b.seq, b.duplicate), (c.seq, c.duplicate), (d.seq, d.duplicate),
                si.state.messages, si.config.duplicate_window]

    assert run(session(js_server, body)) == [(1, None), (1, True), (2, None), (2, True), 2, 1.0]


def test_plain_publish_is_stored_without_ack(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="P", subjects=["p.*"])
        for i in range(5):
            await nc.publish(f"p.{i}", f"m{i}".encode())
        await nc.flush()
        for _ in range(50):
            if (await js.stream_info("P")).state.messages == 5:
                break
            await asyncio.sleep(0.02)
        m = await js.get_msg("P", 3)
        ack = await js.publish("p.x", b"acked")
        return [m.subject, m.data, ack.seq]

    assert run(session(js_server, body)) == ["p.2", b"m2", 6]


def test_subject_transform_and_interest_without_consumers(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        from nats.js.api import StreamConfig, SubjectTransform

        cfg = StreamConfig(name="TR", subjects=["in.*"], subject_transform=SubjectTransform(
            src="in.*", dest="out.{{wildcard(1)}}"))
        await js.add_stream(cfg)
        await js.publish("in.a", b"x")
        m = await js.get_msg("TR", 1)
        await js.add_stream(name="INT", subjects=["int"], retention="interest")
        acks = [(await js.publish("int", b"y")).seq for _ in range(3)]
        si = await js.stream_info("INT")
        return [m.subject, acks, (si.state.messages, si.state.last_seq)]

    assert run(session(js_server, body)) == ["out.a", [1, 2, 3], (0, 3)]


def test_sizes_and_deleted_stream(js_server: ServerProcess) -> None:
    async def body(nc: Any, js: Any) -> list[Any]:
        out: list[Any] = []
        await js.add_stream(name="SZ", subjects=["sz"], max_msg_size=1000)
        out.append((await js.publish("sz", b"x" * 1000)).seq)  # the limit itself is allowed
        out.append(await err(js.publish("sz", b"x" * 1001)))
        out.append(await err(js.publish("sz", b"x" * 990, headers={"K": "0123456789"})))  # headers count too
        big = b"b" * (nc.max_payload - 200)
        await js.add_stream(name="BIG", subjects=["big"])
        out.append((await js.publish("big", big)).seq)
        out.append((await js.get_msg("BIG", 1)).data == big)
        await js.delete_stream("SZ")
        try:
            await js.publish("sz", b"gone", timeout=1)
            out.append("acked")
        except NoStreamResponseError:
            out.append("no stream")
        return out

    assert run(session(js_server, body)) == [1, (10054, "message size exceeds maximum allowed"),
                                             (10054, "message size exceeds maximum allowed"), 1, True,
                                             "no stream"]


def test_ttl_expiry_runs_on_a_timer(js_server: ServerProcess) -> None:
    """A message with Nats-TTL disappears on its own (no later publish, no read triggers it), while a
    message with "never" stays even past the stream's max_age."""
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="T", subjects=["t.*"], allow_msg_ttl=True, max_age=3.0)
        await js.publish("t.short", b"1", headers={"Nats-TTL": "1s"})
        await js.publish("t.forever", b"2", headers={"Nats-TTL": "never"})
        await js.publish("t.plain", b"3")
        first = (await js.stream_info("T")).state.messages
        await asyncio.sleep(2.0)
        mid = (await js.stream_info("T", subjects_filter=">")).state.subjects
        await asyncio.sleep(2.5)
        last = (await js.stream_info("T", subjects_filter=">")).state.subjects
        return [first, mid, last]

    assert run(session(js_server, body)) == [3, {"t.forever": 1, "t.plain": 1}, {"t.forever": 1}]


def test_publish_burst_keeps_order_and_acks(js_server: ServerProcess) -> None:
    """2000 publishes in flight at once: every ack arrives, sequences are 1..2000 with no gap, and each
    message is stored at the sequence its ack named."""
    async def body(nc: Any, js: Any) -> list[Any]:
        await js.add_stream(name="B", subjects=["b"])
        acks = await asyncio.gather(*[js.publish("b", str(i).encode()) for i in range(2000)])
        by_seq = {a.seq: i for i, a in enumerate(acks)}
        sample = [(await js.get_msg("B", s)).data == str(by_seq[s]).encode() for s in (1, 500, 1999, 2000)]
        return [sorted(by_seq) == list(range(1, 2001)), sample]

    assert run(session(js_server, body)) == [True, [True, True, True, True]]


def test_js_publish_requires_nothing_else(js_server: ServerProcess) -> None:
    """The same client can publish with `nats.connect` defaults and JetStream context defaults (what
    most applications do): the PubAck fields are exactly stream and seq."""
    async def main() -> Any:
        nc = await nats.connect(js_server.url)
        js = nc.jetstream()
        await js.add_stream(name="D", subjects=["d"])
        r = await nc.request("d", b"x", timeout=2)
        await nc.close()
        return r.data

    assert run(main()) == b'{"stream":"D","seq":1}'


def test_one_message_per_subject_edge_cases(js_server: ServerProcess) -> None:
    """max_msgs_per_subject 1 (a KV bucket's shape) while messages also go away by delete, purge, rollup
    and a history change: what remains is always the last message of each subject."""
    async def body(nc: Any, js: Any) -> list[Any]:
        out: list[Any] = []

        async def state() -> Any:
            si = await js.stream_info("K", subjects_filter=">")
            kept = {}
            for subj in sorted(si.state.subjects or {}):
                m = await js.get_last_msg("K", subj)
                kept[subj] = (m.seq, m.data)
            return si.state.messages, si.state.first_seq, si.state.last_seq, kept

        await js.add_stream(name="K", subjects=["k.*"], max_msgs_per_subject=1, allow_rollup_hdrs=True)
        for subj, v in [("k.a", b"1"), ("k.a", b"2"), ("k.b", b"3"), ("k.a", b"4")]:
            await js.publish(subj, v)
        out.append(await state())
        await js.delete_msg("K", 4)
        await js.publish("k.a", b"5")
        await js.publish("k.a", b"6")
        out.append(await state())
        await js.purge_stream("K", subject="k.a")
        await js.publish("k.a", b"7")
        await js.publish("k.b", b"8", headers={"Nats-Rollup": "sub"})
        out.append(await state())
        await js.update_stream(name="K", subjects=["k.*"], max_msgs_per_subject=3, allow_rollup_hdrs=True)
        for v in (b"9", b"10", b"11"):
            await js.publish("k.a", v)
        await js.update_stream(name="K", subjects=["k.*"], max_msgs_per_subject=1, allow_rollup_hdrs=True)
        await js.publish("k.a", b"12")
        out.append(await state())
        return out

    assert run(session(js_server, body)) == [
        (2, 3, 4, {"k.a": (4, b"4"), "k.b": (3, b"3")}),
        (2, 3, 6, {"k.a": (6, b"6"), "k.b": (3, b"3")}),
        (2, 7, 8, {"k.a": (7, b"7"), "k.b": (8, b"8")}),
        (2, 8, 12, {"k.a": (12, b"12"), "k.b": (8, b"8")}),
    ]
