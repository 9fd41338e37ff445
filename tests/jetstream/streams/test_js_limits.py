"""Account and server JetStream limits, memory storage, first_seq, republish, direct batch gets:
differential against nats-server."""

from __future__ import annotations

import json
import tempfile
from typing import Any

import nats
import pytest
from nats.js.errors import APIError

from tests.support.aio import run
from tests.support.jsutil import err
from tests.support.servers import KINDS, ServerProcess


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
    assert got[2] == [10002]  # "resource limits exceeded for account" once its file limit is reached
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


LIMITS_CONF = """jetstream {{ store_dir: "{d}", max_file_store: 10000, max_memory_store: 10000 }}
accounts {{
  A: {{ users: [ {{user: a, password: a}} ], jetstream: {{ max_streams: 4, max_file: 2000, max_mem: 0, max_consumers: 5 }} }}
  B: {{ users: [ {{user: b, password: b}} ], jetstream: enabled }}
}}
"""


@pytest.mark.parametrize("kind", KINDS)
def test_reservations_and_server_limits(kind: str) -> None:
    """max_bytes reserves space against the account's and the server's limits (a stream without max_bytes
    reserves nothing); updates reserve only the difference; the server refuses publishes once its
    file limit is used up ("insufficient resources"), at the same message as nats-server."""
    d = tempfile.mkdtemp(prefix="jslim-")

    async def pub_until_error(js: Any, subject: str, size: int) -> tuple[int, Any]:
        for i in range(300):
            try:
                await js.publish(subject, b"y" * size)
            except APIError as e:
                return i, (e.err_code, e.description)
        return 300, None

    with ServerProcess(kind, config=LIMITS_CONF.format(d=d)) as s:
        async def main() -> list[Any]:
            out: list[Any] = []
            nc = await nats.connect(f"nats://a:a@127.0.0.1:{s.port}")
            js = nc.jetstream()
            out.append(await err(js.add_stream(name="BIG", subjects=["big"], max_bytes=5000)))
            await js.add_stream(name="R1", subjects=["r1"], max_bytes=1500)
            out.append(await err(js.add_stream(name="R2", subjects=["r2"], max_bytes=600)))
            await js.add_stream(name="R3", subjects=["r3"])
            out.append(await err(js.add_stream(name="MEM", subjects=["mem"], storage="memory")))
            out.append(await err(js.add_stream(name="MC", subjects=["mc"], max_consumers=10)))
            await js.update_stream(name="R1", subjects=["r1"], max_bytes=1900)
            out.append(await err(js.update_stream(name="R1", subjects=["r1"], max_bytes=2100)))
            await js.update_stream(name="R1", subjects=["r1"], max_bytes=1000)
            out.append(await pub_until_error(js, "r1", 100))
            r = json.loads((await nc.request("$JS.API.INFO", b"", timeout=2)).data)
            out.append({k: r[k] for k in ("memory", "storage", "reserved_memory", "reserved_storage", "streams")})
            await nc.close()
            nc = await nats.connect(f"nats://b:b@127.0.0.1:{s.port}")
            js = nc.jetstream()
            out.append(await err(js.add_stream(name="SB", subjects=["sb"], max_bytes=20000)))
            await js.add_stream(name="SB2", subjects=["sb2"], max_bytes=4000)
            out.append(await pub_until_error(js, "sb2", 100))
            await js.add_stream(name="SB3", subjects=["sb3"])
            out.append(await pub_until_error(js, "sb3", 100))
            await nc.close()
            return out

        got = run(main())
    storage_err = (10047, "insufficient storage resources available")
    assert got[0] == storage_err  # 5000 > the account's 2000
    assert got[1] == storage_err  # 1500 + 600 > 2000
    assert got[2] == (10028, "insufficient memory resources available")  # max_mem 0
    assert got[3] == (10026, "maximum consumers limit reached")
    assert got[4] == storage_err  # 2100 > 2000
    assert got[5] == (300, None)  # max_bytes 1000, discard old: the stream keeps trimming itself
    assert got[6] == {"memory": 0, "storage": 924, "reserved_memory": 0, "reserved_storage": 1000, "streams": 2}
    assert got[7] == storage_err  # 20000 > the server's 10000
    assert got[8] == (300, None)
    assert got[9] == (39, (10023, "insufficient resources"))  # the server's 10000 bytes are used up
