"""pytfcomm.horovod where a migrating Horovod user's code or tests would notice a
difference: half-precision scaling, error classes, what hvd.keras returns, the names
Horovod's tests reach, process-set ids and text (2 and 3 ranks, eager and tf.function)."""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow")


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("n", [2, 3])
def test_half_precision_factors_scale_in_float32_as_horovod(ranks, n, mode):
    # Horovod's own tests allow no difference at all up to 3 ranks.
    for o in ranks(n, "horovod_compat_workers:half_scaling", mode, timeout=240):
        assert len(o) == 18 and all(v == 0.0 for v in o.values()), o


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("n", [2, 3])
def test_alltoall_argument_errors_are_tf_invalid_argument(ranks, n, mode):
    for r, o in enumerate(ranks(n, "horovod_compat_workers:alltoall_errors", mode, timeout=240)):
        want = "tensorflow.python.framework.errors_impl.InvalidArgumentError"
        assert o["indivisible"] == want and o["splits_sum"] == want, o
        assert o["after"] == [float(j * 10 + r) for j in range(n)]


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("n", [2, 3])
def test_keras_collectives_return_tensors(ranks, n, mode):
    mean = (n - 1) / 2
    for o in ranks(n, "horovod_compat_workers:keras_results", mode, timeout=180):
        for mod in ("keras", "tf_keras"):
            assert o[f"{mod}.allreduce"] == (True, [mean, mean])
            assert o[f"{mod}.allgather"] == (True, [[float(r), float(r)] for r in range(n)])
            assert o[f"{mod}.broadcast"] == (True, [1.0, 1.0])
            assert o[f"{mod}.reducescatter"] == (True, [mean, mean])


@pytest.mark.parametrize("n", [2, 3])
def test_names_process_set_text_and_reused_ids(ranks, n):
    for o in ranks(n, "horovod_compat_workers:names_and_sets", timeout=180):
        assert o["empty_graph_broadcast"] == "NoOp"
        assert o["eager"] == [True, True] and o["in_function"] is False
        assert o["gpu_available"] == [False, False]  # no GPU on the test machines
        everyone = list(range(n))
        assert o["global_str"] == f"ProcessSet(process_set_id=0, ranks={everyone}, mpi_comm=None)"
        assert o["ids"] == {0: everyone, 1: [0], 2: everyone[1:]}
        assert o["a_str"] == "ProcessSet(process_set_id=1, ranks=[0], mpi_comm=None)"
        assert o["reused"] == [2, 1]
        assert o["after_remove"] == {0: everyone, 1: [0], 2: everyone[1:]}


@pytest.mark.parametrize("kind", ["keras3", "tf_keras", "tf_keras_legacy"])
def test_optimizer_internals_horovods_tests_drive(ranks, kind):
    for o in ranks(2, "horovod_compat_workers:optimizer_internals", kind, timeout=240):
        assert o["grad"] == 3.0 and o["grad_tape"] == 3.0  # all-reduced (Sum of 1 and 2)
        assert o["x_after_apply"] == -2.0  # applied once reduced, not reduced twice
        assert o["y_after_minimize"] == (1.0 if kind == "keras3" else -2.0)
        assert o["helper_none"] is True
        # backward passes since the last all-reduce; every 2nd call applies the average
        # of the 2-call sums: (2 + 4) / 2 = 3
        assert o["counters"] == [1, 0, 1] and o["z"] == -2.0
