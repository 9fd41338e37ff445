"""Shared fixtures: `js_server` is a JetStream-enabled server of each kind (differential tests)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator

import pytest

from tests.support.servers import ServerProcess

KINDS = ["nats-server", "edged"]


@pytest.fixture(scope="session", autouse=True)
def _temp_dirs_under_pytest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every directory the tests make with `tempfile` (servers' workdirs and logs, stores) goes under
    pytest's own base directory for this run, which pytest prunes to its last three runs: made straight
    under /tmp, they were never removed, and a few hundred runs with the benchmarks filled a disk."""
    old = tempfile.tempdir
    tempfile.tempdir = str(tmp_path_factory.getbasetemp())
    yield
    tempfile.tempdir = old


@pytest.fixture
def anyio_backend() -> str:
    """Async tests (`pytest.mark.anyio`) run on asyncio, as edged does."""
    return "asyncio"


@pytest.fixture(params=KINDS)
def js_server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    p = ServerProcess(request.param, ["-js", "-sd", tempfile.mkdtemp(prefix="js-")]).start()
    yield p
    p.stop()
