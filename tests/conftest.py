"""Shared fixtures. Multi-process helpers live in tests/_harness.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "workers"))


@pytest.fixture
def ranks():
    """The run_ranks function of tests/_harness.py."""
    from _harness import run_ranks

    return run_ranks
