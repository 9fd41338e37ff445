"""Where the tests and the benchmarks leave their directories: both made thousands straight under /tmp
(servers' workdirs, stores of tens of MB) and never removed them, until a disk filled up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.servers import ROOT, ServerProcess


def test_test_directories_go_under_pytests_base_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    base = tmp_path_factory.getbasetemp().resolve()
    made = Path(tempfile.mkdtemp(prefix="js-")).resolve()
    p = ServerProcess("edged")  # not started: where its workdir (log, config) goes is what counts
    assert base in made.parents
    assert base in Path(p.workdir).resolve().parents


def test_bench_removes_its_directories(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "out.json"
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "jsp", "--out", str(out)], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert any(row["name"] == "publish, 1000 in flight" for row in rows), rows  # it did run servers
    assert list(tmp.iterdir()) == []
