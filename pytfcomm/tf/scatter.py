"""``reduce_scatter`` and ``alltoall`` as TensorFlow ops, with gradients.

One tensor per process (the Horovod-style path: one process per device),
eager and inside ``tf.function``. Each op runs the core's collective of the
same name, so it moves only the bytes the collective needs: a reduce-scatter
about half those of an all-reduce, an all-to-all each row once.

Both split along dimension 0. ``reduce_scatter`` gives rank r of N its share
of the R rows by Horovod's rule: R // N rows, the first R % N ranks one more,
in rank order. Every rank must pass the same shape and dtype (else
``tf.errors.FailedPreconditionError`` on every rank); an ``alltoall``'s ranks
must agree on the dtype and the dimensions after the first.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import tensorflow as tf

from .._rows import reduce_scatter_rows
from ..errors import InvalidArgumentError
from . import _ops
from ._ordering import ordered
from .collectives import (
    _HANDLE_COMMS,
    _dense,
    _linear_reduce_op,
    _op_device,
    _op_name,
    _timeout,
    check_dtype,
)
from .collectives import allgather as _allgather
from .collectives import comm_handle as _comm_handle

__all__ = ["alltoall", "reduce_scatter", "reduce_scatter_rows"]


def _one_tensor(tensor: Any, what: str) -> tf.Tensor:
    t = tf.convert_to_tensor(tensor)
    check_dtype(t.dtype)
    if t.shape.rank == 0:
        raise InvalidArgumentError(f"{what} needs a tensor with at least one dimension")
    return t


def reduce_scatter(
    tensor: Any,
    op: str = "sum",
    *,
    communicator: Any = None,
    timeout: float | None = None,
    name: str | None = None,
) -> Any:
    """This rank's rows of the reduction (``op``: sum, mean, min, max or prod) over
    every process's ``tensor``, or of each tensor of a list (a list back).

    The tensors of a list that share a dtype travel in one collective (packed into
    one buffer). Without a communicator of more than one process the result is the
    input. Gradient (sum and mean): the all-gather of the incoming gradients,
    divided by the number of processes for mean.
    """
    with tf.name_scope(name or "pytfcomm_reduce_scatter"):
        as_list = isinstance(tensor, (list, tuple))
        ts = [_one_tensor(t, "reduce_scatter") for t in (tensor if as_list else [tensor])]
        reduce_op = _op_name(op)
        if reduce_op == "mean" and any(t.dtype == tf.bool for t in ts):
            raise InvalidArgumentError("op 'mean' is not defined for bool")
        handle = _comm_handle(communicator)
        by_dtype: dict[tf.DType, list[int]] = {}
        for i, t in enumerate(ts):
            by_dtype.setdefault(t.dtype, []).append(i)
        result: list[Any] = [None] * len(ts)
        for idx in by_dtype.values():
            group = [ts[i] for i in idx]
            with tf.device(group[0].device or ""):
                outs = ordered(
                    handle,
                    functools.partial(
                        _ops.ops().pytfcomm_reduce_scatter,
                        group,
                        num_devices=1,
                        reduce_op=reduce_op,
                        comm_handle=handle,
                        timeout_seconds=_timeout(timeout),
                    ),
                )
            for i, o in zip(idx, outs, strict=True):
                result[i] = o
        return result if as_list else result[0]


def alltoall(
    tensor: Any,
    splits: Any = None,
    *,
    communicator: Any = None,
    timeout: float | None = None,
    name: str | None = None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Send ``splits[i]`` rows of ``tensor`` (in order) to rank i; return what every
    rank sent this one (in rank order) and how many rows came from each (int64).

    Without ``splits`` dimension 0 is split equally (it must divide by the number
    of processes). The splits must be non-negative and add up to dimension 0:
    otherwise the rank that passed them gets ``tf.errors.InvalidArgumentError``
    and the others ``tf.errors.FailedPreconditionError`` at once (that rank
    still takes part, sending nothing). Gradient: the all-to-all of the incoming
    gradient back, with the received splits.
    """
    with tf.name_scope(name or "pytfcomm_alltoall"):
        t = _one_tensor(tensor, "alltoall")
        handle = _comm_handle(communicator)
        size = _comm_of(handle).size if handle else 1
        s = _splits(t, splits, size)
        with tf.device(t.device or ""):
            out, got = ordered(
                handle,
                lambda: _ops.ops().pytfcomm_alltoall(
                    t, s, num_devices=1, comm_handle=handle, timeout_seconds=_timeout(timeout)
                ),
            )
        return out, got


def _splits(t: tf.Tensor, splits: Any, size: int) -> tf.Tensor:
    """``splits`` as the op's int64 vector; without them, dimension 0 split equally
    (known when traced or eager: checked here, without extra ops per call)."""
    if splits is None:
        rows = t.shape[0]
        if rows is not None:
            if rows % size:
                raise InvalidArgumentError(
                    f"alltoall without splits: dimension 0 ({rows}) must divide by the "
                    f"number of processes ({size}); pass splits"
                )
            return tf.constant([rows // size] * size, tf.int64)
        dynamic = tf.shape(t, out_type=tf.int64)[0]
        check = tf.debugging.assert_equal(
            dynamic % size,
            tf.constant(0, tf.int64),
            message=f"alltoall without splits: dimension 0 must divide by {size} (the size)",
        )
        with tf.control_dependencies([check]):
            return tf.fill([size], dynamic // size)
    if not isinstance(splits, (tf.Tensor, tf.Variable)):
        arr = np.asarray(splits)
        if arr.dtype.kind not in "iu":
            raise InvalidArgumentError(f"alltoall splits must be integers, got {arr.dtype}")
        if arr.ndim != 1:
            raise InvalidArgumentError(
                f"alltoall splits must be a vector of {size} counts, got shape {arr.shape}"
            )
        return tf.constant(arr.astype(np.int64))
    if splits.dtype not in (tf.int32, tf.int64):
        raise InvalidArgumentError(f"alltoall splits must be int32 or int64, got {splits.dtype}")
    if splits.shape.rank is not None and splits.shape.rank != 1:
        raise InvalidArgumentError(
            f"alltoall splits must be a vector of {size} counts, got shape {splits.shape}"
        )
    return splits if splits.dtype == tf.int64 else tf.cast(splits, tf.int64)


# -- gradients ---------------------------------------------------------------------------
@tf.RegisterGradient("PytfcommReduceScatter")
def _reduce_scatter_grad(op: tf.Operation, *grads: Any) -> list[tf.Tensor]:
    reduce_op = _linear_reduce_op(op, "reduce-scatter")
    handle = op.get_attr("comm_handle")
    with tf.device(_op_device(op)):
        dys = _dense(grads, op.outputs)
        if not handle:
            return dys
        comm = _comm_of(handle)
        out = []
        for dy in dys:
            full = _allgather(dy, communicator=comm, timeout=_attr_timeout(op))
            if reduce_op == "mean":
                full = full / tf.cast(comm.size, full.dtype)
            out.append(full)
        return out


@tf.RegisterGradient("PytfcommAlltoall")
def _alltoall_grad(op: tf.Operation, grad: Any, unused_splits_grad: Any) -> list[Any]:
    handle = op.get_attr("comm_handle")
    with tf.device(_op_device(op)):
        dy = _dense([grad], op.outputs[:1])[0]
        if not handle:
            return [dy, None]
        back, _ = alltoall(
            dy, op.outputs[1], communicator=_comm_of(handle), timeout=_attr_timeout(op)
        )
        return [back, None]


def _comm_of(handle: int) -> Any:
    """The communicator whose handle went into an op (kept by comm_handle())."""
    return _HANDLE_COMMS[handle]


def _attr_timeout(op: tf.Operation) -> float | None:
    t = op.get_attr("timeout_seconds")
    return float(t) if t > 0 else None
