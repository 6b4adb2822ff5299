"""Distinct names cost no memory for good (docs/negotiation.md, docs/reliability.md).

Each ``name=`` has a stream numbered across ranks; the engine used to keep every
name's numbering for the communicator's life, even after ``close()`` (about
57 bytes a name: 16.5 MB for 300k names). A name's numbering now goes once a
call of it is decided on every rank with nothing else of it in flight (every
rank then starts it again at 0, a joined rank too), and everything goes at
close.
"""

from __future__ import annotations

import pytest
from _harness import run_ranks

NAMES = 20_000


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_distinct_names_are_not_kept(transport: str) -> None:
    outs = run_ranks(2, "negotiation_workers:many_names", NAMES, transport, timeout=400)
    for r, o in enumerate(outs):
        # Nothing kept per name (the count was NAMES higher before).
        assert o["after_names"] <= o["base"], (r, o)
        # 57 bytes a name were 1.1 MB here; allow allocator noise well under it.
        assert o["rss_after_names"] - o["rss_base"] < NAMES * 57 // 2, (r, o)
        assert o["reused"] == [20.0 * k + 1 for k in range(5)], (r, o)
        assert o["after_join"] == 3.0, (r, o)
        assert o["after_close"] == 0, (r, o)
