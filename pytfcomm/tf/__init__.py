"""TensorFlow integration of pytfcomm.

* :func:`allreduce`, :func:`broadcast`, :func:`allgather`: collectives as TF
  ops, with gradients, eager and in ``tf.function``;
* :class:`RingAllReduce`, :class:`HierarchicalAllReduce`:
  ``tf.distribute.CrossDeviceOps`` for ``MirroredStrategy``;
* :func:`average_gradients`: the classic multi-tower averager.

Importing this module checks that pytfcomm's op library was built for the
running TensorFlow (see docs/tensorflow.md); the library is loaded on first use.
"""

from __future__ import annotations

from ._ops import TFVersionMismatchError, check_tf_version, counters, library_path
from .collectives import (
    allgather,
    allreduce,
    allreduce_replicas,
    broadcast,
    set_default_communicator,
)
from .cross_device_ops import HierarchicalAllReduce, PytfcommCrossDeviceOps, RingAllReduce
from .towers import average_gradients

check_tf_version()

__all__ = [
    "HierarchicalAllReduce",
    "PytfcommCrossDeviceOps",
    "RingAllReduce",
    "TFVersionMismatchError",
    "allgather",
    "allreduce",
    "allreduce_replicas",
    "average_gradients",
    "broadcast",
    "counters",
    "library_path",
    "set_default_communicator",
]
