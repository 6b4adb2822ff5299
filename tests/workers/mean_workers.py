"""MEAN through the strategy on several workers, run by tests/tf/test_tf_mean.py.

Each worker returns what ``strategy.reduce``, ``extended.reduce_to``,
``batch_reduce_to`` and ``ReplicaContext.all_reduce`` give for MEAN of int32,
int64, float16 (a sum that overflows), bfloat16 and float32, so the test can
compare them with TF's own semantics: the sum in the value's dtype divided by
the number of replicas with ``/``.
"""

from __future__ import annotations

import os

import numpy as np

# Replica r's values; the test computes TF's answer from these.
INT_VALUES = (-10, 7, 3)  # replica r adds -r to each
HALF_BIG = 60000.0  # float16 max is 65504: two replicas overflow the sum


def replica_values(r: int) -> dict[str, np.ndarray]:
    return {
        "int32": np.array(INT_VALUES, np.int32) - r,
        "int64": np.array(INT_VALUES, np.int64) - 3 * r,
        "float16": np.array([HALF_BIG, 1.0 + r], np.float16),
        "float32": np.array([0.1 * (r + 1), -3.0 + r], np.float32),
    }


def mean(rank: int, size: int, addr: str, ndev: int) -> dict:
    os.environ.update(PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE=str(size), PYTFCOMM_ADDR=addr)
    os.environ.pop("TF_CONFIG", None)
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * ndev)
    import pytfcomm

    strategy = pytfcomm.MultiWorkerMirroredStrategy(
        local_devices=[f"CPU:{i}" for i in range(ndev)] if ndev > 1 else None
    )
    out: dict = {}
    for name in replica_values(0):
        v = strategy.experimental_distribute_values_from_function(
            lambda ctx, name=name: tf.constant(replica_values(ctx.replica_id_in_sync_group)[name])
        )
        got = strategy.reduce("MEAN", v, axis=None)
        out[f"reduce/{name}"] = (got.dtype.name, got.numpy())
        got = strategy.extended.reduce_to("MEAN", v, destinations="/device:CPU:0")
        out[f"reduce_to/{name}"] = (got.dtype.name, got.numpy())
        (got,) = strategy.extended.batch_reduce_to("MEAN", [(v, v)])
        local = strategy.experimental_local_results(got)
        out[f"batch/{name}"] = (local[0].dtype.name, [x.numpy() for x in local])

        @tf.function
        def in_replica(x):
            return strategy.run(
                lambda y: tf.distribute.get_replica_context().all_reduce("MEAN", y), args=(x,)
            )

        local = strategy.experimental_local_results(in_replica(v))
        out[f"replica/{name}"] = (local[0].dtype.name, [x.numpy() for x in local])
    return out
