"""One probe per public Horovod name (tests/horovod/test_horovod_names.py): call it the simplest
meaningful way in a 1-process job; report "ok" or the NotImplementedError's message."""

from __future__ import annotations

import importlib
import os
import tempfile
from typing import Any

import numpy as np


def _check(ok: bool) -> None:
    if not ok:
        raise AssertionError("unexpected result")


def _raises(kind: type, text: str, fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except kind as exc:
        if text not in str(exc):
            raise AssertionError(f"{kind.__name__} without {text!r}: {exc}") from None
        return
    raise AssertionError(f"no {kind.__name__}")


def _probes(hvd: Any, keras_hvd: Any) -> dict[str, Any]:
    import keras
    import tensorflow as tf

    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    v = tf.Variable([1.0, 2.0])

    def tape() -> Any:
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(v * v)
        return t, loss

    def dist_tape() -> Any:
        t, loss = tape()
        return hvd.DistributedGradientTape(t).gradient(loss, [v])

    def partial_tape() -> Any:
        t, loss = tape()
        return hvd.PartialDistributedGradientTape(t, local_layers=[]).gradient(loss, [v])

    def callback(name: str, *args: Any, **kw: Any) -> Any:
        return lambda m: getattr(getattr(m, "callbacks", m), name)(*args, **kw)

    def load_model(m: Any) -> Any:
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        path = os.path.join(tempfile.mkdtemp(), "m.keras")
        model.save(path)
        return m.load_model(path)

    def graph_broadcast_global() -> Any:
        with tf.Graph().as_default():
            tf.compat.v1.Variable(1.0)
            return hvd.broadcast_global_variables(0)

    common = {
        "init": lambda m: m.init(),
        "shutdown": None,  # exercised by the fixture at the end
        "is_initialized": lambda m: m.is_initialized(),
        "size": lambda m: m.size(),
        "rank": lambda m: m.rank(),
        "local_size": lambda m: m.local_size(),
        "local_rank": lambda m: m.local_rank(),
        "cross_size": lambda m: m.cross_size(),
        "cross_rank": lambda m: m.cross_rank(),
        "is_homogeneous": lambda m: m.is_homogeneous(),
        "mpi_threads_supported": lambda m: m.mpi_threads_supported(),
        "mpi_enabled": lambda m: m.mpi_enabled(),
        "mpi_built": lambda m: m.mpi_built(),
        "gloo_enabled": lambda m: m.gloo_enabled(),
        "gloo_built": lambda m: m.gloo_built(),
        "nccl_built": lambda m: m.nccl_built(),
        "ddl_built": lambda m: m.ddl_built(),
        "ccl_built": lambda m: m.ccl_built(),
        "cuda_built": lambda m: m.cuda_built(),
        "rocm_built": lambda m: m.rocm_built(),
        "start_timeline": lambda m: m.start_timeline(f"{tempfile.mkdtemp()}/timeline.json"),
        "stop_timeline": lambda m: m.stop_timeline(),
        "Average": lambda m: m.Average,
        "Sum": lambda m: m.Sum,
        "Adasum": lambda m: m.Adasum,
        "Min": lambda m: m.Min,
        "Max": lambda m: m.Max,
        "Product": lambda m: m.Product,
        "ProcessSet": lambda m: m.ProcessSet([0]),
        "global_process_set": lambda m: m.global_process_set.size(),
        # With one rank, [0] is every rank: the global set, a duplicate (as Horovod).
        "add_process_set": lambda m: _raises(ValueError, "duplicate", m.add_process_set, [0]),
        "remove_process_set": lambda m: _check(not m.remove_process_set(m.ProcessSet([0, 1]))),
        "Compression": lambda m: m.Compression.fp16.compress(x),
        "elastic": lambda m: m.elastic.run(lambda: None),
        "callbacks": lambda m: m.callbacks.MetricAverageCallback(),
        "DistributedOptimizer": lambda m: m.DistributedOptimizer(keras.optimizers.SGD(0.1)),
        "PartialDistributedOptimizer": lambda m: m.PartialDistributedOptimizer(
            keras.optimizers.SGD(0.1), local_layers=[]
        ),
        "broadcast_global_variables": lambda m: graph_broadcast_global(),
        "load_model": load_model,
    }
    tf_only = {
        "allreduce": lambda m: m.allreduce(x),
        "grouped_allreduce": lambda m: m.grouped_allreduce([x, x]),
        "allgather": lambda m: m.allgather(x),
        "grouped_allgather": lambda m: m.grouped_allgather([x]),
        "broadcast": lambda m: m.broadcast(x, 0),
        "broadcast_": lambda m: m.broadcast_([v], 0),
        "reducescatter": lambda m: m.reducescatter(x),
        "grouped_reducescatter": lambda m: m.grouped_reducescatter([x]),
        "alltoall": lambda m: m.alltoall(x, splits=[2]),
        "allgather_object": lambda m: m.allgather_object({"a": 1}),
        "broadcast_object": lambda m: m.broadcast_object({"a": 1}),
        "broadcast_object_fn": lambda m: m.broadcast_object_fn()({"a": 1}),
        "broadcast_variables": lambda m: m.broadcast_variables([v], 0),
        "join": lambda m: m.join(),
        "rank_op": lambda m: m.rank_op(),
        "local_rank_op": lambda m: m.local_rank_op(),
        "size_op": lambda m: m.size_op(),
        "local_size_op": lambda m: m.local_size_op(),
        "process_set_included_op": lambda m: m.process_set_included_op(),
        "handle_average_backwards_compatibility": lambda m: (
            m.handle_average_backwards_compatibility(None, None)
        ),
        "check_num_rank_power_of_2": lambda m: m.check_num_rank_power_of_2(4),
        "vars_to_refs": lambda m: m.refs_to_vars(m.vars_to_refs([v])),
        "refs_to_vars": lambda m: m.refs_to_vars(m.vars_to_refs([v])),
        "DistributedGradientTape": lambda m: dist_tape(),
        "PartialDistributedGradientTape": lambda m: partial_tape(),
        "BroadcastGlobalVariablesHook": lambda m: m.BroadcastGlobalVariablesHook(0),
        "SyncBatchNormalization": lambda m: m.SyncBatchNormalization()(x, training=True),
        "LocalGradientAggregationHelper": lambda m: m.LocalGradientAggregationHelper(),
        "DistributedOptimizer": lambda m: m.DistributedOptimizer(keras.optimizers.SGD(0.1)),
    }
    keras_only = {
        "allreduce": lambda m: m.allreduce(np.ones(2, np.float32)),
        "allgather": lambda m: m.allgather(np.ones((2, 1), np.float32)),
        "broadcast": lambda m: m.broadcast(np.ones(2, np.float32), 0),
        "reducescatter": lambda m: m.reducescatter(np.ones((2, 1), np.float32)),
        "BroadcastGlobalVariablesCallback": callback("BroadcastGlobalVariablesCallback", 0),
        "MetricAverageCallback": callback("MetricAverageCallback"),
        "LearningRateScheduleCallback": callback("LearningRateScheduleCallback", 0.1, 0.5),
        "LearningRateWarmupCallback": callback("LearningRateWarmupCallback", 0.1),
        "BestModelCheckpoint": callback("BestModelCheckpoint"),
    }
    return {"common": common, "tf": tf_only, "keras": keras_only}


def probe(rank: int, size: int, addr: str, names: dict[str, list[str]]) -> dict:
    os.environ.update(PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE=str(size), PYTFCOMM_ADDR=addr)
    hvd = importlib.import_module("pytfcomm.horovod.tensorflow")
    hvd.init()
    keras_hvd = importlib.import_module("pytfcomm.horovod.tensorflow.keras")
    probes = _probes(hvd, keras_hvd)
    out: dict = {}
    for module_name, listed in names.items():
        module = importlib.import_module(module_name)
        kind = "tf" if module_name == "pytfcomm.horovod.tensorflow" else "keras"
        for name in listed:
            key = f"{module_name}.{name}"
            if not hasattr(module, name):
                out[key] = "missing"
                continue
            call = probes[kind].get(name, probes["common"].get(name, "no probe"))
            if (kind == "keras" and name.endswith("Callback")) or name == "BestModelCheckpoint":
                call = probes["keras"][name]
            if call == "no probe":
                out[key] = "no probe"
                continue
            if call is None:
                out[key] = "ok"
                continue
            try:
                call(module)
                out[key] = "ok"
            except NotImplementedError as exc:
                out[key] = f"NotImplementedError: {exc}"
            except Exception as exc:  # reported, the test fails on it
                out[key] = f"error: {type(exc).__name__}: {exc}"
    hvd.shutdown()
    return out
