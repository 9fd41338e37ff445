"""Collecting a subscription's messages, and proving that interest reached a server: publish until the
message arrives (interest crosses a leafnode link or a route some time after the SUB)."""

from __future__ import annotations

import asyncio
import time
from typing import Any


class Inbox:
    """The messages of the subscriptions it is the callback of, in arrival order."""

    def __init__(self) -> None:
        self.msgs: list[Any] = []

    async def cb(self, m: Any) -> None:
        self.msgs.append(m)

    def subjects(self) -> list[str]:
        return [m.subject for m in self.msgs]


async def propagated(pub: Any, subject: str, inbox: Inbox, timeout: float = 5.0) -> float:
    """Publish until `inbox` sees `subject`: proves interest crossed the link. Returns seconds taken."""
    t0 = time.monotonic()
    n0 = len(inbox.msgs)
    deadline = t0 + timeout
    while time.monotonic() < deadline:
        await pub.publish(subject, b"probe")
        await pub.flush()
        await asyncio.sleep(0.05)
        if any(m.subject == subject for m in inbox.msgs[n0:]):
            return time.monotonic() - t0
    raise TimeoutError(f"no delivery on {subject} within {timeout}s")
