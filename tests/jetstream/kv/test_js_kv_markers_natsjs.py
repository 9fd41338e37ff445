"""nats.js v3's KV with limit markers (`markerTTL`), differential: the bucket nats.js creates, what its
watcher reports when a key ages out (a PURGE from the server's MaxAge marker) and what `get` then returns.
The peer is a node script over the real @nats-io packages (tests/support/natsjs, installed by `make test`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.servers import KINDS, ServerProcess

NATSJS = Path(__file__).resolve().parents[2] / "support" / "natsjs"


def _run_peer(url: str) -> dict[str, object]:
    node = shutil.which("node")
    assert node is not None, "node is needed for the nats.js tests (make test installs it)"
    assert (NATSJS / "node_modules" / "@nats-io" / "kv").is_dir(), "run `make test` (npm ci in tests/support/natsjs)"
    r = subprocess.run([node, str(NATSJS / "kv_markers.mjs"), url], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_natsjs_kv_watcher_sees_limit_marker() -> None:
    res = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-js", "-sd", tempfile.mkdtemp(prefix="natsjs-kv-")]) as p:
            res[kind] = _run_peer(p.url)
    assert res["edged"] == res["nats-server"]
    assert res["edged"] == {
        "status": {"ttl": 1000, "markerTTL": 2000},
        "updates": [{"key": "k", "op": "PUT", "rev": 1, "value": "v"},
                    {"key": "k", "op": "PURGE", "rev": 2, "value": ""}],
        "get": {"op": "PURGE", "rev": 2},
    }
