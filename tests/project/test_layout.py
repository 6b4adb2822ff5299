"""The suite's layout (tests/README.md): every test module sits in the folder of its
area, and every such folder is on the README's map, so a new test has one place to go."""

from __future__ import annotations

import re

from _paths import TESTS


def test_no_test_module_at_the_top_of_tests() -> None:
    loose = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert not loose, (
        f"tests/ holds test modules outside any area folder: {loose}. Move each with git mv "
        "into the folder tests/README.md maps its area to, and update its tests/quick.txt "
        "entries and the paths that name it"
    )


def test_every_test_folder_is_on_the_map() -> None:
    mapped = set(re.findall(r"^\| `([a-z_]+)/` \|", (TESTS / "README.md").read_text(), re.M))
    folders = {p.parent.relative_to(TESTS).parts[0] for p in TESTS.glob("*/**/test_*.*")}
    folders -= {"workers"}
    assert folders <= mapped, f"tests/README.md's map lacks {sorted(folders - mapped)}"
    assert mapped <= {p.name for p in TESTS.iterdir() if p.is_dir()}, "a mapped folder is gone"
