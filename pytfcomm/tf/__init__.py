"""TensorFlow integration of pytfcomm.

* :func:`allreduce`, :func:`broadcast`, :func:`allgather`, :func:`reduce_scatter`,
  :func:`alltoall`: collectives as TF ops, with gradients, eager and in ``tf.function``;
* :class:`RingAllReduce`, :class:`HierarchicalAllReduce`:
  ``tf.distribute.CrossDeviceOps`` for ``MirroredStrategy``;
* :func:`average_gradients`: the classic multi-tower averager;
* :class:`MultiWorkerMirroredStrategy`: TF's multi-worker strategy reducing on pytfcomm;
* :func:`pin_gpu`: one process per GPU (call it first);
* :class:`DistributedGradientTape`, :mod:`keras` (``DistributedOptimizer``, callbacks),
  :func:`broadcast_variables`: Horovod-style, one process per device.

Importing this module checks that pytfcomm's op library was built for the
running TensorFlow (see docs/tensorflow.md); the library is loaded on first use.
"""

from __future__ import annotations

from . import keras
from ._ops import (
    TFVersionMismatchError,
    check_tf_version,
    counters,
    has_gpu_kernels,
    library_path,
)
from .collectives import (
    allgather,
    allreduce,
    allreduce_replicas,
    broadcast,
    set_default_communicator,
)
from .cross_device_ops import HierarchicalAllReduce, PytfcommCrossDeviceOps, RingAllReduce
from .distributed import (
    Compression,
    DistributedGradientTape,
    allreduce_gradients,
    broadcast_variables,
)
from .placement import pin_gpu
from .scatter import alltoall, reduce_scatter, reduce_scatter_rows
from .strategy import MultiWorkerMirroredStrategy
from .towers import average_gradients

check_tf_version()

__all__ = [
    "Compression",
    "DistributedGradientTape",
    "HierarchicalAllReduce",
    "MultiWorkerMirroredStrategy",
    "PytfcommCrossDeviceOps",
    "RingAllReduce",
    "TFVersionMismatchError",
    "allgather",
    "allreduce",
    "allreduce_gradients",
    "allreduce_replicas",
    "alltoall",
    "average_gradients",
    "broadcast",
    "broadcast_variables",
    "counters",
    "has_gpu_kernels",
    "keras",
    "library_path",
    "pin_gpu",
    "reduce_scatter",
    "reduce_scatter_rows",
    "set_default_communicator",
]
