"""A pull batch reaches the client the way nats-server frames it, differential: nats-py's pull subscription
with `pending_msgs_limit=50` keeps what one read of the batch fills its queue with (50, a few more when the
first messages came in a read of their own), the rest are dropped as a slow consumer. nats-server's writer
holds a client's output while the consumer is still adding to it, until 64 KB are pending (client.go,
writeLoop and maxBufSize), so 100 small messages leave in one write; edged once wrote a big batch's
first 32 messages at once, and the client, having taken those from its queue, kept 82."""

from __future__ import annotations

import nats

from tests.support.jsutil import replies_of_both

ROUNDS = 5  # a fresh consumer each: a split batch does not show every time


async def _scenario(url: str) -> list[dict[str, int]]:
    errors: list[Exception] = []

    async def error_cb(err: Exception) -> None:
        errors.append(err)

    nc = await nats.connect(url, error_cb=error_cb)
    js = nc.jetstream()
    await js.add_stream(name="PL", subjects=["pl.>"])
    for _ in range(100):
        await js.publish("pl.a", b"test")
    out = []
    for i in range(ROUNDS):
        errors.clear()
        sub = await js.pull_subscribe("pl.a", f"c{i}", pending_msgs_limit=50, pending_bytes_limit=-1)
        msgs = await sub.fetch(100, timeout=1)
        for m in msgs:
            await m.ack()
        info = await sub.consumer_info()
        out.append({"kept": len(msgs), "dropped": len(errors), "left": sub.pending_msgs,
                    "delivered": info.delivered.consumer_seq})
        await sub.unsubscribe()
    await nc.close()
    return out


def test_pull_batch_fills_a_limited_queue_as_on_nats_server() -> None:
    res = replies_of_both(_scenario, "pullpend-")
    for kind, rounds in res.items():
        for got in rounds:
            assert got["kept"] + got["dropped"] == 100, (kind, rounds)
            assert got["left"] == 0, (kind, rounds)
            assert got["delivered"] == 100, (kind, rounds)
    # nats.py's own test allows 3 over the limit: the first messages may come in a read of their own.
    # nats-server's writer races its consumer's goroutine, so on a busy machine a round now and then sees
    # the first part of the batch written early (as edged's 32 were), keeping more; its usual framing is
    # the whole batch in one write, which edged now gives every time
    assert min(got["kept"] for got in res["nats-server"]) in range(50, 54), res["nats-server"]
    assert all(got["kept"] in range(50, 54) for got in res["edged"]), res["edged"]
