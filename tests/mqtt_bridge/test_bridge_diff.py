"""Differential: the same forwarding through mosquitto's own bridge (a local mosquitto with a
`connection` to the upstream one) and through edged's, seen by the same clients upstream: the same
topics and payloads, in the same order, both ways."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import nats

from tests.support.aio import run, until
from tests.support.mqttpeers.mosquitto import Mosquitto, Subscriber, publish
from tests.support.servers import ServerProcess, free_port

N = 50


async def probe(port: int, topic: str, seen: Callable[[], list[Any]]) -> None:
    """Publish `topic` until it shows in `seen()`: the bridge is connected and subscribed both ways, with no
    fixed wait (the probes are left out of what is compared)."""
    for _ in range(100):
        publish(port, topic, [b"probe"])
        try:
            await until(lambda: any(t == topic for t, *_ in seen()), 0.3)
            return
        except TimeoutError:
            continue
    raise AssertionError(f"{topic} never came through")


def real(msgs: list[Any]) -> list[Any]:
    return [(t, p) for t, p, *_ in msgs if p != b"probe"]


def _mosquitto_bridge(mosquitto: Callable[..., Mosquitto], up: Mosquitto) -> tuple[list[Any], list[Any]]:
    local = mosquitto(extra=["connection up", f"address 127.0.0.1:{up.port}", "topic a/# out 1",
                             "topic cmd/# in 1", "cleansession false", "restart_timeout 1"])
    upsub = Subscriber(up.port, "a/#")
    localsub = Subscriber(local.port, "cmd/#")
    try:
        assert upsub.subscribed.wait(10) and localsub.subscribed.wait(10)

        async def main() -> None:
            await probe(local.port, "a/probe", upsub.messages)
            await probe(up.port, "cmd/probe", localsub.messages)
            publish(local.port, "a/x", [b"%d" % i for i in range(N)])
            publish(up.port, "cmd/y", [b"c%d" % i for i in range(N)])
            await until(lambda: len(real(upsub.messages())) >= N and len(real(localsub.messages())) >= N, 20)

        run(main())
        return real(upsub.messages()), real(localsub.messages())
    finally:
        upsub.close()
        localsub.close()


def _edged_bridge(start_server: Callable[..., ServerProcess], up: Mosquitto) -> tuple[list[Any], list[Any]]:
    upsub = Subscriber(up.port, "a/#")
    assert upsub.subscribed.wait(10)
    p = start_server("edged", config=f"""
edged {{ mqtt_bridge [ {{ name: up, url: "{up.url}"
  out: [ {{ subject: "a.>", qos: 1 }} ], in: [ {{ topic: "cmd/#", qos: 1 }} ] }} ] }}
""", http_port=free_port())

    async def main() -> list[Any]:
        nc = await nats.connect(p.url)
        got: list[Any] = []

        async def on_cmd(m: Any) -> None:
            got.append((m.subject.replace(".", "/"), m.data))

        await nc.subscribe("cmd.>", cb=on_cmd)
        await nc.flush()
        await probe(up.port, "cmd/probe", lambda: got)
        for _ in range(100):  # a/probe through edged: the out rule is there once the broker has it
            await nc.publish("a.probe", b"probe")
            try:
                await until(lambda: any(t == "a/probe" for t, *_ in upsub.messages()), 0.3)
                break
            except TimeoutError:
                continue
        for i in range(N):
            await nc.publish("a.x", b"%d" % i)
        await nc.flush()
        publish(up.port, "cmd/y", [b"c%d" % i for i in range(N)])
        await until(lambda: len(real(upsub.messages())) >= N and len(real(got)) >= N, 20)
        await nc.close()
        return real(got)

    try:
        local = run(main())
        return real(upsub.messages()), local
    finally:
        upsub.close()


def test_same_as_mosquittos_bridge(mosquitto: Callable[..., Mosquitto],
                                   start_server: Callable[..., ServerProcess]) -> None:
    m_up, m_in = _mosquitto_bridge(mosquitto, mosquitto())
    e_up, e_in = _edged_bridge(start_server, mosquitto())
    assert m_up == e_up == [("a/x", b"%d" % i) for i in range(N)]
    assert m_in == e_in == [("cmd/y", b"c%d" % i) for i in range(N)]
