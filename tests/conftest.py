"""Shared fixtures: `js_server` is a JetStream-enabled server of each kind (differential tests)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator

import pytest

from tests.servers import ServerProcess

KINDS = ["nats-server", "edged"]


@pytest.fixture(params=KINDS)
def js_server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    p = ServerProcess(request.param, ["-js", "-sd", tempfile.mkdtemp(prefix="js-")]).start()
    yield p
    p.stop()
