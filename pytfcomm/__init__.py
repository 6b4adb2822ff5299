"""pytfcomm: C++-accelerated collective communication for TensorFlow.

NumPy API::

    import pytfcomm
    comm = pytfcomm.init()                 # or init(rank=0, size=4, addr="127.0.0.1:29500")
    y = comm.allreduce(x, op="sum")

The core has no TensorFlow dependency; TensorFlow integration lives in
submodules that import TensorFlow only when used.
"""

from __future__ import annotations

from . import errors
from ._core import __version__
from .communicator import Communicator, init
from .errors import (
    AuthenticationError,
    CommClosedError,
    CommError,
    CommTimeoutError,
    ConfigError,
    InvalidArgumentError,
    MismatchError,
    PeerLostError,
)

__all__ = [
    "AuthenticationError",
    "CommClosedError",
    "CommError",
    "CommTimeoutError",
    "Communicator",
    "ConfigError",
    "InvalidArgumentError",
    "MismatchError",
    "PeerLostError",
    "__version__",
    "errors",
    "init",
]
