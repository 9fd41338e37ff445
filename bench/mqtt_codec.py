"""Micro-benchmark of the MQTT codec's hot path (bridges/mqtt/codec.py), no server: ns per PUBLISH decoded
from a 1,000-packet read and per PUBLISH encoded, at MQTT 3.1.1 and 5, best of 5.

The `mqtt` section adds these rows (edged column only) so a codec change shows beside the brokers' figures.
Run alone: `python -m bench.mqtt_codec`.
"""

from __future__ import annotations

import sys
import time

from bench.harness import ROOT, Report
from bridges.mqtt.codec import EMPTY_PROPERTIES, MQTTDecoder, encode, encode_publish
from bridges.mqtt.packets import Connect, Properties, Publish

TOPIC = "sensors/room1/temperature"
PAYLOAD = b"x" * 16
BATCH = 1000


def _best(fn: object, n: int, reps: int = 5) -> float:
    """Best ns per op of `fn()` doing `n` ops."""
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, (time.perf_counter() - t) / n * 1e9)
    return best


def decode_ns(level: int, qos: int, props: Properties | None = None, loops: int = 20) -> float:
    d = MQTTDecoder()
    d.feed(encode(Connect(level, "bench"), level))
    batch = encode(Publish(TOPIC, PAYLOAD, qos, packet_id=7 if qos else 0, properties=props), level) * BATCH

    def go() -> None:
        for _ in range(loops):
            d.feed(batch)

    return _best(go, loops * BATCH)


def encode_ns(level: int, qos: int, n: int = 20_000) -> float:
    topic = TOPIC.encode()
    props = EMPTY_PROPERTIES if level == 5 else None

    def go() -> None:
        for _ in range(n):
            encode_publish(topic, PAYLOAD, qos, 7, False, False, props)

    return _best(go, n)


def rows(quick: bool = False) -> list[tuple[str, float]]:
    loops = 5 if quick else 20
    user = Properties(user_properties=[("unit", "C")], message_expiry_interval=60)
    out = [
        ("decode PUBLISH 3.1.1 QoS 0", decode_ns(4, 0, loops=loops)),
        ("decode PUBLISH 3.1.1 QoS 1", decode_ns(4, 1, loops=loops)),
        ("decode PUBLISH 5 QoS 1", decode_ns(5, 1, loops=loops)),
        ("decode PUBLISH 5 QoS 1, 2 properties", decode_ns(5, 1, user, loops=loops)),
        ("encode PUBLISH 3.1.1 QoS 1", encode_ns(4, 1, 5_000 if quick else 20_000)),
        ("encode PUBLISH 5 QoS 1", encode_ns(5, 1, 5_000 if quick else 20_000)),
    ]
    return out


def run(report: Report) -> None:
    for name, ns in rows(report.quick):
        report.add("mqtt", f"codec: {name}", "ns/msg", ns, 0, higher_is_better=False)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    for name, ns in rows("--quick" in sys.argv):
        print(f"{name:40} {ns:8.0f} ns/msg")
