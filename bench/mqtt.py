"""Issue 20's MQTT table: edged's MQTT listener beside mosquitto, nats-server's MQTT listener and amqtt,
with the same clients in one run.

All four brokers run at once and every measurement rotates which goes first (harness.interleaved's
idea, for four), so load from other processes falls on all alike. Clients are processes of their own
(multiprocessing "spawn"):
- paho-mqtt (MQTT 3.1.1, its default in-flight window of 20): what a device library gets;
- a raw-socket client writing prebuilt packets made with edged's own codec (bridges/mqtt/codec.py),
  256 QoS 1 in flight, so the figure measures the broker, not the client.
Rows: QoS 0 and QoS 1 pub→sub (rate from the first publish to the last arrival) and publish-only
(until the broker has acknowledged the last message: a trailing QoS 1 publish for QoS 0), with each
broker's CPU µs per message read from /proc; idle RSS per connection with 1,000 MQTT connections.
The main table holds edged and nats-server; mosquitto and amqtt are in the JSON (`extra`) and in the
four-broker table this section prints, with the ratios edged/mosquitto and edged/nats-server.

Run: `python -m bench --only mqtt [--quick]` or `python -m bench.mqtt [--quick]`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import mqtt_codec
from bench.core import CTX, START_TIMEOUT, Procs
from bench.harness import ROOT, Report, cpu_seconds, rss_bytes
from bridges.mqtt.codec import MQTTDecoder, encode, encode_publish
from bridges.mqtt.packets import ConnAck, Connect, PubAck, Publish, SubAck, Subscribe, SubscriptionOptions
from tests.support.servers import ServerProcess, free_port, wait_port

BROKERS = ("edged", "mosquitto", "nats-server", "amqtt")
TOPIC = "bench/mqtt"
RAW_WINDOW = 256  # QoS 1 publishes in flight from the raw client
SIZE = 16

# ---------------------------------------------------------------- brokers


def mosquitto_path() -> str | None:
    return shutil.which("mosquitto") or next((p for p in ("/usr/sbin/mosquitto",) if os.path.exists(p)), None)


def amqtt_path() -> str | None:
    """amqtt from the venv `make bench` makes for it (it pins an older websockets than edged needs)."""
    for p in (ROOT / ".venv-amqtt" / "bin" / "amqtt", Path(sys.executable).parent / "amqtt"):
        if p.exists():
            return str(p)
    return shutil.which("amqtt")


def ensure_mosquitto() -> str | None:
    """Debian's mosquitto, installed with apt when missing (as `make test` does); None if that fails."""
    found = mosquitto_path()
    if found:
        return found
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        subprocess.run([*sudo, "apt-get", "update", "-q"], check=True, env=env, capture_output=True, timeout=600)
        subprocess.run([*sudo, "apt-get", "install", "-y", "-q", "mosquitto"], check=True, env=env,
                       capture_output=True, timeout=600)
    except (OSError, subprocess.SubprocessError):
        return None
    return mosquitto_path()


def _nats_mqtt_config(port: int, store: str) -> str:
    # nats-server's MQTT needs JetStream and a server name; edged reads the same block
    return f"server_name: bench_{port}\njetstream {{ store_dir: '{store}' }}\nmqtt {{ port: {port} }}\n"


class Broker:
    """One running broker: its MQTT port, pid, CPU seconds and RSS from /proc."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.port = free_port()
        self.workdir = tempfile.mkdtemp(prefix=f"mqtt-{kind}-")
        self.server: ServerProcess | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    def start(self) -> Broker:
        if self.kind in ("edged", "nats-server"):
            self.server = ServerProcess(self.kind, config=_nats_mqtt_config(self.port, os.path.join(self.workdir, "js")))
            self.server.start()
        else:
            self._log = open(os.path.join(self.workdir, "broker.log"), "ab")
            if self.kind == "mosquitto":
                conf = os.path.join(self.workdir, "mosquitto.conf")
                Path(conf).write_text(
                    f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
                    # no cap on a subscriber's queue: the default 1000 drops QoS 1 messages under load
                    "max_queued_messages 0\nlog_dest stderr\nlog_type error\n"
                )
                path = mosquitto_path()
                assert path is not None
                cmd = [path, "-c", conf]
            else:
                conf = os.path.join(self.workdir, "amqtt.yaml")
                Path(conf).write_text(
                    f"listeners:\n  default:\n    type: tcp\n    bind: 127.0.0.1:{self.port}\n"
                    "plugins:\n  amqtt.plugins.authentication.AnonymousAuthPlugin:\n    allow_anonymous: true\n"
                )
                path = amqtt_path()
                assert path is not None
                cmd = [path, "-c", conf]
            self.proc = subprocess.Popen(cmd, cwd=self.workdir, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            wait_port(self.port, self.proc or (self.server.proc if self.server else None), timeout=20)
        except Exception:
            self.stop()
            raise
        return self

    @property
    def pid(self) -> int:
        p = self.proc if self.proc is not None else (self.server.proc if self.server else None)
        assert p is not None
        return p.pid

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._log is not None:
            self._log.close()
            self._log = None
        shutil.rmtree(self.workdir, ignore_errors=True)


def edged_has_mqtt() -> str:
    """'' when edged serves MQTT, else why not (this branch's edged ignores the mqtt block)."""
    b = Broker("edged")
    try:
        b.start()
    except Exception as e:
        return f"edged did not open its MQTT port ({type(e).__name__}): no MQTT listener in this edged"
    finally:
        b.stop()
    return ""


# ---------------------------------------------------------------- client processes


def _wait(ev: Any) -> bool:
    return bool(ev.wait(START_TIMEOUT))


def _paho(port: int, client_id: str) -> Any:
    import paho.mqtt.client as paho
    from paho.mqtt.enums import CallbackAPIVersion

    c = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv311, clean_session=True)
    c.connect("127.0.0.1", port, keepalive=600)
    c.loop_start()
    return c


def _paho_pub(port: int, n: int, size: int, qos: int, go: Any, out: Any, ready: Any) -> None:
    """Publish n messages as fast as paho goes; done when the broker has acknowledged the last one."""
    c = _paho(port, f"bench-pub-{os.getpid()}")
    payload = b"x" * size
    deadline = time.monotonic() + 30
    while not c.is_connected() and time.monotonic() < deadline:
        time.sleep(0.01)
    ready.set()
    if not _wait(go):
        out.put(("pub", 0.0, 0.0))
        return
    t0, cpu0 = time.monotonic(), time.process_time()
    info = None
    for _ in range(n):
        info = c.publish(TOPIC, payload, qos)
    if qos == 0:  # the broker handles a connection's packets in order: its PUBACK follows all of them
        info = c.publish(TOPIC + "/end", b"", 1)
    assert info is not None
    info.wait_for_publish(600)
    out.put(("pub", t0, time.monotonic(), time.process_time() - cpu0))
    c.disconnect()
    c.loop_stop()


def _paho_sub(port: int, expect: int, qos: int, out: Any, ready: Any) -> None:
    """Count messages until `expect` arrived (or none for 5 s after the first: lost messages)."""
    import threading

    got = 0
    last = 0.0
    done = threading.Event()
    subscribed = threading.Event()

    def on_message(_c: Any, _u: Any, msg: Any) -> None:
        nonlocal got, last
        if msg.topic != TOPIC:
            return
        got += 1
        if got >= expect:
            last = time.monotonic()
            done.set()

    c = _paho(port, f"bench-sub-{os.getpid()}")
    c.on_message = on_message
    c.on_subscribe = lambda *a: subscribed.set()
    deadline = time.monotonic() + 30
    while not c.is_connected() and time.monotonic() < deadline:
        time.sleep(0.01)
    c.subscribe(TOPIC, qos)
    subscribed.wait(30)
    ready.set()
    cpu0 = time.process_time()
    _wait_count(lambda: got, done)
    if not done.is_set():
        last = time.monotonic()
    out.put(("sub", got, last, time.process_time() - cpu0))
    c.disconnect()
    c.loop_stop()


def _wait_count(count: Any, done: Any) -> None:
    """Until done, or nothing new for 5 s after something arrived; at most 600 s."""
    deadline = time.monotonic() + 600
    seen = -1
    while not done.is_set() and time.monotonic() < deadline:
        if done.wait(5):
            return
        now = count()
        if now and now == seen:
            return
        seen = now


def _raw_connect(port: int, client_id: str) -> tuple[socket.socket, MQTTDecoder]:
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(encode(Connect(4, client_id, True, 600), 4))
    d = MQTTDecoder(protocol_level=4, server=False)
    _raw_until(s, d, ConnAck)
    return s, d


def _raw_until(s: socket.socket, d: MQTTDecoder, kind: type) -> Any:
    for _ in range(10_000):
        data = s.recv(65536)
        if not data:
            raise RuntimeError("broker closed the connection")
        for p in d.feed(data):
            if isinstance(p, kind):
                return p
    raise RuntimeError(f"no {kind.__name__}")


def _raw_pub(port: int, n: int, size: int, qos: int, go: Any, out: Any, ready: Any) -> None:
    """Prebuilt PUBLISH packets from a bare socket; QoS 1 keeps RAW_WINDOW in flight."""
    s, _ = _raw_connect(port, f"bench-rawpub-{os.getpid()}")
    s.settimeout(600)  # a slow broker (amqtt) takes minutes to acknowledge a long run
    topic = TOPIC.encode()
    payload = b"x" * size
    if qos == 0:
        one = encode_publish(topic, payload)
        batch = one * 2000
        chunks = [batch] * (n // 2000) + ([one * (n % 2000)] if n % 2000 else [])
        marker = encode_publish(topic + b"/end", b"", 1, 1)
    else:
        packets = [encode_publish(topic, payload, 1, i % 65535 + 1) for i in range(n)]
    ready.set()
    if not _wait(go):
        out.put(("pub", 0.0, 0.0))
        return
    t0 = time.monotonic()
    if qos == 0:
        for c in chunks:
            s.sendall(c)
        s.sendall(marker)
        buf = b""
        while b"\x40\x02\x00\x01" not in buf:
            data = s.recv(65536)
            if not data:
                raise RuntimeError("broker closed the connection")
            buf = buf[-3:] + data
    else:
        sent = acked = 0
        pending = b""
        while acked < n:
            room = min(RAW_WINDOW - (sent - acked), n - sent)
            if room > 0:
                s.sendall(b"".join(packets[sent : sent + room]))
                sent += room
            data = s.recv(65536)
            if not data:
                raise RuntimeError("broker closed the connection")
            pending += data
            k = len(pending) // 4  # every packet a publisher gets back is a 4-byte PUBACK
            acked += k
            pending = pending[k * 4 :]
    out.put(("pub", t0, time.monotonic()))
    s.close()


def _raw_sub(port: int, expect: int, qos: int, out: Any, ready: Any) -> None:
    """Decode deliveries with the codec; QoS 1 deliveries are acknowledged per read."""
    s, d = _raw_connect(port, f"bench-rawsub-{os.getpid()}")
    s.sendall(encode(Subscribe(1, [(TOPIC, SubscriptionOptions(qos))]), 4))
    _raw_until(s, d, SubAck)
    s.settimeout(5)
    ready.set()
    cpu0 = time.process_time()
    got = 0
    last = 0.0
    started = False
    deadline = time.monotonic() + 600
    while got < expect and time.monotonic() < deadline:
        try:
            data = s.recv(262144)
        except TimeoutError:
            if started:
                break  # nothing for 5 s after the first: lost messages
            continue
        if not data:
            break
        started = True
        acks = []
        for p in d.feed(data):
            if isinstance(p, Publish):
                got += 1
                if p.qos:
                    acks.append(encode(PubAck(p.packet_id), 4))
        if acks:
            s.sendall(b"".join(acks))
    last = time.monotonic()
    out.put(("sub", got, last, time.process_time() - cpu0))
    s.close()


def _get(out: Any) -> tuple[Any, ...]:
    item = out.get(timeout=900)
    if item[0] == "error":
        raise RuntimeError(item[1])
    return item


# ---------------------------------------------------------------- measurements


@dataclass
class Run:
    rate: float  # msg/s
    cpu_us: float  # broker CPU µs per message
    info: dict[str, Any] = field(default_factory=dict)


def publish_only(b: Broker, client: str, n: int, qos: int) -> Run:
    out, go = CTX.Queue(), CTX.Event()
    with Procs() as ps:
        ps.start(_paho_pub if client == "paho" else _raw_pub, b.port, n, SIZE, qos, go, out, out=out)
        c0 = b.cpu()
        go.set()
        item = _get(out)
        cpu = b.cpu() - c0
    t0, t1 = item[1], item[2]
    return Run(n / (t1 - t0), cpu / n * 1e6)


def pub_sub(b: Broker, client: str, n: int, qos: int) -> Run:
    out, go = CTX.Queue(), CTX.Event()
    with Procs() as ps:
        ps.start(_paho_sub if client == "paho" else _raw_sub, b.port, n, qos, out, out=out)
        ps.start(_paho_pub if client == "paho" else _raw_pub, b.port, n, SIZE, qos, go, out, out=out)
        c0 = b.cpu()
        go.set()
        res = {item[0]: item for item in (_get(out), _get(out))}
        cpu = b.cpu() - c0
    t0 = res["pub"][1]
    _, got, last, sub_cpu = res["sub"]
    info = {"lost": n - got, "sub_cpu_us": sub_cpu / max(got, 1) * 1e6}
    if len(res["pub"]) > 3:  # paho's publisher measures its own CPU too
        info["clients_cpu_us"] = (res["pub"][3] + sub_cpu) / max(got, 1) * 1e6
    return Run(got / (last - t0), cpu / max(got, 1) * 1e6, info)


def idle_conn_rss(b: Broker, n: int) -> tuple[float, float, float]:
    """n raw MQTT connections (CONNECT, CONNACK); (marginal KB, average KB, total MB): marginal is the RSS
    slope per connection over the second half, leaving out heap room the first ones fill; average is
    (RSS(n) - RSS(0)) / n; total is the broker's RSS with the n connections up."""
    socks: list[socket.socket] = []

    def open_more(k: int) -> None:
        batch = []
        for i in range(k):
            s = socket.create_connection(("127.0.0.1", b.port), timeout=60)
            s.sendall(encode(Connect(4, f"idle-{len(socks) + i}", True, 0), 4))
            batch.append(s)
        for s in batch:
            d = MQTTDecoder(protocol_level=4, server=False)
            ack = _raw_until(s, d, ConnAck)
            if ack.reason_code:
                raise RuntimeError(f"{b.kind} refused an idle connection: {ack.reason_code:#x}")
        socks.extend(batch)

    try:
        time.sleep(0.3)
        base = b.rss()
        first = n // 2
        open_more(first)
        time.sleep(0.5)
        mid = b.rss()
        open_more(n - first)
        time.sleep(0.5)
        after = b.rss()
    finally:
        for s in socks:
            s.close()
    time.sleep(0.5)
    return (after - mid) / (n - first) / 1024, (after - base) / n / 1024, after / 1e6


def scaled(kind: str, n: int) -> int:
    """amqtt runs at a few thousand messages/s: a tenth of the count keeps its runs near everyone else's length."""
    return max(500, n // 10) if kind == "amqtt" else n


def rotated(brokers: dict[str, Broker], reps: int, fn: Any) -> dict[str, list[Any]]:
    """`fn(broker)` `reps` times per broker, rotating which goes first."""
    out: dict[str, list[Any]] = {k: [] for k in brokers}
    kinds = list(brokers)
    for i in range(reps):
        for k in kinds[i % len(kinds) :] + kinds[: i % len(kinds)]:
            out[k].append(fn(brokers[k]))
    return out


# ---------------------------------------------------------------- the table


def _ratio(a: float, b: float) -> float:
    return a / b if a and b else 0.0


def _client_ceiling(report: Report, clients: dict[str, float], rate: dict[str, float]) -> None:
    """What the machine's cores allow the paho QoS 1 pub->sub row at all: the two paho processes need
    their own CPU per message whatever the broker, so no broker can pass cores / that CPU."""
    least = min((v for v in clients.values() if v > 0), default=0.0)
    if not least:
        return
    cores = os.cpu_count() or 1
    ceiling = cores / least * 1e6
    nats = rate.get("nats-server", 0.0)
    report.note(f"mqtt: paho QoS 1 pub→sub: the two paho clients take at least {least:.0f} µs of CPU per message "
                f"(whatever the broker), so on {cores} cores no broker can pass {ceiling:,.0f} msg/s "
                f"even at zero broker CPU; 1.5× nats-server is {1.5 * nats:,.0f} msg/s")


def run(report: Report) -> None:
    q = report.quick
    counts = {
        ("paho", 0): 5_000 if q else 50_000,
        ("paho", 1): 2_000 if q else 20_000,
        ("raw", 0): 20_000 if q else 200_000,
        ("raw", 1): 5_000 if q else 50_000,
    }
    n_idle = 200 if q else 1000
    reps = 1 if q else 3
    mqtt_codec.run(report)  # the codec's own ns per PUBLISH, before any broker runs
    kinds = []
    why = edged_has_mqtt()
    if why:
        report.note(f"mqtt: {why}; edged skipped (merge branch mqttserver for its MQTT listener)")
    else:
        kinds.append("edged")
    if ensure_mosquitto():
        kinds.append("mosquitto")
    else:
        report.note("mqtt: mosquitto not installed and apt-get could not install it: skipped")
    kinds.append("nats-server")
    if amqtt_path():
        kinds.append("amqtt")
        report.note("mqtt: amqtt runs a tenth of each count (at least 500): it moves a few thousand messages/s")
    else:
        report.note("mqtt: amqtt not installed (make bench puts it in .venv-amqtt): skipped")

    brokers: dict[str, Broker] = {}
    results: dict[str, dict[str, Any]] = {}
    try:
        for k in kinds:
            brokers[k] = Broker(k).start()
        time.sleep(1.0)
        for client in ("paho", "raw"):
            for qos in (0, 1):
                n = counts[(client, qos)]
                for what, fn in (("pub→sub", pub_sub), ("publish only", publish_only)):
                    name = f"{client} QoS {qos} {what}"
                    print(f"  {name} ...", flush=True)
                    runs = rotated(brokers, reps, lambda b, fn=fn, client=client, n=n, qos=qos:
                                   fn(b, client, scaled(b.kind, n), qos))
                    results[name] = {k: max(v, key=lambda r: r.rate) for k, v in runs.items()}
                    for k, v in runs.items():
                        lost = [r.info["lost"] for r in v if r.info.get("lost")]
                        if lost:
                            report.note(f"mqtt {name}: {k} lost messages in {len(lost)} run(s): {lost}")
        results["idle"] = {k: idle_conn_rss(b, n_idle) for k, b in brokers.items()}
    finally:
        for b in brokers.values():
            b.stop()

    def fig(name: str, k: str, attr: str) -> float:
        r = results[name].get(k)
        return 0.0 if r is None else float(getattr(r, attr))

    lines = [f"{'MQTT (16 B payloads)':34} {'edged':>10} {'mosquitto':>10} {'nats-server':>11} {'amqtt':>10} "
             f"{'e/mosq':>7} {'e/nats':>7}"]

    def add(name: str, unit: str, vals: dict[str, float], higher: bool = True, **kw: Any) -> None:
        e, m, n, a = (vals.get(k, 0.0) for k in BROKERS)
        report.add("mqtt", name, unit, e, n, higher_is_better=higher, mosquitto=m, amqtt=a,
                   ratio_mosquitto=_ratio(e, m), **kw)
        lines.append(f"{name + ' (' + unit + ')':34} {e:>10.5g} {m:>10.5g} {n:>11.5g} {a:>10.5g} "
                     f"{_ratio(e, m):>7.2f} {_ratio(e, n):>7.2f}")

    for client in ("paho", "raw"):
        for qos in (0, 1):
            for what in ("pub→sub", "publish only"):
                name = f"{client} QoS {qos} {what}"
                rate = {k: fig(name, k, "rate") for k in kinds}
                kw: dict[str, Any] = {}
                if name == "paho QoS 1 pub→sub" and "edged" in kinds:
                    mosq = rate.get("mosquitto", 0.0)
                    kw = {"target": "≥0.9× mosq, ≥1.5× nats",
                          "check": lambda r, m=mosq: r.ratio >= 1.5 and _ratio(r.edged, m) >= 0.9}
                add(name, "msg/s", rate, **kw)
                add(f"{name}, CPU", "µs/msg", {k: fig(name, k, "cpu_us") for k in kinds}, higher=False)
                if name == "paho QoS 1 pub→sub":
                    clients = {k: float(r.info.get("clients_cpu_us", 0.0)) for k, r in results[name].items()}
                    add(f"{name}, paho clients' CPU", "µs/msg", clients, higher=False)
                    _client_ceiling(report, clients, rate)
    idle = results["idle"]
    kw = {}
    if "edged" in kinds:
        kw = {"target": "≤ nats-server", "check": lambda r: r.edged <= r.nats}
    add(f"RSS per idle connection ({n_idle})", "KB", {k: v[0] for k, v in idle.items()}, higher=False,  # type: ignore[index]
        average_kb={k: round(v[1], 2) for k, v in idle.items()}, **kw)  # type: ignore[index]
    add(f"RSS with {n_idle} idle connections", "MB", {k: v[2] for k, v in idle.items()}, higher=False)  # type: ignore[index]
    print("\n" + "\n".join(lines) + "\n", flush=True)
    report.note("mqtt: four brokers side by side:\n" + "\n".join(lines))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    r = Report(quick="--quick" in sys.argv)
    run(r)
    print(r.table())
