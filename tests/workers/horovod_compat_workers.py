"""Rank functions for tests/horovod/test_horovod_compat.py: where pytfcomm.horovod must behave as
Horovod 0.28.1 does, checked the way Horovod's own tests check it
(test/parallel/test_tensorflow.py, test_process_sets_*.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
from horovod_workers import _init, _run


def _half_reference(x: Any, factor: float, size: int, pre: bool) -> Any:
    """Horovod's expected result of a Sum with a pre- or postscale factor: float16
    scaled in float32 and rounded once."""
    import tensorflow as tf

    f32 = tf.constant(factor, tf.float32)
    if pre:
        return tf.cast(f32 * tf.cast(x, tf.float32), x.dtype) * size
    return tf.cast(f32 * tf.cast(x * size, tf.float32), x.dtype)


def half_scaling(rank: int, size: int, addr: str, mode: str) -> dict:
    """Largest |result - Horovod's reference| per collective and factor kind (float16)."""
    import tensorflow as tf

    hvd = _init(rank, size, addr)
    np.random.seed(1234)
    out: dict = {}
    for dim in (1, 2, 3):
        factor = float(np.random.uniform())
        x = tf.constant(np.random.uniform(-100, 100, [size * 4] * dim), tf.float16)
        xs = [x, x * 0.5]
        for pre in (True, False):
            kw = {"prescale_factor": factor} if pre else {"postscale_factor": factor}
            tag = "pre" if pre else "post"
            ref = _half_reference(x, factor, size, pre)
            y = _run(mode, lambda t, kw=kw: hvd.allreduce(t, op=hvd.Sum, **kw), x)
            out[f"allreduce_{tag}_{dim}"] = float(tf.reduce_max(tf.abs(y - ref)))
            y = _run(mode, lambda t, kw=kw: hvd.reducescatter(t, op=hvd.Sum, **kw), x)
            mine = ref[rank * 4 : (rank + 1) * 4]
            out[f"reducescatter_{tag}_{dim}"] = float(tf.reduce_max(tf.abs(y - mine)))
            ys = _run(
                mode, lambda a, b, kw=kw: hvd.grouped_reducescatter([a, b], op=hvd.Sum, **kw), *xs
            )
            refs = [_half_reference(t, factor, size, pre)[rank * 4 : (rank + 1) * 4] for t in xs]
            out[f"grouped_reducescatter_{tag}_{dim}"] = max(
                float(tf.reduce_max(tf.abs(a - b))) for a, b in zip(ys, refs, strict=True)
            )
    hvd.shutdown()
    return out


def alltoall_errors(rank: int, size: int, addr: str, mode: str) -> dict:
    """The error class of an all-to-all whose dimension 0 does not divide, or whose
    splits do not add up; then that the job goes on (a correct all-to-all)."""
    import tensorflow as tf

    hvd = _init(rank, size, addr)
    out: dict = {}
    cases = {
        "indivisible": lambda: hvd.alltoall(tf.ones([size + 1])),
        "splits_sum": lambda: hvd.alltoall(tf.ones([size - 1]), tf.ones([size], tf.int32)),
    }
    for name, fn in cases.items():
        try:
            _run(mode, fn)
            out[name] = "no error"
        except Exception as exc:  # the class is what the test checks
            out[name] = type(exc).__module__ + "." + type(exc).__name__
    x = tf.constant(np.arange(size, dtype=np.float32) + 10 * rank)
    out["after"] = _run(mode, hvd.alltoall, x).numpy().tolist()
    hvd.shutdown()
    return out


def keras_results(rank: int, size: int, addr: str, mode: str) -> dict:
    """What hvd.keras' collectives return: tf.Tensors, as Horovod (eagerly, and inside a
    tf.function, where the function returns them)."""
    import tensorflow as tf

    _init(rank, size, addr)
    import pytfcomm.horovod.keras as khvd
    import pytfcomm.horovod.tensorflow.keras as tkhvd

    out: dict = {}
    for mod_name, k in (("keras", khvd), ("tf_keras", tkhvd)):
        calls = {
            "allreduce": lambda k=k: k.allreduce(np.full([2], float(rank)), name="avg"),
            "allgather": lambda k=k: k.allgather(np.full([1, 2], float(rank))),
            "broadcast": lambda k=k: k.broadcast(np.full([2], float(rank)), root_rank=1),
            "reducescatter": lambda k=k: k.reducescatter(np.full([size * 2], float(rank))),
        }
        for name, call in calls.items():
            r = _run(mode, call)
            out[f"{mod_name}.{name}"] = (isinstance(r, tf.Tensor), r.numpy().tolist())
    khvd.shutdown()
    return out


def names_and_sets(rank: int, size: int, addr: str) -> dict:
    """Horovod names its tests reach through ``hvd.``, process sets' text and ids."""
    import tensorflow as tf

    import pytfcomm.horovod.tensorflow as hvd

    out: dict = {}
    with tf.Graph().as_default():  # a TF1 graph with no variables, before hvd.init()
        op = hvd.broadcast_global_variables(0)
        out["empty_graph_broadcast"] = op.type
    hvd = _init(rank, size, addr)
    out["eager"] = [hvd._executing_eagerly(), hvd.util._executing_eagerly()]
    out["in_function"] = bool(tf.function(lambda: tf.constant(hvd.util._executing_eagerly()))())
    out["gpu_available"] = [hvd.gpu_available("tensorflow"), hvd.gpu_available("torch")]
    out["global_str"] = str(hvd.global_process_set)
    a = hvd.add_process_set([0])
    b = hvd.add_process_set(list(range(1, size)))
    out["ids"] = hvd.mpi_ops._basics._get_process_set_ids_and_ranks()
    out["a_str"] = str(a)
    hvd.remove_process_set(a)
    c = hvd.add_process_set([0])  # the same ranks again: a new set, with a's id
    out["reused"] = [b.process_set_id, c.process_set_id]
    out["after_remove"] = hvd.mpi_ops._basics._get_process_set_ids_and_ranks()
    hvd.shutdown()
    return out


def _optimizers(kind: str) -> Any:
    """The optimizer module of ``kind``: Keras 3, tf-keras, or tf-keras' legacy ones."""
    if kind == "keras3":
        import keras

        return keras.optimizers
    import tf_keras

    return tf_keras.optimizers.legacy if kind == "tf_keras_legacy" else tf_keras.optimizers


def optimizer_internals(rank: int, size: int, addr: str, kind: str) -> dict:
    """Horovod's DistributedOptimizer internals its Keras tests drive: _compute_gradients
    (with and without a tape), compute_gradients/minimize, _agg_helper.counter. The
    gradient of x * (rank + 1) is rank + 1, so a Sum over ranks is size * (size + 1) / 2."""
    import tensorflow as tf

    hvd = _init(rank, size, addr)
    import pytfcomm.horovod.tensorflow.keras as khvd

    opts = _optimizers(kind)
    out: dict = {}
    x = tf.Variable(1.0)
    opt = khvd.DistributedOptimizer(opts.SGD(1.0), op=hvd.Sum)
    pairs = opt._compute_gradients(lambda: x * (rank + 1), [x])
    out["grad"] = float(pairs[0][0])
    opt.apply_gradients(pairs)  # reduced once: x - Sum
    out["x_after_apply"] = float(x.numpy())
    with tf.GradientTape(persistent=True) as tape:
        loss = x * (rank + 1)
    out["grad_tape"] = float(opt._compute_gradients(loss, [x], tape=tape)[0][0])
    out["helper_none"] = opt._agg_helper is None
    y = tf.Variable(1.0)
    if kind != "keras3":  # Keras 3 optimizers have no minimize()
        opt = khvd.DistributedOptimizer(opts.SGD(1.0), op=hvd.Sum)
        opt.minimize(lambda: y * (rank + 1), [y])
    out["y_after_minimize"] = float(y.numpy())
    z = tf.Variable(1.0)
    agg = khvd.DistributedOptimizer(opts.SGD(1.0), backward_passes_per_step=2)
    counters = []
    for _ in range(3):
        agg.apply_gradients(agg._compute_gradients(lambda: z * (rank + 1), [z]))
        counters.append(int(agg._agg_helper.counter.numpy()))
    out["counters"] = counters
    out["z"] = float(z.numpy())
    hvd.shutdown()
    return out
