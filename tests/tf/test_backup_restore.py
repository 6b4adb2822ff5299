"""Keras BackupAndRestore on two workers of pytfcomm.MultiWorkerMirroredStrategy, with restarts.

Keras 3's callback with one backup directory failed on 2 workers (FileExistsError, h5py's
"unable to lock file"): pytfcomm.tf.backup makes only the chief write. Together with
``pytfcomm-run --restarts`` a worker SIGKILLed in the middle of ``fit`` costs nothing but
time: the job restarts, resumes from the chief's backup and ends with the weights of a run
that was never interrupted, bit for bit. Every job here runs under ``pytfcomm-run -np 2``
on 127.0.0.1, bounded in time and killed with its process group on failure.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from _launcher_run import PY, launch
from _paths import ROOT

pytest.importorskip("tensorflow")

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

EXAMPLE = str(ROOT / "examples" / "backup_and_restore.py")
WORKERS = str(ROOT / "tests" / "workers" / "backup_workers.py")
CHIEF_FILES = ["latest.weights.h5", "training_metadata.json"]


def _weights(path: Path) -> list[np.ndarray]:
    with np.load(path) as z:
        return [z[f"arr_{i}"] for i in range(len(z.files))]


def _bitwise_equal(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
        for x, y in zip(a, b, strict=True)
    )


def test_example_resumes_after_a_killed_worker_with_the_same_weights(tmp_path: Path) -> None:
    epochs = "5"
    plain = launch("-np", "2", PY, EXAMPLE, "--backup-dir", str(tmp_path / "b_plain"),
                   "--epochs", epochs, "--out", str(tmp_path / "plain_{rank}.npz"),
                   cwd=tmp_path, timeout=200)  # fmt: skip
    assert plain.returncode == 0, plain.stderr.decode()[-3000:]
    assert b"Error" not in plain.stderr, plain.stderr.decode()[-3000:]
    assert not (tmp_path / "b_plain").exists()  # Keras deletes the backup after fit

    # Rank 1 SIGKILLs itself at batch 3 of epoch 2 (0-based) in the first run only.
    killed = launch("-np", "2", "--restarts", "1", "--kill-timeout", "5",
                    PY, EXAMPLE, "--backup-dir", str(tmp_path / "b_killed"),
                    "--epochs", epochs, "--out", str(tmp_path / "killed_{rank}.npz"),
                    "--keep-backup", "--test-kill-at", "1:2:3",
                    cwd=tmp_path, timeout=200)  # fmt: skip
    err, out = killed.stderr.decode(), killed.stdout.decode()
    assert killed.returncode == 0, err[-3000:]
    assert "pytfcomm-run: rank 1 died (SIGKILL); restarting the job (1 of 1)" in err, err[-3000:]
    # Run 1 found the chief's backup of epochs 0-1 and nothing any other worker wrote.
    assert f"[0] run 1: backup_dir holds {CHIEF_FILES}" in out, out
    for r in range(2):
        assert f"[{r}] worker {r}, run 0: training from epoch 0" in out
        assert f"[{r}] worker {r}, run 1: training from epoch 2" in out, out
    assert sorted(p.name for p in (tmp_path / "b_killed").iterdir()) == CHIEF_FILES
    assert re.findall(r"restarting the job", err) == ["restarting the job"]

    ref = _weights(tmp_path / "plain_0.npz")
    assert ref and any(float(np.abs(w).max()) > 0 for w in ref)
    for name in ("plain_1", "killed_0", "killed_1"):
        assert _bitwise_equal(_weights(tmp_path / f"{name}.npz"), ref), name


def test_plain_keras_callback_on_two_workers_one_directory(tmp_path: Path) -> None:
    res = launch("-np", "2", PY, WORKERS, "keras3", str(tmp_path), cwd=tmp_path, timeout=200)
    assert res.returncode == 0, res.stderr.decode()[-3000:]
    outs = [json.loads((tmp_path / f"keras3.{r}.json").read_text()) for r in range(2)]
    assert outs[0]["repeats"] == outs[1]["repeats"]
    reference = outs[0]["repeats"][0][1]
    # Three fits in a row, one directory: each trains every epoch, ends with the same
    # weights, and leaves no backup behind.
    assert outs[0]["repeats"] == [[4, reference, False]] * 3
    for o in outs:
        # Leftovers of a killed save are cleared; only the chief's files (and .bkp) remain.
        assert o["kept"] == [2, sorted([*CHIEF_FILES, *(f + ".bkp" for f in CHIEF_FILES)])]
        # An unreadable current backup: the .bkp pair (epoch 1) is used, 3 epochs remain.
        assert o["from_bkp"] == [3, reference]
        # Metadata older than the weights: resume from the weights' epoch (2 of 4 left),
        # ending exactly where an uninterrupted fit ends.
        assert o["torn"] == [2, reference]
        assert "found different backups" in o["split"], o["split"]
        assert "worker 0: epoch 1, worker 1: no backup" in o["split"]


def test_tf_keras_callback_restarts_on_two_workers(tmp_path: Path) -> None:
    pytest.importorskip("tf_keras")
    res = launch("-np", "2", "--restarts", "1", "--kill-timeout", "5",
                 PY, WORKERS, "tf_keras", str(tmp_path), cwd=tmp_path, timeout=200)  # fmt: skip
    err = res.stderr.decode()
    assert res.returncode == 0, err[-3000:]
    assert "rank 1 died (SIGKILL); restarting the job (1 of 1)" in err
    outs = [json.loads((tmp_path / f"tf_keras.{r}.json").read_text()) for r in range(2)]
    assert outs[0]["weights"] == outs[1]["weights"]
    for o in outs:
        # tf-keras keeps the chief's checkpoint in backup_dir/chief (workers: workertemp_i,
        # removed); the restarted run resumes at epoch 2, where rank 1 died.
        assert (o["restart"], o["seen"], o["epochs"], o["left"]) == (1, ["chief"], [2, 3],
                                                                    ["chief"])  # fmt: skip


def test_single_process_keeps_keras_behaviour(tmp_path: Path) -> None:
    import keras

    from pytfcomm.tf import backup

    assert backup.install() and backup.install()  # idempotent
    assert getattr(keras.callbacks.BackupAndRestore, "_pytfcomm_multiworker", False)

    class Interrupt(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if epoch == 2:
                raise RuntimeError("interrupted")

    x = np.arange(40, dtype=np.float32).reshape(10, 4) / 40
    y = np.ones((10, 1), np.float32)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    cb = keras.callbacks.BackupAndRestore(str(tmp_path / "b"))
    with pytest.raises(RuntimeError, match="interrupted"):
        model.fit(x, y, epochs=5, verbose=0, callbacks=[cb, Interrupt()])
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == CHIEF_FILES
    history = model.fit(x, y, epochs=5, verbose=0, callbacks=[cb])
    assert len(history.history["loss"]) == 3  # resumed at epoch 2, as Keras does
    assert not (tmp_path / "b").exists()
