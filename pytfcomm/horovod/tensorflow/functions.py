"""Horovod's helper functions: broadcast of variables and of picklable Python objects.

Objects travel pickled (cloudpickle when installed, as Horovod, else pickle)
through the communicator's NumPy collectives; ``session`` (TF1) is ignored.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import tensorflow as tf

from ...tf.distributed import broadcast_variables as _broadcast_variables
from .._basics import global_process_set
from .mpi_ops import _comm, _root

__all__ = ["allgather_object", "broadcast_object", "broadcast_object_fn", "broadcast_variables"]


def _dumps(obj: Any) -> np.ndarray:
    try:
        import cloudpickle as pickler
    except ImportError:  # pragma: no cover - cloudpickle is in the dev requirements
        pickler = pickle
    buf = io.BytesIO()
    pickler.dump(obj, buf)
    return np.frombuffer(buf.getvalue(), dtype=np.uint8).copy()


def _loads(data: np.ndarray) -> Any:
    return pickle.loads(data.tobytes())


def broadcast_variables(
    variables: Iterable[Any],
    root_rank: int,
    process_set: Any = global_process_set,
    inplace: bool = False,
) -> Any:
    """Set every variable to its value on ``root_rank`` (one pytfcomm broadcast for all).

    ``inplace`` is accepted (pytfcomm always assigns in place). Eagerly returns
    None; in a ``tf.function`` or TF1 graph the op that assigns (a no-op for no
    variables, which needs no ``hvd.init()``).
    """
    variables = list(variables)
    if not variables:  # nothing to send: no collective, so no hvd.init() needed (as Horovod)
        return None if tf.executing_eagerly() else tf.group()
    comm = _comm(process_set)
    return _broadcast_variables(variables, _root(comm, root_rank), communicator=comm)


def broadcast_object(
    obj: Any,
    root_rank: int = 0,
    session: Any = None,
    name: str | None = None,
    process_set: Any = global_process_set,
) -> Any:
    """``obj`` as it is on ``root_rank``, on every rank (pickled; call outside tf.function)."""
    comm = _comm(process_set)
    root = _root(comm, root_rank)
    data = _dumps(obj) if comm.rank == root else np.zeros(0, np.uint8)
    length = comm.broadcast(np.array([data.size], dtype=np.int64), root=root)
    if comm.rank != root:
        data = np.zeros(int(length[0]), dtype=np.uint8)
    data = comm.broadcast(data, root=root)
    return _loads(data)


def broadcast_object_fn(
    root_rank: int = 0,
    session: Any = None,
    name: str | None = None,
    process_set: Any = global_process_set,
) -> Callable[[Any], Any]:
    """A function ``fn(obj)`` that is :func:`broadcast_object` with these arguments."""

    def fn(obj: Any) -> Any:
        return broadcast_object(obj, root_rank, session, name, process_set)

    return fn


def allgather_object(
    obj: Any, session: Any = None, name: str | None = None, process_set: Any = global_process_set
) -> list[Any]:
    """A list, in rank order, of every rank's ``obj`` (pickled; call outside tf.function)."""
    comm = _comm(process_set)
    data = _dumps(obj)
    sizes = comm.allgather(np.array([data.size], dtype=np.int64))
    gathered = comm.allgatherv(data)
    out, start = [], 0
    for n in sizes.tolist():
        out.append(_loads(gathered[start : start + n]))
        start += n
    return out
