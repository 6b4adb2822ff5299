"""Keras 3 `model.fit` in Ray Train's TensorflowTrainer on pytfcomm.

    python examples/ray_train_keras.py [--workers 2] [--epochs 3] [--address ADDR]

Without ``--address`` it starts a one-node Ray cluster on 127.0.0.1; with
``--address auto`` (or ``ray://...``) it joins a running one. The training function
is ordinary MultiWorkerMirroredStrategy code: Ray sets TF_CONFIG in each worker,
pytfcomm reads it, and on a real cluster the job secret is drawn by world rank 0 and
shared through Ray Train (docs/launching.md#ray-train). Data: scikit-learn's bundled
digits, no download. Each worker prints its test accuracy and a checksum of its
weights: the checksums are equal on every worker.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def train_func(config: dict) -> None:
    """Runs in every Ray Train worker."""
    import hashlib

    import keras  # Keras 3, although Ray sets TF_USE_LEGACY_KERAS=1 for tf.keras
    import numpy as np
    import tensorflow as tf
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    import pytfcomm

    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    comm = strategy.communicator
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype("float32")
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.25, random_state=0)
    ds = tf.data.Dataset.from_tensor_slices((x_tr, y_tr)).shuffle(2048, seed=0).batch(64)
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)]
        )
        model.compile(
            keras.optimizers.Adam(1e-2),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    model.fit(ds, epochs=config["epochs"], verbose=0)
    acc = float(np.mean(np.argmax(model.predict(x_te, verbose=0), axis=1) == y_te))
    digest = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
    print(f"result: worker {comm.rank}/{comm.size} test_accuracy {acc:.3f} weights {digest[:16]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--address", help="a running Ray cluster (default: start one locally)")
    args = ap.parse_args()

    import ray
    from ray.train import ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    if args.address:
        ray.init(address=args.address)
    else:  # a local cluster, reachable only from this machine
        ray.init(
            address="local",
            _node_ip_address="127.0.0.1",
            include_dashboard=False,
            num_cpus=args.workers,
        )
    try:
        trainer = TensorflowTrainer(
            train_func,
            train_loop_config={"epochs": args.epochs},
            scaling_config=ScalingConfig(num_workers=args.workers),
        )
        trainer.fit()
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
