"""The quick tier (a pytest plugin; not a test module): tests/quick.txt decides it.

``pytest -m "not slow"`` (``scripts/test.sh --quick``) runs the tests that
tests/quick.txt lists; collection marks every other test ``slow``. A test
marked ``slow`` in its module stays slow even if listed.

An entry of tests/quick.txt is a path relative to tests/, optionally followed
by ``::`` names and a parametrization, as pytest prints node ids: it takes
every test whose id equals it or continues it with ``::`` or ``[``
(``core/test_shm.py`` the whole module, ``core/test_shm.py::test_x`` every
parametrization of ``test_x``, ``core/test_shm.py::test_x[2-shm]`` that one).

When the whole tests/ tree was collected, collection notes the entries that
take no test (renamed, removed, re-parametrized, or marked slow in their
module) in ``config.stash[STALE]``, and tests/project/test_quick_tier.py fails naming
them, so the list cannot rot unnoticed. (A test, not a usage error at
collection: an error raised there inside a pytest-xdist worker reaches the
user as an xdist INTERNALERROR without its message.) Running one file or test
checks nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
LIST = TESTS / "quick.txt"
# The entries that took no test, or None where the run did not collect all of tests/.
STALE = pytest.StashKey["list[str] | None"]()


def parse(text: str) -> list[str]:
    """The entries of a quick-tier list: one a line; blank lines and ``#`` comments skipped."""
    entries = []
    for line in text.splitlines():
        entry = line.split("#", 1)[0].strip()
        if entry:
            entries.append(entry)
    return entries


def load() -> list[str]:
    """The entries of tests/quick.txt."""
    return parse(LIST.read_text())


def takes(entry: str, test_id: str) -> bool:
    """Whether ``entry`` names the test ``test_id`` (both relative to tests/)."""
    return test_id == entry or test_id.startswith((entry + "::", entry + "["))


def unmatched(entries: Iterable[str], test_ids: Iterable[str]) -> list[str]:
    """The entries that take none of ``test_ids``."""
    ids = list(test_ids)
    return [e for e in entries if not any(takes(e, i) for i in ids)]


def whole_tree(args: Sequence[str], invocation_dir: Path) -> bool:
    """Whether the collection arguments ``args`` cover all of tests/."""
    for arg in args:
        path = (invocation_dir / arg.split("::", 1)[0]).resolve()
        if path == TESTS or path in TESTS.parents:
            return True
    return False


def relative_id(item: pytest.Item) -> str | None:
    """The item's node id relative to tests/ (None for a test outside it)."""
    try:
        module = Path(str(item.path)).resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return None
    _, sep, rest = item.nodeid.partition("::")
    return module + sep + rest


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_Tier(), "pytfcomm-quick-tier")


class _Tier:
    def __init__(self) -> None:
        self.skipped: set[str] = set()  # modules skipped whole, relative to tests/

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Remember a module skipped whole (``pytest.importorskip`` at module level)."""
        path = Path(report.fspath).resolve()
        if report.skipped and path.suffix == ".py" and path.is_relative_to(TESTS):
            self.skipped.add(path.relative_to(TESTS).as_posix())

    @pytest.hookimpl(tryfirst=True)  # before -m / -k deselection reads the marks
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """Mark ``slow`` every test tests/quick.txt does not list; note stale entries."""
        entries = load()
        ids = []
        for item in items:
            test_id = relative_id(item)
            if test_id is None or item.get_closest_marker("slow") is not None:
                continue
            ids.append(test_id)
            if not any(takes(e, test_id) for e in entries):
                item.add_marker(pytest.mark.slow)
        config.stash[STALE] = None
        if (
            session.testsfailed  # a module failed to import: pytest reports that
            or config.getoption("lf", False)
            or config.getoption("ignore", None)
            or config.getoption("ignore_glob", None)
            or not whole_tree(config.args, config.invocation_params.dir)
        ):
            return
        config.stash[STALE] = [
            e for e in unmatched(entries, ids) if e.split("::", 1)[0] not in self.skipped
        ]
