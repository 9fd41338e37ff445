"""The packages' imports form no circle, except through `if TYPE_CHECKING:` blocks: a module imported
inside a function counts too, since the circle is in the design whether or not it bites at import
time. Read from the source with `ast`, nothing imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("edged", "storage", "bridges", "hw", "pipeline")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, me: str, is_pkg: bool, known: set[str]) -> set[str]:
    out: set[str] = set()

    def resolve(name: str) -> str | None:
        # the longest known module that `name` is or lies in
        while name:
            if name in known:
                return name
            name = name.rpartition(".")[0]
        return None

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for n in node.orelse:
                visit(n)
            return
        if isinstance(node, ast.Import):
            for a in node.names:
                m = resolve(a.name)
                if m:
                    out.add(m)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = me if is_pkg else me.rpartition(".")[0]
                for _ in range(node.level - 1):
                    pkg = pkg.rpartition(".")[0]
                base = f"{pkg}.{base}" if base else pkg
            for a in node.names:
                m = resolve(f"{base}.{a.name}") or resolve(base)
                if m:
                    out.add(m)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    out.discard(me)
    return out


def import_graph() -> dict[str, set[str]]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    known = {_module_name(p) for p in files}
    graph: dict[str, set[str]] = {}
    for p in files:
        me = _module_name(p)
        graph[me] = _imports(ast.parse(p.read_text(), str(p)), me, p.name == "__init__.py", known)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def test_cycle_finder_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_type_checking_imports_do_not_count() -> None:
    src = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from x import y\nelse:\n    import z\n"
    assert _imports(ast.parse(src), "m", False, {"x", "z"}) == {"z"}


def test_no_import_circle_between_modules() -> None:
    graph = import_graph()
    assert len(graph) > 50
    assert cycles(graph) == []
