"""``average_gradients``: the classic in-graph multi-tower trainer's averager, on pytfcomm."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from ..errors import InvalidArgumentError
from . import collectives as coll

__all__ = ["average_gradients"]


def average_gradients(
    tower_grads: Sequence[Sequence[tuple[Any, Any]]],
    *,
    fusion_threshold_bytes: int = coll.DEFAULT_FUSION_BYTES,
    communicator: Any = None,
) -> list[tuple[Any, Any]]:
    """Average gradients over towers; a drop-in for cifar10_multi_gpu_train's function.

    ``tower_grads`` has one list per tower of ``(grad, var)`` pairs, every
    tower listing the variables in the same order. Returns one list of
    ``(mean_grad, var_of_tower_0)``. Dense gradients of all towers are
    averaged by ONE pytfcomm all-reduce op (fused, combined in parallel by the
    engine; across processes too when a communicator is set), not by a concat
    and reduce_mean on one device. A ``None`` gradient (in every tower) stays
    ``None``; ``IndexedSlices`` are averaged by an all-gather of their slices
    and stay ``IndexedSlices``. Shapes are kept.
    """
    towers = [list(t) for t in tower_grads]
    if not towers:
        raise InvalidArgumentError("tower_grads is empty: pass one list of (grad, var) per tower")
    m = len(towers[0])
    for k, t in enumerate(towers):
        if len(t) != m:
            raise InvalidArgumentError(
                f"tower {k} has {len(t)} (grad, var) pairs but tower 0 has {m}; every tower "
                "must list the same variables in the same order"
            )
        for pair in t:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise InvalidArgumentError(f"tower {k} holds {pair!r}, not a (grad, var) pair")
    n = len(towers)
    result: list[tuple[Any, Any]] = [(None, t[1]) for t in towers[0]]
    dense_j: list[int] = []
    for j in range(m):
        grads = [t[j][0] for t in towers]
        nones = sum(g is None for g in grads)
        if nones == n:
            continue
        if nones:
            raise InvalidArgumentError(
                f"variable {j} ({_name(towers[0][j][1])}) has a gradient in some towers and "
                "None in others; towers must compute the same gradients"
            )
        if all(isinstance(g, tf.IndexedSlices) for g in grads):
            result[j] = (_average_slices(grads, n, communicator), towers[0][j][1])
        else:
            dense_j.append(j)
    dense = {j: [tf.convert_to_tensor(t[j][0]) for t in towers] for j in dense_j}
    for j, gs in dense.items():
        coll.check_dtype(gs[0].dtype, f"gradient of {_name(towers[0][j][1])}")
    # float16/bfloat16 as the classic concat + reduce_mean computes them: the
    # sum rounded to the dtype at every step, then divided in the dtype (the
    # engine's mean divides before the last rounding: 1 ulp apart in ~20% of
    # elements). Every other dtype: the engine's mean, which is already that.
    half = [j for j in dense_j if dense[j][0].dtype in (tf.float16, tf.bfloat16)]
    for group, op in (([j for j in dense_j if j not in half], "mean"), (half, "sum")):
        if not group:
            continue
        replicas = [[dense[j][i] for j in group] for i in range(n)]
        reduced = coll.allreduce_replicas(
            replicas,
            op,
            devices=[r[0].device for r in replicas],
            fusion_threshold_bytes=fusion_threshold_bytes,
            communicator=communicator,
        )
        total = n * _processes(communicator)
        for j, g in zip(group, reduced[0], strict=True):
            if op == "sum":
                with tf.device(g.device):
                    g = g / tf.cast(total, g.dtype)
            result[j] = (g, towers[0][j][1])
    return result


def _processes(communicator: Any) -> int:
    comm = coll.active_communicator(communicator)
    return comm.size if comm is not None else 1


def _average_slices(grads: list[tf.IndexedSlices], n: int, communicator: Any) -> tf.IndexedSlices:
    values = coll.allgather([g.values for g in grads], communicator=communicator)[0]
    indices = coll.allgather(
        [tf.cast(g.indices, tf.int64) for g in grads], communicator=communicator
    )[0]
    total = n * _processes(communicator)
    with tf.device(values.device):
        return tf.IndexedSlices(
            values / tf.cast(total, values.dtype),
            tf.cast(indices, grads[0].indices.dtype),
            grads[0].dense_shape,
        )


def _name(var: Any) -> str:
    return getattr(var, "name", repr(var))
