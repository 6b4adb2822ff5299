"""Gradient all-reduce with Horovod's options, shared by the tapes and the optimizers.

All dense gradients of one call go into ONE fused pytfcomm all-reduce
(``groups``/``num_groups`` are accepted; pytfcomm fuses everything anyway);
``IndexedSlices`` are all-gathered (values and indices), unless
``sparse_as_dense``; ``None`` stays ``None``. With ``op=Average`` and a
``gradient_predivide_factor`` f, gradients are multiplied by 1/f before the
sum and by f/size after it, as Horovod does. With ``op=Adasum`` every gradient
is its own Adasum vector and nothing divides by size() (Horovod's CPU Adasum);
sparse gradients then need ``sparse_as_dense``, as in Horovod.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from .. import _basics
from .._basics import Adasum, Average, Sum
from . import mpi_ops
from .compression import Compression

ADASUM_SPARSE = (
    "The Adasum reduction does not currently support sparse tensors. As a workaround "
    "please pass sparse_as_dense=True to DistributedOptimizer (or DistributedGradientTape)"
)


def check_options(op: Any, gradient_predivide_factor: float, compression: Any) -> None:
    """Raise as Horovod does for option combinations it refuses."""
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if op not in (Average, Sum, Adasum):
        mpi_ops.reduce_op_name(op)
    if not (hasattr(compression, "compress") and hasattr(compression, "decompress")):
        raise ValueError(
            "compression must be hvd.Compression.none, .fp16, .bf16 or a Compressor "
            f"(with compress/decompress), got {compression!r}"
        )


def make_allreduce_grads_fn(
    compression: Any = Compression.none,
    sparse_as_dense: bool = False,
    op: Any = Average,
    gradient_predivide_factor: float = 1.0,
    process_set: Any = _basics.global_process_set,
) -> Callable[[Sequence[Any]], list[Any]]:
    """A function ``grads -> reduced grads`` (same order; ``None`` kept)."""
    check_options(op, gradient_predivide_factor, compression)
    _basics.process_set_includes_me(process_set)  # ValueError: not registered
    if op == Average:
        prescale, postscale = 1.0 / gradient_predivide_factor, gradient_predivide_factor
    else:
        prescale, postscale = 1.0, 1.0

    def allreduce_grads(grads: Sequence[Any]) -> list[Any]:
        out: list[Any] = list(grads)
        # Looked up at each call (each trace): an elastic re-forming replaces the job's
        # communicator, and an average must divide by the new size.
        if not _basics.process_set_includes_me(process_set):
            return out  # Horovod: ranks off the process set keep their own gradients
        n = mpi_ops._comm(process_set).size
        dense_idx, dense, ctxs = [], [], []
        for i, g in enumerate(grads):
            if g is None:
                continue
            if isinstance(g, tf.IndexedSlices):
                if not sparse_as_dense and op == Adasum:
                    raise NotImplementedError(ADASUM_SPARSE)
                if not sparse_as_dense:
                    values = mpi_ops.allgather(g.values, process_set=process_set)
                    indices = mpi_ops.allgather(g.indices, process_set=process_set)
                    if op == Average:
                        values = values / tf.cast(n, values.dtype)
                    out[i] = tf.IndexedSlices(values, indices, dense_shape=g.dense_shape)
                    continue
                g = tf.convert_to_tensor(g)
            c, ctx = compression.compress(tf.convert_to_tensor(g))
            dense_idx.append(i)
            dense.append(c)
            ctxs.append(ctx)
        if dense:
            reduced = mpi_ops._grouped_allreduce(
                dense,
                op=op,
                prescale_factor=prescale,
                postscale_factor=postscale,
                process_set=process_set,
            )
            for i, r, ctx in zip(dense_idx, reduced, ctxs, strict=True):
                out[i] = compression.decompress(r, ctx)
        return out

    return allreduce_grads


def var_key(v: Any) -> int:
    """Identity key of a tf.Variable or Keras 3 variable (Keras 3 ones have no ``ref()``)."""
    return id(v)


def scale_local(grad: Any, n: int) -> Any:
    """``grad / n`` for a dense gradient or an IndexedSlices (Horovod's scale_local_gradients)."""
    if grad is None:
        return None
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / n, grad.indices, grad.dense_shape)
    return grad / tf.cast(n, grad.dtype)


def reduce_filtered(
    fn: Callable[[Sequence[Any]], list[Any]],
    grads: Sequence[Any],
    variables: Sequence[Any],
    local: dict[int, Any],
    scale_local_gradients: bool,
) -> list[Any]:
    """All-reduce the gradients of every variable not in ``local``; local ones stay local
    (divided by size() when ``scale_local_gradients``, as Horovod)."""
    grads = list(grads)
    idx = [i for i, v in enumerate(variables) if var_key(v) not in local]
    reduced = fn([grads[i] for i in idx])
    out = list(grads)
    for i, r in zip(idx, reduced, strict=True):
        out[i] = r
    if local and scale_local_gradients:
        n = _basics.size()
        for i, v in enumerate(variables):
            if var_key(v) in local:
                out[i] = scale_local(out[i], n)
    return out
