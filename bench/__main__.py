"""`python -m bench [--quick] [--only core,js,leaf,storage]`: every side-by-side benchmark, one table."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from bench.harness import Report

SECTIONS = {"core": "bench.core", "js": "bench.js_publish", "jsc": "bench.js_consume", "leaf": "bench.leaf"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench")
    ap.add_argument("--quick", action="store_true", help="small counts, one repetition: a smoke run")
    ap.add_argument("--only", default="", help="comma-separated sections: " + ",".join(SECTIONS))
    a = ap.parse_args(argv)
    wanted = [s for s in a.only.split(",") if s] or list(SECTIONS)
    report = Report(quick=a.quick)
    for name in wanted:
        modname = SECTIONS.get(name)
        if modname is None:
            print(f"unknown section {name!r}", file=sys.stderr)
            return 2
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            print(f"[{name}] {modname} is not there yet: skipped")
            continue
        print(f"[{name}]", flush=True)
        if hasattr(mod, "run_report"):
            mod.run_report(report)
        elif hasattr(mod, "run") and name != "leaf":
            mod.run(report)
        else:
            print(f"[{name}] {modname} has no run(report): skipped")
    print()
    print(report.table())
    out = Path(__file__).parent / "results" / "latest.json"
    report.save(out)
    print(f"\nresults written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
