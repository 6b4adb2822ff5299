"""The layering of csrc/ (docs/architecture.md, "Allowed includes"), enforced.

The doc's table says which folder (or file) may include which. This module
reads the table, checks that it names what exists and keeps the layer rules
(no cycle, TensorFlow only in tf/, Python only in bindings/, the providers
only behind the factory, ...), and checks every ``#include`` under csrc/
against it. It reads sources only: no build, no import of pytfcomm.

Also a script (``python tests/project/test_layering.py``, run by scripts/lint.sh):
prints every problem and exits 1 when there is one.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # tests/project/: a script too (lint.sh)
CSRC = ROOT / "csrc"
DOC = ROOT / "docs" / "architecture.md"
TABLE_HEADING = "### Allowed includes"
SOURCES = (".h", ".cc", ".cu", ".cuh", ".def", ".inc")

# Library groups a row may name, by the include paths that belong to them.
EXTERNAL = {
    "TensorFlow": ("tensorflow/", "xla/", "absl/", "tsl/", "Eigen/", "unsupported/Eigen/"),
    "Python": ("pybind11/", "Python.h", "numpy/"),
}
# The units of the transport layer (top-level files and provider folders).
TRANSPORT = "transport"
PROVIDERS = ("transport/tcp", "transport/shm", "transport/host")
FACTORY = "transport/connect.cc"
# What the layers above the transport may see of it (besides top-level files only).
ALGORITHMS_SEE = {"transport/data_plane.h"}
ENGINE_SEES = {"transport/transport.h", "transport/connect.h", "transport/topology.h"}

Table = dict[str, list[str]]


def folder_of(rel: str) -> str:
    """The unit folder of a path relative to csrc/: ``transport/host`` for
    ``transport/host/pair.h`` or ``transport/host``, ``transport`` for
    ``transport/wire.h``."""
    if (CSRC / rel).is_dir():
        return rel
    parts = rel.split("/")
    if parts[0] == TRANSPORT and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0]


@cache
def unit_folders() -> tuple[str, ...]:
    """Every folder of csrc/ that holds sources, as a unit name."""
    found = {folder_of(str(p.relative_to(CSRC))) for p in CSRC.rglob("*") if p.suffix in SOURCES}
    return tuple(sorted(f for f in found if (CSRC / f).is_dir()))


def generated_headers() -> set[str]:
    """Headers CMake generates (cmake/NAME.in, or an OUTPUT of a cmake/*.cmake rule)."""
    names = {p.name[: -len(".in")] for p in (ROOT / "cmake").glob("*.h.in")}
    for f in [ROOT / "CMakeLists.txt", *(ROOT / "cmake").glob("*.cmake")]:
        names |= set(re.findall(r"OUTPUT\s+\S*/(\w+\.h)\b", f.read_text()))
    return names


def parse_table(text: str) -> Table:
    """{unit: [entries]} from the table under TABLE_HEADING; raises if it is missing."""
    if TABLE_HEADING not in text:
        raise AssertionError(f"{DOC}: no {TABLE_HEADING!r} section (the layering table)")
    section = text.split(TABLE_HEADING, 1)[1].split("\n#", 1)[0]
    table: Table = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not re.fullmatch(r"`[^`]+`", cells[0]):
            continue
        unit = cells[0].strip("`")
        if unit in table:
            raise AssertionError(f"{DOC}: `{unit}` has two rows in {TABLE_HEADING!r}")
        table[unit] = re.findall(r"`([^`]+)`", cells[1])
    if not table:
        raise AssertionError(f"{DOC}: {TABLE_HEADING!r} has no rows")
    return table


def load_table() -> Table:
    return parse_table(DOC.read_text())


def kind_of(entry: str, generated: set[str]) -> str | None:
    """'folder', 'file', 'generated' or 'external'; None when it names nothing."""
    if entry in EXTERNAL:
        return "external"
    if entry in generated:
        return "generated"
    if (CSRC / entry).is_file() and entry.endswith(SOURCES):
        return "file"
    if entry in unit_folders():
        return "folder"
    return None


def table_problems(table: Table) -> list[str]:
    """Rows and entries that name nothing, and folders without a row."""
    generated = generated_headers()
    problems = []
    for unit, entries in table.items():
        if kind_of(unit, generated) not in ("folder", "file"):
            problems.append(f"row `{unit}`: no such folder or file under csrc/")
        for e in entries:
            if kind_of(e, generated) is None:
                problems.append(
                    f"row `{unit}`: `{e}` is no csrc/ folder or file, no generated header "
                    f"({', '.join(sorted(generated))}) and none of {', '.join(EXTERNAL)}"
                )
    for folder in unit_folders():
        if folder not in table:
            problems.append(f"csrc/{folder}/ has no row: say what it may include")
    return problems


def allowed(table: Table, rel: str) -> list[str]:
    """What the file csrc/`rel` may include: its folder's row and its own."""
    return table.get(folder_of(rel), []) + table.get(rel, [])


def rule_problems(table: Table) -> list[str]:
    """The layer rules the table must keep, whatever it says."""
    problems = []

    def forbid(unit: str, entry: str, rule: str) -> None:
        problems.append(f"row `{unit}` lists `{entry}`: {rule}")

    for unit, entries in table.items():
        folder = folder_of(unit)
        in_transport = folder == TRANSPORT or folder.startswith(TRANSPORT + "/")
        for e in entries:
            target = folder_of(e) if e not in EXTERNAL else e
            if e == "TensorFlow" and folder != "tf":
                forbid(unit, e, "the core has no TensorFlow dependency (only csrc/tf/)")
            if e == "Python" and folder != "bindings":
                forbid(unit, e, "the core has no Python dependency (only csrc/bindings/)")
            if target in PROVIDERS and unit != FACTORY and folder != target:
                forbid(unit, e, f"only the factory ({FACTORY}) includes the providers")
            if target == "transport/net" and not in_transport:
                forbid(unit, e, "transport/net/ is the providers' shared code, inside transport")
            if target == TRANSPORT and not in_transport and e == TRANSPORT:
                forbid(unit, e, "above the transport layer, name its top-level headers one by one")
            if folder == "algorithms" and target == TRANSPORT and e not in ALGORITHMS_SEE:
                forbid(unit, e, f"algorithms see only {', '.join(sorted(ALGORITHMS_SEE))}")
            if folder == "engine" and target == TRANSPORT and e not in ENGINE_SEES:
                forbid(unit, e, f"the engine sees only {', '.join(sorted(ENGINE_SEES))}")
    problems += [f"the layers have a cycle: {' -> '.join(c)}" for c in cycles(table)]
    return problems


def cycles(table: Table) -> list[list[str]]:
    """Cycles between units (a header's row counts for its folder; a .cc file
    is its own node: nothing includes it)."""

    def node(unit: str) -> str:
        return unit if unit.endswith((".cc", ".cu")) else folder_of(unit)

    edges: dict[str, set[str]] = {}
    for unit, entries in table.items():
        for e in entries:
            if e not in EXTERNAL and kind_of(e, set()) in ("folder", "file"):
                if folder_of(e) != node(unit):
                    edges.setdefault(node(unit), set()).add(folder_of(e))
    found, state = [], {}

    def visit(n: str, path: list[str]) -> None:
        state[n] = "open"
        for m in sorted(edges.get(n, ())):
            if state.get(m) == "open":
                found.append([*path[path.index(m) :], m])
            elif m not in state:
                visit(m, [*path, m])
        state[n] = "done"

    for n in sorted(edges):
        if n not in state:
            visit(n, [n])
    return found


INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def includes() -> Iterator[tuple[str, int, str, str]]:
    """(file relative to csrc/, line, '"' or '<', included path) of every include."""
    for p in sorted(CSRC.rglob("*")):
        if p.suffix not in SOURCES or not p.is_file():
            continue
        rel = str(p.relative_to(CSRC))
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if m:
                yield rel, n, m.group(1), m.group(2)


def external_group(path: str) -> str | None:
    for group, prefixes in EXTERNAL.items():
        if any(path.startswith(p) if p.endswith("/") else path == p for p in prefixes):
            return group
    return None


def include_problems(table: Table) -> list[str]:
    """Every include under csrc/ that its file's rows do not allow."""
    generated = generated_headers()
    problems = []
    for rel, n, quote, inc in includes():
        src = folder_of(rel)
        may = allowed(table, rel)
        rule = f"`{src}` may include {', '.join(may) or 'nothing but itself'}"
        where = f"csrc/{rel}:{n}: {src} -> "
        group = external_group(inc)
        if group is not None:
            if group not in may:
                problems.append(f"{where}{group} ({inc}): {rule}")
            continue
        if quote == "<":
            continue  # the C++ and system libraries
        if inc in generated:
            if inc not in may:
                problems.append(f"{where}{inc} (generated): {rule}")
            continue
        if not (CSRC / inc).is_file():
            problems.append(f"{where}{inc}: no such file under csrc/ and no generated header")
            continue
        if inc.endswith((".cc", ".cu")):
            problems.append(f"{where}{inc}: a source file; include headers only")
            continue
        dst = folder_of(inc)
        if dst != src and dst not in may and inc not in may:
            problems.append(f"{where}{dst} ({inc}): {rule}")
    return problems


def report(title: str, problems: list[str]) -> str:
    return f"{title} ({len(problems)}; docs/architecture.md, {TABLE_HEADING!r}):\n  " + (
        "\n  ".join(problems)
    )


def test_the_table_names_what_exists() -> None:
    problems = table_problems(load_table())
    assert not problems, report("the layering table is out of date", problems)


def test_the_table_keeps_the_layer_rules() -> None:
    problems = rule_problems(load_table())
    assert not problems, report("the layering table breaks a layer rule", problems)


def test_every_include_follows_the_table() -> None:
    problems = include_problems(load_table())
    assert not problems, report("forbidden includes", problems)


def test_the_checks_catch_what_they_guard() -> None:
    """The checks themselves: a missing table, a row naming nothing, a cycle,
    a relaxed rule and a forbidden edge are each reported."""
    try:
        parse_table("# Architecture\n\nno table here\n")
    except AssertionError as e:
        assert TABLE_HEADING in str(e)
    else:
        raise AssertionError("a doc without the table must fail")
    table = load_table()
    bad = {
        **table,
        "nosuch": ["common"],
        "common": ["engine"],
        "engine": [*table["engine"], "transport/tcp"],
        "local": ["common", "TensorFlow"],
    }
    found = "\n".join(table_problems(bad) + rule_problems(bad))
    assert "row `nosuch`: no such folder" in found, found
    assert "the layers have a cycle: common -> engine -> " in found, found
    assert "row `engine` lists `transport/tcp`: only the factory" in found, found
    assert "row `local` lists `TensorFlow`: the core has no TensorFlow" in found, found
    assert "row `tf`" not in found, found
    leak = {**table, "transport/host": [e for e in table["transport/host"] if e != "common"]}

    def edges_of(t: Table) -> set[str]:
        return {p.split(": `", 1)[0] for p in include_problems(t)}  # without the rule's text

    edges = edges_of(leak) - edges_of(table)
    assert edges, "an include the table no longer allows must be reported"
    assert all(
        re.search(r"^csrc/transport/host/\S+:\d+: transport/host -> common \(", e) for e in edges
    )


def main() -> int:
    try:
        table = load_table()
    except AssertionError as e:
        print(e)
        return 1
    problems = table_problems(table) + rule_problems(table) + include_problems(table)
    if problems:
        print(report("layering", problems))
        return 1
    print(f"layering: {sum(1 for _ in includes())} includes follow {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
