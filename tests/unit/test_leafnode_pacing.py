"""The queues a backlog drain may fill ahead of a leafnode link's own traffic, sized by the link's rate."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edged.leafnode.connection import BACKLOG_BYTES, BACKLOG_MAX
from edged.leafnode.pacing import QUEUE_TIME, UNSENT_LOWAT, UNSENT_MAX, queue_sizes


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
