"""The halving-doubling all-reduce (csrc/algorithms/halving_doubling.cc): exact and
bitwise identical on every rank count (powers of two and not), on TCP and shared
memory, and what ``auto`` picks: it on 4, 8, ... ranks some of which talk over TCP (or
that outnumber cores on shared memory, read by reference), from above
PYTFCOMM_SMALL_BYTES up to PYTFCOMM_HALVING_BYTES (agreed: the smallest over ranks), the
ring otherwise (docs/transports.md)."""

from __future__ import annotations

import pytest
from _harness import check_matrix, more_ranks_than_cores, run_ranks

KIB = 1024
MIB = 1024 * KIB


@pytest.mark.parametrize("transport", ["tcp", "shm"])
@pytest.mark.parametrize("n", [5, 8])
def test_exact_and_identical_beyond_four_ranks(n: int, transport: str) -> None:
    """8 ranks: three halvings; 5: one rank folded into its neighbour first."""
    results = run_ranks(
        n,
        "core_workers:allreduce_matrix",
        [1, 7, 100_003],
        ["halving_doubling"],
        True,
        env={"PYTFCOMM_TRANSPORT": transport, "PYTFCOMM_SEGMENT_BYTES": "65536"},
        timeout=240,
    )
    check_matrix(results)


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_random_floats_identical_to_the_byte(transport: str) -> None:
    results = run_ranks(
        4,
        "core_workers:random_floats_identical",
        300_007,
        ["halving_doubling"],
        env={"PYTFCOMM_TRANSPORT": transport},
    )
    check_matrix(results)


def _picked(n: int, sizes: list[int], **kw: object) -> list[dict[int, str]]:
    results = run_ranks(n, "oneshot_workers:algorithms_picked", sizes, **kw)
    for res in results:
        assert res["ok"], res
    picks = [res["picked"] for res in results]
    assert all(p == picks[0] for p in picks), picks  # every rank chose alike
    return picks


TCP = {"PYTFCOMM_TRANSPORT": "tcp"}


@pytest.mark.parametrize("n", [4, 8])
def test_auto_picks_it_over_tcp_up_to_the_limit(n: int) -> None:
    sizes = [64 * KIB + 4, 1 * MIB, 2 * MIB, 2 * MIB + 4]
    picked = _picked(n, sizes, env=TCP)[0]
    assert [picked[s] for s in sizes] == ["halving_doubling"] * 3 + ["ring"], picked


def test_auto_keeps_the_ring_over_shared_memory_unless_pieces_are_read_by_reference() -> None:
    """Over shared memory through the rings halving-doubling measured no faster
    (docs/transports.md): with reading by reference off, 4 ranks keep the ring."""
    env = {"PYTFCOMM_TRANSPORT": "shm", "PYTFCOMM_OVERSUB_SHM_BYREF_BYTES": "off"}
    picked = _picked(4, [1 * MIB], env=env)[0]
    assert picked[1 * MIB] == "ring", picked


def test_ranks_sharing_cores_pick_it_over_shared_memory_from_64_kib_per_rank() -> None:
    """More ranks than cores, all on shared memory: from 64 KiB per rank (read by
    reference) up to PYTFCOMM_HALVING_BYTES, the ring below and above."""
    n = more_ranks_than_cores(power_of_two=True)
    want = {
        n * 32 * KIB: "ring",
        n * 64 * KIB: "halving_doubling",
        2 * MIB: "halving_doubling",
        2 * MIB + 4: "ring",
    }
    picked = _picked(n, list(want), env={"PYTFCOMM_TRANSPORT": "shm"})[0]
    assert picked == want, picked


def test_ranks_sharing_cores_agree_on_the_smallest_by_reference_size() -> None:
    # Rank 1 reads by reference from 128 KiB per rank, the others from 256 KiB: every
    # rank takes halving-doubling from 128 KiB per rank.
    n = more_ranks_than_cores(power_of_two=True)
    envs = [
        {
            "PYTFCOMM_TRANSPORT": "shm",
            "PYTFCOMM_OVERSUB_SHM_BYREF_BYTES": str(128 * KIB if r == 1 else 256 * KIB),
        }
        for r in range(n)
    ]
    want = {n * 64 * KIB: "ring", n * 128 * KIB: "halving_doubling"}
    picked = _picked(n, list(want), per_rank_env=envs)[0]
    assert picked == want, picked


def test_one_rank_on_tcp_makes_every_rank_pick_it() -> None:
    """Ranks 0-2 share memory, rank 3 sits on a host of its own (uneven hosts: no
    hierarchical): some pairs are TCP, and every rank must choose alike."""
    envs = [{"PYTFCOMM_HOST_ID": "other" if r == 3 else "here"} for r in range(4)]
    picked = _picked(4, [1 * MIB], per_rank_env=envs)[0]
    assert picked[1 * MIB] == "halving_doubling", picked


@pytest.mark.parametrize("n", [2, 3, 6])
def test_auto_keeps_the_ring_off_powers_of_two_and_on_two_ranks(n: int) -> None:
    assert _picked(n, [1 * MIB], env=TCP)[0][1 * MIB] == "ring"


def test_ranks_agree_on_the_smallest_limit() -> None:
    # Rank 2 allows only 256 KiB: nobody may pick it above that.
    envs = [
        {**TCP, "PYTFCOMM_HALVING_BYTES": str(256 * KIB if r == 2 else 2 * MIB)} for r in range(4)
    ]
    picked = _picked(4, [256 * KIB, 256 * KIB + 4], per_rank_env=envs)[0]
    assert picked == {256 * KIB: "halving_doubling", 256 * KIB + 4: "ring"}, picked


def test_off_keeps_the_ring() -> None:
    picked = _picked(4, [1 * MIB], env={**TCP, "PYTFCOMM_HALVING_BYTES": "off"})[0]
    assert picked[1 * MIB] == "ring", picked
