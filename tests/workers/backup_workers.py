"""Worker programs for tests/tf/test_backup_restore.py, run under ``pytfcomm-run -np 2``.

``python backup_workers.py MODE OUTDIR``; each worker writes OUTDIR/<mode>.<rank>.json.

* ``keras3``: the plain ``keras.callbacks.BackupAndRestore`` with one backup directory
  on two workers of ``pytfcomm.MultiWorkerMirroredStrategy``:
  - three ``fit`` calls in a row (a fresh model each; Keras deletes the backup after
    each): every one must finish (before the fix: FileExistsError, h5py's "unable to
    lock file");
  - ``double_checkpoint=True, delete_checkpoint=False`` over what a killed save left
    (a staging file, a worker's temporary directory): what remains is the chief's
    files and their ``.bkp`` copies only; then, with the current weights file made
    unreadable, every worker resumes from the ``.bkp`` pair;
  - a backup whose ``training_metadata.json`` is older than its weights (the chief
    killed between moving the two files into place): ``fit`` resumes from the epoch
    the weights carry;
  - workers that see different backups (rank 1 points at an empty directory, as on a
    filesystem that is not shared): ``ConfigError`` on both, not a silent divergence.
* ``tf_keras``: the same one-directory ``fit`` with tf-keras (``TF_USE_LEGACY_KERAS=1``);
  in the first run (``PYTFCOMM_RESTART_COUNT=0``) rank 1 SIGKILLs itself at epoch 2.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

EPOCHS = 4


def _data():
    import numpy as np

    rng = np.random.default_rng(7)
    x = rng.standard_normal((128, 12)).astype(np.float32)
    y = (x[:, :6].sum(axis=1) > x[:, 6:].sum(axis=1)).astype(np.int64)
    return x, y


def _model(k, strategy):
    k.utils.set_random_seed(0)
    with strategy.scope():
        model = k.Sequential([k.Input((12,)), k.layers.Dense(8, activation="relu"),
                              k.layers.Dense(2)])  # fmt: skip
        model.compile(k.optimizers.Adam(1e-2),
                      k.losses.SparseCategoricalCrossentropy(from_logits=True))  # fmt: skip
    return model


def _fit(k, strategy, backup, epochs=EPOCHS, **kw):
    import numpy as np
    import tensorflow as tf

    x, y = _data()
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    model = _model(k, strategy)
    callbacks = [k.callbacks.BackupAndRestore(backup, **kw)]
    history = model.fit(data, epochs=epochs, shuffle=False, verbose=0, callbacks=callbacks)
    return len(history.history["loss"]), [np.array(w) for w in model.get_weights()]


def _digest(weights) -> str:
    import hashlib

    h = hashlib.sha256()
    for w in weights:
        h.update(w.tobytes())
    return h.hexdigest()


def keras3(out: Path) -> dict:
    import keras

    import pytfcomm

    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    comm = strategy.communicator
    rank = comm.rank
    res: dict = {}

    shared = out / "shared"
    repeats = []
    for _ in range(3):
        epochs, weights = _fit(keras, strategy, str(shared))
        repeats.append([epochs, _digest(weights), shared.exists()])
    res["repeats"] = repeats

    kept = out / "kept"
    if rank == 0:  # what a killed chief and a killed worker 1 left behind
        (kept / ".pytfcomm-staging").mkdir(parents=True)
        (kept / ".pytfcomm-staging" / "latest.weights.h5").write_bytes(b"torn")
        (kept / "workertemp_1").mkdir()
        (kept / "workertemp_1" / "latest.weights.h5").write_bytes(b"torn")
    comm.barrier()
    epochs, _ = _fit(keras, strategy, str(kept), epochs=2, double_checkpoint=True,
                     delete_checkpoint=False)  # fmt: skip
    comm.barrier()
    res["kept"] = [epochs, sorted(os.listdir(kept))]

    # The current weights are unreadable: every worker falls back to the .bkp pair
    # (epoch 1) and trains 3 more epochs, ending where an uninterrupted fit ends.
    if rank == 0:
        (kept / "latest.weights.h5").write_bytes(b"not an HDF5 file")
    comm.barrier()
    epochs, weights = _fit(keras, strategy, str(kept), epochs=EPOCHS)
    res["from_bkp"] = [epochs, _digest(weights)]

    # A backup of epoch 2 whose metadata still says 1: the weights are the truth.
    torn = out / "torn"
    _fit(keras, strategy, str(torn), epochs=2, delete_checkpoint=False)
    comm.barrier()
    if rank == 0:
        (torn / "training_metadata.json").write_text(json.dumps({"epoch": 1, "batch": 0}))
    comm.barrier()
    epochs, weights = _fit(keras, strategy, str(torn), epochs=EPOCHS)
    res["torn"] = [epochs, _digest(weights)]  # to equal an uninterrupted fit: repeats[0]

    # Rank 1 sees no backup where the chief sees one (each worker its own directory, as
    # on storage that is not shared): both must refuse.
    mine = out / f"split{rank}"
    _fit(keras, strategy, str(mine), epochs=1, delete_checkpoint=rank == 1)
    comm.barrier()
    try:
        _fit(keras, strategy, str(mine), epochs=2)
        res["split"] = "no error"
    except pytfcomm.ConfigError as exc:
        res["split"] = str(exc)
    return res


def tf_keras(out: Path) -> dict:
    import tf_keras

    import pytfcomm

    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    rank, restart = strategy.communicator.rank, int(os.environ["PYTFCOMM_RESTART_COUNT"])
    backup = out / "tfk"
    seen = sorted(os.listdir(backup)) if backup.exists() else []
    started: list[int] = []

    class Kill(tf_keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            started.append(epoch)
            if rank == 1 and restart == 0 and epoch == 2:
                os.kill(os.getpid(), signal.SIGKILL)

    import tensorflow as tf

    x, y = _data()
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    model = _model(tf_keras, strategy)
    model.fit(
        data,
        epochs=EPOCHS,
        shuffle=False,
        verbose=0,
        callbacks=[
            tf_keras.callbacks.BackupAndRestore(str(backup), delete_checkpoint=False),
            Kill(),
        ],
    )
    # Every worker has finished fit (and so removed its own workertemp_<i> checkpoint)
    # before any lists the directory: without this rank 0 can list while rank 1 is
    # still deleting its temporary copy.
    strategy.communicator.barrier()
    return {
        "restart": restart,
        "seen": seen,
        "epochs": started,
        "weights": _digest(model.get_weights()),
        "left": sorted(os.listdir(backup)),
    }


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    if mode == "tf_keras":
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
    res = {"keras3": keras3, "tf_keras": tf_keras}[mode](out)
    rank = os.environ["PYTFCOMM_RANK"]
    (out / f"{mode}.{rank}.json").write_text(json.dumps(res))


if __name__ == "__main__":
    main()
