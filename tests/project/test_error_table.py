"""docs/errors.md's table of error classes is the core's (PTC_ERROR_KINDS in
csrc/common/error.h), which the Python exception translator and the TF
kernels both read: every kind, its pytfcomm.errors class and its TF status."""

from __future__ import annotations

import re

import pytest
from _paths import ROOT

import pytfcomm.errors
from pytfcomm import _core

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # TensorFlow's import

DOC = ROOT / "docs" / "errors.md"


def doc_table() -> dict[str, tuple[str, str]]:
    """{kind: (Python class, TF status)} from the rows of the doc's table.

    A row's Python cell may name builtins too (the bases, KeyboardInterrupt):
    its class is the first name that pytfcomm.errors defines.
    """
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not re.fullmatch(r"`k\w+`", cells[0]):
            continue
        names = re.findall(r"`(\w+)`", cells[1])
        python = next(n for n in names if isinstance(getattr(pytfcomm.errors, n, None), type))
        (status,) = re.findall(r"`(\w+)`", cells[2])
        assert cells[0].strip("`") not in rows, f"{cells[0]} twice in {DOC}"
        rows[cells[0].strip("`")] = (python, status)
    return rows


def core_table() -> dict[str, tuple[str, str]]:
    return {kind: (python, status) for kind, python, status in _core.error_table()}


def test_the_doc_table_is_the_core_table() -> None:
    assert doc_table() == core_table()


@pytest.mark.parametrize(("kind", "python", "status"), _core.error_table())
def test_every_class_exists_and_every_status_is_tfs(kind: str, python: str, status: str) -> None:
    assert issubclass(getattr(pytfcomm.errors, python), pytfcomm.errors.CommError), kind
    tf = pytest.importorskip("tensorflow")
    assert issubclass(getattr(tf.errors, f"{status}Error"), tf.errors.OpError), kind
