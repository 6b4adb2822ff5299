"""pytfcomm.MultiWorkerMirroredStrategy under pytfcomm-run --elastic: in-place recovery.

Three ranks run tests/workers/elastic_strategy_workers.py (a custom training loop: a
Keras 3 linear model, SGD with momentum, a tf.function train step run by
``strategy.run``, a distributed dataset) through pytfcomm-run over TCP (127.0.0.1 only,
free ports, the launcher bounded and killed with its process group on failure). The
test SIGKILLs one mid-loop: the two others re-form, build a new strategy, model and
optimizer, load rank 0's in-memory commit and finish in the same processes, with
identical weights and momenta, equal within float32 rounding to one process training
on every step's whole global batch (NumPy, float64). The old strategy's train step,
called after the re-forming, fails at once with a clear error. The time from the
SIGKILL to the survivors' next completed step is printed (docs/elastic.md quotes it),
never asserted. The job runs once for both tests (a module fixture).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _launcher_run import PY, _env, started, wait_files
from _paths import WORKERS

pytest.importorskip("tensorflow")

WORKER = str(WORKERS / "elastic_strategy_workers.py")
STEPS, AT = 8, 4  # the victim (started as rank 2) is lost at step AT
RTOL, ATOL = 1e-5, 1e-6  # float32 steps (reduction order differs by size) vs a float64 reference


def _reference() -> list[np.ndarray]:
    """The weights and momenta after STEPS steps of one process on every global batch."""
    sys.path.insert(0, str(WORKERS))
    try:
        from elastic_strategy_workers import LR, MOMENTUM, batch
    finally:
        sys.path.remove(str(WORKERS))
    w, b = np.zeros((4, 1)), np.zeros(1)  # Dense(1) kernel and bias, as the workers load
    mw, mb = np.zeros_like(w), np.zeros_like(b)
    return _reference_from(w, b, mw, mb, LR, MOMENTUM, batch)


def _reference_from(w, b, mw, mb, lr, momentum, batch) -> list[np.ndarray]:
    for step in range(STEPS):
        x, y = (a.astype(np.float64) for a in batch(step))
        err = x @ w + b - y
        gw, gb = 2 * x.T @ err / len(x), 2 * err.sum(axis=0) / len(x)
        mw, mb = momentum * mw - lr * gw, momentum * mb - lr * gb  # Keras 3 SGD
        w, b = w + mw, b + mb
    return [w.ravel(), b.ravel(), mw.ravel(), mb.ravel()]


def _run_job(out: Path, mode: str) -> float:
    """Runs the job in ``mode`` (loop or fit) into ``out``; returns the time of the kill."""
    env = _env(PYTFCOMM_TRANSPORT="tcp", TF_CPP_MIN_LOG_LEVEL="2")
    args = ("-np", "3", "--elastic", "--min-np", "2", "--bind-to", "none")
    worker = (PY, WORKER, str(out), str(STEPS), str(AT), mode)
    with started(*args, *worker, cwd=out, env=env) as proc:
        wait_files([out / "victim"], timeout=120)
        victim = int((out / "victim").read_text())
        time.sleep(0.3)  # the survivors wait in step AT's collectives
        t_kill = time.time()
        os.kill(victim, signal.SIGKILL)
        _, err = proc.communicate(timeout=150)
    text = err.decode(errors="replace")
    assert proc.returncode == 0, text[-4000:]
    assert "the job goes on without it (--elastic)" in text, text[-3000:]
    assert "epoch 1: 2 rank(s) go on" in text and "restarting" not in text, text[-3000:]
    assert not (out / "result2.json").exists()
    return t_kill


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    out = tmp_path_factory.mktemp("elastic_strategy")
    return out, _run_job(out, "loop")


def _result(out: Path, worker: int) -> dict:
    return json.loads((out / f"result{worker}.json").read_text())


def test_survivors_rebuild_the_strategy_in_place(job: tuple[Path, float]) -> None:
    _check_survivors(*job, "strategy")


def test_keras_fit_per_epoch_recovers_in_place(tmp_path: Path) -> None:
    # docs/elastic.md's fit recipe: one fit(epochs=1) per step, a new strategy, model and
    # compile after reform(), rank 0's commit loaded; the same reference as the loop.
    _check_survivors(tmp_path, _run_job(tmp_path, "fit"), "fit")


def _check_survivors(out: Path, t_kill: float, what: str) -> None:
    want = _reference()
    results = [_result(out, i) for i in (0, 1)]
    for i, res in enumerate(results):
        starts = (out / f"starts{i}.jsonl").read_text().splitlines()
        assert [json.loads(line)["pid"] for line in starts] == [res["pid"]]  # never restarted
        assert res["epoch"] == 1
        assert res["seen"] == [[i, 3]] * AT + [[i, 2]] * (STEPS - AT), res["seen"]
        # kernel, bias, then the optimizer's: iterations, learning rate, the two momenta
        weights = res["weights"]
        assert len(weights) == 6 and weights[2] == [STEPS], weights
        got = [weights[0], weights[1], weights[4], weights[5]]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
        t = res["times"]
        print(
            f"{what} rank {i}: SIGKILL -> error {t['error'] - t_kill:.3f} s "
            f"({t['error_type']}), -> new strategy and commit {t['reformed'] - t_kill:.3f} s, "
            f"-> next step done {t['next_step'] - t_kill:.3f} s"
        )
    assert results[0]["weights"] == results[1]["weights"]  # bitwise the same on both


def test_the_old_strategy_fails_clearly_after_reform(job: tuple[Path, float]) -> None:
    # After reform() each survivor calls the old strategy's train step: the tf.function
    # traced before (its ops hold the old communicator), then one traced anew. Both fail
    # at once (the job finished, so nothing hung) and are not recoverable: re-forming
    # again would not help, the program must use the new strategy.
    out, _ = job
    for i in (0, 1):
        stale = _result(out, i)["stale"]
        traced, retraced = stale["traced"], stale["retraced"]
        assert traced["type"] == "FailedPreconditionError", traced
        assert "this communicator was closed" in traced["message"], traced
        # raised while tracing: AutoGraph may wrap it in a StagingError with its text
        assert retraced["type"] in ("CommClosedError", "StagingError"), retraced
        assert "CommClosedError" in retraced["message"] or retraced["type"] == "CommClosedError"
        assert "was replaced by pytfcomm.elastic.reform() (now rank " in retraced["message"]
        assert f"(rank {i} of 3)" in retraced["message"], retraced
        assert not traced["recoverable"] and not retraced["recoverable"]
