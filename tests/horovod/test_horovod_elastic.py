"""hvd.elastic on pytfcomm-run --restarts: a rank crashes, the launcher restarts the job,
and training resumes from the last commit (TF variables: bitwise the uninterrupted
result; Keras: the committed epoch and batch, the same weights on every rank)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _paths import WORKERS

pytest.importorskip("tensorflow")

LAUNCHER = Path(sys.executable).with_name("pytfcomm-run")


def _launch(tmp_path: Path, script: str, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTFCOMM_", "HOROVOD_"))}
    env.update(PYTFCOMM_TIMEOUT="60", PYTFCOMM_CONNECT_TIMEOUT="60")
    return subprocess.run(
        [str(LAUNCHER), "-np", "2", *extra, sys.executable, str(WORKERS / script), str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=240,
    )


def _results(tmp_path: Path) -> list[dict]:
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


def test_tensorflow_state_resumes_from_the_commit(tmp_path: Path) -> None:
    res = _launch(tmp_path, "elastic_tf_script.py", "--restarts", "1")
    assert res.returncode == 0, res.stderr.decode()[-3000:]
    w = np.zeros(4, np.float32)
    for step in range(8):  # the uninterrupted run, in float32 as TF does it
        g = (
            np.arange(4, dtype=np.float32) * (step + 1) * 1
            + np.arange(4, dtype=np.float32) * (step + 1) * 2
        ) / np.float32(2)
        w = w - np.float32(0.01) * g
    for o in _results(tmp_path):
        assert o["attempt"] == 1 and o["first"] == 5 and len(o["resets"]) == 1  # once, pre-sync
        np.testing.assert_allclose(o["w"], w, rtol=1e-6)
    # the commit directory the launcher made is gone with it
    assert not any(p.name.startswith("pytfcomm-elastic-") for p in tmp_path.iterdir())


def test_without_restarts_the_crash_fails_the_job(tmp_path: Path) -> None:
    res = _launch(tmp_path, "elastic_tf_script.py")
    assert res.returncode == 3, res.stderr.decode()[-3000:]


def test_keras_state_resumes_at_the_committed_epoch(tmp_path: Path) -> None:
    res = _launch(tmp_path, "elastic_keras_script.py", "--restarts", "1")
    assert res.returncode == 0, res.stderr.decode()[-3000:]
    a, b = _results(tmp_path)
    for o in (a, b):
        assert o["attempt"] == 1 and o["epoch"] == 4
        # rank 1 died before batch 3 of epoch 2: the last commit holds the 3 batches of
        # epoch 2 done, though CommitStateCallback is listed before
        # UpdateBatchStateCallback (the order of Horovod's examples)
        assert o["starts"] == [[2, 3]]
        # and the resumed epoch ran only its 3 other batches: 4 epochs of 6 in all
        assert o["iterations"] == 24
    assert a["w"] == b["w"]
