"""The quick tier (tests/quick.txt, tests/_quick_tier.py): the list parses, names
existing modules, covers every area once, and its entries match as documented."""

from __future__ import annotations

import re

import _quick_tier as tier
import pytest

# Each area of pytfcomm, and the entries of tests/quick.txt that exercise it.
AREAS = {
    "TCP collectives": r"^core/test_core_collectives\.py::.*\[tcp-",
    "shared-memory collectives": r"^core/test_shm\.py|\[shm-",
    "a mismatch": r"mismatch",
    "a TF op": r"^tf/test_tf_ops\.py",
    "the CrossDeviceOps": r"^tf/test_tf_cross_device_ops\.py",
    "MultiWorkerMirroredStrategy": r"^tf/test_tf_multiworker\.py::test_multiworker_strategy",
    "a pytfcomm-run launch": r"^launch/test_launcher\.py",
    "an hvd call": r"^horovod/test_horovod_",
    "a lost peer": r"lost|killed",
    "security": r"^security/test_security_",
    "timeline": r"^timeline/test_timeline",
    "parameters": r"^project/test_params\.py",
    "docs": r"^project/test_doc_links\.py",
}


def test_the_list_names_existing_modules_once_each() -> None:
    entries = tier.load()
    assert entries, "tests/quick.txt is empty"
    assert len(entries) == len(set(entries)), "an entry is listed twice"
    for entry in entries:
        module = entry.split("::", 1)[0].split("[", 1)[0]
        assert (tier.TESTS / module).is_file(), f"{entry}: no tests/{module}"


def test_every_entry_takes_a_collected_test(request: pytest.FixtureRequest) -> None:
    stale = request.config.stash.get(tier.STALE, None)
    if stale is None:
        pytest.skip("checked only when the whole tests/ tree is collected")
    assert not stale, (
        f"tests/quick.txt lists entries that take no collected test (or only tests marked "
        f"slow in their module): {stale}. Fix or remove them: an entry is a node id "
        f"relative to tests/, as pytest prints it"
    )


def test_every_area_is_in_the_quick_tier() -> None:
    entries = tier.load()
    missing = [a for a, pat in AREAS.items() if not any(re.search(pat, e) for e in entries)]
    assert not missing, f"tests/quick.txt covers no test of: {missing}"


def test_comments_and_blank_lines_are_not_entries() -> None:
    text = "# a comment\n\ntest_a.py  # why\n  test_b.py::test_c[x-1]\n"
    assert tier.parse(text) == ["test_a.py", "test_b.py::test_c[x-1]"]


def test_an_entry_takes_its_tests_and_no_other() -> None:
    assert tier.takes("test_shm.py", "test_shm.py::test_x[2]")
    assert tier.takes("test_shm.py::test_x", "test_shm.py::test_x[shm-2]")
    assert tier.takes("test_shm.py::test_x", "test_shm.py::test_x")
    assert tier.takes("test_shm.py::test_x[shm-2]", "test_shm.py::test_x[shm-2]")
    assert not tier.takes("test_shm.py::test_x", "test_shm.py::test_xy")
    assert not tier.takes("test_shm.py::test_x[shm-2]", "test_shm.py::test_x[shm-22]")
    assert not tier.takes("test_shm.py", "test_shm_more.py::test_x")
    assert tier.unmatched(["test_a.py", "test_b.py::t"], ["test_a.py::t[1]"]) == ["test_b.py::t"]


def test_only_a_run_of_the_whole_tree_checks_the_list() -> None:
    root = tier.TESTS.parent
    assert tier.whole_tree(["tests"], root)
    assert tier.whole_tree(["."], root)
    assert tier.whole_tree(["."], tier.TESTS)
    assert not tier.whole_tree(["tests/core"], root)
    assert not tier.whole_tree(["tests/core/test_shm.py"], root)
    assert not tier.whole_tree(["tests/core/test_shm.py::test_x", "tests/gpu"], root)
