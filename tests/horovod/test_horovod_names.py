"""Every public name of Horovod 0.28.1's TF and Keras API exists in pytfcomm.horovod and
either works or raises NotImplementedError saying what to use instead.

The lists are Horovod's module-level public names (from horovod/tensorflow/__init__.py,
horovod/tensorflow/keras/__init__.py and callbacks.py, horovod/keras/__init__.py and
callbacks.py at v0.28.1), minus what those files import only for their own use (tf,
keras, K, os, warnings, version, inspect, check_extension, gpu_available, split_list,
device_compatibility_check, is_version_greater_equal_than).
"""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow")

BASICS = [
    "init", "shutdown", "is_initialized", "start_timeline", "stop_timeline",
    "size", "local_size", "cross_size", "rank", "local_rank", "cross_rank",
    "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built",
    "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built",
    "global_process_set", "Average", "Sum", "Compression", "elastic",
]  # fmt: skip
TENSORFLOW = [
    *BASICS,
    "allgather", "grouped_allgather", "broadcast", "broadcast_", "alltoall",
    "allreduce", "grouped_allreduce", "reducescatter", "grouped_reducescatter",
    "allgather_object", "broadcast_object", "broadcast_object_fn", "broadcast_variables",
    "is_homogeneous", "rank_op", "local_rank_op", "size_op", "local_size_op",
    "process_set_included_op", "ProcessSet", "add_process_set", "remove_process_set",
    "Adasum", "Min", "Max", "Product", "handle_average_backwards_compatibility",
    "check_num_rank_power_of_2", "vars_to_refs", "refs_to_vars", "join",
    "SyncBatchNormalization", "LocalGradientAggregationHelper",
    "broadcast_global_variables", "BroadcastGlobalVariablesHook", "DistributedOptimizer",
    "DistributedGradientTape", "PartialDistributedGradientTape",
]  # fmt: skip
TF_KERAS = [
    *BASICS,
    "ProcessSet", "add_process_set", "remove_process_set", "DistributedOptimizer",
    "broadcast_global_variables", "allreduce", "allgather", "broadcast", "reducescatter",
    "load_model", "callbacks",
]  # fmt: skip
KERAS = [
    *BASICS,
    "Adasum", "DistributedOptimizer", "PartialDistributedOptimizer",
    "broadcast_global_variables", "allreduce", "allgather", "broadcast", "reducescatter",
    "load_model", "callbacks",
]  # fmt: skip
CALLBACKS = [
    "BroadcastGlobalVariablesCallback", "MetricAverageCallback",
    "LearningRateScheduleCallback", "LearningRateWarmupCallback", "BestModelCheckpoint",
]  # fmt: skip

NAMES = {
    "pytfcomm.horovod.tensorflow": TENSORFLOW,
    "pytfcomm.horovod.tensorflow.keras": TF_KERAS,
    "pytfcomm.horovod.keras": KERAS,
    "pytfcomm.horovod.tensorflow.keras.callbacks": CALLBACKS,
    "pytfcomm.horovod.keras.callbacks": CALLBACKS,
}

# What raises NotImplementedError for now (docs/horovod.md says why and what instead).
NOT_IMPLEMENTED = {
    "LocalGradientAggregationHelper": "backward_passes_per_step",
    "BroadcastGlobalVariablesHook": "broadcast_variables",
}


def test_every_horovod_name_exists_and_works_or_says_what_instead(ranks):
    (out,) = ranks(1, "horovod_coverage:probe", NAMES, timeout=240)
    assert len(out) == sum(len(v) for v in NAMES.values())
    problems = {}
    for key, result in out.items():
        name = key.rsplit(".", 1)[1]
        if name in NOT_IMPLEMENTED:
            ok = result.startswith("NotImplementedError: ") and NOT_IMPLEMENTED[name] in result
        else:
            ok = result == "ok"
        if not ok:
            problems[key] = result
    assert not problems, "\n".join(f"{k}: {v}" for k, v in problems.items())
    # The count the docs quote: distinct names, implemented / NotImplementedError.
    distinct = {k.rsplit(".", 1)[1] for k in out}
    assert len(distinct) == 72
    assert len(distinct & NOT_IMPLEMENTED.keys()) == 2
