"""Horovod 0.28.1's TensorFlow and Keras API on pytfcomm (docs/horovod.md).

A Horovod script changes only its import line::

    import pytfcomm.horovod.tensorflow as hvd         # was: horovod.tensorflow
    import pytfcomm.horovod.tensorflow.keras as hvd   # was: horovod.tensorflow.keras
    import pytfcomm.horovod.keras as hvd              # was: horovod.keras

and runs under ``pytfcomm-run -np N python train.py`` (which also sets
``HOROVOD_RANK``/``HOROVOD_SIZE``/... for each rank). Names, signatures,
defaults and gradient conventions are Horovod's; what is not supported yet
raises ``NotImplementedError`` saying what to use instead.

This package imports nothing heavy; its ``tensorflow`` subpackage imports TensorFlow.
"""

from __future__ import annotations

__all__: list[str] = []
