"""Horovod's ``SyncBatchNormalization``: batch statistics over every process's batch.

The ``BatchNormalization`` of the Keras in use (Keras 3, or tf-keras under
``TF_USE_LEGACY_KERAS``) whose training-time mean and variance come from one fused
all-reduce (Sum) of each process's per-channel sum, sum of squares and count (so
batches of different sizes weigh by their rows); gradients flow back through that
all-reduce as in Horovod.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from ...tf._which_keras import keras_module, legacy_keras
from .. import _basics
from .._basics import Sum
from .mpi_ops import _grouped_allreduce

__all__ = ["SyncBatchNormalization"]

_K: Any = keras_module()
_LEGACY = legacy_keras()


class SyncBatchNormalization(_K.layers.BatchNormalization):
    """Batch normalization with statistics synchronised across all processes.

    Arguments are ``BatchNormalization``'s; ``fused`` (Horovod's, TF1 Keras) must stay
    False.
    """

    def __init__(self, fused: bool | None = False, **kwargs: Any) -> None:
        if fused in (True, None):
            raise ValueError("SyncBatchNormalization does not support fused=True.")
        if _LEGACY:
            kwargs["fused"] = False  # tf-keras would pick its fused kernel otherwise
        super().__init__(**kwargs)

    def _moments(self, inputs: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        # Keras 3 calls _moments(inputs, mask); tf-keras _moments(inputs, reduction_axes,
        # keep_dims).
        if _basics.size() == 1:
            return super()._moments(inputs, *args, **kwargs)
        if _LEGACY:
            named = dict(zip(("reduction_axes", "keep_dims"), args, strict=False), **kwargs)
            axes, keep, mask = list(named["reduction_axes"]), bool(named["keep_dims"]), None
        else:
            mask = args[0] if args else kwargs.get("mask")
            axes, keep = list(self._reduction_axes), False
        return _synced_moments(tf.convert_to_tensor(inputs), axes, mask, keep)


def _synced_moments(x: tf.Tensor, axes: list[int], mask: Any, keep: bool) -> tuple[Any, Any]:
    """Mean and variance over ``axes`` of every process's ``x`` (rows where ``mask``)."""
    if mask is None:
        weights = tf.ones_like(x)
    else:
        weights = tf.cast(tf.broadcast_to(tf.expand_dims(mask, -1), tf.shape(x)), x.dtype)
    total, squares, count = _grouped_allreduce(
        [
            tf.reduce_sum(x * weights, axes, keepdims=keep),
            tf.reduce_sum(tf.square(x) * weights, axes, keepdims=keep),
            tf.reduce_sum(weights, axes, keepdims=keep),
        ],
        op=Sum,
    )
    count = tf.maximum(count, _K.backend.epsilon())
    mean = total / count
    variance = tf.maximum(squares / count - tf.square(mean), 0.0)
    return mean, variance
