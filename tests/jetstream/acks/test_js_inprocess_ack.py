"""An in-process receiver (an InternalClient, as the MQTT sessions are) that acks a push consumer's
delivery from inside the delivery call: the consumer's delivery loop is re-entered by the ack and must
carry on with the rest of its read-ahead. edged runs in this process; a nats-py client sets up the
stream and consumer and publishes, as any client would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, RetentionPolicy, StreamConfig

from edged.routing.accounts import InternalClient
from edged.settings.options import Options
from tests.support.aio import run, until
from tests.support.inprocess import running

N = 40


@pytest.mark.parametrize("retention", [RetentionPolicy.INTEREST, RetentionPolicy.WORK_QUEUE, RetentionPolicy.LIMITS])
def test_ack_from_inside_the_delivery(tmp_path: Path, retention: RetentionPolicy) -> None:
    async def main() -> None:
        o = Options(host="127.0.0.1", port=-1)
        o.jetstream.enabled = True
        o.jetstream.store_dir = str(tmp_path)
        async with running(o) as srv:
            nc = await nats.connect(f"nats://127.0.0.1:{srv.client_port}")
            try:
                js = nc.jetstream()
                await js.add_stream(StreamConfig(name="S", subjects=["s.>"], retention=retention))
                # nobody on the deliver subject yet: the messages wait in the stream
                await js.add_consumer("S", ConsumerConfig(durable_name="c", deliver_subject="in.proc",
                                                          ack_policy=AckPolicy.EXPLICIT,
                                                          deliver_policy=DeliverPolicy.ALL))
                for i in range(N):
                    await js.publish(f"s.{i % 3}", b"%d" % i)
                acc = srv.accounts["$G"]
                got: list[bytes] = []
                ic = InternalClient(acc, "acker")

                def on_msg(_sub: Any, _subject: str, reply: str, _hdr: bytes | None, payload: bytes) -> None:
                    got.append(payload)
                    ic.publish(reply, b"")  # the ack, synchronously, inside the delivery

                ic.subscribe("in.proc", on_msg)  # interest: the consumer reads ahead many and delivers them
                await until(lambda: len(got) >= N, timeout=10)
                assert got == [b"%d" % i for i in range(N)]
                info = await js.consumer_info("S", "c")
                assert info.num_ack_pending == 0 and info.num_redelivered == 0
                assert info.delivered.stream_seq == N and info.ack_floor.stream_seq == N
                si = await js.stream_info("S")
                assert si.state.messages == (N if retention == RetentionPolicy.LIMITS else 0)
            finally:
                await nc.close()

    run(main())
