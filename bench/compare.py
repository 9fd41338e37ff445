"""`python -m bench.compare BEFORE.json AFTER.json`: two `make bench` results side by side.

For a change judged by "no row slower beyond noise": run `python -m bench --out before.json` on the old
commit (a `git worktree` of it with its own venv) and `--out after.json` on the new one, then compare.
Each row shows both edged figures, their change, and each run's ratio against the nats-server of the same
run (the ratio absorbs most of the machine's drift between the two runs).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.harness import fmt


def load(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    data = json.loads(path.read_text())
    return {(r["section"], r["name"]): r for r in data["rows"]}


def change(before: float, after: float, higher_is_better: bool) -> str:
    """+x % when `after` is better, -x % when worse."""
    if not before or not after:
        return "-"
    pct = (after / before - 1.0) * 100.0 if higher_is_better else (before / after - 1.0) * 100.0
    return f"{pct:+.1f}%"


def table(before: dict[tuple[str, str], dict[str, Any]], after: dict[tuple[str, str], dict[str, Any]]) -> str:
    head = (f"{'sect':5} {'measure':40} {'before':>11} {'after':>11} {'unit':8} {'change':>8} "
            f"{'ratio before':>12} {'ratio after':>11}")
    lines = [head, "-" * len(head)]
    for key in list(before) + [k for k in after if k not in before]:
        b, a = before.get(key), after.get(key)
        r = a or b
        assert r is not None
        hib = bool(r["higher_is_better"])
        bv = b["edged"] if b else 0.0
        av = a["edged"] if a else 0.0
        rb = f"{b['ratio']:.2f}" if b and b["nats"] else "-"
        ra = f"{a['ratio']:.2f}" if a and a["nats"] else "-"
        lines.append(f"{key[0]:5} {key[1]:40} {fmt(bv) if b else '-':>11} {fmt(av) if a else '-':>11} "
                     f"{r['unit']:8} {change(bv, av, hib):>8} {rb:>12} {ra:>11}")
    lines.append("change: + is better (higher throughput or lower time/CPU), - is worse")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    a = ap.parse_args(argv)
    print(table(load(a.before), load(a.after)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
