"""The one-shot all-reduce: small inputs travel with the negotiation round (in
shared memory on one host, as frames otherwise) and every rank reduces all of
them in rank order (csrc/engine/execute.cc, docs/negotiation.md)."""

from __future__ import annotations

import pytest
from _harness import check_matrix, run_ranks

# 8191 x 8 bytes is just under the default 64 KiB one-shot limit.
SIZES = [0, 1, 2, 3, 5, 1000, 8191]


@pytest.mark.parametrize("n", [2, 3, 4])
def test_every_dtype_op_size_exact_and_identical(n: int) -> None:
    results = run_ranks(n, "core_workers:allreduce_matrix", SIZES, ["oneshot"], False, timeout=240)
    check_matrix(results)


def test_in_place() -> None:
    results = run_ranks(3, "core_workers:allreduce_matrix", [7, 4099], ["oneshot"], True)
    check_matrix(results)


@pytest.mark.parametrize("n", [2, 3])
def test_random_floats_identical_to_the_byte(n: int) -> None:
    check_matrix(run_ranks(n, "core_workers:random_floats_identical", 5000, ["oneshot"]))


def test_auto_picks_it_up_to_the_limit_and_not_beyond() -> None:
    results = run_ranks(3, "oneshot_workers:algorithms_picked", [4, 4096, 65536, 65540, 1 << 20])
    for res in results:
        assert res["ok"], res
        picked = res["picked"]
        assert [picked[k] for k in (4, 4096, 65536)] == ["oneshot"] * 3, picked
        assert picked[65540] != "oneshot" and picked[1 << 20] == "ring", picked


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_limit_over_frames_shrinks_above_three_ranks(transport: str) -> None:
    """Over frames an in-round all-reduce brings each of 4 ranks 3 inputs: the limit
    there is 2/3 of PYTFCOMM_ONESHOT_BYTES (docs/transports.md), while records in
    shared memory keep all of it."""
    env = {"PYTFCOMM_TRANSPORT": transport}
    results = run_ranks(4, "oneshot_workers:algorithms_picked", [32768, 65536], env=env)
    for res in results:
        assert res["ok"], res
        assert res["picked"][32768] == "oneshot", res
        want = "recursive_doubling" if transport == "tcp" else "oneshot"
        assert res["picked"][65536] == want, res


def test_ranks_agree_on_the_smallest_limit() -> None:
    # Rank 1 allows only 4 KiB: nobody may pick one-shot above that.
    envs = [{"PYTFCOMM_ONESHOT_BYTES": "4096" if r == 1 else "65536"} for r in range(3)]
    results = run_ranks(3, "oneshot_workers:algorithms_picked", [4096, 8192], per_rank_env=envs)
    for res in results:
        assert res["ok"], res
        assert res["picked"][4096] == "oneshot", res
        assert res["picked"][8192] == "recursive_doubling", res


def test_zero_turns_it_off() -> None:
    env = {"PYTFCOMM_ONESHOT_BYTES": "0"}
    results = run_ranks(2, "oneshot_workers:algorithms_picked", [4096], env=env)
    assert all(r["picked"][4096] == "recursive_doubling" for r in results), results


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_refused_over_the_limit(transport: str) -> None:
    for res in run_ranks(2, "oneshot_workers:refused", transport, 1 << 16):
        assert res["type"] == "InvalidArgumentError", res
        assert "PYTFCOMM_ONESHOT_BYTES" in res["message"], res
        assert res["after"] == 2.0, res


def test_runs_over_tcp_too() -> None:
    """Inputs travel with the negotiation frames: no shared memory needed."""
    results = run_ranks(
        3, "oneshot_workers:algorithms_picked", [4, 4096], env={"PYTFCOMM_TRANSPORT": "tcp"}
    )
    for res in results:
        assert res["ok"], res
        assert res["picked"] == {4: "oneshot", 4096: "oneshot"}, res


@pytest.mark.parametrize("case", ["count", "dtype", "op", "algorithm", "collective"])
def test_disagreement_is_an_error_on_every_rank(case: str) -> None:
    results = run_ranks(3, "oneshot_workers:mismatch", case, timeout=60)
    for r, res in enumerate(results):
        assert res["type"] == "MismatchError", (r, res)
        assert "disagree" in res["message"], (r, res)
        assert res["after"] == 3.0, (r, res)  # nothing moved: the job goes on


def test_killed_peer_is_named_at_once() -> None:
    outcomes = run_ranks(3, "oneshot_workers:peer_dies", timeout=60, allow_failure=True)
    assert not outcomes[2][0]  # the killed rank left no result
    for ok, res in outcomes[:2]:
        assert ok, res
        assert res["type"] == "PeerLostError", res
        assert "rank 2" in res["message"], res
        assert res["seconds"] < 5, res


@pytest.mark.parametrize("n", [2, 4])
def test_thousands_back_to_back(n: int) -> None:
    results = run_ranks(n, "oneshot_workers:many_in_a_row", 3000, timeout=120)
    assert [r["bad"] for r in results] == [0] * n
