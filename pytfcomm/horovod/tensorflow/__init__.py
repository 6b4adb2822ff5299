"""``import pytfcomm.horovod.tensorflow as hvd``: Horovod 0.28.1's TensorFlow API on pytfcomm.

Same names, signatures, defaults and gradient conventions as Horovod's
``horovod.tensorflow``; see docs/horovod.md for what differs and what raises
``NotImplementedError`` (timelines started at run time, TF1 sessions, elastic
training). ``op=hvd.Adasum`` follows Horovod's CPU Adasum (a power-of-two number
of ranks; composed of an all-gather, see ``_adasum``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from .._basics import (
    Adasum,
    Average,
    Max,
    Min,
    ProcessSet,
    Product,
    Sum,
    add_process_set,
    ccl_built,
    check_num_rank_power_of_2,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    global_process_set,
    gloo_built,
    gloo_enabled,
    handle_average_backwards_compatibility,
    init,
    is_homogeneous,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    remove_process_set,
    rocm_built,
    shutdown,
    size,
    start_timeline,
    stop_timeline,
)
from . import elastic, mpi_ops
from . import util as util  # hvd.util, as Horovod
from ._gradients import ADASUM_SPARSE, make_allreduce_grads_fn, reduce_filtered, var_key
from .compression import Compression
from .functions import allgather_object, broadcast_object, broadcast_object_fn, broadcast_variables
from .mpi_ops import (
    _allreduce,
    _grouped_allreduce,
    _grouped_reducescatter,
    _reducescatter,
    allgather,
    alltoall,
    broadcast,
    broadcast_,
    grouped_allgather,
    join,
    local_rank_op,
    local_size_op,
    process_set_included_op,
    rank_op,
    size_op,
)
from .sync_batch_norm import SyncBatchNormalization
from .util import _executing_eagerly as _executing_eagerly  # hvd._executing_eagerly
from .util import gpu_available as gpu_available  # Horovod imports it here
from .util import refs_to_vars, vars_to_refs

__all__ = [
    "Adasum",
    "Average",
    "BroadcastGlobalVariablesHook",
    "Compression",
    "DistributedGradientTape",
    "DistributedOptimizer",
    "LocalGradientAggregationHelper",
    "Max",
    "Min",
    "PartialDistributedGradientTape",
    "ProcessSet",
    "Product",
    "Sum",
    "SyncBatchNormalization",
    "add_process_set",
    "allgather",
    "allgather_object",
    "allreduce",
    "alltoall",
    "broadcast",
    "broadcast_",
    "broadcast_global_variables",
    "broadcast_object",
    "broadcast_object_fn",
    "broadcast_variables",
    "ccl_built",
    "check_num_rank_power_of_2",
    "cross_rank",
    "cross_size",
    "cuda_built",
    "ddl_built",
    "elastic",
    "global_process_set",
    "gloo_built",
    "gloo_enabled",
    "grouped_allgather",
    "grouped_allreduce",
    "grouped_reducescatter",
    "handle_average_backwards_compatibility",
    "init",
    "is_homogeneous",
    "is_initialized",
    "join",
    "local_rank",
    "local_rank_op",
    "local_size",
    "local_size_op",
    "mpi_built",
    "mpi_enabled",
    "mpi_threads_supported",
    "nccl_built",
    "process_set_included_op",
    "rank",
    "rank_op",
    "reducescatter",
    "refs_to_vars",
    "remove_process_set",
    "rocm_built",
    "shutdown",
    "size",
    "size_op",
    "start_timeline",
    "stop_timeline",
    "vars_to_refs",
]


def _check_sparse_op(op: Any, prescale_factor: float, postscale_factor: float) -> None:
    if op == Adasum:
        raise NotImplementedError(ADASUM_SPARSE)
    if op not in (Sum, Average):
        raise NotImplementedError("Only Sum and Average ops are supported with tf.IndexedSlices")
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError("Pre/postscale_factor are not supported with tf.IndexedSlices")


def _allreduce_slices(t: tf.IndexedSlices, op: Any, process_set: Any) -> tf.IndexedSlices:
    values = allgather(t.values, process_set=process_set)
    indices = allgather(t.indices, process_set=process_set)
    if op == Average:
        n = mpi_ops._comm(process_set).size
        values = values / tf.cast(n, values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=t.dense_shape)


def allreduce(
    tensor: Any,
    average: Any = None,
    device_dense: str = "",
    device_sparse: str = "",
    compression: Any = Compression.none,
    op: Any = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    name: str | None = None,
    process_set: Any = global_process_set,
    ignore_name_scope: bool = False,
) -> Any:
    """Reduce ``tensor`` (a tf.Tensor, tf.Variable or tf.IndexedSlices) over all processes.

    ``op`` defaults to Average (Sum, Min, Max, Product, Adasum also). An
    IndexedSlices is all-gathered (values and indices) instead (not with
    Adasum: NotImplementedError, as Horovod). ``device_*`` are accepted;
    pytfcomm places the op where the tensor is. Gradient: the same all-reduce
    of the incoming gradient.

    ``op=hvd.Adasum`` (float16/32/64, ``size()`` a power of two, else
    NotImplementedError as Horovod) combines the ranks' tensors pairwise in
    Horovod's tree, ``(1 - a.b/2|a|^2) a + (1 - a.b/2|b|^2) b``, with no
    division by ``size()``. It is composed of an all-gather: every rank
    receives ``size()`` times the tensor's bytes and computes the tree (in
    float64) itself; results are bitwise identical on every rank.
    """
    op = handle_average_backwards_compatibility(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        _check_sparse_op(op, prescale_factor, postscale_factor)
        return _allreduce_slices(tensor, op, process_set)
    compressed, ctx = compression.compress(tf.convert_to_tensor(tensor))
    reduced = _allreduce(
        compressed,
        name=name,
        op=op,
        prescale_factor=prescale_factor,
        postscale_factor=postscale_factor,
        process_set=process_set,
    )
    return compression.decompress(reduced, ctx)


def grouped_allreduce(
    tensors: Sequence[Any],
    average: Any = None,
    device_dense: str = "",
    device_sparse: str = "",
    compression: Any = Compression.none,
    op: Any = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: Any = global_process_set,
    ignore_name_scope: bool = False,
    name: str | None = None,
) -> Any:
    """:func:`allreduce` of every tensor; the dense ones in ONE fused pytfcomm op."""
    if not tensors:
        return tensors
    op = handle_average_backwards_compatibility(op, average)
    out: list[Any] = [None] * len(tensors)
    dense_idx, dense, ctxs = [], [], []
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            _check_sparse_op(op, prescale_factor, postscale_factor)
            out[i] = _allreduce_slices(t, op, process_set)
        else:
            c, ctx = compression.compress(tf.convert_to_tensor(t))
            dense_idx.append(i)
            dense.append(c)
            ctxs.append(ctx)
    if dense:
        reduced = _grouped_allreduce(
            dense,
            name=name,
            op=op,
            prescale_factor=prescale_factor,
            postscale_factor=postscale_factor,
            process_set=process_set,
        )
        for i, r, ctx in zip(dense_idx, reduced, ctxs, strict=True):
            out[i] = compression.decompress(r, ctx)
    return out


def reducescatter(
    tensor: Any,
    device_dense: str = "",
    compression: Any = Compression.none,
    op: Any = Average,
    name: str | None = None,
    process_set: Any = global_process_set,
    ignore_name_scope: bool = False,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> tf.Tensor:
    """Reduce ``tensor`` over all processes (Average or Sum), keep this rank's rows.

    Rank r gets rows ``[r*q + min(r, m), ...)`` of the result, q = rows //
    size(), the first m = rows % size() ranks one more (Horovod's split).
    Runs as a full all-reduce then a slice: correct, but about twice the
    traffic of a true reduce-scatter (pytfcomm's core one is not a TF op yet).
    Gradient (Horovod's): the all-gather of the incoming gradient (times
    size() for Sum).
    """
    compressed, ctx = compression.compress(tf.convert_to_tensor(tensor))
    out = _reducescatter(
        compressed,
        name=name,
        op=op,
        process_set=process_set,
        prescale_factor=prescale_factor,
        postscale_factor=postscale_factor,
    )
    return compression.decompress(out, ctx)


def grouped_reducescatter(
    tensors: Sequence[Any],
    device_dense: str = "",
    compression: Any = Compression.none,
    op: Any = Average,
    process_set: Any = global_process_set,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> Any:
    """:func:`reducescatter` of every tensor, through one fused all-reduce."""
    if not tensors:
        return tensors
    pairs = [compression.compress(tf.convert_to_tensor(t)) for t in tensors]
    out = _grouped_reducescatter(
        [c for c, _ in pairs],
        op=op,
        process_set=process_set,
        prescale_factor=prescale_factor,
        postscale_factor=postscale_factor,
    )
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(out, pairs, strict=True)]


def broadcast_global_variables(root_rank: int) -> Any:
    """TF1 graphs: broadcast ``tf.compat.v1.global_variables()``; eagerly a RuntimeError, as
    Horovod (use :func:`broadcast_variables` on the model's and optimizer's variables)."""
    if tf.executing_eagerly():
        raise RuntimeError(
            "hvd.broadcast_global_variables() does not support eager execution. Please use "
            "`hvd.broadcast_variables(<model/optimizer variables>)` instead."
        )
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


class BroadcastGlobalVariablesHook:
    """Horovod's TF1 ``SessionRunHook``; not supported (pytfcomm targets TF2)."""

    def __init__(self, root_rank: int, device: str = "") -> None:
        raise NotImplementedError(
            "hvd.BroadcastGlobalVariablesHook is for TF1 sessions (tf.estimator); pytfcomm "
            "targets TF2: call hvd.broadcast_variables(model.variables, root_rank=0) after "
            "the first step, or use hvd.keras.callbacks.BroadcastGlobalVariablesCallback(0)"
        )


class LocalGradientAggregationHelper:
    """Horovod's internal TF1 helper for ``backward_passes_per_step``; not supported."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "hvd.LocalGradientAggregationHelper (TF1 graphs) is not supported; pass "
            "backward_passes_per_step=N to hvd.keras.DistributedOptimizer instead"
        )


# -- gradient tape ------------------------------------------------------------------------
class _DistributedGradientTape:
    """A tf.GradientTape wrapper whose ``gradient`` returns all-reduced gradients."""

    def __init__(
        self,
        tape: tf.GradientTape,
        compression: Any,
        sparse_as_dense: bool,
        op: Any,
        gradient_predivide_factor: float,
        process_set: Any,
        scale_local_gradients: bool,
    ) -> None:
        if not isinstance(tape, tf.GradientTape):
            raise ValueError(
                f"DistributedGradientTape wraps a tf.GradientTape, got {type(tape).__name__}"
            )
        self._tape = tape
        self._allreduce_grads = make_allreduce_grads_fn(
            compression, sparse_as_dense, op, gradient_predivide_factor, process_set
        )
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self._local_sources: dict[int, Any] = {}

    def register_local_source(self, source: Any) -> None:
        """Mark ``source`` as worker-local: its gradient is not all-reduced."""
        self._local_sources[var_key(source)] = source

    def gradient(
        self,
        target: Any,
        sources: Any,
        output_gradients: Any = None,
        use_generic_names: bool = False,
    ) -> Any:
        """``tf.GradientTape.gradient``, then the all-reduce of every non-local gradient."""
        grads = self._tape.gradient(target, sources, output_gradients=output_gradients)
        flat_s, flat_g = tf.nest.flatten(sources), tf.nest.flatten(grads)
        out = reduce_filtered(
            self._allreduce_grads,
            flat_g,
            flat_s,
            self._local_sources,
            self.scale_local_gradients,
        )
        return tf.nest.pack_sequence_as(grads, out)

    def get_local_and_global_gradients(
        self,
        target: Any,
        sources: Any,
        output_gradients: Any = None,
        use_generic_names: bool = False,
    ) -> tuple[list[tuple[Any, Any]], list[tuple[Any, Any]]]:
        """``([(local source, grad)], [(global source, grad)])``."""
        grads = self.gradient(target, sources, output_gradients, use_generic_names)
        local: list[tuple[Any, Any]] = []
        glob: list[tuple[Any, Any]] = []
        for s, g in zip(tf.nest.flatten(sources), tf.nest.flatten(grads), strict=True):
            (local if var_key(s) in self._local_sources else glob).append((s, g))
        return local, glob

    def __enter__(self) -> _DistributedGradientTape:
        self._tape.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._tape.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tape, name)


def DistributedGradientTape(
    gradtape: tf.GradientTape,
    device_dense: str = "",
    device_sparse: str = "",
    compression: Any = Compression.none,
    sparse_as_dense: bool = False,
    op: Any = Average,
    gradient_predivide_factor: float = 1.0,
    num_groups: int = 0,
    groups: Any = None,
    process_set: Any = global_process_set,
    scale_local_gradients: bool = True,
) -> Any:
    """Wrap ``gradtape`` so that ``gradient()`` averages (``op``) gradients over processes.

    Every dense gradient goes into one fused all-reduce (``num_groups`` and
    ``groups`` are accepted and need nothing more); IndexedSlices are
    all-gathered unless ``sparse_as_dense``. With ``op=hvd.Adasum`` each
    gradient is combined by Adasum (per tensor, not averaged: Horovod's guide
    scales the single-worker learning rate by about 2-2.5 rather than by
    size()). ``register_local_source(var)`` keeps a variable's gradient local
    (divided by size() when ``scale_local_gradients``).
    """
    return _DistributedGradientTape(
        gradtape,
        compression,
        sparse_as_dense,
        op,
        gradient_predivide_factor,
        process_set,
        scale_local_gradients,
    )


def PartialDistributedGradientTape(
    gradtape: tf.GradientTape,
    device_dense: str = "",
    device_sparse: str = "",
    compression: Any = Compression.none,
    sparse_as_dense: bool = False,
    op: Any = Average,
    gradient_predivide_factor: float = 1.0,
    num_groups: int = 0,
    groups: Any = None,
    process_set: Any = global_process_set,
    local_layers: Any = None,
    scale_local_gradients: bool = True,
) -> Any:
    """:func:`DistributedGradientTape` whose ``local_layers``' weights stay local."""
    tape = DistributedGradientTape(
        gradtape,
        device_dense,
        device_sparse,
        compression,
        sparse_as_dense,
        op,
        gradient_predivide_factor,
        num_groups,
        groups,
        process_set,
        scale_local_gradients,
    )
    for layer in _as_list(local_layers):
        for var in layer.trainable_weights:
            tape.register_local_source(var)
    return tape


def _as_list(layers: Any) -> list[Any]:
    if layers is None:
        return []
    return list(layers) if isinstance(layers, (list, tuple)) else [layers]


def DistributedOptimizer(
    optimizer: Any,
    name: str | None = None,
    use_locking: bool = False,
    device_dense: str = "",
    device_sparse: str = "",
    compression: Any = Compression.none,
    sparse_as_dense: bool = False,
    backward_passes_per_step: int = 1,
    op: Any = Average,
    gradient_predivide_factor: float = 1.0,
    average_aggregated_gradients: bool = False,
    num_groups: int = 0,
    groups: Any = None,
    process_set: Any = global_process_set,
    scale_local_gradients: bool = True,
) -> Any:
    """Wrap a Keras optimizer (see :func:`pytfcomm.horovod.tensorflow.keras.DistributedOptimizer`).

    TF1 ``tf.compat.v1.train.Optimizer``s raise NotImplementedError. ``op=hvd.Adasum``
    raises ValueError, as Horovod's (its Adasum optimizer, which reduces weight
    deltas, is for TF1 optimizers only); ``pytfcomm.horovod.tensorflow.keras``'s
    ``DistributedOptimizer(opt, op=hvd.Adasum)`` and ``DistributedGradientTape(tape,
    op=hvd.Adasum)`` reduce gradients with Adasum.
    """
    if op == Adasum and average_aggregated_gradients:
        raise ValueError("Adasum does not support average_aggregated_gradients == True")
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        raise NotImplementedError(
            "hvd.DistributedOptimizer of a TF1 tf.compat.v1.train.Optimizer is not supported; "
            "use a Keras optimizer, or hvd.DistributedGradientTape in a custom loop"
        )
    if op == Adasum:
        raise ValueError(
            "op == Adasum is not supported yet with Keras (as in Horovod 0.28.1); use "
            "pytfcomm.horovod.tensorflow.keras.DistributedOptimizer(opt, op=hvd.Adasum) or "
            "hvd.DistributedGradientTape(tape, op=hvd.Adasum), which reduce the gradients "
            "with Adasum"
        )
    from ._keras_optimizer import DistributedOptimizer as keras_distributed

    return keras_distributed(
        optimizer,
        name=name,
        device_dense=device_dense,
        device_sparse=device_sparse,
        compression=compression,
        sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor,
        op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients,
        num_groups=num_groups,
        groups=groups,
        process_set=process_set,
        scale_local_gradients=scale_local_gradients,
    )
