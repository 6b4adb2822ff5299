"""Horovod-style training, one process per device: the tape and the optimizer.

    pytfcomm-run -np 2 python examples/horovod_style.py [--epochs 5]

What a Horovod user writes, with ``hvd`` replaced by ``pytfcomm``: each
process trains on its own shard; ``pytfcomm.keras.DistributedOptimizer``
averages the gradients of every step in one fused all-reduce, the callbacks
broadcast rank 0's initial weights and average the logged metrics. A custom
loop with ``pytfcomm.DistributedGradientTape`` follows. Works with Keras 3 and
(``TF_USE_LEGACY_KERAS=1``) tf-keras. Data: scikit-learn's digits.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=32, help="per-process batch size")
    ap.add_argument("--compression", choices=["none", "fp16", "bf16"], default="none")
    args = ap.parse_args()

    import numpy as np
    import tensorflow as tf
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    import pytfcomm

    keras = tf.keras if os.environ.get("TF_USE_LEGACY_KERAS") == "1" else __import__("keras")
    comm = pytfcomm.init()
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0)
    # Equal shards: every process must run the same number of steps.
    n = len(x_train) // comm.size
    mine = slice(comm.rank * n, (comm.rank + 1) * n)
    x_mine, y_mine = x_train[mine], y_train[mine]

    def make_model():
        return keras.Sequential(
            [keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)]
        )

    # 1. Keras fit with the distributed optimizer (learning rate scaled by workers).
    model = make_model()
    opt = pytfcomm.keras.DistributedOptimizer(
        keras.optimizers.Adam(1e-3 * comm.size), compression=args.compression
    )
    model.compile(
        opt, keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"]
    )
    model.fit(
        x_mine,
        y_mine,
        batch_size=args.batch_size,
        epochs=args.epochs,
        verbose=2 if comm.rank == 0 else 0,
        callbacks=[
            pytfcomm.keras.callbacks.BroadcastGlobalVariablesCallback(0),
            pytfcomm.keras.callbacks.MetricAverageCallback(),
        ],
    )
    _, acc = model.evaluate(x_test, y_test, verbose=0)
    print(f"fit: test accuracy {acc:.3f}")

    # 2. A custom loop with the distributed gradient tape.
    model = make_model()
    pytfcomm.broadcast_variables(model.variables, root=0)
    opt = keras.optimizers.Adam(1e-3 * comm.size)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        tape = pytfcomm.DistributedGradientTape(tape, compression=args.compression)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    steps = n // args.batch_size
    for _ in range(args.epochs):
        for s in range(steps):
            sl = slice(s * args.batch_size, (s + 1) * args.batch_size)
            step(x_mine[sl], y_mine[sl])
    acc = float(np.mean(np.argmax(model(x_test), axis=1) == y_test))
    checksum = sum(float(np.sum(w)) for w in model.get_weights())
    print(f"tape: test accuracy {acc:.3f}; weights checksum {checksum:.6f}")
    comm.close()


if __name__ == "__main__":
    main()
