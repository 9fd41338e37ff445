"""A real mosquitto broker (Debian's `mosquitto`) on a free port with a generated config, and a paho-mqtt
subscriber that records what the broker delivers, for the upstream bridge's tests."""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from tests.support.servers import free_port, wait_port


def mosquitto_path() -> str:
    for p in (shutil.which("mosquitto"), "/usr/sbin/mosquitto"):
        if p and os.path.exists(p):
            return p
    raise RuntimeError("mosquitto not found: apt-get install mosquitto (make .venv/.installed-test does)")


class Mosquitto:
    """`persistence`: the broker keeps sessions and queued messages in a file, saved on every change
    (autosave_on_changes, interval 1) and on a clean stop, so a subscriber's session survives a restart.
    `users`: name -> password (a mosquitto_passwd file; anonymous refused). `tls`: the pki dict of
    tests/support/identity/certs.py (a TLS listener with the test server cert)."""

    def __init__(self, persistence: bool = True, users: dict[str, str] | None = None,
                 tls: dict[str, str] | None = None, require_certificate: bool = False,
                 extra: list[str] | None = None) -> None:
        self.port = free_port()
        self.workdir = tempfile.mkdtemp(prefix="mosquitto-")
        self.log_path = os.path.join(self.workdir, "mosquitto.log")
        lines = [f"listener {self.port} 127.0.0.1", f"persistence {'true' if persistence else 'false'}",
                 f"persistence_location {self.workdir}/", "autosave_interval 1", "autosave_on_changes true",
                 "log_dest stderr", "log_type error", "log_type warning", "log_type notice",
                 "max_queued_messages 0", "max_inflight_messages 20", "set_tcp_nodelay true",
                 # run as root, mosquitto drops to user `mosquitto`, which cannot write the persistence file here
                 f"user {getpass.getuser()}"]
        if users:
            pw = os.path.join(self.workdir, "passwd")
            Path(pw).write_text("")
            for name, password in users.items():
                subprocess.run(["mosquitto_passwd", "-b", pw, name, password], check=True, capture_output=True)
            lines += ["allow_anonymous false", f"password_file {pw}"]
        else:
            lines += ["allow_anonymous true"]
        if tls:
            lines += [f"cafile {tls['ca']}", f"certfile {tls['server_cert']}", f"keyfile {tls['server_key']}",
                      f"require_certificate {'true' if require_certificate else 'false'}"]
        lines += extra or []  # e.g. a `connection` block: mosquitto's own bridge
        self.conf = os.path.join(self.workdir, "mosquitto.conf")
        Path(self.conf).write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen | None = None
        self._log: Any = None

        self.tls = bool(tls)

    @property
    def url(self) -> str:
        return f"{'mqtts' if self.tls else 'mqtt'}://127.0.0.1:{self.port}"

    def start(self) -> Mosquitto:
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([mosquitto_path(), "-c", self.conf], cwd=self.workdir, stdout=self._log,
                                     stderr=subprocess.STDOUT)
        try:
            wait_port(self.port, self.proc, 10)
        except Exception:
            self.stop()
            raise RuntimeError(f"mosquitto did not start: {self.log_tail()}") from None
        return self

    def stop(self) -> None:
        p = self.proc
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, n: int = 3000) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-n:]
        except OSError:
            return ""


class Subscriber:
    """A paho-mqtt subscriber with a persistent session (clean session off, QoS 1 or 2), reconnecting on its
    own, that keeps every (topic, payload, user properties) it gets, in order."""

    def __init__(self, port: int, topic: str, qos: int = 1, client_id: str = "", v5: bool = False,
                 username: str = "", password: str = "", tls: dict[str, str] | None = None) -> None:
        self.topic, self.qos = topic, qos
        self.got: list[tuple[str, bytes, dict[str, str]]] = []
        self.lock = threading.Lock()
        self.subscribed = threading.Event()
        cid = client_id or f"sub-{os.getpid()}-{time.monotonic_ns()}"
        if v5:
            self.c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=cid, protocol=mqtt.MQTTv5)
        else:
            self.c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=cid, clean_session=False)
        if username:
            self.c.username_pw_set(username, password)
        if tls:
            self.c.tls_set(ca_certs=tls["ca"], certfile=tls.get("client_cert"), keyfile=tls.get("client_key"))
        self.c.reconnect_delay_set(1, 1)
        self.c.on_connect = self._on_connect
        self.c.on_message = self._on_message
        self.c.on_subscribe = lambda *a: self.subscribed.set()
        if v5:
            from paho.mqtt.packettypes import PacketTypes
            from paho.mqtt.properties import Properties

            props = Properties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = 3600
            self.c.connect_async("127.0.0.1", port, 30, clean_start=False, properties=props)
        else:
            self.c.connect_async("127.0.0.1", port, 30)
        self.c.loop_start()

    def _on_connect(self, c: mqtt.Client, u: Any, flags: Any, rc: Any, props: Any) -> None:
        if not rc.is_failure:
            c.subscribe(self.topic, self.qos)

    def _on_message(self, c: mqtt.Client, u: Any, msg: mqtt.MQTTMessage) -> None:
        props = dict(getattr(msg.properties, "UserProperty", []) or []) if msg.properties else {}
        with self.lock:
            self.got.append((msg.topic, bytes(msg.payload), props))

    def messages(self) -> list[tuple[str, bytes, dict[str, str]]]:
        with self.lock:
            return list(self.got)

    def payloads(self) -> list[bytes]:
        return [p for _, p, _ in self.messages()]

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def publish(port: int, topic: str, payloads: list[bytes], qos: int = 1) -> None:
    """Publish and wait for each broker confirmation (a paho client of its own)."""
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"pub-{time.monotonic_ns()}")
    c.connect("127.0.0.1", port, 30)
    c.loop_start()
    try:
        for p in payloads:
            c.publish(topic, p, qos).wait_for_publish(10)
    finally:
        c.disconnect()
        c.loop_stop()
