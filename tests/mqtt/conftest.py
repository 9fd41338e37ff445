"""MQTT tests: edged (or nats-server, for differential tests) with an `mqtt {}` port, and paho clients."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.mqttpeers.clients import Mosquitto, mqtt_config, wait_mqtt
from tests.support.servers import KINDS, ServerProcess, free_port


@pytest.fixture
def mqtt_server(start_server: Callable[..., ServerProcess]) -> Callable[..., ServerProcess]:
    """`mqtt_server(kind="edged", extra="", mqtt_extra="")`: a started server with JetStream and an MQTT
    port (`.mqtt_port`)."""

    def start(kind: str = "edged", extra: str = "", mqtt_extra: str = "", js_extra: str = "", **kw: Any) -> ServerProcess:
        port = free_port()
        store = tempfile.mkdtemp(prefix="mqtt-js-")
        srv = start_server(kind, config=mqtt_config(port, store, extra, mqtt_extra, js_extra), **kw)
        wait_mqtt(port)
        srv.mqtt_port = port  # type: ignore[attr-defined]
        return srv

    return start


@pytest.fixture(params=KINDS)
def any_mqtt(request: pytest.FixtureRequest, mqtt_server: Callable[..., ServerProcess]) -> ServerProcess:
    """The same MQTT 3.1.1 scenario against nats-server's MQTT listener and against edged."""
    return mqtt_server(request.param)


@pytest.fixture(params=["mosquitto", "edged"])
def v5_broker(request: pytest.FixtureRequest, mqtt_server: Callable[..., ServerProcess]) -> Iterator[Any]:
    """The same MQTT 5 scenario against mosquitto (nats-server has no MQTT 5) and against edged."""
    if request.param == "edged":
        yield mqtt_server()
        return
    try:
        m = Mosquitto(tempfile.mkdtemp(prefix="mosquitto-"))
    except FileNotFoundError as e:
        pytest.skip(str(e))
    yield m
    m.stop()
