"""Keeping a leafnode link responsive while a JetStream backlog drains over it.

What the kernel has queued but not yet sent sits ahead of everything written after it: with Linux's send
buffer autotuning that can be megabytes, so on a slow link a PONG, an LS+ or a core reply would wait
seconds behind a drain. TCP_NOTSENT_LOWAT keeps the unsent part of the kernel's queue small, so what is
waiting stays in edged's own output, where `LeafConnection.backlogged()` sees it and holds bulk producers
(JetStream deliveries) back while the link's own traffic goes out promptly. In-flight bytes (the TCP
window, what the link really needs for its throughput) are not limited by it. It is on only while a bulk
producer drains over the link (`set_paced`): a socket that stops taking more at 64 KiB unsent costs core
traffic's full-speed forwarding about half its throughput in write calls (bench leaf, link edge -> hub).

Both queues are sized in time, not bytes (`queue_sizes`): QUEUE_TIME of the link's measured drain rate,
never below the byte floors a slow link gets. A fast link then always has enough queued to stay busy while
edged's loop is away (another process's turn on a loaded board; at 10 MB/s a 64 KiB queue is gone in 6 ms,
and the link sat idle until edged came back), while a slow link keeps the small queues that let a PONG or a
reply through within a fraction of a second.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

UNSENT_LOWAT = 64 * 1024  # kernel bytes not yet sent, past which the socket stops taking more (the floor)
UNSENT_MAX = 2 * 1024 * 1024
QUEUE_TIME = 0.1  # seconds of the link's drain rate a bulk producer may keep queued ahead of its own traffic

_NOTSENT_LOWAT: int | None = getattr(socket, "TCP_NOTSENT_LOWAT", None)


def tune_link_socket(transport: Any) -> None:
    """No Nagle delay: PING/PONG and replies go out now."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass


def queue_sizes(rate: float, floor: int, most: int) -> tuple[int, int]:
    """(edged's own output, the kernel's unsent queue) a drain may fill at `rate` bytes/s: QUEUE_TIME's worth
    between them, two thirds in edged and one third in the kernel, each at least its floor (`floor` for
    edged's, UNSENT_LOWAT for the kernel's) and at most its ceiling (`most`, UNSENT_MAX)."""
    ahead = rate * QUEUE_TIME
    return (int(min(max(ahead * 2 / 3, floor), most)),
            int(min(max(ahead / 3, UNSENT_LOWAT), UNSENT_MAX)))


def set_paced(transport: Any, on: bool, lowat: int = UNSENT_LOWAT) -> None:
    """A small unsent kernel queue of `lowat` bytes (on, while a drain runs) or the kernel's default (off)."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or _NOTSENT_LOWAT is None:
        return
    try:
        # 0xFFFFFFFF is "no limit", the kernel's default: an unsigned int, which setsockopt's int form
        # refuses (a TypeError that closed the link whenever a drain ended), so it goes as bytes
        sock.setsockopt(socket.IPPROTO_TCP, _NOTSENT_LOWAT, struct.pack("=I", lowat if on else 0xFFFFFFFF))
    except OSError:  # not Linux (or too old): the drain still works, with the kernel's queue ahead
        pass
