"""A push consumer's run handed as ack-reply numbers (`Receiver.deliver_numbered_run`): the default gives a
receiver the very run `deliver_routed_batch` would, and flow control counts the replies' bytes from the
numbers' digits (`consumer._digits`) exactly as the replies' lengths."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from edged.jetstream.consumer import _digits
from edged.routing.receiver import Receiver, Subscription


@given(st.integers(0, 10**21), st.integers(-3, 2500))
def test_digits_of_a_range(lo: int, span: int) -> None:
    assert _digits(lo, lo + span) == sum(len(str(q)) for q in range(lo, lo + span + 1))


class _Taker(Receiver):
    kind = "test"

    def __init__(self) -> None:
        self.runs: list[Any] = []

    def deliver_routed_batch(self, sub: Subscription, routed: bytes, msgs: list[Any], nbytes: int) -> None:
        self.runs.append((routed, msgs, nbytes))


def test_default_hands_the_built_replies_to_deliver_routed_batch() -> None:
    r = _Taker()
    tss = [1764170000000000000, 5, 1764170000000000999]
    r.deliver_numbered_run(None, b"$JS.S.d", [b"a.1", b"a.2", b"a.%"], [b"x", b"", b"yz"],  # type: ignore[arg-type]
                           b"$JS.ACK.s.c%%.1.%d.%d.%d.%d", (range(7, 10), range(9, 12), tss, range(3, 0, -1)), 3)
    assert r.runs == [(b"$JS.S.d", [
        (b"a.1", b"$JS.ACK.s.c%.1.7.9.1764170000000000000.3", None, b"x"),
        (b"a.2", b"$JS.ACK.s.c%.1.8.10.5.2", None, b""),
        (b"a.%", b"$JS.ACK.s.c%.1.9.11.1764170000000000999.1", None, b"yz"),
    ], 3)]
