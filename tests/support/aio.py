"""Running a test's coroutine from a plain test function, and waiting for a condition, both bounded."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any


def run(coro: Awaitable[Any], timeout: float = 90.0) -> Any:
    """`coro` in a fresh event loop, cancelled after `timeout` seconds: below pytest's own 120 s limit, so a
    hang fails with the awaiting coroutine's traceback rather than pytest-timeout's thread dump."""

    async def main() -> Any:
        return await asyncio.wait_for(coro, timeout)

    if os.environ.get("EDGED_TEST_UVLOOP"):  # edged runs on uvloop when installed: same tests on it
        import uvloop

        return uvloop.run(main())
    return asyncio.run(main())


async def until(pred: Callable[[], Any], timeout: float = 5.0, interval: float = 0.02) -> Any:
    """Poll `pred` until it is truthy (its value is returned) or `timeout` seconds have passed (raises)."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(interval)


async def eventually(what: Callable[[], Awaitable[Any]], timeout: float, msg: str = "", interval: float = 0.05) -> Any:
    """Await `what()` until it returns something truthy (returned) or `timeout` seconds pass (AssertionError
    with `msg` and the last result); an error while polling counts as not yet (a server or link coming up)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = await what()
            if last:
                return last
        except Exception as e:
            last = e
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out: {msg} (last: {last!r})")
