"""Ranks of tests/launch/test_tf_config_forms.py: each reads only the cluster variables a
scheduler (TFJob, Vertex AI, Ray Train) writes; nothing from the harness's ``addr``."""

from __future__ import annotations

import hashlib

import numpy as np

import pytfcomm


def allreduce(rank: int, size: int, addr: str) -> dict:
    """init() from the environment, then an all-reduce of every rank's rank + 1; also a
    digest of the job secret the communicator was made with."""
    with pytfcomm.init() as comm:
        total = comm.allreduce(np.array([comm.rank + 1], np.int64))
        secret = comm._join_args["secret"].encode()
        return {
            "rank": comm.rank,
            "size": comm.size,
            "total": int(total[0]),
            "secret_sha256": hashlib.sha256(secret).hexdigest() if secret else "",
        }


def keras_fit(rank: int, size: int, addr: str) -> dict:
    """A tiny Keras 3 fit under pytfcomm.MultiWorkerMirroredStrategy; final weights."""
    import keras
    import tensorflow as tf

    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 4)).astype("float32")
    y = (x @ np.arange(1, 5, dtype="float32"))[:, None]
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.05), "mse")
    model.fit(ds, epochs=2, verbose=0)
    return {
        "rank": pytfcomm.default_communicator().rank,
        "replicas": strategy.num_replicas_in_sync,
        "weights": [np.asarray(w) for w in model.get_weights()],
    }
