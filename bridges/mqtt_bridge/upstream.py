"""The connection to the upstream broker: one paho-mqtt client on its own network thread.

Why a thread: paho-mqtt is a well-kept, complete MQTT 3.1.1/5 client (QoS 1/2 state, resends on
reconnect, TLS, backoff), but its I/O is blocking-socket based. Its asyncio socket callbacks
(`on_socket_open`/`register_write`) would put its reads on edged's loop too, and with them paho's own
processing of every packet (and its locks) on the one thread that routes every message of the daemon.
`loop_start()` keeps all of paho on a thread of its own; the only crossing is one
`loop.call_soon_threadsafe` per event (connected, disconnected, PUBACK/PUBCOMP, incoming message), so
everything the bridge decides (ordering, acks to JetStream, the router) happens on edged's event loop
and needs no lock. The other direction (publish, subscribe, a manual PUBACK) is paho's thread-safe API,
which only queues a packet and wakes its thread.

Reconnecting is paho's: forever, with a doubling delay from 1 s up to `reconnect_max`, rotating through
the configured URLs after each failed or lost connection.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from bridges.mqtt_bridge.config import parse_url
from edged.settings.options import MQTTBridgeOpts

SESSION_FOREVER = 0xFFFFFFFF  # MQTT 5 session expiry interval: never


class UpstreamEvents:
    """What the bridge hears from the broker, always on the event loop."""

    def on_connected(self, session_present: bool) -> None: ...

    def on_disconnected(self, reason: str) -> None: ...

    def on_published(self, mid: int, refused: str) -> None:
        """The broker's PUBACK (QoS 1) / PUBCOMP (QoS 2) for `mid`, or a QoS 0 publish written.
        `refused`: an MQTT 5 reason code >= 0x80, as text; "" when accepted."""

    def on_message(self, gen: int, mid: int, topic: str, payload: bytes, qos: int,
                   props: list[tuple[str, str]]) -> None:
        """An incoming PUBLISH; `props`: its MQTT 5 user properties."""


def tls_context(opts: MQTTBridgeOpts) -> ssl.SSLContext:
    t = opts.tls
    ctx = ssl.create_default_context(cafile=t.ca_file or None if t else None)
    if t is not None:
        if t.cert_file:
            ctx.load_cert_chain(t.cert_file, t.key_file)
        if t.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
    return ctx


class Upstream:
    """A paho client for one bridge. `subscriptions` are (re)made on every connect, from paho's thread."""

    def __init__(self, opts: MQTTBridgeOpts, client_id: str, loop: asyncio.AbstractEventLoop,
                 events: UpstreamEvents, subscriptions: list[tuple[str, int]]) -> None:
        self.opts = opts
        self.loop = loop
        self.events = events
        self.subscriptions = subscriptions
        self.targets = [parse_url(u) for u in opts.urls]
        self._next = 0
        self.v5 = opts.protocol == 5
        # bumped on every connect: an incoming message's PUBACK belongs to the connection that brought it
        self.gen = 0
        self.url = ""
        self.stopping = False
        self._refused = ""  # the broker's CONNACK refusal, reported with the disconnection that follows
        c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id,
                        clean_session=None if self.v5 else opts.clean_session,
                        protocol=mqtt.MQTTv5 if self.v5 else mqtt.MQTTv311, manual_ack=True)
        c.max_inflight_messages_set(max(20, opts.max_inflight * max(1, len(opts.out))))
        c.reconnect_delay_set(1, max(1, int(opts.reconnect_max)))
        if opts.username:
            c.username_pw_set(opts.username, opts.password or None)
        if any(tls for _, _, tls in self.targets) or opts.tls is not None:
            c.tls_set_context(tls_context(opts))
        c.on_connect = self._on_connect
        c.on_connect_fail = self._on_connect_fail
        c.on_disconnect = self._on_disconnect
        c.on_publish = self._on_publish
        c.on_message = self._on_message
        self.client = c

    # ------------------------------------------------------------------ the event loop's side

    def start(self) -> None:
        self._aim()
        self.client.loop_start()

    async def stop(self) -> None:
        self.stopping = True
        self.client.disconnect()
        await asyncio.to_thread(self.client.loop_stop)

    def publish(self, topic: str, payload: bytes, qos: int, retain: bool,
                user_props: list[tuple[str, str]] | None = None) -> tuple[MQTTErrorCode, int]:
        """Queue a PUBLISH. With QoS 1/2 paho keeps it until the broker acknowledges it, across
        reconnects; with QoS 0 and no connection it is gone (MQTT_ERR_NO_CONN)."""
        props = None
        if self.v5 and user_props:
            props = Properties(PacketTypes.PUBLISH)
            props.UserProperty = user_props
        info = self.client.publish(topic, payload, qos, retain, props)
        return info.rc, info.mid

    def ack(self, gen: int, mid: int, qos: int) -> None:
        """Release the PUBACK/PUBCOMP of an incoming message, if its connection is still the current one
        (otherwise the broker sends the message again on the new connection)."""
        if qos and gen == self.gen:
            self.client.ack(mid, qos)

    # ------------------------------------------------------------------ paho's thread

    def _aim(self) -> None:
        """Point the next (re)connect at the next URL."""
        host, port, _ = self.targets[self._next % len(self.targets)]
        self._next += 1
        self.url = f"{host}:{port}"
        props = None
        if self.v5:
            props = Properties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = 0 if self.opts.clean_session else SESSION_FOREVER
        self.client.connect_async(host, port, int(self.opts.keepalive),
                                  clean_start=self.opts.clean_session if self.v5 else mqtt.MQTT_CLEAN_START_FIRST_ONLY,
                                  properties=props)

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # the loop is closed: edged is exiting

    def _on_connect(self, client: mqtt.Client, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        if rc.is_failure:  # paho closes the connection next: on_disconnect says why
            self._refused = f"connect refused by {self.url}: {rc}"
            return
        self.gen += 1
        if self.subscriptions:
            if self.v5:
                client.subscribe([(t, SubscribeOptions(qos=q, noLocal=True)) for t, q in self.subscriptions])
            else:
                client.subscribe(self.subscriptions)
        self._post(self.events.on_connected, bool(flags.session_present))

    def _on_connect_fail(self, client: mqtt.Client, userdata: Any) -> None:
        self._post(self.events.on_disconnected, f"cannot connect to {self.url}")
        if len(self.targets) > 1 and not self.stopping:
            self._aim()

    def _on_disconnect(self, client: mqtt.Client, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        why, self._refused = self._refused or f"disconnected from {self.url}: {rc}", ""
        self._post(self.events.on_disconnected, why)
        if len(self.targets) > 1 and not self.stopping:
            self._aim()

    def _on_publish(self, client: mqtt.Client, userdata: Any, mid: int, rc: Any, props: Any) -> None:
        refused = str(rc) if rc is not None and getattr(rc, "is_failure", False) else ""
        self._post(self.events.on_published, mid, refused)

    def _on_message(self, client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        props = list(getattr(msg.properties, "UserProperty", None) or []) if msg.properties is not None else []
        self._post(self.events.on_message, self.gen, msg.mid, msg.topic, bytes(msg.payload), msg.qos, props)
