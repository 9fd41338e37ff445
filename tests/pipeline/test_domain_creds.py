"""The `jetstream` source's last two options on real servers: `domain` (an edge's stream read and written
through a nats-server hub over `$JS.edge.API`, with edged and with a nats-server as the leaf: the same
rows) and `creds` (a user `.creds` file against an operator-mode server with a memory resolver, and a
clear refusal for a user the operator never signed)."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import nats
import pytest

from tests.pipeline.conftest import PIPELINE, reference_read, run
from tests.support.leaf import Hub, OperatorSetup, encode_jwt, hub_binary
from tests.support.servers import KINDS, ServerProcess, free_port

pytestmark = PIPELINE

HUB = """
server_name: hub1
jetstream { store_dir: "./js", domain: hub }
leafnodes { port: $LEAF_PORT }
accounts { APP { jetstream: enabled, users: [ {user: leaf, password: s3cret}, {user: app, password: app} ] } }
"""

LEAF = """
server_name: edge1
jetstream { store_dir: "./js", domain: edge }
leafnodes { remotes: [ { urls: ["nats://leaf:s3cret@127.0.0.1:%d"] } ] }
"""


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted((r.seq, r.subject, r.data, dict(r.headers) if r.headers else None, r.time) for r in df.collect())


async def _edge_domain_up(url: str, timeout: float = 15.0) -> None:
    """Until a hub client reaches the leaf's JetStream through `$JS.edge.API` (the link up, interest in)."""
    nc = await nats.connect(url, user="app", password="app")
    try:
        for _ in range(int(timeout / 0.1)):
            try:
                await nc.jetstream(domain="edge").account_info()
                return
            except Exception:
                await asyncio.sleep(0.1)
        raise TimeoutError("the leaf's JetStream domain is not reachable from the hub")
    finally:
        await nc.close()


@pytest.fixture(scope="module", params=KINDS)
def hub_and_leaf(request: pytest.FixtureRequest) -> Iterator[tuple[Hub, ServerProcess]]:
    """A nats-server hub and a leaf of the parameter's kind with JetStream domain `edge`, linked."""
    with Hub(hub_binary("2.15"), HUB) as hub, ServerProcess(request.param, config=LEAF % hub.leaf_port) as leaf:
        run(_edge_domain_up(hub.url))
        yield hub, leaf


def test_domain_read_through_the_hub_equals_the_edge(spark: Any, hub_and_leaf: tuple[Hub, ServerProcess]) -> None:
    hub, leaf = hub_and_leaf

    async def fill() -> None:
        nc = await nats.connect(leaf.url)
        js = nc.jetstream()
        await js.add_stream(name="DOM", subjects=["dom.>"])
        for i in range(30):
            await js.publish(f"dom.{i % 3}", b"m%d" % i, headers={"I": str(i)} if i % 2 else None)
        await js.delete_msg("DOM", 7)
        await nc.close()

    run(fill())
    direct = spark.read.format("jetstream").option("servers", leaf.url).option("stream", "DOM").load()
    via_hub = (spark.read.format("jetstream").option("servers", hub.url).option("user", "app")
               .option("password", "app").option("domain", "edge").option("stream", "DOM")
               .option("partitions", "2").load())
    want = _rows(direct)
    assert [r[0] for r in want] == [s for s in range(1, 31) if s != 7]
    assert _rows(via_hub) == want
    # without the domain the hub's own JetStream answers, and it has no such stream; a domain nobody
    # serves has no responders
    for domain, said in ((None, "stream 'DOM' not found"), ("nowhere", "no JetStream answers .* domain nowhere")):
        with pytest.raises(Exception, match=said):
            (spark.read.format("jetstream").option("servers", hub.url).option("user", "app")
             .option("password", "app").options(**({"domain": domain} if domain else {}))
             .option("stream", "DOM").load().collect())


def test_domain_write_through_the_hub(spark: Any, hub_and_leaf: tuple[Hub, ServerProcess]) -> None:
    """The sink learns the edge's stream subjects through the domain, so rows get PubAcks and msg ids."""
    hub, leaf = hub_and_leaf

    async def make() -> None:
        nc = await nats.connect(leaf.url)
        await nc.jetstream().add_stream(name="CMD", subjects=["cmd.>"])
        await nc.close()

    run(make())
    rows = [(f"cmd.{i % 2}", b"c%d" % i, f"id-{i}") for i in range(12)]
    df = spark.createDataFrame(rows, "subject string, data binary, msg_id string").coalesce(1)
    for _ in range(2):  # the second write's ids fall in the edge stream's duplicate window
        (df.write.format("jetstream").option("servers", hub.url).option("user", "app")
         .option("password", "app").option("domain", "edge").mode("append").save())
    got = reference_read(leaf.url, "CMD")
    assert [(g["subject"], g["data"], g["headers"]) for g in got] == \
        [(s, d, {"Nats-Msg-Id": [m]}) for s, d, m in rows]


def _operator(workdir: str) -> tuple[OperatorSetup, str]:
    """The operator set-up with APP's JWT given JetStream limits, and the server config that preloads it."""
    op = OperatorSetup(workdir)
    limits = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True,
              "conn": -1, "leaf": -1, "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}
    op.app_jwt = encode_jwt({"sub": op.app.public_key.decode(), "name": "APP",
                             "nats": {"type": "account", "version": 2, "limits": limits}}, op.op)
    return op, op.hub_config() + f'jetstream {{ store_dir: "{workdir}/js" }}\n'


@pytest.mark.parametrize("kind", KINDS)
def test_creds_read(spark: Any, kind: str, start_server: Callable[..., ServerProcess]) -> None:
    op, conf = _operator(tempfile.mkdtemp(prefix="op-"))
    creds = op.user_creds("reader")
    srv = start_server(kind, config=conf, port=free_port())

    async def fill() -> None:
        nc = await nats.connect(srv.url, user_credentials=creds)
        js = nc.jetstream()
        await js.add_stream(name="CR", subjects=["cr.>"])
        for i in range(10):
            await js.publish(f"cr.{i}", b"%d" % i)
        await nc.close()

    run(fill())

    def read(path: str) -> list[tuple[int, bytes]]:
        df = (spark.read.format("jetstream").option("servers", srv.url).option("creds", path)
              .option("stream", "CR").option("timeout", "5").load())
        return sorted((r.seq, r.data) for r in df.collect())

    assert read(creds) == [(i + 1, b"%d" % i) for i in range(10)]
    spark.createDataFrame([("cr.w", b"w")], "subject string, data binary").write.format("jetstream") \
        .option("servers", srv.url).option("creds", creds).mode("append").save()
    assert read(creds)[-1] == (11, b"w")
    # a user signed by an account the server does not know: refused, and said so
    stranger = OperatorSetup(tempfile.mkdtemp(prefix="op-")).user_creds("stranger")
    with pytest.raises(Exception) as e:
        read(stranger)
    assert "refused the credentials" in str(e.value), str(e.value)[-2000:]
    # a damaged file (a seed that is no nkey, no seed at all) is named before any connection is tried
    with open(creds) as f:
        text = f.read()
    for damaged in (text.replace("\nSU", "\nSX", 1), text.split("*")[0]):
        bad = f"{op.workdir}/bad.creds"
        with open(bad, "w") as f:
            f.write(damaged)
        with pytest.raises(Exception, match="PipelineError: option creds: .*bad.creds"):
            read(bad)
