"""The training function of tests/launch/test_ray_train.py, run by Ray Train's
TensorflowTrainer and, for comparison, as a script under pytfcomm-run.

It writes what each worker saw to ``<out>/rank<N>.json`` (JSON, never a pickle): a Keras
3 ``fit`` and a tf-keras ``fit`` under pytfcomm.MultiWorkerMirroredStrategy, a Horovod-API
tape loop, and a digest of the job secret the communicator was made with.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import numpy as np

GLOBAL_BATCH = 16
STEPS = 3


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(GLOBAL_BATCH * STEPS, 4)).astype("float32")
    y = (x @ np.arange(1, 5, dtype="float32"))[:, None]
    return x, y


def _fit(tf, k, strategy) -> list[list[float]]:
    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    with strategy.scope():
        k.utils.set_random_seed(0)
        model = k.Sequential([k.Input((4,)), k.layers.Dense(1)])
        model.compile(k.optimizers.SGD(0.05), "mse")
    model.fit(ds, epochs=2, verbose=0)
    return [np.asarray(w).ravel().tolist() for w in model.get_weights()]


def _horovod_loop(tf, k) -> list[list[float]]:
    """hvd.init(), then a DistributedGradientTape loop over this rank's shard."""
    import pytfcomm.horovod.tensorflow as hvd

    hvd.init()
    x, y = _data()
    local = GLOBAL_BATCH // hvd.size()
    k.utils.set_random_seed(1)
    model = k.Sequential([k.Input((4,)), k.layers.Dense(1)])
    opt = k.optimizers.SGD(0.05)
    for s in range(STEPS):
        lo = s * GLOBAL_BATCH + hvd.rank() * local
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x[lo : lo + local]) - y[lo : lo + local]) ** 2)
        grads = hvd.DistributedGradientTape(tape).gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    return [np.asarray(w).ravel().tolist() for w in model.get_weights()]


def train(config: dict) -> None:
    """The training function: Ray Train calls it with ``train_loop_config``."""
    import keras  # Keras 3, imported by name although Ray sets TF_USE_LEGACY_KERAS=1
    import tensorflow as tf
    import tf_keras

    import pytfcomm

    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    comm = pytfcomm.default_communicator()
    out = {
        "rank": comm.rank,
        "size": comm.size,
        "replicas": strategy.num_replicas_in_sync,
        "legacy_env": os.environ.get("TF_USE_LEGACY_KERAS", ""),
        "secret_sha256": hashlib.sha256(comm._join_args["secret"].encode()).hexdigest(),
        "secret_len": len(comm._join_args["secret"]),
        "keras3": _fit(tf, keras, strategy),
        "tf_keras": _fit(tf, tf_keras, strategy),
        "horovod": _horovod_loop(tf, keras),
    }
    path = os.path.join(config["out"], f"rank{comm.rank}.json")
    with open(path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":  # under pytfcomm-run: python ray_train_workers.py OUT_DIR
    train({"out": sys.argv[1]})
