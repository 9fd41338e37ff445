"""bench.compare: the before/after table of two bench result files."""

from __future__ import annotations

import json
from pathlib import Path

from bench.compare import change, load, table


def _row(section: str, name: str, edged: float, nats: float, hib: bool = True, unit: str = "msg/s") -> dict:
    return {"section": section, "name": name, "unit": unit, "edged": edged, "nats": nats,
            "higher_is_better": hib, "ratio": edged / nats if hib else nats / edged}


def test_change_sign_follows_better() -> None:
    assert change(100, 110, True) == "+10.0%"
    assert change(100, 90, True) == "-10.0%"
    assert change(10, 8, False) == "+25.0%"  # CPU µs/msg went down: better
    assert change(0, 5, True) == "-"


def test_table_pairs_rows_by_section_and_name(tmp_path: Path) -> None:
    b = tmp_path / "b.json"
    a = tmp_path / "a.json"
    b.write_text(json.dumps({"rows": [_row("core", "pub", 100, 100), _row("js", "cpu", 10, 5, False, "us/msg")]}))
    a.write_text(json.dumps({"rows": [_row("core", "pub", 90, 100), _row("leaf", "new", 5, 5)]}))
    out = table(load(b), load(a)).splitlines()
    pub = next(line for line in out if " pub " in line)
    assert "-10.0%" in pub and "1.00" in pub and "0.90" in pub
    assert any(" cpu " in line and line.split()[3] == "-" for line in out)  # gone after
    assert any(" new " in line for line in out)
