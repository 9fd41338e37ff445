"""The queues a backlog drain may fill ahead of a leafnode link's own traffic, sized by the link's rate."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edged.leafnode import pacing
from edged.leafnode.connection import BACKLOG_BYTES, BACKLOG_MAX
from edged.leafnode.pacing import QUEUE_TIME, UNSENT_LOWAT, UNSENT_MAX, queue_sizes, set_paced


def test_a_slow_link_keeps_the_floors() -> None:
    # 400 KB/s (the slow-link hub test): a tenth of a second is 40 KB, less than either floor
    assert queue_sizes(400_000, BACKLOG_BYTES, BACKLOG_MAX) == (BACKLOG_BYTES, UNSENT_LOWAT)
    assert queue_sizes(0.0, BACKLOG_BYTES, BACKLOG_MAX) == (BACKLOG_BYTES, UNSENT_LOWAT)


def test_a_fast_link_gets_queue_time_of_its_rate() -> None:
    rate = 20_000_000  # loopback drain, 20 MB/s
    own, kernel = queue_sizes(rate, BACKLOG_BYTES, BACKLOG_MAX)
    assert own + kernel == int(rate * QUEUE_TIME * 2 / 3) + int(rate * QUEUE_TIME / 3)
    assert own > BACKLOG_BYTES and kernel > UNSENT_LOWAT


@given(st.floats(min_value=0, max_value=1e12, allow_nan=False))
def test_sizes_stay_within_floor_and_ceiling(rate: float) -> None:
    own, kernel = queue_sizes(rate, BACKLOG_BYTES, BACKLOG_MAX)
    assert BACKLOG_BYTES <= own <= BACKLOG_MAX
    assert UNSENT_LOWAT <= kernel <= UNSENT_MAX
    # never more than a tenth of a second of the link ahead, except the floors
    assert own <= max(BACKLOG_BYTES, rate * QUEUE_TIME) and kernel <= max(UNSENT_LOWAT, rate * QUEUE_TIME)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_pacing_turns_on_and_off_on_a_real_transport(loop: str) -> None:
    """The kernel's unsent queue set small and back to "no limit" (0xFFFFFFFF, an unsigned int that the int
    form of setsockopt refuses with a TypeError, which used to kill the link as a drain ended), on the
    transports of both event loops edged runs on."""
    if pacing._NOTSENT_LOWAT is None:
        pytest.skip("no TCP_NOTSENT_LOWAT on this platform")
    if loop == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        ev = uvloop.new_event_loop()
    else:
        ev = asyncio.new_event_loop()

    async def main() -> list[int]:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, w = await asyncio.open_connection("127.0.0.1", port)
        sock = w.transport.get_extra_info("socket")
        seen = []
        for on in (True, False, True, False):
            set_paced(w.transport, on, 12345)
            raw = sock.getsockopt(socket.IPPROTO_TCP, pacing._NOTSENT_LOWAT, 4)
            seen.append(struct.unpack("=I", raw)[0])
        w.close()
        server.close()
        return seen

    try:
        assert ev.run_until_complete(main()) == [12345, 0xFFFFFFFF, 12345, 0xFFFFFFFF]
    finally:
        ev.close()
