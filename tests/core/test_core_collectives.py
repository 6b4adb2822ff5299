"""Core collectives across real processes on 127.0.0.1 against NumPy references."""

from __future__ import annotations

import pytest
from _harness import check_matrix, run_ranks

SIZES = [0, 1, 2, 3, 5, 1000, 40_001, 300_001]


@pytest.fixture(autouse=True, params=["tcp", "shm"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every case runs over TCP and over shared memory (the ranks inherit the variable)."""
    monkeypatch.setenv("PYTFCOMM_TRANSPORT", request.param)
    return request.param


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_allreduce_every_dtype_op_size(n: int) -> None:
    results = run_ranks(
        n,
        "core_workers:allreduce_matrix",
        SIZES,
        ["ring", "recursive_doubling", "halving_doubling", "auto"],
        False,
        timeout=240,
    )
    check_matrix(results)


@pytest.mark.parametrize("n", [2, 3])
def test_allreduce_in_place_small_segments(n: int) -> None:
    # 4 KiB segments: many pipeline segments per chunk even for small buffers.
    results = run_ranks(
        n,
        "core_workers:allreduce_matrix",
        [7, 5000, 100_003],
        ["ring"],
        True,
        env={"PYTFCOMM_SEGMENT_BYTES": "4096"},
        timeout=240,
    )
    check_matrix(results)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_random_floats_bitwise_identical_across_ranks(n: int) -> None:
    check_matrix(run_ranks(n, "core_workers:random_floats_identical", 100_003))


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_broadcast_allgather_reduce_scatter_barrier(n: int) -> None:
    check_matrix(run_ranks(n, "core_workers:other_collectives", [0, 1, 3, 70_001], timeout=240))


def test_large_pipelined_broadcast() -> None:
    # Above PYTFCOMM_SMALL_BYTES with 3 ranks: the pipelined chain.
    check_matrix(
        run_ranks(
            3,
            "core_workers:other_collectives",
            [300_000],
            env={"PYTFCOMM_SEGMENT_BYTES": "65536"},
            timeout=240,
        )
    )


# TCP only (each rank's environment names it): under the transport fixture's "shm" it
# would run the same TCP job a second time.
@pytest.mark.parametrize("transport", ["tcp"], indirect=True)
@pytest.mark.parametrize(
    "values", [["16384", "65536", "32768", "16384"], ["16384", "off", "32768", "65536"]]
)
def test_ranks_given_different_oversubscribed_segments_agree_on_one(values: list[str]) -> None:
    # 4 ranks over TCP (more than CI's 2 cores): ring all-reduces whose chunk per rank,
    # and halving-doubling ones whose first half, holds two PYTFCOMM_OVERSUB_SEGMENT_BYTES
    # use that size, the smallest over the ranks, and none where any rank has it off.
    # Ranks cutting differently would disagree on every message's size.
    results = run_ranks(
        4,
        "core_workers:allreduce_matrix",
        [5000, 100_003, 300_001],
        ["ring", "halving_doubling"],
        False,
        per_rank_env=[
            {"PYTFCOMM_OVERSUB_SEGMENT_BYTES": v, "PYTFCOMM_TRANSPORT": "tcp"} for v in values
        ],
        timeout=240,
    )
    check_matrix(results)


@pytest.mark.slow
def test_allreduce_buffer_over_2_gib() -> None:
    nbytes = (2 << 30) + 4097  # > 2 GiB and odd-sized
    results = run_ranks(2, "core_workers:large_buffer", nbytes, timeout=400)
    assert results == [[True], [True]]


@pytest.mark.parametrize("n", [2, 3])
def test_ranks_configured_with_different_segments_agree_on_one(n: int) -> None:
    # The ring's segments must be cut alike on every rank: the smallest
    # PYTFCOMM_SEGMENT_BYTES wins at setup, whatever each rank was given.
    segments = ["4096", "262144", "65536"]
    results = run_ranks(
        n,
        "core_workers:allreduce_matrix",
        [5000, 100_003, 300_001],
        ["ring"],
        False,
        per_rank_env=[{"PYTFCOMM_SEGMENT_BYTES": segments[r]} for r in range(n)],
        timeout=240,
    )
    check_matrix(results)
