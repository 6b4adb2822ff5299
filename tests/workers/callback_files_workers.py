"""Worker programs for tests/tf/test_callback_files.py, run under ``pytfcomm-run -np 2``.

``python callback_files_workers.py MODE OUTDIR REPEATS``; MODE is ``keras3`` or
``tf_keras`` (``TF_USE_LEGACY_KERAS=1``). Each worker writes OUTDIR/<mode>.<rank>.json.
``keras3`` adds one more fit in which worker 1's ``val_loss`` never improves (a callback
edits its logs): the workers must still save together, as the chief decides.

Every repeat is one ``fit`` of 3 epochs under ``pytfcomm.MultiWorkerMirroredStrategy``
with, on the same paths on every worker, ``ModelCheckpoint(save_best_only=True)`` of the
weights (``best.weights.h5``) and of the whole model (``best.keras``) and ``TensorBoard``
(``tb``). Each worker records where its model was saved (``save``/``save_weights`` of
its model, as the callbacks call them), the monitored ``val_loss`` of every epoch and
the weights after every epoch; after a barrier it loads both checkpoints and lists what
is on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

EPOCHS = 3


def _digest(weights) -> str:
    h = hashlib.sha256()
    for w in weights:
        h.update(w.tobytes())
    return h.hexdigest()


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _model(k, strategy):
    k.utils.set_random_seed(0)
    with strategy.scope():
        model = k.Sequential([k.Input((12,)), k.layers.Dense(8, activation="relu"),
                              k.layers.Dense(1)])  # fmt: skip
        model.compile(k.optimizers.Adam(1e-2), "mse")
    return model


def _data():
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(7)
    x = rng.standard_normal((128, 12)).astype(np.float32)
    y = x[:, :6].sum(axis=1, keepdims=True) - x[:, 6:].sum(axis=1, keepdims=True)
    train = tf.data.Dataset.from_tensor_slices((x[:96], y[:96])).batch(32)
    val = tf.data.Dataset.from_tensor_slices((x[96:], y[96:])).batch(16)
    return train, val


def _one_fit(k, strategy, shared: Path, skew: bool = False) -> dict:
    import numpy as np

    model = _model(k, strategy)
    saved: list[str] = []
    for name in ("save", "save_weights"):  # where the callbacks make this worker write
        original = getattr(model, name)

        def record(path, *a, _original=original, **kw):
            saved.append(os.path.relpath(str(path), shared))
            return _original(path, *a, **kw)

        setattr(model, name, record)
    per_epoch: list[str] = []
    weights: list[list] = []

    class Record(k.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            w = [np.array(v) for v in model.get_weights()]
            weights.append(w)
            per_epoch.append(_digest(w))

    class Skew(k.callbacks.Callback):  # worker 1 sees a val_loss that never improves
        def on_epoch_end(self, epoch, logs=None):
            if strategy.communicator.rank == 1:
                logs["val_loss"] = 1e9

    callbacks = [
        Record(),
        *([Skew()] if skew else []),
        k.callbacks.ModelCheckpoint(
            str(shared / "best.weights.h5"), save_best_only=True, save_weights_only=True
        ),
        k.callbacks.ModelCheckpoint(str(shared / "best.keras"), save_best_only=True),
        k.callbacks.TensorBoard(str(shared / "tb")),
    ]
    train, val = _data()
    history = model.fit(train, validation_data=val, epochs=EPOCHS, verbose=0,
                        callbacks=callbacks, shuffle=False)  # fmt: skip
    strategy.communicator.barrier()  # every worker is done writing
    val_loss = [float(v) for v in history.history["val_loss"]]
    best = int(np.argmin(val_loss))  # the first minimum: what save_best_only keeps
    fresh = _model(k, strategy)
    fresh.load_weights(str(shared / "best.weights.h5"))
    whole = k.models.load_model(str(shared / "best.keras"))
    out = {
        "pid": os.getpid(),
        "saved": saved,
        "val_loss": val_loss,
        "best": best,
        "weights_file_is_best": _digest(fresh.get_weights()) == per_epoch[best],
        "keras_file_is_best": _digest(whole.get_weights()) == per_epoch[best],
        "listing": _listing(shared),
        "events": _events(shared / "tb"),
    }
    strategy.communicator.barrier()  # every worker has read before the next repeat
    return out


def _events(tb: Path) -> dict:
    """Per events file under ``tb``: its path and the epoch_loss steps it holds."""
    import tensorflow as tf

    out = {}
    for path in sorted(tb.rglob("events.out.tfevents.*")):
        steps = []
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            steps += [event.step for v in event.summary.value if v.tag == "epoch_loss"]
        out[str(path.relative_to(tb))] = steps
    return out


def main() -> None:
    mode, out, repeats = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    if mode == "tf_keras":
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
        import tf_keras as k
    else:
        import keras as k
    import pytfcomm

    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    rank = strategy.communicator.rank
    runs = [_one_fit(k, strategy, out / f"{mode}{i}") for i in range(repeats)]
    if mode == "keras3":  # a monitored value that differs per worker
        runs.append(_one_fit(k, strategy, out / "skewed", skew=True))
    (out / f"{mode}.{rank}.json").write_text(json.dumps(runs))


if __name__ == "__main__":
    main()
