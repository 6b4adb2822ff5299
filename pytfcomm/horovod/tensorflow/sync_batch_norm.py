"""Horovod's ``SyncBatchNormalization``: batch statistics over every process's batch.

A Keras 3 ``BatchNormalization`` whose training-time mean and variance come
from one fused all-reduce (Sum) of each process's per-channel sum, sum of
squares and count; gradients flow back through that all-reduce as in Horovod.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from .. import _basics
from .._basics import Sum
from .mpi_ops import _grouped_allreduce

__all__ = ["SyncBatchNormalization"]


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """Batch normalization with statistics synchronised across all processes.

    Arguments are ``keras.layers.BatchNormalization``'s; ``fused`` (Horovod's,
    TF1 Keras) must stay False.
    """

    def __init__(self, fused: bool = False, **kwargs: Any) -> None:
        if fused in (True, None):
            raise ValueError("SyncBatchNormalization does not support fused=True.")
        super().__init__(**kwargs)

    def _moments(self, inputs: Any, mask: Any) -> tuple[Any, Any]:
        if _basics.size() == 1:
            return super()._moments(inputs, mask)
        x = tf.convert_to_tensor(inputs)
        axes = list(self._reduction_axes)
        if mask is None:
            weights = tf.ones_like(x)
        else:
            weights = tf.cast(tf.broadcast_to(tf.expand_dims(mask, -1), tf.shape(x)), x.dtype)
        total, squares, count = _grouped_allreduce(
            [
                tf.reduce_sum(x * weights, axes),
                tf.reduce_sum(tf.square(x) * weights, axes),
                tf.reduce_sum(weights, axes),
            ],
            op=Sum,
        )
        count = tf.maximum(count, keras.backend.epsilon())
        mean = total / count
        variance = tf.maximum(squares / count - tf.square(mean), 0.0)
        return mean, variance
