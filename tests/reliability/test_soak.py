"""Soak: thousands of random collectives (kind, op, dtype, size, root, algorithm)
across 4 processes, each checked against a NumPy reference.

CI runs PYTFCOMM_SOAK_ITERS (default 3000, about 15 s on 2 cores);
the long run is ``PYTFCOMM_SOAK_ITERS=20000 pytest tests/reliability/test_soak.py``.
"""

from __future__ import annotations

import os

from _harness import run_ranks

ITERS = int(os.environ.get("PYTFCOMM_SOAK_ITERS", "3000"))
SEED = int(os.environ.get("PYTFCOMM_SOAK_SEED", "20240601"))


def test_random_collectives_match_numpy() -> None:
    timeout = max(120.0, ITERS * 0.5)
    results = run_ranks(4, "soak_workers:soak", SEED, ITERS, timeout=timeout)
    counts = results[0]["counts"]
    assert sum(counts.values()) == ITERS, counts
    assert all(res["counts"] == counts for res in results), results
    assert set(counts) == {"allreduce", "broadcast", "allgather", "reduce_scatter", "barrier"}
