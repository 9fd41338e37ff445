"""Keeping a leafnode link responsive while a JetStream backlog drains over it.

What the kernel has queued but not yet sent sits ahead of everything written after it: with Linux's send
buffer autotuning that can be megabytes, so on a slow link a PONG, an LS+ or a core reply would wait
seconds behind a drain. TCP_NOTSENT_LOWAT keeps the unsent part of the kernel's queue small, so what is
waiting stays in edged's own output, where `LeafConnection.backlogged()` sees it and holds bulk producers
(JetStream deliveries) back while the link's own traffic goes out promptly. In-flight bytes (the TCP
window, what the link really needs for its throughput) are not limited by it. It is on only while a bulk
producer drains over the link (`set_paced`): a socket that stops taking more at 64 KiB unsent costs core
traffic's full-speed forwarding about half its throughput in write calls (bench leaf, link edge -> hub).
"""

from __future__ import annotations

import socket
from typing import Any

UNSENT_LOWAT = 64 * 1024  # kernel bytes not yet sent, past which the socket stops taking more

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


def set_paced(transport: Any, on: bool) -> None:
    """A small unsent kernel queue (on, while a drain runs) or the kernel's default (off)."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or _NOTSENT_LOWAT is None:
        return
    try:
        # 0xFFFFFFFF is "no limit", the kernel's default
        sock.setsockopt(socket.IPPROTO_TCP, _NOTSENT_LOWAT, UNSENT_LOWAT if on else 0xFFFFFFFF)
    except OSError:  # not Linux (or too old): the drain still works, with the kernel's queue ahead
        pass
