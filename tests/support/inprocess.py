"""edged in this test's own process and event loop, for tests that look at its insides (its accounts,
links, monitor) next to what clients see."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any


@asynccontextmanager
async def running(opts: Any) -> AsyncIterator[Any]:
    """An edged Server started from `opts` (edged.settings.options.Options), shut down however the block ends."""
    from edged.server import Server

    srv = Server(opts)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.shutdown()
