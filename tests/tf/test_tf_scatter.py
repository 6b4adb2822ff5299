"""pytfcomm.tf.reduce_scatter and pytfcomm.tf.alltoall (and the all-gather of rows of
no width): the core's collectives as TF ops, across real processes over TCP and
shared memory, small (one-shot) and multi-MiB sizes, eager, in tf.function and
under a gradient, and what a rank that disagrees or passes bad splits gets."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from _harness import run_ranks
from _paths import ROOT
from scatter_workers import a2a_expected, a2a_splits, data, rs_expected, share

pytest.importorskip("tensorflow")

BIG_ROWS = 1 << 19  # rows of 4 float32: 8 MiB per rank, past the one-shot size


@pytest.fixture(params=["tcp", "shm"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PYTFCOMM_TRANSPORT", request.param)
    return request.param


@pytest.mark.parametrize("n", [2, 3])
def test_reduce_scatter_and_alltoall(transport: str, n: int) -> None:
    outs = run_ranks(n, "scatter_workers:tf_scatter", BIG_ROWS, timeout=300)
    for r, o in enumerate(outs):
        # reduce-scatter: Horovod's row split, every op, eager and traced.
        assert o["rs_sum_7"] == rs_expected(r, n, 7, "sum").tolist(), r
        assert o["rs_mean_even"] == rs_expected(r, n, 2 * n, "mean").tolist(), r
        np.testing.assert_allclose(o["rs_mean_5"], rs_expected(r, n, 5, "mean"), rtol=1e-6)
        assert o["rs_max_int"] == rs_expected(r, n, 5, "max", dtype="int32").tolist(), r
        assert o["rs_one_row"] == rs_expected(r, n, 1, "sum").tolist(), r
        assert len(o["rs_one_row"]) == (1 if r == 0 else 0)
        assert o["rs_empty"] == [0, 3], r
        listed = [(7, 3, "float32"), (2 * n, 5, "float32"), (5, 3, "int32"), (1, 3, "float32")]
        for op in ("sum", "max"):
            want = [rs_expected(r, n, k, op, w, dt).tolist() for k, w, dt in listed]
            assert o["rs_list" if op == "sum" else "rs_list_max"] == want, (r, op)
        assert o["rs_big"] is True, r
        # Gradient: every rank's weight at that rank's rows (divided by n for mean).
        w = np.concatenate([np.full((share(7, n, p)[1], 3), p + 1.0) for p in range(n)])
        assert o["rs_grad_sum"] == w.tolist(), r
        np.testing.assert_allclose(o["rs_grad_mean"], w / n, rtol=1e-6)
        assert o["rs_shape_mismatch"].startswith("FailedPreconditionError"), o["rs_shape_mismatch"]
        assert "disagree" in o["rs_shape_mismatch"], o["rs_shape_mismatch"]
        assert o["rs_bool_mean"].startswith("InvalidArgumentError"), o["rs_bool_mean"]
        assert o["rs_after"] == o["rs_sum_7"], r

        # all-to-all: equal and uneven splits (some zero), rows of no width, 8 MiB.
        even = [data(p, 2 * n)[2 * r : 2 * r + 2] for p in range(n)]
        assert o["a2a_even"] == [np.concatenate(even).tolist(), [2] * n], r
        want, got_splits = a2a_expected(r, n)
        assert o["a2a_splits"] == [want.tolist(), got_splits], r
        assert o["a2a_no_width"] == [[sum(got_splits), 0], got_splits], r
        assert o["a2a_big"] is True, r
        sent = a2a_splits(r, n)
        grad = np.concatenate([np.full((k, 3), j + 1.0) for j, k in enumerate(sent)])
        assert o["a2a_grad"] == grad.reshape(-1, 3).tolist(), r
        assert o["a2a_row_mismatch"].startswith("FailedPreconditionError"), o["a2a_row_mismatch"]
        # Bad splits on rank 0: it says why, the others fail at once (not at their timeout).
        bad_one = o["a2a_bad_splits_one"]
        if r == 0:
            assert bad_one.startswith("InvalidArgumentError") and "splits" in bad_one, bad_one
        else:
            assert bad_one.startswith("FailedPreconditionError"), bad_one
        assert o["a2a_bad_splits_s"] < 20, o["a2a_bad_splits_s"]
        assert o["a2a_bad_splits_all"].startswith("InvalidArgumentError"), o["a2a_bad_splits_all"]
        assert o["ag_no_width"] == [n * (n + 1) // 2, 0], r
        assert o["a2a_indivisible"].startswith("InvalidArgumentError"), o["a2a_indivisible"]
        assert "must divide" in o["a2a_indivisible"], o["a2a_indivisible"]
        assert o["a2a_float_splits"].startswith("InvalidArgumentError"), o["a2a_float_splits"]
        # Two threads per rank, started in a different order per rank: 20 right results.
        assert o["threads"] == [True] * 20, (r, o["threads"])
        assert o["a2a_after"] == o["a2a_even"], r


def test_benchmark_checks_every_path_and_prints_each_round() -> None:
    """benchmarks/tf_scatter.py: every path's result is checked (a wrong one fails the
    run), one table row per collective, size and round."""
    root = ROOT
    args = ["--np", "2", "--sizes", "64K,1M", "--iters", "2", "--rounds", "2"]
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.tf_scatter", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [line for line in run.stdout.splitlines() if line.startswith("| reduce_scatter")]
    rows += [line for line in run.stdout.splitlines() if line.startswith("| alltoall")]
    assert len(rows) == 2 * 2 * 2, run.stdout
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert all(float(c) > 0 for c in cells[3:]), row


def test_rows_split_the_horovod_way() -> None:
    from pytfcomm.horovod.tensorflow import mpi_ops
    from pytfcomm.tf import reduce_scatter_rows

    assert reduce_scatter_rows(7, 3) == [3, 2, 2]
    assert reduce_scatter_rows(1, 3) == [1, 0, 0]
    assert reduce_scatter_rows(6, 3) == [2, 2, 2]
    assert reduce_scatter_rows(0, 2) == [0, 0]
    assert mpi_ops.reducescatter_parts(7, 3) == [3, 2, 2]
    # the worker's own reckoning, which the multi-process test compares against
    assert [share(7, 3, r)[1] for r in range(3)] == [3, 2, 2]
