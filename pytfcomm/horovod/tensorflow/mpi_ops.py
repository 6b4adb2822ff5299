"""Horovod's TF collectives, written on pytfcomm's ops, with Horovod's gradients.

Every function here is a TF op sequence usable eagerly and inside
``tf.function``. Gradients follow Horovod 0.28.1 (its ``mpi_ops.py``):

* ``allreduce``: the same all-reduce (op, prescale, postscale) of the incoming gradient;
* ``allgather``: the *average* over ranks of the incoming gradient, then this rank's rows;
* ``broadcast``: the *average* over ranks of the incoming gradient on the root, zeros elsewhere;
* ``reducescatter``: the all-gather of the incoming gradient (times ``size()`` for Sum);
* ``alltoall``: the all-to-all of the incoming gradient with the received splits.

``reducescatter`` and ``alltoall`` run pytfcomm's own TF ops of those
collectives (:mod:`pytfcomm.tf.scatter`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from ...errors import InvalidArgumentError
from ...tf import collectives as _coll
from ...tf import scatter as _scatter
from .. import _basics
from .._basics import (
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    global_process_set,
)
from . import _adasum
from ._scaling import scale as _scale

__all__ = [
    "allgather",
    "alltoall",
    "broadcast",
    "broadcast_",
    "grouped_allgather",
    "join",
    "local_rank_op",
    "local_size_op",
    "process_set_included_op",
    "rank_op",
    "reducescatter_parts",
    "size_op",
]

_OP_NAMES = {Average: "mean", Sum: "sum", Min: "min", Max: "max", Product: "prod"}


def _comm(process_set: Any = None) -> Any:
    """The communicator of ``process_set``; tf.errors.InvalidArgumentError off the set
    (as Horovod), ValueError for a set that is not registered."""
    try:
        return _basics.process_set_communicator(process_set)
    except _basics.NotAMemberError as exc:
        raise tf.errors.InvalidArgumentError(None, None, str(exc)) from None


def _root(comm: Any, root_rank: int) -> int:
    """Global rank ``root_rank`` as a rank of ``comm`` (a process set's sub-communicator)."""
    try:
        return _basics.set_root(comm, root_rank)
    except _basics.NotAMemberError as exc:
        raise tf.errors.InvalidArgumentError(None, None, str(exc)) from None


def reduce_op_name(op: Any) -> str:
    """pytfcomm's name of Horovod's element-wise op ``op`` (Adasum is not one: see
    ``_adasum``); ValueError for anything else."""
    if op not in _OP_NAMES:
        raise ValueError(
            f"unknown reduction op {op!r}; use hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, "
            "hvd.Max or hvd.Product"
        )
    return _OP_NAMES[op]


try:
    from tensorflow.python.eager.record import could_possibly_record as _could_record
except ImportError:  # not in this TF: assume a tape could always record

    def _could_record() -> bool:
        return True


def _differentiable(fn: Any) -> Any:
    """``tf.custom_gradient(fn)``, except eagerly while no tape (or forward
    accumulator) could record: then ``fn``'s outputs alone, without the 30-100 us
    per call that custom_gradient's eager wrapper costs (nothing would take the
    gradient of that call anyway)."""

    def call(*args: Any) -> Any:
        if tf.executing_eagerly() and not _could_record():
            return fn(*args)[0]
        return tf.custom_gradient(fn)(*args)

    return call


def _dense(dys: Sequence[Any], like: Sequence[tf.Tensor]) -> list[tf.Tensor]:
    return [
        tf.zeros_like(y) if d is None else tf.convert_to_tensor(d)
        for d, y in zip(dys, like, strict=True)
    ]


def _tensor(x: Any) -> tf.Tensor:
    return tf.convert_to_tensor(x)


# Dtypes Horovod takes that pytfcomm's core has no code for. Data-moving ops send
# them as a same-width dtype (bit for bit); reductions widen them and narrow the
# result (integer arithmetic modulo 2**bits, as in the narrow type).
_SAME_WIDTH = {
    tf.int16: tf.float16,
    tf.uint16: tf.float16,
    tf.uint32: tf.int32,
    tf.uint64: tf.int64,
    tf.complex64: tf.int64,
}
_WIDER = {tf.int16: tf.int32, tf.uint16: tf.int32, tf.uint32: tf.int64}


def _moved(fn: Any, x: tf.Tensor, *args: Any, **kwargs: Any) -> Any:
    """``fn(x, ...)`` for a data-moving collective, ``x`` sent bit for bit."""
    wire = _SAME_WIDTH.get(x.dtype)
    if wire is None:
        return fn(x, *args, **kwargs)
    return tf.bitcast(fn(tf.bitcast(x, wire), *args, **kwargs), x.dtype)


def _widened(xs: Sequence[tf.Tensor]) -> list[tf.Tensor]:
    return [tf.cast(x, _WIDER[x.dtype]) if x.dtype in _WIDER else x for x in xs]


# -- all-reduce ---------------------------------------------------------------------------
def _grouped_allreduce(
    tensors: Sequence[Any],
    name: str | None = None,
    op: Any = Sum,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    ignore_name_scope: bool = False,
    process_set: Any = global_process_set,
) -> list[tf.Tensor]:
    """All-reduce ``tensors`` in ONE fused pytfcomm op; gradient: the same all-reduce.

    ``op=Adasum`` runs :func:`._adasum.grouped_adasum` instead (an all-gather, then
    the Adasum tree on every rank; its gradient is the Adasum of the incoming
    gradients, as Horovod's).
    """
    comm = _comm(process_set)
    xs = [_tensor(t) for t in tensors]
    if op == Adasum:
        _adasum.check(xs, comm.size)
    else:
        op_name = reduce_op_name(op)
    if not xs:
        return []

    @_differentiable
    def fused(*inputs: tf.Tensor) -> Any:
        if op == Adasum:
            with tf.name_scope(name or "HorovodAdasum"):
                ys = _adasum.grouped_adasum(inputs, comm, prescale_factor, postscale_factor)
        else:
            scaled = _widened([_scale(x, prescale_factor) for x in inputs])
            with tf.name_scope(name or "HorovodGroupedAllreduce"):
                out = _coll.allreduce_replicas([scaled], op_name, communicator=comm)[0]
            ys = [
                tf.cast(_scale(y, postscale_factor), x.dtype)
                if y.dtype != x.dtype
                else _scale(y, postscale_factor)
                for y, x in zip(out, inputs, strict=True)
            ]

        def grad(*dys: Any) -> list[tf.Tensor]:
            return _grouped_allreduce(
                _dense(dys, ys),
                op=op,
                prescale_factor=prescale_factor,
                postscale_factor=postscale_factor,
                process_set=process_set,
            )

        return ys, grad

    return list(fused(*xs))


def _allreduce(
    tensor: Any,
    name: str | None = None,
    op: Any = Sum,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    ignore_name_scope: bool = False,
    process_set: Any = global_process_set,
) -> tf.Tensor:
    """All-reduce one dense tensor (Horovod's raw op; default Sum)."""
    return _grouped_allreduce(
        [tensor],
        name=name,
        op=op,
        prescale_factor=prescale_factor,
        postscale_factor=postscale_factor,
        process_set=process_set,
    )[0]


# -- all-gather ---------------------------------------------------------------------------
def _first_dims(x: tf.Tensor, comm: Any) -> tf.Tensor:
    """Every rank's first dimension (int64, length size())."""
    mine = tf.reshape(tf.cast(tf.shape(x)[0], tf.int64), [1])
    return _coll.allgather(mine, communicator=comm)


def allgather(
    tensor: Any,
    name: str | None = None,
    ignore_name_scope: bool = False,
    process_set: Any = global_process_set,
) -> tf.Tensor:
    """Concatenate every rank's ``tensor`` along dimension 0, in rank order.

    The first dimension may differ between ranks (pytfcomm's all-gather
    exchanges the row counts first). Gradient (Horovod's): the average over
    ranks of the incoming gradient, then this rank's rows.
    """
    comm = _comm(process_set)
    x = _tensor(tensor)

    @_differentiable
    def gather(x: tf.Tensor) -> Any:
        with tf.name_scope(name or "HorovodAllgather"):
            y = _moved(_coll.allgather, x, communicator=comm)

        def grad(dy: Any) -> tf.Tensor:
            avg = _allreduce(_dense([dy], [y])[0], op=Average, process_set=process_set)
            dims = _first_dims(x, comm)
            start = tf.reduce_sum(dims[: comm.rank])
            return avg[start : start + dims[comm.rank]]

        return y, grad

    return gather(x)


def grouped_allgather(
    tensors: Sequence[Any],
    name: str | None = None,
    ignore_name_scope: bool = False,
    process_set: Any = global_process_set,
) -> list[tf.Tensor]:
    """:func:`allgather` of each tensor (one pytfcomm op each)."""
    return [allgather(t, name=name, process_set=process_set) for t in tensors]


# -- broadcast ----------------------------------------------------------------------------
def broadcast(
    tensor: Any,
    root_rank: int,
    name: str | None = None,
    ignore_name_scope: bool = False,
    process_set: Any = global_process_set,
) -> tf.Tensor:
    """Rank ``root_rank``'s ``tensor`` on every rank.

    Gradient (Horovod's): on the root, the average over ranks of the incoming
    gradient; zeros on every other rank.
    """
    comm = _comm(process_set)
    x = _tensor(tensor)
    root = _root(comm, root_rank)

    @_differentiable
    def bcast(x: tf.Tensor) -> Any:
        with tf.name_scope(name or "HorovodBroadcast"):
            y = _moved(_coll.broadcast, x, root, communicator=comm)

        def grad(dy: Any) -> tf.Tensor:
            avg = _allreduce(_dense([dy], [y])[0], op=Average, process_set=process_set)
            return avg if comm.rank == root else avg * 0

        return y, grad

    return bcast(x)


def broadcast_(
    variables: Sequence[Any],
    root_rank: int,
    name: str | None = None,
    process_set: Any = global_process_set,
) -> list[tf.Tensor]:
    """Set ``variables`` in place to their values on ``root_rank``; returns the new values.

    All variables travel in one pytfcomm broadcast (as bytes).
    """
    from ...tf.distributed import broadcast_variables

    comm = _comm(process_set)
    variables = list(variables)
    op = broadcast_variables(variables, _root(comm, root_rank), communicator=comm)
    deps = [op] if op is not None else []
    with tf.control_dependencies(deps):
        return [tf.identity(tf.convert_to_tensor(v)) for v in variables]


# -- reduce-scatter -----------------------------------------------------------------------
def reducescatter_parts(rows: int, n: int) -> list[int]:
    """Rows each rank gets of a first dimension ``rows``: Horovod's rule, the first
    ``rows % n`` ranks one more."""
    return _scatter.reduce_scatter_rows(rows, n)


def _grouped_reducescatter(
    tensors: Sequence[Any],
    name: str | None = None,
    op: Any = Sum,
    ignore_name_scope: bool = False,
    process_set: Any = global_process_set,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> list[tf.Tensor]:
    """Reduce-scatter of every tensor: one pytfcomm reduce-scatter op per dtype (the
    core's, moving about half the bytes of an all-reduce; a dtype's tensors packed into
    one collective); gradient: the all-gather."""
    if op not in (Sum, Average):
        raise NotImplementedError(
            "hvd.reducescatter supports op=hvd.Average and op=hvd.Sum only (as Horovod)"
        )
    comm = _comm(process_set)
    xs = [_tensor(t) for t in tensors]
    for x in xs:
        if x.shape.rank == 0:
            raise ValueError("reducescatter needs tensors with at least one dimension")
    op_name = reduce_op_name(op)

    @_differentiable
    def rs(*inputs: tf.Tensor) -> Any:
        ys = []
        scaled = _widened([_scale(x, prescale_factor) for x in inputs])
        with tf.name_scope(name or "HorovodReducescatter"):
            parts = _scatter.reduce_scatter(scaled, op_name, communicator=comm)
        for x, y in zip(inputs, parts, strict=True):
            y = tf.cast(y, x.dtype) if y.dtype != x.dtype else y
            ys.append(_scale(y, postscale_factor))

        def grad(*dys: Any) -> list[tf.Tensor]:
            out = []
            for d in _dense(dys, ys):
                if op == Sum:
                    d = _scale(d, float(comm.size))
                d = _scale(_scale(d, prescale_factor), postscale_factor)
                out.append(allgather(d, process_set=process_set))
            return out

        return ys, grad

    return list(rs(*xs))


def _reducescatter(
    tensor: Any,
    name: str | None = None,
    op: Any = Sum,
    ignore_name_scope: bool = False,
    process_set: Any = global_process_set,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> tf.Tensor:
    """Horovod's raw reduce-scatter of one tensor (default Sum)."""
    return _grouped_reducescatter(
        [tensor],
        name=name,
        op=op,
        process_set=process_set,
        prescale_factor=prescale_factor,
        postscale_factor=postscale_factor,
    )[0]


# -- all-to-all ---------------------------------------------------------------------------
def _alltoall_raw(x: tf.Tensor, splits: tf.Tensor, comm: Any) -> tuple[tf.Tensor, tf.Tensor]:
    wire = _SAME_WIDTH.get(x.dtype)  # sent bit for bit, as _moved does
    y, received = _scatter.alltoall(
        x if wire is None else tf.bitcast(x, wire), splits, communicator=comm
    )
    return (y if wire is None else tf.bitcast(y, x.dtype)), tf.cast(received, tf.int32)


def alltoall(
    tensor: Any,
    splits: Any = None,
    name: str | None = None,
    ignore_name_scope: bool = False,
    process_set: Any = global_process_set,
) -> Any:
    """Send ``splits[j]`` rows of ``tensor`` (in order) to rank j; receive from every rank.

    Without ``splits`` dimension 0 is split equally (it must divide by
    ``size()``) and only the received tensor is returned; with ``splits`` the
    result is ``(received, received_splits)``, as Horovod. One pytfcomm
    all-to-all op (:func:`pytfcomm.tf.alltoall`): each row travels once.
    Gradient: the all-to-all of the incoming gradient back with the received splits.
    """
    comm = _comm(process_set)
    x = _tensor(tensor)
    if x.shape.rank == 0:
        raise ValueError("alltoall needs a tensor with at least one dimension")
    n = comm.size
    split_t = None  # equal parts, split by pytfcomm.tf.alltoall
    if splits is not None:
        split_t = tf.convert_to_tensor(splits)
        if split_t.dtype not in (tf.int32, tf.int64):
            raise ValueError(f"alltoall splits must be int32 or int64, got {split_t.dtype.name}")
        if split_t.shape.rank != 1 or (split_t.shape[0] is not None and split_t.shape[0] != n):
            raise ValueError(f"alltoall splits must be a vector of size() = {n} counts")

    @_differentiable
    def a2a(x: tf.Tensor) -> Any:
        with tf.name_scope(name or "HorovodAlltoall"):
            try:
                y, recv = _alltoall_raw(x, split_t, comm)
            except InvalidArgumentError as exc:  # found before the op runs: Horovod's class
                raise tf.errors.InvalidArgumentError(None, None, str(exc)) from None

        def grad(dy: Any, *unused: Any) -> tf.Tensor:
            return _alltoall_raw(_dense([dy], [y])[0], recv, comm)[0]

        return (y, recv), grad

    out, recv = a2a(x)
    return (out, recv) if splits is not None else out


def join(device: str = "") -> tf.Tensor:
    """This rank ran out of data: until every rank has called ``join``, it takes part
    in the collectives the others still run with nothing of its own (Horovod's join:
    zeros to sums and averages, which still divide by ``size()``; the identity to
    Min/Max/Product; no rows to all-gathers and all-to-alls). Returns, as an int32
    scalar, the rank that joined last (the same on every rank).

    Runs when called (eagerly; inside ``tf.function`` as a ``tf.py_function``). Waits
    at most the job's collective timeout (PYTFCOMM_TIMEOUT) for the last rank. What
    cannot run with a joined rank raises on the ranks that asked for it (see
    :meth:`pytfcomm.Communicator.join`): e.g. a broadcast whose root has joined, or
    pytfcomm's TF all-gather, whose row-count exchange is an all-gather of equal shapes.
    """
    comm = _comm()
    if tf.executing_eagerly():
        return tf.constant(comm.join(), dtype=tf.int32)
    return tf.py_function(lambda: comm.join(), [], tf.int32)


# -- ops answering the rank queries ---------------------------------------------------------
def size_op(process_set_id: int = 0, name: str | None = None) -> tf.Tensor:
    """An int32 scalar: the number of processes in the set (0: the global set)."""
    ps = _basics.process_set_by_id(process_set_id)
    return tf.constant(ps.size(), dtype=tf.int32, name=name)


def local_size_op(name: str | None = None) -> tf.Tensor:
    """An int32 scalar: the number of processes on this host."""
    return tf.constant(_basics.local_size(), dtype=tf.int32, name=name)


def rank_op(name: str | None = None) -> tf.Tensor:
    """An int32 scalar: this process's rank."""
    return tf.constant(_basics.rank(), dtype=tf.int32, name=name)


def local_rank_op(name: str | None = None) -> tf.Tensor:
    """An int32 scalar: this process's local rank."""
    return tf.constant(_basics.local_rank(), dtype=tf.int32, name=name)


def process_set_included_op(process_set_id: int = 0, name: str | None = None) -> tf.Tensor:
    """An int32 scalar: 1 when this process is in the set, else 0."""
    ps = _basics.process_set_by_id(process_set_id)
    return tf.constant(1 if ps.included() else 0, dtype=tf.int32, name=name)
