"""Horovod's helper functions: broadcast of variables and of picklable Python objects.

Objects travel pickled (cloudpickle when installed, as Horovod, else pickle)
through the communicator's NumPy collectives, sealed with the job secret: a payload
that was altered or replayed on the way raises AuthenticationError and is never
unpickled (``pytfcomm._sealed``; docs/security.md). ``session`` (TF1) is ignored.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import tensorflow as tf

from ..._sealed import seal_for
from ...tf.distributed import broadcast_variables as _broadcast_variables
from .._basics import global_process_set
from .mpi_ops import _comm, _root

__all__ = ["allgather_object", "broadcast_object", "broadcast_object_fn", "broadcast_variables"]


def _dumps(obj: Any) -> bytes:
    try:
        import cloudpickle as pickler
    except ImportError:  # pragma: no cover - cloudpickle is in the dev requirements
        pickler = pickle
    buf = io.BytesIO()
    pickler.dump(obj, buf)
    return buf.getvalue()


def _array(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8).copy()


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
    """``obj`` as it is on ``root_rank``, on every rank (pickled; call outside tf.function).

    The root returns ``obj`` itself. With a job secret the pickle is sealed; a rank that
    receives one altered or replayed on the way raises :class:`AuthenticationError`
    without unpickling it.
    """
    comm = _comm(process_set)
    root = _root(comm, root_rank)
    seal = seal_for(comm, "broadcast_object")
    if comm.rank == root:
        data = _array(seal.wrap(_dumps(obj), comm.rank))
    else:
        data = np.zeros(0, np.uint8)
    length = comm.broadcast(np.array([data.size], dtype=np.int64), root=root)
    if comm.rank == root:
        comm.broadcast(data, root=root)
        return obj  # as Horovod: the root's own object
    data = comm.broadcast(np.zeros(int(length[0]), dtype=np.uint8), root=root)
    return pickle.loads(seal.unwrap(data, root))


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
    """A list, in rank order, of every rank's ``obj`` (pickled; call outside tf.function).

    With a job secret each pickle is sealed; a payload altered or replayed on the way
    raises :class:`AuthenticationError` on the rank that received it, not unpickled.
    """
    comm = _comm(process_set)
    seal = seal_for(comm, "allgather_object")
    mine = _dumps(obj)
    data = _array(seal.wrap(mine, comm.rank))
    sizes = comm.allgather(np.array([data.size], dtype=np.int64))
    gathered = comm.allgatherv(data)
    out, start = [], 0
    for r, n in enumerate(sizes.tolist()):
        # this rank's own entry from its own bytes; the others' once their tag verifies
        part = mine if r == comm.rank else seal.unwrap(gathered[start : start + n], r)
        out.append(pickle.loads(part))
        start += n
    return out
