"""Horovod's Keras elastic recipe recovers in place under pytfcomm-run --elastic.

Three ranks run tests/workers/elastic_keras_inplace_script.py through pytfcomm-run
(127.0.0.1 only, free ports, the launcher bounded and killed with its process group on
failure): ``model.fit`` under ``hvd.elastic.run`` with ``KerasState`` and the three
elastic callbacks, unchanged from Horovod's recipe, for Keras 3 and tf-keras. Worker 2
SIGKILLs itself mid-epoch. The two others must finish in their first processes (no
restart), with identical weights equal to a float64 NumPy run of the same membership
schedule, having trained exactly EPOCHS * STEPS batches: the interrupted epoch resumes
at the committed batch. The time from the SIGKILL to the survivors' next finished batch
is printed (docs/elastic.md quotes it), never asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _launcher_run import PY, _env, launch
from _paths import WORKERS

pytest.importorskip("tensorflow")

SCRIPT = str(WORKERS / "elastic_keras_inplace_script.py")
EPOCHS, STEPS = 3, 4
KILL_EPOCH, KILL_BATCH = 1, 2  # worker 2 dies before this batch: 6 steps done with 3 ranks
DONE = KILL_EPOCH * STEPS + KILL_BATCH
LR, MOMENTUM = 0.05, 0.9


def _batch(worker: int) -> tuple[np.ndarray, np.ndarray]:
    """The worker's batch, as the script makes it (in float64)."""
    x = ((np.arange(24).reshape(8, 3) % 5) - 2) * (worker + 1) / 4.0
    return x, x @ np.array([[1.0], [-2.0], [0.5]]) + 1.0 + 0.5 * worker


def _reference(members_per_step: list[tuple[int, ...]]) -> np.ndarray:
    """Kernel and bias after one SGD-with-momentum step per entry, the mean squared
    error's gradient averaged over the workers it names (Keras' formula, float64)."""
    w, m = np.zeros(4), np.zeros(4)
    for members in members_per_step:
        grads = []
        for i in members:
            x, y = _batch(i)
            r = x @ w[:3, None] + w[3] - y
            grads.append(np.concatenate([(2 * x.T @ r / len(x)).ravel(), [2 * r.sum() / len(x)]]))
        m = MOMENTUM * m - LR * np.mean(grads, axis=0)
        w = w + m
    return w


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_keras_fit_recipe_recovers_in_place(tmp_path: Path, flavour: str) -> None:
    pytest.importorskip("keras" if flavour == "keras3" else "tf_keras")
    env = _env(PYTFCOMM_TRANSPORT="tcp", TF_USE_LEGACY_KERAS="1" if flavour == "tf_keras" else "0")
    args = (str(tmp_path), str(EPOCHS), str(STEPS), str(KILL_EPOCH), str(KILL_BATCH))
    res = launch("-np", "3", "--elastic", "--min-np", "2", "--bind-to", "none", PY, SCRIPT,
                 *args, cwd=tmp_path, env=env, timeout=300)  # fmt: skip
    text = res.stderr.decode(errors="replace")
    assert res.returncode == 0, text[-3000:]
    assert "was killed by SIGKILL (exit code 137); the job goes on without it" in text, text
    assert "restarting" not in text, text[-3000:]
    assert not (tmp_path / "rank2.json").exists()
    total = EPOCHS * STEPS
    want = _reference([(0, 1, 2)] * DONE + [(0, 1)] * (total - DONE))
    results = [json.loads((tmp_path / f"rank{i}.json").read_text()) for i in (0, 1)]
    killed_at = float((tmp_path / "killed_at").read_text())
    for i, o in enumerate(results):
        # the first process, re-formed once: fit ran from the start, then from the commit
        # (epoch 1, 2 of its batches done), and the interrupted epoch did only the rest
        assert o["epoch"] == 1 and o["resets"] == [[i, 2]], o
        assert o["starts"] == [[0, 0], [KILL_EPOCH, KILL_BATCH]], o
        assert o["seen"] == [[i, 3]] * DONE + [[i, 2]] * (total - DONE), o["seen"]
        assert o["iterations"] == total and o["state"] == [EPOCHS, 0], o
        # float32 training against the float64 reference
        np.testing.assert_allclose(np.concatenate(o["weights"]), want, rtol=1e-5, atol=1e-6)
        print(
            f"{flavour} rank {i}: SIGKILL -> next batch done {o['next_step_at'] - killed_at:.3f} s"
        )
    assert results[0]["weights"] == results[1]["weights"]
    for o in results:  # divided by the new size, 2, not the first one, 3
        assert o["sparse_type"] == "IndexedSlices", o["sparse_type"]
        assert o["sparse_average"] == [[0.5, 0.5], [1.0, 1.0], [0.0, 0.0]], o
