"""Horovod-style data parallelism (one process per device): gradients and variables.

``allreduce_gradients`` is the one function behind :class:`DistributedGradientTape`
and :func:`pytfcomm.keras.DistributedOptimizer`: every dense gradient of a step
goes into ONE fused pytfcomm all-reduce op (so there is one collective per
step, in the same place of every worker's program, and TF cannot reorder it
against another), ``IndexedSlices`` are all-gathered, ``None`` stays ``None``.
:func:`broadcast_variables` sends all variables as one byte buffer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import tensorflow as tf

from ..errors import InvalidArgumentError
from . import collectives as coll

__all__ = ["Compression", "DistributedGradientTape", "allreduce_gradients", "broadcast_variables"]


class Compression:
    """Wire compression of gradients: cast before the all-reduce, cast back after.

    ``Compression.fp16`` and ``Compression.bf16`` halve the bytes of float32
    and float64 gradients (other dtypes are sent as they are);
    ``Compression.none`` sends them unchanged. The strings ``"fp16"``,
    ``"bf16"`` and ``"none"`` are accepted too.
    """

    none = "none"
    fp16 = "fp16"
    bf16 = "bf16"


_WIRE = {"none": None, "fp16": tf.float16, "bf16": tf.bfloat16}
_OPS = ("mean", "sum")


def _check_op(op: str) -> str:
    if op not in _OPS:
        raise InvalidArgumentError(f"op must be 'mean' or 'sum' for gradients, got {op!r}")
    return op


def _wire_dtype(compression: Any) -> tf.DType | None:
    key = "none" if compression is None else compression
    if key not in _WIRE:
        raise InvalidArgumentError(
            f"compression must be None, 'none', 'fp16' or 'bf16' (pytfcomm.Compression), "
            f"got {compression!r}"
        )
    return _WIRE[key]


def allreduce_gradients(
    grads: Sequence[Any],
    op: str = "mean",
    *,
    compression: Any = None,
    sparse_as_dense: bool = False,
    communicator: Any = None,
    algorithm: str = "auto",
    fusion_threshold_bytes: int = coll.DEFAULT_FUSION_BYTES,
    timeout: float | None = None,
) -> list[Any]:
    """Average (``op="mean"``) or sum the gradients of every process; see the module doc.

    Returns a list in the order of ``grads``. Without a communicator of more
    than one process the gradients come back unchanged; with a closed one
    this raises :class:`pytfcomm.CommClosedError`.
    """
    _check_op(op)
    wire = _wire_dtype(compression)
    comm = coll.active_communicator(communicator)
    grads = list(grads)
    if comm is None:
        return grads
    out: list[Any] = list(grads)
    dense_idx: list[int] = []
    dense: list[tf.Tensor] = []
    for i, g in enumerate(grads):
        if g is None:
            continue
        if isinstance(g, tf.IndexedSlices):
            if not sparse_as_dense:
                out[i] = _allgather_slices(g, op, comm, timeout)
                continue
            g = tf.convert_to_tensor(g)
        dense_idx.append(i)
        dense.append(tf.convert_to_tensor(g))
    if not dense:
        return out
    sent = []
    for g in dense:
        if wire is not None and g.dtype in (tf.float32, tf.float64):
            # Scale before narrowing so that the sum cannot overflow fp16.
            if op == "mean":
                g = g / tf.cast(comm.size, g.dtype)
            g = tf.cast(g, wire)
        sent.append(g)
    wire_op = "sum" if wire is not None and op == "mean" else op
    reduced = coll.allreduce_replicas(
        [sent],
        wire_op,
        communicator=comm,
        algorithm=algorithm,
        fusion_threshold_bytes=fusion_threshold_bytes,
        timeout=timeout,
    )[0]
    for i, g, r in zip(dense_idx, dense, reduced, strict=True):
        out[i] = tf.cast(r, g.dtype) if r.dtype != g.dtype else r
    return out


def _allgather_slices(
    g: tf.IndexedSlices, op: str, comm: Any, timeout: float | None
) -> tf.IndexedSlices:
    values = coll.allgather(g.values, communicator=comm, timeout=timeout)
    indices = coll.allgather(tf.cast(g.indices, tf.int64), communicator=comm, timeout=timeout)
    if op == "mean":
        values = values / tf.cast(comm.size, values.dtype)
    return tf.IndexedSlices(values, tf.cast(indices, g.indices.dtype), g.dense_shape)


class DistributedGradientTape:
    """Wraps a ``tf.GradientTape`` so that ``gradient()`` returns all-reduced gradients.

    Horovod's usage works as is::

        with tf.GradientTape() as tape:
            loss = ...
        tape = pytfcomm.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)

    and so does ``with pytfcomm.DistributedGradientTape(tf.GradientTape()) as
    tape:``. ``op`` is ``"mean"`` (default) or ``"sum"``; ``compression``
    ``pytfcomm.Compression.fp16``/``bf16`` narrows float gradients on the wire;
    ``sparse_as_dense`` densifies ``IndexedSlices`` instead of gathering them.
    Works eagerly and inside ``tf.function``, with Keras 3 or tf-keras
    variables. Any other attribute is the wrapped tape's.
    """

    def __init__(
        self,
        tape: tf.GradientTape,
        *,
        op: str = "mean",
        compression: Any = None,
        sparse_as_dense: bool = False,
        communicator: Any = None,
        algorithm: str = "auto",
        fusion_threshold_bytes: int = coll.DEFAULT_FUSION_BYTES,
        timeout: float | None = None,
    ) -> None:
        if not isinstance(tape, tf.GradientTape):
            raise InvalidArgumentError(
                f"DistributedGradientTape wraps a tf.GradientTape, got {type(tape).__name__}"
            )
        _check_op(op)
        _wire_dtype(compression)
        self._tape = tape
        self._reduce_kwargs = dict(
            op=op,
            compression=compression,
            sparse_as_dense=bool(sparse_as_dense),
            communicator=communicator,
            algorithm=algorithm,
            fusion_threshold_bytes=fusion_threshold_bytes,
            timeout=timeout,
        )

    def gradient(
        self,
        target: Any,
        sources: Any,
        output_gradients: Any = None,
        unconnected_gradients: Any = tf.UnconnectedGradients.NONE,
    ) -> Any:
        """``tf.GradientTape.gradient``, then the all-reduce of every gradient."""
        grads = self._tape.gradient(
            target,
            sources,
            output_gradients=output_gradients,
            unconnected_gradients=unconnected_gradients,
        )
        flat = tf.nest.flatten(grads)
        return tf.nest.pack_sequence_as(grads, allreduce_gradients(flat, **self._reduce_kwargs))

    def __enter__(self) -> DistributedGradientTape:
        self._tape.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._tape.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tape, name)


def _as_bytes(v: tf.Tensor) -> tf.Tensor:
    if v.dtype == tf.bool:
        return tf.reshape(tf.cast(v, tf.uint8), [-1])
    return tf.reshape(tf.bitcast(v, tf.uint8), [-1])


def _from_bytes(b: tf.Tensor, like: tf.Tensor) -> tf.Tensor:
    if like.dtype == tf.bool:
        return tf.reshape(tf.cast(b, tf.bool), tf.shape(like))
    if like.dtype.size == 1:
        return tf.reshape(tf.bitcast(b, like.dtype), tf.shape(like))
    b = tf.reshape(b, tf.concat([tf.shape(like), [like.dtype.size]], 0))
    return tf.bitcast(b, like.dtype)


def broadcast_variables(
    variables: Iterable[Any],
    root: int = 0,
    *,
    communicator: Any = None,
    timeout: float | None = None,
) -> Any:
    """Set every variable to its value on process ``root`` (one broadcast for all).

    Accepts tf.Variables and Keras 3 / tf-keras variables of any dtype (sent
    as raw bytes). Call it after the model (and, when it has state worth
    keeping, the optimizer) is built. Eagerly it returns None; in a
    ``tf.function`` or graph it returns the op that assigns.
    """
    if isinstance(root, bool) or not isinstance(root, int) or root < 0:
        raise InvalidArgumentError(f"root must be a non-negative int, got {root!r}")
    seen: set[int] = set()
    unique = []
    for v in variables:  # Keras 3 variables have no .ref(): deduplicate by identity
        if id(v) not in seen:
            seen.add(id(v))
            unique.append(v)
    comm = coll.active_communicator(communicator)
    if comm is None or not unique:
        return None
    if root >= comm.size:
        raise InvalidArgumentError(f"root {root} is not a rank of a {comm.size}-process job")
    values = [tf.convert_to_tensor(v) for v in unique]
    flat = [_as_bytes(x) for x in values]
    sizes = [int(x.shape[0]) for x in flat]
    got = coll.broadcast(tf.concat(flat, 0), root, communicator=comm, timeout=timeout)
    parts = tf.split(got, sizes) if len(sizes) > 1 else [got]
    assigns = [v.assign(_from_bytes(p, x)) for v, p, x in zip(unique, parts, values, strict=True)]
    if tf.executing_eagerly():
        return None
    return tf.group(*[a for a in assigns if a is not None])
