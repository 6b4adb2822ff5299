"""Functions run inside each rank by tests/gpu/test_tf_gpu.py: pytfcomm's TF GPU kernels.

Each process splits GPU 0 into two logical GPUs (TF virtual devices), so one
physical GPU hosts a 2-GPU MirroredStrategy; NCCL >= 2.30 lets its ranks
share the GPU (NCCL_MULTI_RANK_GPU_ENABLE=1, set by the test).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import pytfcomm

LOGICAL_GPUS = 2


def _tf() -> Any:
    import tensorflow as tf

    gpu = tf.config.list_physical_devices("GPU")[0]
    tf.config.set_logical_device_configuration(
        gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=2048)] * LOGICAL_GPUS
    )
    return tf


def _strategy_step(tf: Any, ptf: Any, comm: Any) -> dict:
    """Sum and mean of three tensors over the replicas (and processes), plus a gradient."""
    devices = [d.name for d in tf.config.list_logical_devices("GPU")]
    strategy = tf.distribute.MirroredStrategy(
        devices, cross_device_ops=ptf.RingAllReduce(communicator=comm)
    )
    base = 10.0 * (comm.rank if comm else 0)

    @tf.function
    def step() -> Any:
        def replica_fn() -> Any:
            ctx = tf.distribute.get_replica_context()
            i = tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 1.0 + base
            xs = [
                tf.fill([1000], i),
                tf.cast(tf.fill([7], i), tf.float16),
                tf.fill([3, 5], tf.cast(i, tf.float64)),
            ]
            return (
                ctx.all_reduce(tf.distribute.ReduceOp.SUM, xs),
                ctx.all_reduce(tf.distribute.ReduceOp.MEAN, xs),
            )

        return strategy.run(replica_fn)

    before = ptf.counters()["allreduce_ops"]
    sums, means = step()
    out = {
        "sum": [
            [float(np.asarray(v).ravel()[0]) for v in strategy.experimental_local_results(t)]
            for t in sums
        ],
        "mean": [
            [float(np.asarray(v).ravel()[0]) for v in strategy.experimental_local_results(t)]
            for t in means
        ],
        "ops": ptf.counters()["allreduce_ops"] - before,
        "devices": [v.device for v in strategy.experimental_local_results(sums[0])],
    }
    # A Keras step: gradients reach batch_reduce_implementation through merge_call.
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(4)])
        model.compile(optimizer="sgd", loss="mse")
    x = np.random.default_rng(0).normal(size=(64, 8)).astype(np.float32)
    hist = model.fit(x, x[:, :4], batch_size=16, epochs=1, verbose=0)
    out["loss"] = float(hist.history["loss"][-1])
    return out


def mirrored(rank: int, size: int, addr: str) -> dict:
    """One process, two logical GPUs: MirroredStrategy, then an eager list all-reduce."""
    tf = _tf()
    import pytfcomm.tf as ptf

    assert ptf.has_gpu_kernels(), "the op library has no GPU kernels"
    out = _strategy_step(tf, ptf, None)
    xs = []
    for i, d in enumerate(tf.config.list_logical_devices("GPU")):
        with tf.device(d.name):
            xs.append(tf.fill([5], float(i + 1)))
    ys = ptf.allreduce(xs, op="max")
    out["eager"] = [y.numpy().tolist() for y in ys]
    out["eager_devices"] = [y.device for y in ys]
    return out


def two_workers(rank: int, size: int, addr: str) -> dict:
    """Two processes with two logical GPUs each: one NCCL clique of four ranks (or staged)."""
    tf = _tf()
    import pytfcomm.tf as ptf

    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        return _strategy_step(tf, ptf, comm)
