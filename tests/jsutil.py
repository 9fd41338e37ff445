"""Helpers shared by the JetStream tests: run a coroutine with a deadline, a nats-py session, and the
(err_code, description) of a failed JetStream call."""

from __future__ import annotations

import asyncio
from typing import Any

import nats
from nats.js.errors import APIError

from tests.servers import ServerProcess


def run(coro: Any, timeout: float = 60) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def session(server: ServerProcess, body: Any, domain: str | None = None) -> Any:
    """`body(nc, js)` on a fresh connection, closed afterwards."""
    nc = await nats.connect(server.url)
    try:
        return await body(nc, nc.jetstream(domain=domain))
    finally:
        await nc.close()


async def err(aw: Any) -> tuple[int, str]:
    """(err_code, description) of a JetStream call that must fail."""
    try:
        await aw
    except APIError as e:
        return e.err_code or 0, e.description or ""
    raise AssertionError("expected an API error")
