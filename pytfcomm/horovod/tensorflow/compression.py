"""Horovod's gradient compression: ``Compression.none``, ``Compression.fp16`` (and ``bf16``).

A compressor is a class with static ``compress(tensor) -> (tensor, ctx)`` and
``decompress(tensor, ctx) -> tensor``; user subclasses of :class:`Compressor`
work wherever Horovod takes ``compression=``.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

__all__ = ["BF16Compressor", "Compression", "Compressor", "FP16Compressor", "NoneCompressor"]


class Compressor:
    """Interface for compressing and decompressing a tensor."""

    @staticmethod
    def compress(tensor: Any) -> tuple[Any, Any]:
        """Compress ``tensor``; returns it and the context ``decompress`` needs."""
        raise NotImplementedError("Compressor subclasses implement compress(tensor)")

    @staticmethod
    def decompress(tensor: Any, ctx: Any) -> Any:
        """Undo ``compress`` given its context."""
        raise NotImplementedError("Compressor subclasses implement decompress(tensor, ctx)")


class NoneCompressor(Compressor):
    """No compression."""

    @staticmethod
    def compress(tensor: Any) -> tuple[Any, Any]:
        return tensor, None

    @staticmethod
    def decompress(tensor: Any, ctx: Any) -> Any:
        return tensor


class _CastCompressor(Compressor):
    wire: tf.DType = tf.float16

    @classmethod
    def compress(cls, tensor: Any) -> tuple[Any, Any]:
        t = tf.convert_to_tensor(tensor)
        if t.dtype.is_floating and t.dtype != cls.wire:
            return tf.cast(t, cls.wire), t.dtype
        return t, t.dtype

    @staticmethod
    def decompress(tensor: Any, ctx: Any) -> Any:
        if ctx is not None and tensor.dtype != ctx:
            return tf.cast(tensor, ctx)
        return tensor


class FP16Compressor(_CastCompressor):
    """Floating-point tensors travel as float16 and come back in their own dtype."""

    wire = tf.float16


class BF16Compressor(_CastCompressor):
    """Floating-point tensors travel as bfloat16 (pytfcomm's addition; not in Horovod 0.28.1)."""

    wire = tf.bfloat16


class Compression:
    """The compressors: ``none``, ``fp16`` and (pytfcomm) ``bf16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
