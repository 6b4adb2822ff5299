"""Keras callbacks that write files, on two workers of pytfcomm.MultiWorkerMirroredStrategy.

``ModelCheckpoint`` and ``TensorBoard`` with one path on every worker: Keras 3's callbacks
wrote from every worker (h5py's "unable to lock file" in 3 of 4 runs, two writers of one
``.keras`` file, one TensorBoard events file per worker). As TF documents for
multi-worker training, the chief writes the user's path and every other worker writes
into ``workertemp_<id>`` next to it, removed at once. Every job runs under
``pytfcomm-run -np 2`` on 127.0.0.1, bounded in time (tests/_launcher_run.launch).
"""

from __future__ import annotations

import json
from pathlib import Path

import _paths
import pytest
from _launcher_run import PY, launch

pytest.importorskip("tensorflow")

pytestmark = [
    pytest.mark.timeout(400),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

WORKERS = str(_paths.WORKERS / "callback_files_workers.py")
REPEATS = 3
WEIGHTS, MODEL = "best.weights.h5", "best.keras"


def _run(tmp_path: Path, mode: str, repeats: int) -> tuple[list[list[dict]], str]:
    res = launch("-np", "2", PY, WORKERS, mode, str(tmp_path), str(repeats),
                 cwd=tmp_path, timeout=360)  # fmt: skip
    err = res.stderr.decode()
    errors = "\n".join(line for line in err.splitlines() if "Error" in line)
    assert res.returncode == 0, errors[:3000] + "\n...\n" + err[-3000:]
    assert "Error" not in err, errors[:3000]
    return [json.loads((tmp_path / f"{mode}.{r}.json").read_text()) for r in range(2)], err


def _check(runs: list[list[dict]], repeats: int) -> None:
    chief, worker = runs
    assert len(chief) == len(worker) == repeats
    for c, w in zip(chief, worker, strict=True):
        # The monitored metric is the all-reduced one: every worker decides alike.
        assert c["val_loss"] == w["val_loss"] and len(c["val_loss"]) == 3
        # Only the chief wrote the user's paths; worker 1 wrote into its own
        # temporary directory (as many times: it takes part in every save).
        assert c["saved"] and all(p in (WEIGHTS, MODEL) for p in c["saved"]), c["saved"]
        assert [p.split("/")[-1] for p in w["saved"]] == c["saved"], w["saved"]
        assert all(p.startswith("workertemp_1/") for p in w["saved"]), w["saved"]
        # One checkpoint of each kind, one log directory, no temporary directory left.
        for o in (c, w):
            assert not [p for p in o["listing"] if "workertemp" in p], o["listing"]
            assert [p for p in o["listing"] if "/" not in p] == sorted([WEIGHTS, MODEL, "tb"])
            # Both files hold the best epoch's weights and load on every worker.
            assert o["weights_file_is_best"] and o["keras_file_is_best"]
            # One events file per split, the chief's (its pid is in the name), with
            # the loss of every epoch once.
            events = o["events"]
            assert sorted(p.split("/")[0] for p in events) == ["train", "validation"], events
            assert all(f".{c['pid']}." in p for p in events), (events, c["pid"])
            train = next(steps for p, steps in events.items() if p.startswith("train/"))
            assert train == [0, 1, 2], events


def test_keras3_checkpoint_and_tensorboard_one_path(tmp_path: Path) -> None:
    (chief, worker), err = _run(tmp_path, "keras3", REPEATS)
    _check([chief[:REPEATS], worker[:REPEATS]], REPEATS)
    # Worker 1's monitored value never improves after epoch 0, the chief's does: worker
    # 1 still saves whenever the chief does (into its own directory) and says why.
    c, w = chief[REPEATS], worker[REPEATS]
    assert w["val_loss"] == [1e9] * 3 and c["val_loss"] != w["val_loss"]
    assert c["saved"] == [WEIGHTS, MODEL] * len(_improvements(c["val_loss"]))
    assert [p.split("/")[-1] for p in w["saved"]] == c["saved"], w["saved"]
    assert all(p.startswith("workertemp_1/") for p in w["saved"]), w["saved"]
    assert "[1] " in err and "'val_loss' is not the same on every worker" in err, err[-3000:]
    assert c["weights_file_is_best"] and c["keras_file_is_best"]
    assert not [p for p in c["listing"] if "workertemp" in p], c["listing"]


def _improvements(values: list[float]) -> list[int]:
    """The epochs at which save_best_only (mode min) saves."""
    best, out = float("inf"), []
    for i, v in enumerate(values):
        if v < best:
            best, out = v, [*out, i]
    return out


def test_tf_keras_checkpoint_and_tensorboard_one_path(tmp_path: Path) -> None:
    pytest.importorskip("tf_keras")
    runs, _ = _run(tmp_path, "tf_keras", REPEATS)
    _check(runs, REPEATS)
