"""Shared fixtures: `start_server` starts edged or nats-server processes and stops them after the test,
`js_server` is a JetStream-enabled server of each kind (differential tests). The hub fixtures are in
tests/hub/conftest.py."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.identity.certs import make_pki
from tests.support.servers import KINDS, ServerProcess


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


@pytest.fixture
def start_server() -> Iterator[Callable[..., ServerProcess]]:
    """`start_server(kind, ...)` with ServerProcess's arguments: a started edged or nats-server, stopped when
    the test is done, whatever the test did to it (stopped, killed, restarted) and however it ended."""
    procs: list[ServerProcess] = []

    def start(kind: str, *args: Any, **kw: Any) -> ServerProcess:
        p = ServerProcess(kind, *args, **kw)
        procs.append(p)
        return p.start()

    yield start
    for p in procs:
        p.stop()


@pytest.fixture(scope="session")
def pki() -> dict[str, str]:
    """A test CA with server and client certificates for 127.0.0.1 (tests/support/identity/certs.py): file paths."""
    return make_pki(tempfile.mkdtemp(prefix="pki-"))


@pytest.fixture(params=KINDS)
def js_server(request: pytest.FixtureRequest, start_server: Callable[..., ServerProcess]) -> ServerProcess:
    return start_server(request.param, ["-js", "-sd", tempfile.mkdtemp(prefix="js-")])
