"""The pipeline tests' shared pieces: one local Spark session for the whole run, and real servers.

Spark takes 10-20 s to start and half a GB, so one session serves every test of an xdist worker
(with `make test`'s `-n 2`, at most two sessions; pytest-xdist's `loadgroup`, which could keep them
in one worker, does not group under pytest 9). Each module carries `PIPELINE`, the mark `spark`. `local[2,2]`: two task threads, and a failed task is tried once more, as
on a cluster, which the sink's retry test needs.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.servers import ServerProcess

pyspark = pytest.importorskip("pyspark", reason="the spark extra: pip install -e '.[spark]'")

PIPELINE = [pytest.mark.spark]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import pipeline

    s = (SparkSession.builder.master("local[2,2]").appName("edged-pipeline-tests")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
         .config("spark.driver.memory", "1g").config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.streaming.stopTimeout", "10s").getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    pipeline.register(s)
    yield s
    s.stop()


@pytest.fixture(scope="module", params=["nats-server", "edged"])
def server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    p = ServerProcess(request.param, ["-js", "-sd", tempfile.mkdtemp(prefix="pl-")]).start()
    yield p
    p.stop()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def raw_publish(url: str, msgs: list[tuple[str, bytes, bytes]]) -> None:
    """HPUB/PUB each (subject, header block, data) from a bare socket, then PING/PONG: repeated header
    keys go out exactly as given, which nats-py's publish cannot do."""
    host, port = url.removeprefix("nats://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        f = s.makefile("rb")
        assert f.readline().startswith(b"INFO ")
        out = [b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n']
        for subject, hdr, data in msgs:
            if hdr:
                out.append(b"HPUB %s %d %d\r\n%s%s\r\n" % (subject.encode(), len(hdr), len(hdr) + len(data), hdr, data))
            else:
                out.append(b"PUB %s %d\r\n%s\r\n" % (subject.encode(), len(data), data))
        out.append(b"PING\r\n")
        s.sendall(b"".join(out))
        line = f.readline()
        assert line == b"PONG\r\n", line


def wait_stored(url: str, stream: str, n: int, timeout: float = 20.0) -> None:
    """Until the stream holds n messages (a raw publish has no PubAck to wait for)."""
    import time

    import nats

    async def go() -> None:
        nc = await nats.connect(url)
        js = nc.jetstream()
        deadline = time.monotonic() + timeout
        while (await js.stream_info(stream)).state.messages < n:
            assert time.monotonic() < deadline, f"{stream} did not reach {n} messages"
            await asyncio.sleep(0.05)
        await nc.close()

    asyncio.run(go())


def reference_read(url: str, stream: str) -> list[dict[str, Any]]:
    """Every message of the stream by STREAM.MSG.GET, one request per sequence, from nats-py: the raw
    header block (base64 in the reply) parsed here, independently of the pipeline's parser."""
    import nats

    async def go() -> list[dict[str, Any]]:
        nc = await nats.connect(url)
        try:
            info = await nc.jetstream().stream_info(stream)
            out = []
            for seq in range(max(info.state.first_seq, 1), info.state.last_seq + 1):
                m = await nc.request(f"$JS.API.STREAM.MSG.GET.{stream}", json.dumps({"seq": seq}).encode(), timeout=5)
                r = json.loads(m.data)
                if "error" in r:
                    assert r["error"]["err_code"] == 10037, r  # deleted: no message
                    continue
                msg = r["message"]
                hdrs = None
                if msg.get("hdrs"):
                    hdrs = {}
                    for line in base64.b64decode(msg["hdrs"]).decode().split("\r\n")[1:]:
                        if ":" in line:
                            k, v = line.split(":", 1)
                            hdrs.setdefault(k.strip(), []).append(v.strip())
                from datetime import datetime

                t = msg["time"]
                # RFC 3339 with nanoseconds: keep microseconds, as Spark does
                head, _, frac = t.rstrip("Z").partition(".")
                ts = datetime.fromisoformat(head + "+00:00").replace(microsecond=int((frac + "000000")[:6]))
                out.append({"seq": msg["seq"], "subject": msg["subject"], "headers": hdrs, "time": ts,
                            "data": base64.b64decode(msg.get("data") or "")})
            return out
        finally:
            await nc.close()

    return asyncio.run(go())
