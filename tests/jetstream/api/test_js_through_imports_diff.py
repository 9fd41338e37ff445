"""JetStream through account imports, differential (nats-server and edged, one server): a client of another
account pulls from a durable through an imported NEXT (`to` rename, stream response type) and acks through
the imported `$JS.ACK`, a push consumer delivers into the other account through a stream import, and the
consumer state shows the acks; an API subject that is not imported gets "no responders"."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Callable
from typing import Any

import nats

from tests.support.aio import run
from tests.support.servers import KINDS, ServerProcess

CONF = """
jetstream { store_dir: '%s' }
accounts {
  ACC: {
    users: [{user: acc, password: acc}]
    jetstream: enabled
    exports: [
      {service: "$JS.API.CONSUMER.MSG.NEXT.s.dur", response_type: "stream"}
      {service: "$JS.ACK.s.dur.>"}
      {stream: "deliver.acc.>"}
    ]
  }
  IMP: {
    users: [{user: imp, password: imp}]
    imports: [
      {service: {account: ACC, subject: "$JS.API.CONSUMER.MSG.NEXT.s.dur"}, to: "JS.acc.API.CONSUMER.MSG.NEXT.s.dur"}
      {service: {account: ACC, subject: "$JS.ACK.s.dur.>"}}
      {stream: {account: ACC, subject: "deliver.acc.>"}, prefix: "in"}
    ]
  }
}
"""


async def scenario(srv: ServerProcess) -> dict:
    out: dict[str, Any] = {}
    acc = await nats.connect(f"nats://acc:acc@127.0.0.1:{srv.port}")
    imp = await nats.connect(f"nats://imp:imp@127.0.0.1:{srv.port}")
    try:
        js = acc.jetstream()
        await js.add_stream(name="s", subjects=["s.>"])
        await js.add_consumer("s", durable_name="dur", ack_policy="explicit")
        pushed: list = []

        async def on_push(m: Any) -> None:
            pushed.append((m.subject, m.data.decode(), m.reply.split(".")[2:4]))
        await imp.subscribe("in.deliver.acc.push", cb=on_push)
        await imp.flush()
        await js.add_consumer("s", durable_name="push", deliver_subject="deliver.acc.push", ack_policy="none")
        for i in range(3):
            await js.publish(f"s.{i}", f"m{i}".encode())
        inbox = await imp.subscribe(imp.new_inbox())
        got = []
        for _ in range(2):
            await imp.publish("JS.acc.API.CONSUMER.MSG.NEXT.s.dur", json.dumps({"batch": 1, "expires": 2_000_000_000})
                              .encode(), reply=inbox.subject)
            m = await inbox.next_msg(timeout=3)
            got.append((m.subject, m.data.decode(), m.reply.split(".")[2:4]))
            await m.ack()
        await imp.flush()
        out["pulled"] = got
        await imp.publish("JS.acc.API.CONSUMER.INFO.s.dur", b"", reply=inbox.subject)
        out["not imported"] = ((await inbox.next_msg(timeout=2)).headers or {}).get("Status")
        for _ in range(50):
            ci = await js.consumer_info("s", "dur")
            if ci.ack_floor.stream_seq == 2 and len(pushed) == 3:
                break
            await asyncio.sleep(0.1)
        out["consumer"] = (ci.delivered.stream_seq, ci.ack_floor.stream_seq, ci.num_ack_pending, ci.num_pending)
        out["pushed"] = pushed
    finally:
        await acc.close()
        await imp.close()
    return out


def test_pull_ack_and_push_through_imports_like_nats_server(start_server: Callable[..., ServerProcess]) -> None:
    res = {}
    for kind in KINDS:
        srv = start_server(kind, config=CONF % tempfile.mkdtemp(prefix="jsimp-"))
        res[kind] = run(scenario(srv), timeout=60)
    assert res["edged"] == res["nats-server"]
    assert [g[:2] for g in res["edged"]["pulled"]] == [("s.0", "m0"), ("s.1", "m1")]
    assert res["edged"]["consumer"] == (2, 2, 0, 1) and res["edged"]["not imported"] == "503"
    # a JetStream delivery keeps its original subject through the stream import, as in nats-server
    assert res["edged"]["pushed"] == [(f"s.{i}", f"m{i}", ["s", "push"]) for i in range(3)]
