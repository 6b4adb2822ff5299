"""GPU all-reduce as TF ops: one op per local GPU, reduced together over NCCL.

With an op library that has GPU kernels (docs/gpu.md), an all-reduce whose
replicas all sit on distinct GPUs is built as a *group*: op i runs on GPU i
with that replica's tensors (``group_size``, ``group_rank``, one
``group_key``), and the kernels meet in pytfcomm's core, which launches one
NCCL call over all of them (and over the other workers' GPUs when there is a
communicator). No tensor is copied to another GPU first, which one op taking
every replica's inputs would force.

The ops of a group wait for each other, so they must run concurrently:

* inside ``tf.function``, automatic control dependencies chain stateful ops
  in program order, which would deadlock a group; a resolver gives each
  member a resource of its own (its first output), which takes it out of
  that chain, as TF does for its NCCL ops (``ASYNC_STATEFUL_OPS``); ordering
  across processes comes from ``_ordering`` instead;
* eagerly, TF runs one op at a time, so the group is built inside a cached
  ``tf.function`` and runs as one graph.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from typing import Any

import tensorflow as tf
from tensorflow.python.framework import auto_control_deps

from . import _ops
from ._ordering import ordered

_GROUP_KEYS = itertools.count(1)
_GRAD_KEYS_ATTR = "_pytfcomm_grad_group_keys"
_EAGER_FNS: dict[tuple, Any] = {}
_MAX_EAGER_FNS = 64


def is_gpu(device: str) -> bool:
    """Whether a device string names a GPU."""
    if not device or "GPU" not in device.upper():
        return False
    try:
        return (tf.DeviceSpec.from_string(device).device_type or "").upper() == "GPU"
    except ValueError:
        return False


def host_of(device: str) -> str:
    """The CPU of the task that owns ``device``."""
    return tf.DeviceSpec.from_string(device).replace(device_type="CPU", device_index=0).to_string()


def use_group(devices: Sequence[str]) -> bool:
    """Whether an all-reduce over ``devices`` runs as a GPU group."""
    return (
        bool(devices)
        and len(set(devices)) == len(devices)
        and all(is_gpu(d) for d in devices)
        and _ops.has_gpu_kernels()
    )


def place_ungrouped(device: str) -> str:
    """Where the one-op-for-all-replicas form runs: never on a GPU kernel (it takes one replica)."""
    return host_of(device) if is_gpu(device) and _ops.has_gpu_kernels() else device


def allreduce_group(
    replicas: Sequence[Sequence[tf.Tensor]], devices: Sequence[str], attrs: dict[str, Any]
) -> list[list[tf.Tensor]]:
    """All-reduce replica i's tensors on ``devices[i]``, one op per GPU; same layout back."""
    n, m = len(replicas), len(replicas[0])
    if n == 1 or not tf.executing_eagerly():  # a lone op has nobody to wait for
        return build_group(replicas, devices, attrs)
    cache_key = (tuple(devices), m, tuple(sorted(attrs.items())))
    fn = _EAGER_FNS.get(cache_key)
    if fn is None:

        def body(*flat: tf.Tensor) -> list[tf.Tensor]:
            reps = [list(flat[i * m : (i + 1) * m]) for i in range(n)]
            return [t for r in build_group(reps, devices, attrs) for t in r]

        fn = tf.function(body, autograph=False, reduce_retracing=True)
        if len(_EAGER_FNS) >= _MAX_EAGER_FNS:
            _EAGER_FNS.pop(next(iter(_EAGER_FNS)))
        _EAGER_FNS[cache_key] = fn
    flat = fn(*[t for r in replicas for t in r])
    return [list(flat[i * m : (i + 1) * m]) for i in range(n)]


def build_group(
    replicas: Sequence[Sequence[tf.Tensor]],
    devices: Sequence[str],
    attrs: dict[str, Any],
    key: int | None = None,
) -> list[list[tf.Tensor]]:
    """The group's ops in the current graph (``key``: a fresh one by default)."""
    key = next(_GROUP_KEYS) if key is None else key
    n = len(devices)
    out = []
    for i, d in enumerate(devices):
        with tf.device(d):
            outs = ordered(
                attrs["comm_handle"],
                functools.partial(
                    _ops.ops().pytfcomm_all_reduce,
                    list(replicas[i]),
                    num_devices=1,
                    group_size=n,
                    group_rank=i,
                    group_key=key,
                    **attrs,
                ),
                group_key=key,
            )
        out.append(list(outs))
    return out


def group_attr(op: tf.Operation, name: str, default: int) -> int:
    """An int attr of a pytfcomm op, ``default`` for ops built without it."""
    try:
        return int(op.get_attr(name))
    except ValueError:
        return default


def grad_group_key(op: tf.Operation) -> int:
    """The group key of the gradient of a group member.

    TF builds each member's gradient separately; they must agree on a key
    without talking. The k-th gradient taken of group K on member r (in this
    graph) pairs with the k-th of every other member, so the key is derived
    from (K, k): the same on every member, distinct from fresh keys.
    """
    graph = tf.compat.v1.get_default_graph()
    counts = getattr(graph, _GRAD_KEYS_ATTR, None)
    if counts is None:
        counts = {}
        setattr(graph, _GRAD_KEYS_ATTR, counts)
    fkey, rank = group_attr(op, "group_key", 0), group_attr(op, "group_rank", 0)
    k = counts.get((fkey, rank), 0)
    counts[(fkey, rank)] = k + 1
    mixed = (fkey * 0x9E3779B97F4A7C15 + (k + 1) * 0xBF58476D1CE4E5B9) & ((1 << 61) - 1)
    return (1 << 61) | mixed  # fresh keys count up from 1 and never get here


@auto_control_deps.register_acd_resource_resolver
def _pytfcomm_gpu_group_resolver(op: Any, reads: Any, writes: Any) -> bool:
    """Take the members of a GPU group out of tf.function's chain of stateful ops (above)."""
    if op.type != "PytfcommAllReduce" or not op.outputs:
        return False
    if group_attr(op, "group_size", 1) <= 1 or op.outputs[0] in writes:
        return False
    writes.add(op.outputs[0])
    return True
