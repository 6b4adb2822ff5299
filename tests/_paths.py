"""Where the suite's files are, for a test module in any folder of tests/.

Test modules live one folder below tests/ (tests/README.md); they name the
checkout, tests/ and tests/workers through these, never by counting parents of
their own ``__file__``.
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent  # tests/
ROOT = TESTS.parent  # the checkout
WORKERS = TESTS / "workers"
