"""`edged run` imports only what its configuration uses: a server with no MQTT, WebSocket, leafnode, board
health or monitoring port does not load those modules, which would only lengthen its start-up (a client
suite restarts the server mid-test). Each case builds a server the way `edged run` does (options, checks,
`edged.app.build`) in a fresh interpreter and lists what got imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

OPTIONAL = ("bridges.mqtt.service", "bridges.websocket", "bridges.mqtt_bridge.service", "hw.health",
            "edged.leafnode.remote", "edged.leafnode.credsfile", "edged.monitor.httpserver",
            "edged.monitor.metrics")

_PROBE = """
import json, sys
from edged.cli import build_options, validate, _parser
from edged.app import build
ns = _parser("run").parse_args(sys.argv[1:])
opts = build_options(ns)
validate(opts)
build(opts)
print(json.dumps(sorted(sys.modules)))
"""


def _imported(tmp_path: Path, conf: str, *flags: str) -> set[str]:
    path = tmp_path / "edged.conf"
    path.write_text(conf)
    out = subprocess.run([sys.executable, "-c", _PROBE, "-c", str(path), *flags], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return set(json.loads(out))


def test_plain_jetstream_server_loads_no_optional_front_door(tmp_path: Path) -> None:
    mods = _imported(tmp_path, f'jetstream {{ store_dir: "{tmp_path}/js" }}\n')
    assert "edged.jetstream" in mods
    assert {m for m in OPTIONAL if m in mods} == set()


def test_configured_blocks_load_their_modules(tmp_path: Path) -> None:
    conf = (f'jetstream {{ store_dir: "{tmp_path}/js" }}\n'
            "mqtt { port: -1 }\nwebsocket { port: -1, no_tls: true }\n"
            "leafnodes { port: -1 }\n"
            'edged { hw { enabled: false }, creds { watch_interval: "5s" } }\n')
    mods = _imported(tmp_path, conf)
    for m in ("bridges.mqtt.service", "bridges.websocket", "edged.leafnode.remote", "hw.health",
              "edged.leafnode.credsfile"):
        assert m in mods, m
