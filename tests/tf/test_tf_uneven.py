"""Uneven work across processes: all-gathers whose dimension 0 differs per
process, and Keras fit on a different number of batches per worker.

Before this, every process had to contribute the same shape to an
all-gather (a mismatch error that closed the communicator, so Keras
``predict`` on 261 rows with 2 workers failed), and sparse gradients with a
different number of slices per worker failed the same way.
"""

from __future__ import annotations

import numpy as np
import pytest
from uneven_workers import FIT_BATCH, PREDICT_ROWS, _expected, _rows

pytest.importorskip("tensorflow")


@pytest.mark.parametrize("size", [2, 3])
def test_numpy_allgatherv(ranks, size):
    outs = ranks(size, "uneven_workers:core_allgatherv", timeout=120)
    for r, o in enumerate(outs):
        assert o["uneven"] == _expected(size).tolist(), r
        assert o["empty"] == [[p] * 4 for p in range(1, size) for _ in range(2)], r
        assert o["even"] == [[p, p] for p in range(size) for _ in range(2)], r
        assert "no error" != o["row_mismatch"] and "allgather" in o["row_mismatch"], r
        assert "no error" != o["dtype_mismatch"], r
        assert o["after"] == _expected(size).tolist(), r


@pytest.mark.parametrize("size", [2, 3])
def test_tf_allgather_uneven(ranks, size):
    outs = ranks(size, "uneven_workers:tf_allgather", timeout=180)
    full = _expected(size)
    for r, o in enumerate(outs):
        assert o["eager"] == full.tolist(), r
        for k, got in enumerate(o["traced"]):
            want = np.concatenate([_rows(p + k) + k for p in range(size)])
            assert got == want.tolist(), (r, k)
        # Every process's loss reads every process's rows: this process's rows
        # get the sum over processes of their part of the upstream gradient.
        start = sum(p + 1 for p in range(r)) * 3
        w = size * np.arange(full.size, dtype=np.float32)
        assert o["grad"] == w[start : start + (r + 1) * 3].reshape(r + 1, 3).tolist(), r
        assert o["row_mismatch"] != "no error" and "disagree" in o["row_mismatch"], r
        assert o["after"] == full.tolist(), r


@pytest.mark.parametrize(("workers", "ndev"), [(2, 1), (2, 2), (3, 1)])
def test_strategy_gather_uneven(ranks, workers, ndev):
    outs = ranks(workers, "uneven_workers:strategy_gather", ndev, timeout=180)
    n = workers * ndev
    want = [float(i) for i in range(n) for _ in range(i + 1)]
    for r, o in enumerate(outs):
        assert o["gather0"] == want, r
        assert o["gather1"] == want, r
        assert o["all_gather"] == [want] * ndev, r
    # Sum of the embedding gradients: id j is looked up by every worker w with 1 + 2w > j.
    table = np.array(outs[0]["sparse"])
    counts = [
        sum(1 for w in range(workers) for i in range(1 + 2 * w) if i % 8 == j) * ndev
        for j in range(8)
    ]
    np.testing.assert_allclose(table[:, 0], [-0.5 * c for c in counts])
    for o in outs[1:]:
        assert o["sparse"] == outs[0]["sparse"]


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_predict_with_a_remainder(ranks, legacy):
    if legacy:
        pytest.importorskip("tf_keras")
    # Set before the rank starts, so it imports TF without Keras 3 (and starts cold).
    env = {"TF_USE_LEGACY_KERAS": "1"} if legacy else {}
    outs = ranks(2, "uneven_workers:predict_remainder", legacy, timeout=180, env=env)
    for r, o in enumerate(outs):
        assert o["shape"] == [PREDICT_ROWS, 10], r
        np.testing.assert_allclose(o["got"], o["ref"], rtol=1e-5, atol=1e-6, err_msg=f"rank {r}")


@pytest.mark.parametrize("steps_per_epoch", [None, 4])
def test_fit_with_a_different_number_of_batches_per_worker(ranks, steps_per_epoch):
    """Worker w has 4 + w global batches (auto-sharding off; 8 + 2w steps of 8 rows each).

    Before, Keras 3 stopped each worker at its own count and the other waited in
    TF's end-of-data all-reduce until the timeout."""
    outs = ranks(
        2, "uneven_workers:fit_uneven", steps_per_epoch, timeout=180, env={"PYTFCOMM_TIMEOUT": "30"}
    )
    epochs = 2
    want_steps = epochs * (steps_per_epoch or 10)  # the longer worker's count
    for r, o in enumerate(outs):
        assert o["steps"] == want_steps, (r, o["steps"])
        assert all(np.isfinite(o["loss"])), o["loss"]
        for a, b in zip(o["weights"], outs[0]["weights"], strict=True):
            assert np.array_equal(a, b), f"worker {r}'s weights differ from worker 0's"
    assert outs[0]["loss"] == outs[1]["loss"]


@pytest.mark.parametrize("longer", [0, 1], ids=["worker0_has_5", "worker1_has_5"])
def test_datasets_from_function_with_a_different_number_of_batches(ranks, longer):
    """distribute_datasets_from_function, one worker with 5 batches and the other with 4.

    Every worker runs to the global end of data (5 steps an epoch; the shorter
    worker gets an empty batch in its 5th): Keras 3 fit and evaluate, and custom
    loops (eager ``for``, ``for`` in a tf.function, ``get_next_as_optional``).
    Before, Keras stopped the shorter worker at 4 steps and the other waited in
    TF's end-of-data all-reduce until PYTFCOMM_TIMEOUT (DeadlineExceeded)."""
    outs = ranks(
        2,
        "uneven_workers:from_function_uneven",
        longer,
        timeout=240,
        env={"PYTFCOMM_TIMEOUT": "30"},
    )
    rows = FIT_BATCH * 9  # both workers' rows, each seen once per epoch
    for r, o in enumerate(outs):
        assert o["fit_steps"] == 2 * 5, (r, o["fit_steps"])
        assert all(np.isfinite(o["fit_loss"])), o["fit_loss"]
        assert o["eval_steps"] == 5, (r, o["eval_steps"])
        # evaluate's loss is the mean over every worker's rows, as one process computes it
        np.testing.assert_allclose(o["eval_loss"], o["eval_ref"], rtol=1e-5, err_msg=f"rank {r}")
        for key in ("eager_loop", "traced_loop", "optional_loop"):
            assert o[key] == [5, rows], (r, key, o[key])
        # unknown cardinality (filter): TF's agreement alone ends the epoch
        assert o["filtered_fit_steps"] == 5, (r, o["filtered_fit_steps"])
        for a, b in zip(o["weights"], outs[0]["weights"], strict=True):
            assert np.array_equal(a, b), f"worker {r}'s weights differ from worker 0's"
    assert outs[0]["fit_loss"] == outs[1]["fit_loss"]
    assert outs[0]["eval_loss"] == outs[1]["eval_loss"]


def test_infinite_dataset_on_some_workers_only_is_refused(ranks):
    """TF skips its end-of-data agreement for infinite datasets: worker 0's repeat()ed
    dataset beside worker 1's finite one would leave worker 1 alone in that all-reduce
    at every step (a timeout). Refused on every worker, and the job goes on."""
    outs = ranks(
        2, "uneven_workers:from_function_infinite", timeout=180, env={"PYTFCOMM_TIMEOUT": "30"}
    )
    for r, o in enumerate(outs):
        assert "worker 0: infinite, worker 1: 4 batch(es)" in o["error"], (r, o["error"])
        assert "repeat() the dataset on every worker" in o["error"], (r, o["error"])
        assert o["steps"] == 4, (r, o["steps"])
