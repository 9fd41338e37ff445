"""How JetStream's modules and the stores import each other, read from their source: no module of
edged/jetstream (its subpackages included) or storage takes part in an import cycle (imports under TYPE_CHECKING, which never run,
aside), none imports another lazily from inside a function, and JetStream reaches the stores only
through the `storage` package's interface, never a backend module."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("edged/jetstream", "storage")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = p
    return out


def _imports(path: Path, known: set[str]) -> tuple[set[str], set[str]]:
    """(modules imported when `path` is imported, modules imported inside its functions), of `known`."""
    top: set[str] = set()
    lazy: set[str] = set()

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for n in child.orelse:
                    walk(n, in_function)
                continue
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module:
                subs = [f"{child.module}.{a.name}" for a in child.names if f"{child.module}.{a.name}" in known]
                names = subs + ([child.module] if len(subs) < len(child.names) else [])
            (lazy if in_function else top).update(n for n in names if n in known)
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    walk(ast.parse(path.read_text()), False)
    return top, lazy


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    mods = _modules()
    known = set(mods)
    top, lazy = {}, {}
    for name, path in mods.items():
        top[name], lazy[name] = _imports(path, known)
    return top, lazy


def _cycle_from(start: str, graph: dict[str, set[str]]) -> list[str] | None:
    """A path start -> ... -> start in `graph`, if there is one."""
    stack = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for nxt in graph.get(node, ()):
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def test_the_graph_is_read() -> None:
    top, _ = _graph()
    assert "edged.jetstream.engine" in top and "storage.sqlite" in top
    assert "edged.jetstream.wire.dispatch" in top["edged.jetstream.engine"]
    assert "storage.base" in top["storage.sqlite"]


def test_no_import_cycles() -> None:
    top, _ = _graph()
    cycles = [c for m in sorted(top) if (c := _cycle_from(m, top)) is not None]
    assert cycles == []


def test_no_imports_inside_functions() -> None:
    _, lazy = _graph()
    assert {m: sorted(d) for m, d in lazy.items() if d} == {}


def test_jetstream_sees_the_stores_through_their_interface() -> None:
    top, _ = _graph()
    backends = {"storage.sqlite", "storage.memory"}
    assert {m: sorted(d & backends) for m, d in top.items() if m.startswith("edged.") and d & backends} == {}
