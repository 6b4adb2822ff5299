"""Horovod's Adasum all-reduce (``op=hvd.Adasum``), composed of pytfcomm's all-gather.

Semantics of Horovod 0.28.1 (its CPU kernel, ``horovod/common/ops/adasum/adasum.h``):

* two vectors a and b combine into ``(1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b``;
  a coefficient whose squared norm is below ``sqrt(DBL_MIN)`` is 1 instead, so a zero
  vector leaves the other one as it is. Orthogonal vectors add up; equal ones give
  the vector itself;
* ranks combine in a binary tree: level 1 combines ranks (0, 1), (2, 3), ...; level 2
  the results of (0, 1) and (2, 3), ...; the lower ranks' side is ``a``. The tree needs
  ``size()`` to be a power of two: Horovod raises NotImplementedError otherwise, and so
  does this module, on every rank and before any communication;
* every tensor is its own vector, also when several are fused into one all-reduce
  (``grouped_allreduce``, the gradients of a step): dot products and norms are per tensor;
* float16, float32 and float64 only. Dot products, norms, coefficients and each
  combination are computed in float64, and each level's result is rounded to the
  tensor's dtype, as Horovod's kernel stores every level in the tensor's buffer;
* ``prescale_factor`` multiplies before, ``postscale_factor`` after; nothing divides
  by ``size()``.

How: one all-gather brings every rank's flattened tensors (of one dtype) to every
rank, which then computes the same tree. That moves ``size()`` times the bytes of the
tensors into each rank (Horovod's vector-halving, distance-doubling exchange moves
about twice), and costs memory for all of them in float64. Element-wise TF ops give
the same bits on every rank, but a TF reduction may sum in another order on a machine
with another thread count (or a GPU): so only rank 0 computes each level's
coefficients (two float64 per pair of vectors and tensor) and broadcasts them, and
every rank ends with bitwise-identical results. Each all-gathered row starts with a
description of the tensors' shapes: ranks whose shapes differ get
``tf.errors.InvalidArgumentError`` (other dimensions or dtypes: pytfcomm's
all-gather raises ``tf.errors.FailedPreconditionError``), on every rank.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from ...tf import collectives as _coll
from ._scaling import scale as _scale

DTYPES = (tf.float16, tf.float32, tf.float64)
# Horovod's threshold (sqrt of the smallest normal double) below which a squared
# norm counts as zero.
_SQRT_DBL_MIN = math.sqrt(sys.float_info.min)


def check(xs: Sequence[tf.Tensor], size: int) -> None:
    """Raise, as Horovod does, for what Adasum cannot reduce (before any communication)."""
    if size & (size - 1) != 0:
        raise NotImplementedError(
            "Running Adasum with non-power of 2 ranks is not supported yet. "
            f"(hvd.Adasum combines ranks in a binary tree; this job has {size} ranks: run "
            "2, 4, 8, ... processes, or use op=hvd.Average or hvd.Sum.)"
        )
    for x in xs:
        if x.dtype not in DTYPES:
            raise ValueError(
                f"hvd.Adasum reduces float16, float32 and float64 tensors (as Horovod), got "
                f"{x.dtype.name}; cast it, or use op=hvd.Sum or hvd.Average"
            )


def grouped_adasum(
    xs: Sequence[tf.Tensor],
    comm: Any,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> list[tf.Tensor]:
    """The Adasum of every rank's ``xs[i]``, for each i; the same on every rank."""
    check(xs, comm.size)
    xs = [_scale(x, prescale_factor) for x in xs]
    out: list[Any] = list(xs)
    if comm.size > 1:
        by_dtype: dict[tf.DType, list[int]] = {}
        for i, x in enumerate(xs):
            by_dtype.setdefault(x.dtype, []).append(i)
        for idx in by_dtype.values():  # one all-gather per dtype (usually one)
            for i, y in zip(idx, _same_dtype([xs[i] for i in idx], comm), strict=True):
                out[i] = y
    return [_scale(y, postscale_factor) for y in out]


def _describe(xs: Sequence[tf.Tensor]) -> tf.Tensor:
    """int64: the number of tensors, then each one's rank and dimensions (self-delimiting)."""
    parts = [tf.constant([len(xs)], tf.int64)]
    for x in xs:
        shape = tf.shape(x, out_type=tf.int64)
        parts += [tf.reshape(tf.size(shape, out_type=tf.int64), [1]), shape]
    return tf.concat(parts, 0)


def _same_dtype(xs: Sequence[tf.Tensor], comm: Any) -> list[tf.Tensor]:
    dtype, n = xs[0].dtype, comm.size
    desc = _describe(xs)
    # The description travels bit for bit in the data's dtype (8 // itemsize values each).
    header = tf.reshape(tf.bitcast(desc, dtype), [-1])
    flat = tf.concat([header] + [tf.reshape(x, [-1]) for x in xs], 0)
    rows = _coll.allgather(tf.reshape(flat, [1, -1]), communicator=comm)  # [n, h + elems]
    h = tf.size(header)
    headers = tf.bitcast(tf.reshape(rows[:, :h], [n, tf.size(desc), -1]), tf.int64)
    headers = tf.reshape(headers, [n, -1])  # float64's bitcast keeps its last dimension (1)
    same = tf.debugging.assert_equal(
        headers,
        tf.broadcast_to(headers[:1], tf.shape(headers)),
        message="hvd.Adasum: the tensors' shapes differ between ranks (they must be equal)",
    )
    with tf.control_dependencies([same] if same is not None else []):
        data = tf.identity(rows[:, h:])  # [n, elems]
    sizes = [tf.size(x) for x in xs]
    seg = tf.repeat(tf.range(len(xs)), sizes)  # tensor index of every element
    result = _tree(data, seg, len(xs), comm)
    outs, start = [], 0
    for x, s in zip(xs, sizes, strict=True):
        outs.append(tf.reshape(result[start : start + s], tf.shape(x)))
        start = start + s
    return outs


def _tree(data: tf.Tensor, seg: tf.Tensor, count: int, comm: Any) -> tf.Tensor:
    """Combine the n rows of ``data`` pairwise, level by level, into one row."""
    dtype, rows = data.dtype, comm.size
    elems = tf.shape(data)[1]
    while rows > 1:
        rows //= 2
        pairs = tf.reshape(data, tf.stack([rows, 2, elems]))
        a = tf.cast(pairs[:, 0], tf.float64)  # the lower ranks' side, [rows, elems]
        b = tf.cast(pairs[:, 1], tf.float64)
        if comm.rank == 0:
            coeffs = _coefficients(a, b, seg, count)
        else:
            coeffs = tf.zeros([2, count, rows], tf.float64)
        coeffs = _coll.broadcast(coeffs, 0, communicator=comm)
        ac = tf.gather(tf.transpose(coeffs[0]), seg, axis=1)  # [rows, elems]
        bc = tf.gather(tf.transpose(coeffs[1]), seg, axis=1)
        data = tf.cast(ac * a + bc * b, dtype)
    return data[0]


def _coefficients(a: tf.Tensor, b: tf.Tensor, seg: tf.Tensor, count: int) -> tf.Tensor:
    """[2, count, pairs] float64: Horovod's acoeff and bcoeff of every tensor and pair."""

    def per_tensor(v: tf.Tensor) -> tf.Tensor:  # [pairs, elems] -> [count, pairs]
        return tf.math.unsorted_segment_sum(tf.transpose(v), seg, count)

    dot = per_tensor(a * b)

    def coeff(normsq: tf.Tensor) -> tf.Tensor:
        big = normsq >= _SQRT_DBL_MIN
        safe = tf.where(big, normsq, tf.ones_like(normsq))
        return tf.where(big, 1.0 - dot / safe * 0.5, tf.ones_like(dot))

    return tf.stack([coeff(per_tensor(a * a)), coeff(per_tensor(b * b))])
