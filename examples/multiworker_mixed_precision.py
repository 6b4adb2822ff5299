"""Keras 3 mixed precision on several workers: float16 compute, loss scaling, pytfcomm.

    pytfcomm-run -np 2 python examples/multiworker_mixed_precision.py [--epochs 3]

The ``mixed_float16`` policy makes layers compute in float16 with float32
variables, and Keras wraps the optimizer in a ``LossScaleOptimizer``, whose
dynamic loss scale skips a step (inside a ``tf.cond``) when a gradient is not
finite. ``steps_per_execution=4`` runs four steps per call in a
``tf.while_loop``. pytfcomm matches every collective across workers by key,
so the workers meet in the same reductions whatever order TF runs them in
(docs/multiworker.md, "Ordering"). ``predict`` on the 360 test rows splits the
last batch unevenly between workers (an all-gather of different sizes).

Each worker prints one line, ``result: ...``, with its loss, test accuracy,
loss scale and a digest of its weights: the digests are equal on every worker.
"""

from __future__ import annotations

import argparse
import hashlib
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64, help="global batch size")
    args = ap.parse_args()

    import keras
    import numpy as np
    import tensorflow as tf
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    import pytfcomm

    keras.mixed_precision.set_global_policy("mixed_float16")
    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    comm = strategy.communicator

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0)
    train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(args.batch_size)

    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((64,)),
                keras.layers.Dense(128, activation="relu"),
                keras.layers.Dense(64, activation="relu"),
                # Logits in float32: a softmax in float16 loses too much.
                keras.layers.Dense(10, dtype="float32"),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.Adam(3e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            steps_per_execution=4,
        )
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert model.layers[0].compute_dtype == "float16"
    hist = model.fit(train, epochs=args.epochs, shuffle=False, verbose=2 if comm.rank == 0 else 0)
    logits = model.predict(x_test, batch_size=args.batch_size, verbose=0)
    assert logits.shape == (len(x_test), 10), logits.shape
    acc = float(np.mean(np.argmax(logits, axis=1) == y_test))
    digest = hashlib.sha256(
        b"".join(np.ascontiguousarray(w).tobytes() for w in model.get_weights())
    ).hexdigest()[:16]
    scale = float(model.optimizer.dynamic_scale.numpy())
    print(
        f"result: worker {comm.rank}/{comm.size} loss {hist.history['loss'][-1]:.4f} "
        f"test_accuracy {acc:.3f} loss_scale {scale:g} weights {digest}",
        flush=True,
    )


if __name__ == "__main__":
    main()
