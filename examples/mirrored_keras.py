"""Keras 3 `model.fit` with MirroredStrategy on 4 logical CPU devices, reduced by pytfcomm.

    python examples/mirrored_keras.py [--ops ring|hierarchical] [--epochs 5]

Data: scikit-learn's bundled digits (8x8 images, 10 classes), no download.
Gradients of the 4 replicas are all-reduced by pytfcomm.RingAllReduce (one
fused pytfcomm op per step); the script prints test accuracy and how many
pytfcomm ops ran.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

NUM_DEVICES = 4


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", choices=["ring", "hierarchical"], default="ring")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64, help="global batch size")
    args = ap.parse_args()

    # Split the CPU into 4 logical devices before TensorFlow initialises.
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * NUM_DEVICES
    )

    import keras
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    import pytfcomm

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32).reshape(-1, 8, 8, 1)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0)

    ops = pytfcomm.RingAllReduce() if args.ops == "ring" else pytfcomm.HierarchicalAllReduce()
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=ops)
    print(f"{strategy.num_replicas_in_sync} replicas, cross-device ops: {ops!r}")

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
    model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs, verbose=2)
    _, acc = model.evaluate(x_test, y_test, verbose=0)
    print(f"test accuracy: {acc:.3f}")
    print(f"pytfcomm op executions: {pytfcomm.tf.counters()}")


if __name__ == "__main__":
    main()
