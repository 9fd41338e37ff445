"""`in` rules: upstream messages to local subjects or streams.

paho runs with manual acks, so the broker's PUBACK (QoS 1) / PUBCOMP (QoS 2) is released only when the
message is where the rule sends it (with MQTT 5, its user properties as NATS headers): published into the router for a subject rule; stored, with the
stream's PubAck in hand, for a rule with `stream` (the publish carries `Nats-Expected-Stream`, so a
subject no longer captured by that stream is an error, not a silent drop). A store that fails is tried
again every second while the connection that brought the message lasts; after that the broker sends the
message again. Acks are released in the order the messages came, as MQTT asks of a receiver.

What may arrive twice locally: a message whose PUBACK the broker did not get before the connection
dropped (the broker sends it again, DUP set). A topic that cannot be a subject (an empty level, a `.` or
a space in a level) is dropped with a warning and acknowledged, so it does not come back forever.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
from paho.mqtt.client import topic_matches_sub

from bridges.mqtt_bridge.jsapi import JSClient, JSError
from bridges.mqtt_bridge.topics import TopicError, topic_to_subject
from edged.log import log
from edged.routing.headers import make_headers
from edged.settings.options import BridgeInRule

if TYPE_CHECKING:
    from bridges.mqtt_bridge.bridge import Bridge

RETRY_S = 1.0
_decode = msgspec.json.Decoder().decode


@dataclass
class _In:
    gen: int
    mid: int
    qos: int
    rule: int = -1
    done: bool = False


class Inbound:
    def __init__(self, bridge: Bridge, rules: list[BridgeInRule], js: JSClient) -> None:
        self.bridge = bridge
        self.rules = rules
        self.js = js
        self.fifo: deque[_In] = deque()
        self.received = [0] * len(rules)
        self.delivered = [0] * len(rules)
        self.dropped = [0] * len(rules)
        self.last_error = [""] * len(rules)
        self._tasks: set[asyncio.Task[None]] = set()

    def subscriptions(self) -> list[tuple[str, int]]:
        return [(r.topic, r.qos) for r in self.rules]

    def stop(self) -> None:
        for t in self._tasks:
            t.cancel()

    def on_message(self, gen: int, mid: int, topic: str, payload: bytes, qos: int,
                   props: list[tuple[str, str]] | None = None) -> None:
        i = next((i for i, r in enumerate(self.rules) if topic_matches_sub(r.topic, topic)), -1)
        entry = _In(gen, mid, qos, i)
        self.fifo.append(entry)
        if i < 0:  # a subscription of an earlier configuration, kept by the broker's session
            entry.done = True
            self._release()
            return
        rule = self.rules[i]
        self.received[i] += 1
        try:
            subject = topic_to_subject(topic, rule.topic, rule.subject)
        except TopicError as e:
            self._drop(i, str(e))
            entry.done = True
            self._release()
            return
        if not rule.stream:
            self.js.ic.publish(subject, payload, "", make_headers(props) if props else None)
            self.delivered[i] += 1
            entry.done = True
            self._release()
            return
        hdr = make_headers([*(props or []), ("Nats-Expected-Stream", rule.stream)])
        t = asyncio.get_running_loop().create_task(self._store(i, entry, subject, payload, hdr))
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _store(self, i: int, entry: _In, subject: str, payload: bytes, hdr: bytes) -> None:
        rule = self.rules[i]
        while entry.gen == self.bridge.upstream.gen:
            try:
                _, body = await self.js.request(subject, payload, hdr)
                ack = _decode(body) if body else {}
                err = ack.get("error") if isinstance(ack, dict) else None
                if err:
                    raise JSError(str(err.get("description") or err), int(err.get("err_code") or 0))
                self.delivered[i] += 1
                self.last_error[i] = ""
                break
            except (JSError, msgspec.DecodeError) as e:
                why = f"not stored in stream {rule.stream}: {e}"
                if why != self.last_error[i]:
                    log.error("mqtt_bridge %s: in rule %s: %s", self.bridge.opts.name, rule.topic, why)
                self.last_error[i] = why
                await asyncio.sleep(RETRY_S)
        entry.done = True
        self._release()

    def _drop(self, i: int, why: str) -> None:
        self.dropped[i] += 1
        self.last_error[i] = why
        log.warning("mqtt_bridge %s: in rule %s: dropped: %s", self.bridge.opts.name, self.rules[i].topic, why)

    def _release(self) -> None:
        up = self.bridge.upstream
        while self.fifo and self.fifo[0].done:
            e = self.fifo.popleft()
            up.ack(e.gen, e.mid, e.qos)

    def status(self) -> list[dict[str, Any]]:
        return [{"topic": r.topic, "subject": r.subject, "stream": r.stream, "qos": r.qos,
                 "received": self.received[i], "delivered": self.delivered[i], "dropped": self.dropped[i],
                 "in_flight": sum(1 for e in self.fifo if e.rule == i), "last_error": self.last_error[i]}
                for i, r in enumerate(self.rules)]
