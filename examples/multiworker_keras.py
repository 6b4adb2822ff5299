"""Keras 3 `model.fit` across workers with pytfcomm.MultiWorkerMirroredStrategy.

    pytfcomm-run -np 2 python examples/multiworker_keras.py [--epochs 5] [--algorithm auto]

Each worker is one process (TF_CONFIG and PYTFCOMM_* come from pytfcomm-run;
under srun or mpirun no launcher is needed). The strategy shards the
dataset across workers; every gradient, metric and end-of-data reduction
between workers runs on pytfcomm. Data: scikit-learn's bundled digits, no
download. Each worker prints its test accuracy and a checksum of its
weights: the checksums are equal on every worker.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64, help="global batch size")
    ap.add_argument("--algorithm", choices=["auto", "ring", "hierarchical"], default="auto")
    args = ap.parse_args()

    import keras
    import numpy as np
    import tensorflow as tf
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    import pytfcomm

    strategy = pytfcomm.MultiWorkerMirroredStrategy(algorithm=args.algorithm)
    comm = strategy.communicator
    print(f"worker {comm.rank} of {comm.size}: {strategy.num_replicas_in_sync} replicas in sync")

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32).reshape(-1, 8, 8, 1)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0)
    train = (
        tf.data.Dataset.from_tensor_slices((x_train, y_train))
        .shuffle(len(x_train), seed=0)
        .batch(args.batch_size)
    )

    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((8, 8, 1)),
                keras.layers.Conv2D(16, 3, activation="relu", padding="same"),
                keras.layers.MaxPooling2D(),
                keras.layers.Flatten(),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(10),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.Adam(1e-2),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    model.fit(train, epochs=args.epochs, shuffle=False, verbose=2 if comm.rank == 0 else 0)
    logits = model.predict(x_test, verbose=0)
    acc = float(np.mean(np.argmax(logits, axis=1) == y_test))
    checksum = sum(float(np.sum(w)) for w in model.get_weights())
    print(f"test accuracy: {acc:.3f}; weights checksum {checksum:.6f}")
    print(f"pytfcomm op executions: {pytfcomm.tf.counters()}")


if __name__ == "__main__":
    main()
