"""Helpers shared by the JetStream tests: run a coroutine with a deadline, a nats-py session, the
(err_code, description) of a failed JetStream call, and a wire script's replies from both servers."""

from __future__ import annotations

import asyncio
import tempfile
from typing import Any

import nats
from nats.js.errors import APIError

from tests.servers import ServerProcess

KINDS = ("nats-server", "edged")


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


def replies_of_both(scenario: Any, prefix: str) -> dict[str, list[Any]]:
    """`scenario(url)` against a fresh JetStream server of each kind: {kind: what it returned}, for the
    wire scripts that compare every reply."""
    res = {}
    for kind in KINDS:
        p = ServerProcess(kind, ["-js", "-sd", tempfile.mkdtemp(prefix=prefix)]).start()
        try:
            res[kind] = run(scenario(p.url), timeout=120)
        finally:
            p.stop()
    return res
