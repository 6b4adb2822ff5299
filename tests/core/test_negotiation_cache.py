"""Collectives agreed before are confirmed by their slot in a cache every rank keeps
alike (docs/negotiation.md, "Agreed collectives in the steady state"): mixed with new
calls and disagreeing ones, on threads with their own streams and in TF functions
whose ops run in any order, every result is right, every disagreement is a
MismatchError on every rank at once, and the calls after it pair again."""

from __future__ import annotations

import pytest
from _harness import run_ranks

TRANSPORTS = ["tcp", "shm"]
SIZES = {"in-round": 64, "after-round": 100_000}  # input rides in the record, or not


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("size", SIZES, ids=list(SIZES))
@pytest.mark.parametrize("cache", ["1", "0", "mixed"])
def test_cached_new_and_disagreeing_calls_mix(transport: str, size: str, cache: str) -> None:
    """Also with the cache off on every rank, and on rank 0 only (every rank reads
    both forms of a record)."""
    n_ranks = 3
    setting = {"1": ["1"] * n_ranks, "0": ["0"] * n_ranks, "mixed": ["1", "0", "0"]}[cache]
    env = [{"PYTFCOMM_NEGOTIATION_CACHE": s} for s in setting]
    results = run_ranks(
        n_ranks,
        "negotiation_cache_workers:mixed_numpy",
        transport,
        SIZES[size],
        24,
        per_rank_env=env,
        timeout=240,
    )
    for r, res in enumerate(results):
        assert res["n_wrong"] == 0, (r, res["wrong"])
        assert res["errors"] == {"t0": ["disagree"] * 2, "t1": ["disagree"] * 2}, (r, res)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_tf_ops_in_any_order_with_a_disagreement(transport: str) -> None:
    pytest.importorskip("tensorflow")
    results = run_ranks(2, "negotiation_cache_workers:mixed_tf", transport, 12, timeout=240)
    for r, res in enumerate(results):
        assert res["n_wrong"] == 0, (r, res["wrong"])
        assert res["errors"] == ["FailedPreconditionError"], (r, res)


@pytest.mark.parametrize("n_ranks", [4, 5])
def test_equal_records_merged_over_tcp_change_nothing(n_ranks: int) -> None:
    """Over TCP, bundles carry equal records of consecutive ranks once (runs,
    docs/negotiation.md "Where records travel"): from 4 ranks up, the confirmations
    of the steady state merge, while new calls and disagreements travel in full.
    Every result is right and every disagreement raises on every rank, as with 3."""
    results = run_ranks(
        n_ranks,
        "negotiation_cache_workers:mixed_numpy",
        "tcp",
        SIZES["after-round"],
        24,
        timeout=240,
    )
    for r, res in enumerate(results):
        assert res["n_wrong"] == 0, (r, res["wrong"])
        assert res["errors"] == {"t0": ["disagree"] * 2, "t1": ["disagree"] * 2}, (r, res)
