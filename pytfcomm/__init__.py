"""pytfcomm: C++-accelerated collective communication for TensorFlow.

NumPy API::

    import pytfcomm
    comm = pytfcomm.init()                 # or init(rank=0, size=4, addr="127.0.0.1:29500")
    y = comm.allreduce(x, op="sum")

The core has no TensorFlow dependency; TensorFlow integration lives in
submodules that import TensorFlow only when used.
"""

from __future__ import annotations

from . import elastic, errors
from ._core import __version__
from .communicator import Communicator, default_communicator, init
from .errors import (
    AuthenticationError,
    CommClosedError,
    CommError,
    CommTimeoutError,
    ConfigError,
    InvalidArgumentError,
    MembershipError,
    MismatchError,
    PeerLostError,
)

# TensorFlow-facing names, imported from pytfcomm.tf on first use so that
# `import pytfcomm` stays light and works without TensorFlow.
_TF_NAMES = frozenset(
    {
        "RingAllReduce",
        "HierarchicalAllReduce",
        "MultiWorkerMirroredStrategy",
        "average_gradients",
        "Compression",
        "allreduce_gradients",
        "DistributedGradientTape",
        "broadcast_variables",
        "allreduce",
        "broadcast",
        "allgather",
        "reduce_scatter",
        "alltoall",
        "keras",
        "set_default_communicator",
        "pin_gpu",
    }
)


def __getattr__(name: str) -> object:
    """TF names load ``pytfcomm.tf`` (and TensorFlow) on first use; ``pytfcomm.tf``
    itself too, so that ``import pytfcomm; pytfcomm.tf.counters()`` works."""
    if name == "tf" or name in _TF_NAMES:
        import importlib

        tf_api = importlib.import_module(".tf", __name__)
        if name == "tf":
            return tf_api
        try:
            return getattr(tf_api, name)
        except AttributeError:
            raise AttributeError(
                f"pytfcomm.{name} is not available in this build of pytfcomm.tf"
            ) from None
    raise AttributeError(f"module 'pytfcomm' has no attribute {name!r}")


__all__ = [
    "AuthenticationError",
    "CommClosedError",
    "CommError",
    "CommTimeoutError",
    "Communicator",
    "ConfigError",
    "InvalidArgumentError",
    "MembershipError",
    "MismatchError",
    "PeerLostError",
    "__version__",
    "default_communicator",
    "elastic",
    "errors",
    "init",
]
