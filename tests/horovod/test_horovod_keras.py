"""pytfcomm.horovod.tensorflow.keras: Keras 3 fit with Horovod's callbacks, in 2 processes."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("keras")


def test_fit_with_horovod_callbacks_and_load_model(ranks, tmp_path):
    out = ranks(2, "horovod_workers:keras_fit", str(tmp_path), timeout=300)
    a, b = out
    # The broadcast made the differently seeded models one; averaged gradients kept them so.
    for wa, wb in zip(a["weights"], b["weights"], strict=True):
        np.testing.assert_allclose(wa, wb, rtol=1e-6)
    # MetricAverageCallback: every rank logs the same (averaged) loss.
    np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-6)
    # Warmup from 0.1/size to 0.1 over 2 epochs, per batch (Horovod's formula):
    # at the end of epoch e the multiplier is 1/size * ((e+1) * (size-1)/2 + 1).
    np.testing.assert_allclose(a["lr"], [0.075, 0.1], rtol=1e-5)
    np.testing.assert_allclose(a["schedule_lr"], [0.1, 0.05], rtol=1e-5)
    # Horovod keeps the optimizer's class name (so saved models load as the plain one).
    assert a["opt_class"] == "SGD"
    assert a["callable_variables"]  # Horovod's opt.variables() works besides opt.variables
    assert a["loaded_distributed"] and a["loaded_iterations"] > 0
    for wa, wb in zip(a["loaded_weights"], b["loaded_weights"], strict=True):
        np.testing.assert_allclose(wa, wb, rtol=1e-6)
    assert "callback.filepath" in a["no_path"]


def test_tf_keras_fit_with_horovod_callbacks(ranks):
    pytest.importorskip("tf_keras")
    a, b = ranks(2, "horovod_workers:tf_keras_fit", timeout=300, env={"TF_USE_LEGACY_KERAS": "1"})
    assert a["module"].startswith("tf_keras") and a["callback_base"].startswith("tf_keras")
    for wa, wb in zip(a["weights"], b["weights"], strict=True):
        np.testing.assert_allclose(wa, wb, rtol=1e-6)
    np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-6)
    np.testing.assert_allclose(a["lr"], [0.075, 0.1], rtol=1e-5)


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras", "tf_keras_legacy"])
def test_backward_passes_per_step(ranks, flavour):
    """Horovod's backward_passes_per_step=3: gradients summed locally for 3 calls, then
    all-reduced (and divided by 3 with average_aggregated_gradients) and applied; the
    workers compare every step's weights with a NumPy reference (tests/workers)."""
    env = {}
    if flavour != "keras3":
        pytest.importorskip("tf_keras")
        env["TF_USE_LEGACY_KERAS"] = "1"
    a, b = ranks(2, "horovod_workers:optimizer_accumulation", flavour, timeout=300, env=env)
    assert a["module"].startswith("keras" if flavour == "keras3" else "tf_keras"), a["module"]
    for key in ("eager_weights", "function_weights", "fit_False_weights", "fit_True_weights"):
        np.testing.assert_array_equal(a[key], b[key])  # one model on both ranks
    # 7 calls: applied after the 3rd and 6th; iterations counts every call, as Horovod's.
    for key in ("eager_iterations", "function_iterations", "fit_False_iterations"):
        assert a[key] == b[key] == 7, (key, a[key], b[key])
    # Nothing moves until the 3rd call.
    assert a["eager_weights"][0] == a["eager_weights"][1] == [0.5, 0.0, -1.0]
    assert a["eager_weights"][2] != a["eager_weights"][1]
