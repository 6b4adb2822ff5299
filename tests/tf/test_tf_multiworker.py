"""Multi-worker training on pytfcomm: weights equal on every worker and to one process.

pytfcomm.MultiWorkerMirroredStrategy (Keras 3 fit, custom loop, tf-keras fit)
with 2 and 3 workers of 1 and 2 logical CPUs each, and the Horovod-style
path (DistributedOptimizer, DistributedGradientTape, broadcast_variables).
"""

from __future__ import annotations

import numpy as np
import pytest
from _harness import free_port
from multiworker_workers import GLOBAL_BATCH, STEPS

pytest.importorskip("tensorflow")

RTOL, ATOL = 1e-5, 1e-6


def _same_everywhere(outs: list[dict], key: str) -> list[np.ndarray]:
    first = outs[0][key]
    for r, o in enumerate(outs[1:], 1):
        for a, b in zip(first, o[key], strict=True):
            assert np.array_equal(a, b), f"{key}: worker {r} differs from worker 0"
    return first


def _close_to_reference(
    weights: list[np.ndarray],
    ref: list[np.ndarray],
    what: str,
    rtol: float = RTOL,
    atol: float = ATOL,
) -> None:
    assert len(weights) == len(ref)
    moved = max(float(np.max(np.abs(r))) for r in ref)
    assert moved > 0
    for w, r in zip(weights, ref, strict=True):
        np.testing.assert_allclose(w, r, rtol=rtol, atol=atol, err_msg=what)


@pytest.mark.parametrize(("workers", "ndev"), [(2, 1), (2, 2), (3, 1), (3, 2)])
def test_multiworker_strategy_matches_single_process(ranks, workers, ndev):
    tf_ports = [free_port() for _ in range(workers)]
    outs = ranks(workers, "multiworker_workers:mwms", ndev, tf_ports, timeout=280)
    ref = outs[0]["reference"]
    for key in ("fit", "loop"):
        _close_to_reference(_same_everywhere(outs, key), ref, f"{key}, {workers}x{ndev}")
    for r, o in enumerate(outs):
        assert o["fit_cross_worker_ops"] > 0, "fit's reductions did not go through pytfcomm"
        assert o["reduce"] == [float(workers), float(sum(range(workers)))], r
        assert o["nested"] == [2.0, [4.0]]
        _check_beyond_fit(outs, workers, ndev)


def _check_beyond_fit(
    outs: list[dict], workers: int, ndev: int, tasks: list[tuple[str, int]] | None = None
) -> None:
    """evaluate/predict/gather/sharding/checkpoints: see multiworker_workers._beyond_fit."""
    replicas = workers * ndev
    tasks = tasks or [("worker", r) for r in range(workers)]
    seen: list[int] = []
    for r, o in enumerate(outs):
        # No TF server: the replicas are this process's own devices.
        assert o["devices"] == [
            f"/job:localhost/replica:0/task:0/device:CPU:{i}" for i in range(ndev)
        ], o["devices"]
        assert o["chief"] == (r == 0) and o["task"] == tasks[r], (o["chief"], o["task"])
        assert o["between_graph"] == workers
        assert o["initial"] == [[1.0] * 3, 1], o["initial"]
        assert o["evaluate"] == outs[0]["evaluate"] and np.isfinite(o["evaluate"])
        assert o["predict_shape"] == [GLOBAL_BATCH * STEPS, 10]
        assert o["gather"] == [float(i) for i in range(replicas)]
        assert len(o["shard"]) == 2 * GLOBAL_BATCH // workers, o["shard"]
        seen += o["shard"]
        assert o["restored"], f"worker {r} did not restore the chief's checkpoint"
        assert o["ckpt_dirs"] == ["chief", *[f"workertemp_{i}" for _, i in tasks[1:]]]
    assert sorted(seen) == list(range(2 * GLOBAL_BATCH)), "workers' shards overlap or miss rows"


def test_multiworker_strategy_without_tf_config(ranks):
    """Launched without TF_CONFIG (as under srun or mpirun): TF's cluster comes from pytfcomm."""
    outs = ranks(2, "multiworker_workers:mwms", 1, None, timeout=240)
    ref = outs[0]["reference"]
    for key in ("fit", "loop"):
        _close_to_reference(_same_everywhere(outs, key), ref, key)
    assert all(o["fit_cross_worker_ops"] > 0 for o in outs)
    _check_beyond_fit(outs, 2, 1)


def test_multiworker_strategy_with_a_chief(ranks):
    """TF_CONFIG with a "chief" task: it is rank 0, whose initial values every worker takes."""
    outs = ranks(
        2, "multiworker_workers:mwms", 1, [free_port(), free_port()], False, True, timeout=240
    )
    ref = outs[0]["reference"]
    for key in ("fit", "loop"):
        _close_to_reference(_same_everywhere(outs, key), ref, key)
    _check_beyond_fit(outs, 2, 1, tasks=[("chief", 0), ("worker", 0)])


def test_multiworker_strategy_tf_keras_fit(ranks):
    pytest.importorskip("tf_keras")
    outs = ranks(
        2,
        "multiworker_workers:mwms",
        1,
        [free_port(), free_port()],
        True,
        timeout=240,
        env={"TF_USE_LEGACY_KERAS": "1"},
    )
    _close_to_reference(_same_everywhere(outs, "fit"), outs[0]["reference"], "tf-keras fit")
    assert all(o["fit_cross_worker_ops"] > 0 for o in outs)


@pytest.mark.parametrize("workers", [2, 3])
def test_horovod_style_matches_single_process(ranks, workers):
    outs = ranks(workers, "multiworker_workers:horovod", timeout=240)
    ref = outs[0]["reference"]
    # Different initial weights per rank: equal to the reference only if the
    # callback broadcast rank 0's and every step averaged the gradients.
    _close_to_reference(_same_everywhere(outs, "fit"), ref, "DistributedOptimizer fit")
    _close_to_reference(_same_everywhere(outs, "tape"), ref, "DistributedGradientTape")
    for o in outs:
        assert o["broadcast"] == [[1.0] * 3, [1, 1], True]
        assert o["counters"]["cross_worker_ops"] > 0
        # MetricAverageCallback: the logged loss is the mean over workers, same everywhere.
        assert o["loss"] == outs[0]["loss"]


def test_horovod_style_tf_keras(ranks):
    pytest.importorskip("tf_keras")
    outs = ranks(
        2, "multiworker_workers:horovod", True, timeout=240, env={"TF_USE_LEGACY_KERAS": "1"}
    )
    _close_to_reference(_same_everywhere(outs, "fit"), outs[0]["reference"], "tf-keras fit")


@pytest.mark.parametrize("compression", ["fp16", "bf16"])
def test_horovod_style_compression(ranks, compression):
    outs = ranks(2, "multiworker_workers:horovod", False, compression, timeout=240)
    ref = outs[0]["reference"]
    weights = _same_everywhere(outs, "tape")
    # Narrow wire data: close to the exact run, not equal to it.
    tol = 2e-2 if compression == "bf16" else 2e-3
    _close_to_reference(weights, ref, compression, rtol=tol, atol=tol)
    assert any(not np.allclose(w, r, rtol=1e-7, atol=0) for w, r in zip(weights, ref, strict=True))


@pytest.mark.parametrize("mode", ["function", "graph"])
def test_collectives_meet_across_inter_op_threads(ranks, mode):
    """48 independent all-reduces, readied in a different order on each rank: no
    deadlock, no mixed-up tensors (each has its own shape and value). In a graph
    nothing orders them: each rank issues them as their inputs come."""
    outs = ranks(
        2, "multiworker_workers:ordering", mode, timeout=180, env={"PYTFCOMM_TIMEOUT": "30"}
    )
    assert all(o["ok"] for o in outs), [o["results"] for o in outs]


def test_training_loop_catches_a_lost_worker(ranks):
    """Rank 2 dies: both survivors' step raises tf.errors.UnavailableError naming it, at once."""
    outs = ranks(3, "multiworker_workers:tf_fault", "crash", timeout=120, allow_failure=True)
    for r in (0, 1):
        ok, res = outs[r]
        assert ok, res
        assert res["error"] == "UnavailableError", res
        assert "lost rank 2" in res["message"], res["message"]
        assert res["seconds"] < 10, res


def test_training_loop_catches_a_hung_worker(ranks):
    """Rank 2 stalls: both survivors get DeadlineExceededError at the 3 s timeout
    (CommunicationOptions.timeout_seconds), the one that relays it too: every rank
    raises the class of the root cause."""
    outs = ranks(
        3, "multiworker_workers:tf_fault", "hang", timeout=120, allow_failure=True, victim=2
    )
    for r in (0, 1):
        ok, res = outs[r]
        assert ok, res
        assert res["error"] == "DeadlineExceededError", res
        assert 2.5 < res["seconds"] < 15, res


def test_training_loop_catches_a_stopped_worker_without_a_deadline(ranks):
    """Rank 2 is stopped (SIGSTOP) and no timeout is set (600 s by default): the
    survivors' step raises tf.errors.UnavailableError naming it once it has been
    silent for PYTFCOMM_PEER_TIMEOUT (10 s), as TF's own coordination service would
    flag a worker that stopped sending heartbeats."""
    outs = ranks(
        3,
        "multiworker_workers:tf_fault",
        "stop",
        timeout=120,
        allow_failure=True,
        env={"PYTFCOMM_TIMEOUT": "600"},
        victim=2,
    )
    for r in (0, 1):
        ok, res = outs[r]
        assert ok, res
        assert res["error"] == "UnavailableError", res
        assert "rank 2" in res["message"] and "heartbeat" in res["message"], res["message"]
        assert 8 < res["seconds"] < 20, res
