"""Board health (issue 21 §4) from a running edged subprocess whose hw root is a fake Pi tree: the sample
published on its subject and in its KV bucket (read with nats-py), the `edged_hw` block of /varz, the
/metrics families, the ACT LED following the leaf link, and the watchdog fed and disarmed on a clean stop.
Off a Pi (an empty root) every board fact is "not available" (null) and nothing fails."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats

from tests.support.aio import eventually, run
from tests.support.fakeboard import make_pi
from tests.support.servers import ServerProcess, free_port


def get(http: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{http}{path}", timeout=3) as r:
        return r.read()


def start(start_server: Callable[..., ServerProcess], tmp_path: Path, root: Path, hw: str = "",
          extra: str = "") -> tuple[ServerProcess, int]:
    http = free_port()
    conf = (f"server_name: pi-7\nhttp_port: {http}\njetstream {{ store_dir: {json.dumps(str(tmp_path / 'js'))}, domain: pi7 }}\n"
            f"edged {{ hw {{ interval: 300ms\n{hw} }} }}\n{extra}")
    srv = start_server("edged", [], config=conf, env={"EDGED_HW_ROOT": str(root)})
    return srv, http


def test_a_pi_sample_on_the_subject_the_kv_bucket_varz_and_metrics(
        start_server: Callable[..., ServerProcess], tmp_path: Path) -> None:
    root = make_pi(tmp_path / "root")
    srv, http = start(start_server, tmp_path, root)

    async def main() -> dict[str, Any]:
        nc = await nats.connect(srv.url)
        try:
            sub = await nc.subscribe("$EDGED.health.pi-7")
            msg = await sub.next_msg(timeout=5)
            doc = json.loads(msg.data)
            js = nc.jetstream()

            async def kv_entry() -> Any:
                kv = await js.key_value("edged_health")
                return await kv.get("pi-7")

            entry = await eventually(kv_entry, 10, "the sample in the KV bucket")
            assert json.loads(entry.value)["serial"] == "10000000abcdef01"
            return doc
        finally:
            await nc.close()

    doc = run(main())
    assert doc["model"] == "Raspberry Pi 4 Model B Rev 1.4"
    assert doc["serial"] == "10000000abcdef01"
    assert doc["cpu_temp_c"] == 48.312
    t = doc["throttled"]
    assert t["raw"] == "0x50005" and t["under_voltage"] and t["throttled"] and t["under_voltage_occurred"]
    assert t["throttled_occurred"] and not t["arm_freq_capped"] and not t["soft_temp_limit_occurred"]
    assert doc["disk"]["total_bytes"] > 0 and doc["disk"]["path"].startswith(str(tmp_path / "js"))
    v = json.loads(get(http, "/varz"))["edged_hw"]
    assert v["model"] == doc["model"] and v["kv_bucket"] == "edged_health" and v["published"] >= 1
    metrics = get(http, "/metrics").decode()
    assert "edged_hw_cpu_temperature_celsius 48.312" in metrics
    assert 'edged_hw_throttled{flag="under_voltage"} 1' in metrics
    assert 'edged_hw_throttled{flag="arm_freq_capped"} 0' in metrics
    assert "edged_hw_disk_free_bytes{" in metrics


def test_off_a_pi_every_fact_is_not_available(start_server: Callable[..., ServerProcess], tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    srv, http = start(start_server, tmp_path, empty, extra="")

    async def sample() -> Any:
        v = json.loads(get(http, "/varz"))["edged_hw"]
        return v if v.get("sampled") else None

    v = run(eventually(sample, 10, "a sample"))
    assert v["model"] is None and v["serial"] is None and v["cpu_temp_c"] is None and v["throttled"] is None
    assert v["disk"]["total_bytes"] > 0  # the store's disk is there on any machine
    metrics = get(http, "/metrics").decode()
    assert "edged_hw_cpu_temperature_celsius" not in metrics and "edged_hw_throttled" not in metrics
    assert srv.proc is not None and srv.proc.poll() is None


def test_led_shows_the_link_and_the_watchdog_is_fed_then_disarmed(
        start_server: Callable[..., ServerProcess], tmp_path: Path) -> None:
    root = make_pi(tmp_path / "root")
    dog = tmp_path / "watchdog"
    dog.write_bytes(b"")
    leaf_port = free_port()
    hub = start_server("nats-server", [], config=f"leafnodes {{ port: {leaf_port} }}\n")
    hw = f'led: ACT\nwatchdog: {json.dumps(str(dog))}\nwatchdog_interval: 100ms\n'
    srv, http = start(start_server, tmp_path, root, hw,
                      extra=f"leafnodes {{ reconnect: 200ms, remotes: [ {{ url: \"nats-leaf://127.0.0.1:{leaf_port}\" }} ] }}\n")
    led = root / "sys/class/leds/ACT"

    def led_is(text: str) -> Callable[[], Any]:
        async def check() -> bool:
            return (led / "brightness").read_text() == text
        return check

    run(eventually(led_is("1"), 10, "the LED on while the link is up"))
    hub.stop()
    run(eventually(led_is("0"), 10, "the LED off once the link is down"))

    async def fed() -> bool:
        return len(dog.read_bytes()) >= 3

    run(eventually(fed, 10, "the watchdog fed"))
    assert set(dog.read_bytes()) == {0}
    assert (led / "trigger").read_text() == "none"
    v = json.loads(get(http, "/varz"))["edged_hw"]
    assert v["watchdog"]["open"] and v["watchdog"]["feeds"] >= 3 and v["led"]["on"] is False
    assert srv.stop() == 0
    assert dog.read_bytes().endswith(b"V")  # the magic close: a clean stop does not reset the board
    assert (led / "trigger").read_text() == "mmc0"
