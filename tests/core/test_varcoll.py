"""allgather with a different dimension 0 per rank and alltoall with splits
(Horovod's semantics) across real processes, over TCP and shared memory."""

from __future__ import annotations

import pytest
from _harness import check_matrix, run_ranks


@pytest.fixture(autouse=True, params=["tcp", "shm"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PYTFCOMM_TRANSPORT", request.param)
    return request.param


@pytest.mark.parametrize("n", [2, 3])
def test_every_dtype_small_and_zero(n: int) -> None:
    check_matrix(run_ranks(n, "varcoll_workers:matrix", [0, 1, 7], timeout=240))


@pytest.mark.parametrize("n", [2, 3])
def test_multi_mib(n: int) -> None:
    # 2**17 rows of 3: a few MiB per rank, through the ring and the pairwise exchange.
    check_matrix(
        run_ranks(
            n,
            "varcoll_workers:matrix",
            [1 << 17],
            env={"PYTFCOMM_SEGMENT_BYTES": "262144"},
            timeout=400,
        )
    )


@pytest.mark.parametrize("n", [2, 3])
def test_bad_splits_and_disagreements(n: int) -> None:
    results = run_ranks(n, "varcoll_workers:errors", timeout=120)
    for r, out in enumerate(results):
        for what in ["short", "negative", "sum", "not_int", "indivisible"]:
            assert out[what].startswith("InvalidArgumentError"), (r, what, out[what])
        for what in ["ag_dtype", "ag_row", "ag_ndim", "a2a_dtype", "a2a_row"]:
            assert out[what].startswith("MismatchError"), (r, what, out[what])
        assert "disagree" in out["ag_dtype"] and "allgatherv" in out["ag_dtype"]
        assert out["after"] == ([k for k in range(n)], [1] * n)
