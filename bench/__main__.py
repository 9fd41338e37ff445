"""`python -m bench [--quick] [--only core,js,leaf,offline,storage,pipe,mqtt]`: every side-by-side benchmark, one table.

A section module takes part by exposing `run_report(report)` or `run(report)`; one that is missing,
or has neither, is skipped with a line saying so. A section that fails is reported and the rest still
run (exit status 1).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.harness import RESULTS, Report

SECTIONS: dict[str, tuple[str, ...]] = {
    "core": ("bench.core",),
    "js": ("bench.jetstream.js_publish", "bench.jetstream.js_consume", "bench.jetstream.js_fast_batch"),
    "jsfb": ("bench.jetstream.js_fast_batch",),
    "jsp": ("bench.jetstream.js_publish",),
    "jsc": ("bench.jetstream.js_consume",),
    "jsl2": ("bench.jetstream.js_level2",),
    "leaf": ("bench.leaf",),
    "storage": ("bench.bench_storage",),
    "pipe": ("bench.pipeline_read",),
    "offline": ("bench.offline",),
    "mqtt": ("bench.mqtt",),
}
DEFAULT = ("core", "js", "jsl2", "leaf", "offline", "storage", "pipe", "mqtt")


def entry(mod: ModuleType) -> Callable[[Report], Any] | None:
    """The module's `run_report(report)`, or its `run` if that takes the report as its one argument."""
    fn = getattr(mod, "run_report", None)
    if callable(fn):
        return fn
    fn = getattr(mod, "run", None)
    if not callable(fn):
        return None
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if params and params[0].name == "report" and all(p.default is not p.empty for p in params[1:]):
        return fn
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small counts, one run each: a smoke run")
    ap.add_argument("--only", default="", help="comma-separated sections: " + ",".join(SECTIONS))
    ap.add_argument("--out", type=Path, default=RESULTS, help=f"JSON results (default {RESULTS})")
    a = ap.parse_args(argv)
    wanted = [s.strip() for s in a.only.split(",") if s.strip()] or list(DEFAULT)
    unknown = [s for s in wanted if s not in SECTIONS]
    if unknown:
        ap.error(f"unknown section(s) {', '.join(unknown)}; known: {', '.join(SECTIONS)}")
    modules = list(dict.fromkeys(m for s in wanted for m in SECTIONS[s]))
    report = Report(quick=a.quick)
    print(report.header(), flush=True)
    # servers' workdirs and stores (a 50k-message fill, a -wal file of tens of MB) go under one
    # directory, removed at the end: left in /tmp, a few hundred runs filled a disk
    t_all = time.monotonic()
    tmp_root = tempfile.mkdtemp(prefix="edged-bench-")
    tempfile.tempdir = tmp_root
    try:
        failed = _run_sections(modules, report)
    finally:
        tempfile.tempdir = None
        shutil.rmtree(tmp_root, ignore_errors=True)
    print(report.table())
    report.save(a.out)
    print(f"\n{time.monotonic() - t_all:.0f} s; results written to {a.out}")
    return 1 if failed else 0


def _run_sections(modules: list[str], report: Report) -> bool:
    """Each section in turn; True if one failed (the others still run)."""
    failed = False
    for modname in modules:
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as e:
            if e.name != modname:
                raise
            report.note(f"{modname} is not there yet: skipped")
            continue
        fn = entry(mod)
        if fn is None:
            report.note(f"{modname} has no run(report): skipped (run it as `python -m {modname}`)")
            continue
        print(f"[{modname}]", flush=True)
        t0 = time.monotonic()
        try:
            fn(report)
        except Exception as e:  # one broken section must not hide the others' figures
            traceback.print_exc()
            report.note(f"{modname} failed: {type(e).__name__}: {e}")
            failed = True
        print(f"[{modname}] {time.monotonic() - t0:.1f} s", flush=True)
    print()
    return failed


if __name__ == "__main__":
    sys.exit(main())
