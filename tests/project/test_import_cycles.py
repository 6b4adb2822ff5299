"""pytfcomm's modules import each other without cycles, counting imports inside functions.

A cycle closed by an import inside a function works only because of call order, and
means two modules share one job. Imports under ``if TYPE_CHECKING:`` do not run and do
not count. Reads the source (``ast``); imports nothing of pytfcomm.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from _paths import ROOT

PACKAGE = ROOT / "pytfcomm"


def _module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: module level and inside functions."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.orelse:
                    visit_stmt(stmt)
                continue
            visit_stmt(child)

    def visit_stmt(node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        visit(node)

    visit(tree)
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the package's modules it imports (relative and absolute imports)."""
    files = {_module_name(p, package): p for p in package.rglob("*.py")}
    # Compiled modules (pytfcomm._core, stubbed by a .pyi) import nothing of the package.
    stubs = {_module_name(p, package) for p in package.rglob("*.pyi")} - set(files)
    known = set(files) | stubs
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        is_pkg = path.name == "__init__.py"
        here = name if is_pkg else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base_parts = here.split(".")
                    base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                # "from X import y" imports X.y when that is a module, else X.
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
                ]
            for target in targets:
                if target in stubs:
                    continue
                # "import a.b.c" runs a.b.c; keep the longest prefix that is ours.
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.add(target)
        graph[name] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a path, first module repeated at the end) per strongly connected part."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    parts: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan; the graph is small, recursion is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                parts.append(part)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return [_cycle_in(graph, set(part)) for part in parts]


def _cycle_in(graph: dict[str, set[str]], part: set[str]) -> list[str]:
    """A shortest cycle through the first module of ``part`` (breadth first)."""
    start = min(part)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & part):
            if w == start:
                return [*paths[v], start]
            if w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    raise AssertionError(f"no cycle through {start} in {sorted(part)}")


def test_the_graph_sees_imports_inside_functions(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .a import x\n"
        "def f():\n    from .sub import c\n"
    )
    (pkg / "sub" / "c.py").write_text("import os\ndef g():\n    from ..a import y\n")
    graph = import_graph(pkg)
    assert graph["pkg.b"] == {"pkg.sub.c"}, graph
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]]
    (pkg / "sub" / "c.py").write_text("import os\n")
    assert find_cycles(import_graph(pkg)) == []


def test_pytfcomm_has_no_import_cycles() -> None:
    cycles = find_cycles(import_graph())
    if cycles:
        pytest.fail(
            "import cycles in pytfcomm (move the shared part into a module of its own, "
            "or pass what is needed in):\n" + "\n".join(" -> ".join(c) for c in cycles)
        )
