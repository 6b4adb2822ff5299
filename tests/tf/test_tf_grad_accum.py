"""Keras 3 ``gradient_accumulation_steps`` on pytfcomm: the weights of one process.

Keras 3 accumulates inside a ``tf.cond`` whose branches ``merge_call``; without
pytfcomm's change (pytfcomm/tf/grad_accum.py) ``fit`` fails with "merge_call
called while defining a new graph" under any strategy. Here ``fit`` (a
``tf.function``) with accumulation over 2 and 3 steps, under (a)
``MirroredStrategy(cross_device_ops=pytfcomm.RingAllReduce())`` on 2 logical
CPUs and (b) 2 workers of ``pytfcomm.MultiWorkerMirroredStrategy``, must end
with the weights and optimizer variables (momentums, accumulators) of one
process training on the same global batch with the same accumulation.
"""

from __future__ import annotations

import numpy as np
import pytest
from _harness import free_port

pytest.importorskip("tensorflow")
from grad_accum_workers import ACCUMULATION, train
from tf_setup import devices, tf_with_devices

tf = tf_with_devices()
import keras  # noqa: E402

import pytfcomm  # noqa: E402
import pytfcomm.tf as ptf  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# Measured: at most 3e-8 apart (float32 sums in another order).
RTOL, ATOL = 1e-5, 1e-6


def _max_diff(got: list[np.ndarray], ref: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(g - r))) for g, r in zip(got, ref, strict=True))


def _matches(got: dict, ref: dict, what: str) -> None:
    for key in ("weights", "optimizer"):
        assert len(got[key]) == len(ref[key]), (what, key)
        diff = _max_diff(got[key], ref[key])
        for g, r in zip(got[key], ref[key], strict=True):
            np.testing.assert_allclose(
                g, r, rtol=RTOL, atol=ATOL, err_msg=f"{what} {key}: max |diff| {diff:.3g}"
            )
    # The run trained: the weights moved from the initial ones.
    assert _max_diff(ref["weights"], [np.zeros_like(w) for w in ref["weights"]]) > 0


@pytest.mark.parametrize("steps", ACCUMULATION)
def test_mirrored_ring_all_reduce_matches_one_process(steps):
    strategy = tf.distribute.MirroredStrategy(devices(2), cross_device_ops=pytfcomm.RingAllReduce())
    before = ptf.counters()["allreduce_ops"]
    got = train(tf, keras, steps, strategy)
    assert ptf.counters()["allreduce_ops"] > before, "the gradients did not go through pytfcomm"
    assert got["replicas_equal"], "the two replicas' copies differ"
    _matches(got, train(tf, keras, steps), f"MirroredStrategy, {steps} steps")


def test_mirrored_sparse_gradients_and_loss_scaling():
    """An Embedding's IndexedSlices gradient, and the optimizer inside LossScaleOptimizer."""
    for case in ({"sparse": True}, {"loss_scale": True}):
        strategy = tf.distribute.MirroredStrategy(
            devices(2), cross_device_ops=pytfcomm.RingAllReduce()
        )
        got = train(tf, keras, 2, strategy, **case)
        assert got["replicas_equal"], f"{case}: the two replicas' copies differ"
        _matches(got, train(tf, keras, 2, **case), f"MirroredStrategy, {case}")


@pytest.mark.parametrize("ndev", [1, 2])
def test_multiworker_strategy_matches_one_process(ranks, ndev):
    outs = ranks(2, "grad_accum_workers:mwms", ndev, [free_port(), free_port()], timeout=400)
    for steps in ACCUMULATION:
        ref = outs[0][steps]["reference"]
        for r, o in enumerate(outs):
            got = o[steps]
            assert got["cross_worker_ops"] > 0, f"worker {r}: fit's reductions skipped pytfcomm"
            assert got["replicas_equal"], f"worker {r}: its replicas' copies differ"
            for key in ("weights", "optimizer"):
                for a, b in zip(got[key], outs[0][steps][key], strict=True):
                    assert np.array_equal(a, b), f"{steps} steps: worker {r} differs from worker 0"
            _matches(got, ref, f"2 workers x {ndev} CPUs, {steps} steps")
