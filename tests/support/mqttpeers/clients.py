"""MQTT test clients: paho-mqtt (threaded network loop) with what a test waits for collected in queues,
and the server config with an `mqtt {}` block. Every wait is bounded."""

from __future__ import annotations

import queue
import socket
import time
import uuid
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.support.servers import wait_port

WAIT = 10.0


def mqtt_config(port: int, store_dir: str, extra: str = "", mqtt_extra: str = "", js_extra: str = "") -> str:
    return (f"server_name: mqtt_{port}\njetstream {{ store_dir: '{store_dir}'\n{js_extra}\n}}\n"
            f"mqtt {{ port: {port}\n{mqtt_extra}\n}}\n{extra}\n")


class Client:
    """A paho client on 127.0.0.1:`port`; messages and acks land in queues."""

    def __init__(self, port: int, client_id: str | None = None, v5: bool = False, clean: bool = True,
                 username: str | None = None, password: str | None = None, keepalive: int = 60,
                 will: tuple[str, bytes, int, bool] | None = None, will_props: Properties | None = None,
                 connect_props: Properties | None = None, tls: dict[str, Any] | None = None,
                 connect: bool = True, protocol: int | None = None, websocket: bool = False) -> None:
        self.port = port
        self.v5 = v5
        self.client_id = client_id or f"t-{uuid.uuid4().hex[:10]}"
        proto = protocol or (paho.MQTTv5 if v5 else paho.MQTTv311)
        kw: dict[str, Any] = {"client_id": self.client_id, "protocol": proto}
        if not v5:
            kw["clean_session"] = clean
        self.clean = clean
        if websocket:  # MQTT over WebSocket: `port` is the websocket {} port, path /mqtt
            kw["transport"] = "websockets"
        self.c = paho.Client(CallbackAPIVersion.VERSION2, **kw)
        if websocket:
            self.c.ws_set_options(path="/mqtt")
        self.c.enable_logger()
        self.msgs: queue.Queue[paho.MQTTMessage] = queue.Queue()
        self.connacks: queue.Queue[tuple[Any, Any, Any]] = queue.Queue()
        self.subacks: queue.Queue[list[Any]] = queue.Queue()
        self.disconnects: queue.Queue[Any] = queue.Queue()
        self.c.on_message = lambda c, u, m: self.msgs.put(m)
        self.c.on_connect = lambda c, u, flags, rc, props: self.connacks.put((flags, rc, props))
        self.c.on_subscribe = lambda c, u, mid, rcs, props: self.subacks.put(rcs)
        self.c.on_disconnect = lambda c, u, flags, rc, props: self.disconnects.put(rc)
        if username is not None:
            self.c.username_pw_set(username, password)
        if will is not None:
            self.c.will_set(will[0], will[1], will[2], will[3], properties=will_props)
        if tls is not None:
            self.c.tls_set(**tls)
        self.keepalive = keepalive
        self.connect_props = connect_props
        if connect:
            self.connect()

    def connect(self, expect_ok: bool = True) -> Any:
        kw: dict[str, Any] = {}
        if self.v5:
            kw["clean_start"] = self.clean
            kw["properties"] = self.connect_props
        self.c.connect("127.0.0.1", self.port, self.keepalive, **kw)
        self.c.loop_start()
        flags, rc, props = self.connacks.get(timeout=WAIT)
        if expect_ok:
            assert not rc.is_failure, f"CONNACK {rc}"
        self.session_present = bool(flags.session_present)
        self.connack_props = props
        return rc

    def subscribe(self, topic: str | list[tuple[str, Any]], qos: int = 0, props: Properties | None = None) -> list[Any]:
        if isinstance(topic, str):
            if self.v5:
                self.c.subscribe(topic, options=paho.SubscribeOptions(qos=qos), properties=props)
            else:
                self.c.subscribe(topic, qos)
        else:
            self.c.subscribe(topic, properties=props) if self.v5 else self.c.subscribe(topic)
        return [getattr(r, "value", r) for r in self.subacks.get(timeout=WAIT)]

    def publish(self, topic: str, payload: bytes | str, qos: int = 0, retain: bool = False,
                props: Properties | None = None) -> None:
        info = self.c.publish(topic, payload, qos, retain, properties=props)
        info.wait_for_publish(WAIT)
        assert info.is_published()

    def get(self, timeout: float = WAIT) -> paho.MQTTMessage:
        return self.msgs.get(timeout=timeout)

    def get_n(self, n: int, timeout: float = WAIT) -> list[paho.MQTTMessage]:
        return [self.get(timeout) for _ in range(n)]

    def none(self, wait: float = 0.5) -> bool:
        """True if nothing arrives within `wait` (for 'must not get' checks: a bound, not a timing claim)."""
        try:
            m = self.msgs.get(timeout=wait)
        except queue.Empty:
            return True
        raise AssertionError(f"unexpected message {m.topic} {m.payload!r}")

    def disconnect(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()

    def drop(self) -> None:
        """Go away without DISCONNECT (the will is sent)."""
        sock = self.c.socket()
        self.c.loop_stop()
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def props(kind: int, **kw: Any) -> Properties:
    p = Properties(kind)
    for k, v in kw.items():
        setattr(p, k, v)
    return p


def publish_props(**kw: Any) -> Properties:
    return props(PacketTypes.PUBLISH, **kw)


def wait_mqtt(port: int, timeout: float = 10.0) -> None:
    wait_port(port, None, timeout)


def until(pred: Any, timeout: float = WAIT, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(interval)


class Mosquitto:
    """A mosquitto broker on a free loopback port: the MQTT 5 reference where nats-server has no MQTT 5."""

    def __init__(self, workdir: str) -> None:
        import os
        import shutil
        import subprocess

        from tests.support.servers import free_port

        exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        if not os.path.exists(exe):
            raise FileNotFoundError("mosquitto not installed (apt-get install mosquitto)")
        self.mqtt_port = free_port()
        conf = os.path.join(workdir, "mosquitto.conf")
        with open(conf, "w") as f:
            f.write(f"listener {self.mqtt_port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
        self.log = open(os.path.join(workdir, "mosquitto.log"), "wb")
        self.proc = subprocess.Popen([exe, "-c", conf], stdout=self.log, stderr=subprocess.STDOUT)
        wait_port(self.mqtt_port, self.proc)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except Exception:
            self.proc.kill()
        self.log.close()
