"""Horovod's ``prescale_factor`` / ``postscale_factor``: how a tensor is scaled.

One rule for every collective that takes the factors (all-reduce, reduce-scatter,
Adasum), as Horovod 0.28.1 applies them on CPUs: float16 and bfloat16 are scaled
in float32 and rounded once (never by a factor first rounded to 16 bits);
float32 and float64 by the factor in their own precision; integers in float64,
the result cast back (truncated, as ``tf.cast`` does).
"""

from __future__ import annotations

import tensorflow as tf

_HALF = (tf.float16, tf.bfloat16)


def scale(t: tf.Tensor, factor: float) -> tf.Tensor:
    """``t`` times ``factor`` (``t`` itself when the factor is 1), in ``t``'s dtype."""
    if factor == 1.0:
        return t
    if t.dtype in _HALF:
        return tf.cast(tf.cast(t, tf.float32) * tf.constant(factor, tf.float32), t.dtype)
    if t.dtype.is_floating:
        return t * tf.cast(factor, t.dtype)
    return tf.cast(tf.cast(t, tf.float64) * factor, t.dtype)
