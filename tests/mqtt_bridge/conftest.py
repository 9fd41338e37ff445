"""Fixtures of the upstream bridge's tests: `mosquitto(...)` starts a real broker, stopped after the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.mqttpeers.mosquitto import Mosquitto


@pytest.fixture
def mosquitto() -> Iterator[Callable[..., Mosquitto]]:
    brokers: list[Mosquitto] = []

    def start(**kw: Any) -> Mosquitto:
        b = Mosquitto(**kw)
        brokers.append(b)
        return b.start()

    yield start
    for b in brokers:
        b.stop()
