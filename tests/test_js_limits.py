"""Account and server JetStream limits, memory storage, first_seq, republish, direct batch gets:
differential against nats-server."""

from __future__ import annotations

import json
import tempfile
from typing import Any

import nats
import pytest
from nats.js.errors import APIError

from tests.jsutil import err, run
from tests.servers import ServerProcess

KINDS = ["nats-server", "edged"]




@pytest.mark.parametrize("kind", KINDS)
def test_account_limits(kind: str) -> None:
    d = tempfile.mkdtemp(prefix="jslim-")
    conf = f"""jetstream {{ store_dir: "{d}" }}
accounts {{
  A: {{ users: [ {{user: a, password: a}} ], jetstream: {{ max_streams: 1, max_file: 2000, max_mem: 0 }} }}
  NOJS: {{ users: [ {{user: n, password: n}} ] }}
}}
"""
    with ServerProcess(kind, config=conf) as s:
        async def main() -> list[Any]:
            nc = await nats.connect(f"nats://a:a@127.0.0.1:{s.port}")
            js = nc.jetstream()
            out: list[Any] = []
            await js.add_stream(name="ONE", subjects=["one"])
            out.append((await err(js.add_stream(name="TWO", subjects=["two"])))[0])
            info = await js.account_info()
            out.append((info.limits.max_streams, info.limits.max_storage, info.streams))
            codes = set()
            for _ in range(40):
                try:
                    await js.publish("one", b"x" * 100)
                except APIError as e:
                    codes.add(e.err_code)
                    break
            out.append(sorted(codes))
            si = await js.stream_info("ONE")
            out.append(si.state.bytes <= 2000)
            await nc.close()
            n = await nats.connect(f"nats://n:n@127.0.0.1:{s.port}")
            r = await n.request("$JS.API.INFO", b"", timeout=2)
            out.append(json.loads(r.data)["error"]["err_code"])
            await n.close()
            return out

        got = run(main())
    assert got[0] == 10027
    assert got[1] == (1, 2000, 1)
    assert got[2] in ([10047], [10077], [10002])  # refused once the account's file limit is reached
    assert got[3] is True
    assert got[4] == 10039


@pytest.mark.parametrize("kind", KINDS)
def test_memory_stream_first_seq_republish_direct_batch(kind: str) -> None:
    with ServerProcess(kind, ["-js", "-sd", tempfile.mkdtemp(prefix="jsmem-")]) as s:
        async def main() -> list[Any]:
            nc = await nats.connect(s.url)
            js = nc.jetstream()
            out: list[Any] = []
            await js.add_stream(name="MEM", subjects=["mem.>"], storage="memory", first_seq=100,
                                allow_direct=True, republish={"src": "mem.>", "dest": "copy.>"})
            copies = await nc.subscribe("copy.>")
            await nc.flush()
            acks = [await js.publish(f"mem.{i % 2}", str(i).encode()) for i in range(4)]
            out.append([a.seq for a in acks])
            m = await copies.next_msg(2)
            out.append((m.subject, m.data, m.headers.get("Nats-Stream"), m.headers.get("Nats-Sequence")))
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            await nc.publish("$JS.API.DIRECT.GET.MEM", b'{"seq":100,"batch":3}', reply=inbox)
            got = []
            for _ in range(4):
                r = await sub.next_msg(2)
                got.append((r.data, (r.headers or {}).get("Status"), (r.headers or {}).get("Nats-Num-Pending")))
            out.append(got)
            await nc.publish("$JS.API.DIRECT.GET.MEM", b'{"multi_last":["mem.>"]}', reply=inbox)
            ml = []
            for _ in range(3):
                r = await sub.next_msg(2)
                ml.append((r.data, (r.headers or {}).get("Status")))
            out.append(ml)
            si = await js.stream_info("MEM")
            out.append((str(getattr(si.config.storage, "value", si.config.storage)), si.state.first_seq,
                        si.state.last_seq))
            await nc.close()
            return out

        got = run(main())
    assert got[0] == [100, 101, 102, 103]
    assert got[1] == ("copy.0", b"0", "MEM", "100")
    assert got[2] == [(b"0", None, "3"), (b"1", None, "2"), (b"2", None, "1"), (b"", "204", "1")]
    assert got[3] == [(b"2", None), (b"3", None), (b"", "204")]
    assert got[4] == ("memory", 100, 103)


@pytest.mark.parametrize("kind", KINDS)
def test_sealed_no_ack_and_discard_new_per_subject(kind: str) -> None:
    with ServerProcess(kind, ["-js", "-sd", tempfile.mkdtemp(prefix="jscfg-")]) as s:
        async def main() -> list[Any]:
            nc = await nats.connect(s.url)
            js = nc.jetstream()
            out: list[Any] = []
            await js.add_stream(name="PER", subjects=["per.*"], discard="new", max_msgs_per_subject=1,
                                discard_new_per_subject=True)
            await js.publish("per.a", b"1")
            await js.publish("per.b", b"1")
            out.append(await err(js.publish("per.a", b"2")))
            await js.add_stream(name="NOACK", subjects=["noack"], no_ack=True)
            try:
                await nc.request("noack", b"x", timeout=0.5)
                out.append("acked")
            except Exception as e:
                out.append(type(e).__name__)
            out.append((await js.stream_info("NOACK")).state.messages)
            await js.add_stream(name="SEAL", subjects=["seal"])
            await js.publish("seal", b"x")
            await js.update_stream(name="SEAL", subjects=["seal"], sealed=True)
            out.append(await err(js.publish("seal", b"y")))
            out.append(await err(js.delete_msg("SEAL", 1)))
            out.append((await err(js.update_stream(name="SEAL", subjects=["seal"], sealed=False)))[0])
            await nc.close()
            return out

        got = run(main())
    assert got[0] == (10077, "maximum messages per subject exceeded")
    assert got[1] == "TimeoutError" and got[2] == 1
    assert got[3] == (10109, "invalid operation on sealed stream")
    assert got[4] == (10109, "invalid operation on sealed stream")
    assert got[5] == 10052
