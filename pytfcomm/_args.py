"""Argument checks shared by every entry point of the NumPy communicator.

One home per rule, as NCCL's argcheck.h: what an input or ``out=`` array must be
(a C-contiguous ``numpy.ndarray`` of a supported dtype; ``out`` writable, of the
result's shape and dtype, not overlapping the input), a rank or root in range, a
``name=``, ``splits=``, and a ``timeout=``. Each raises
:class:`~pytfcomm.InvalidArgumentError` (``TypeError`` for a non-array or a
non-int rank) with one wording.

The native core checks the same rules again for callers of ``_core`` (contiguity and
writability in bindings/module.cc, overlap and root in engine/communicator.cc) and
with the same words for contiguity, writability and root; these checks run first
because the Python side uses the array before the core sees it (an ``out`` is copied
into for a broadcast, padded for a reduce-scatter, measured for overlap).
"""

from __future__ import annotations

import numpy as np

from . import _core
from ._dtypes import dtype_code
from .errors import ConfigError, InvalidArgumentError

__all__ = [
    "check_input",
    "check_name",
    "check_out",
    "check_out_rows",
    "check_overlap",
    "check_rank",
    "check_splits",
    "check_writable",
    "connect_wait_s",
    "timeout_s",
]


def timeout_s(value: float | None) -> float:
    """A ``timeout=`` in seconds for the core: ``None`` (the default deadline) is -1."""
    if value is None:
        return -1.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InvalidArgumentError(f"timeout must be a positive number of seconds, got {value!r}")
    return float(value)


def connect_wait_s(connect_timeout: float | None) -> float:
    """``init(connect_timeout=)``, else PYTFCOMM_CONNECT_TIMEOUT as the core reads it."""
    if connect_timeout is not None:
        return timeout_s(connect_timeout)  # checked: a positive number
    for row in _core.param_table():
        if row["env"] == "PYTFCOMM_CONNECT_TIMEOUT":
            if row["value"] is None:
                raise ConfigError(f"PYTFCOMM_CONNECT_TIMEOUT: {row['error']}")
            return float(row["value"].split()[0])  # "120 s"
    raise AssertionError("the core has no PYTFCOMM_CONNECT_TIMEOUT parameter")


def check_input(x: object, what: str = "input") -> np.ndarray:
    """``x`` when it is a C-contiguous ``numpy.ndarray`` of a supported dtype."""
    if not isinstance(x, np.ndarray):
        raise TypeError(
            f"{what} must be a numpy.ndarray, got {type(x).__name__}; wrap it with np.asarray()"
        )
    dtype_code(x.dtype)
    if not x.flags.c_contiguous:
        raise InvalidArgumentError(
            f"{what} is not C-contiguous (a strided view or a transpose?); pass "
            "np.ascontiguousarray(x) -- pytfcomm works on the array's memory without copying"
        )
    return x


def check_out(
    out: object,
    like_shape: tuple[int, ...],
    dtype: np.dtype,
    x: np.ndarray | None = None,
    *,
    in_place: bool = True,
) -> np.ndarray:
    """``out=`` for a result of ``like_shape`` and ``dtype`` computed from ``x``."""
    out = check_input(out, "out")
    if out.dtype != dtype:
        raise InvalidArgumentError(f"out has dtype {out.dtype} but the result is {dtype}")
    if out.shape != like_shape:
        raise InvalidArgumentError(f"out has shape {out.shape} but the result has {like_shape}")
    check_writable(out)
    if x is not None:
        check_overlap(x, out, in_place)
    return out


def check_out_rows(out: object, x: np.ndarray) -> np.ndarray:
    """``out=`` for rows of ``x``'s shape and dtype, any number of them (all-gather)."""
    out = check_input(out, "out")
    row = x.shape[1:]
    if out.dtype != x.dtype or out.shape[1:] != row or out.ndim != x.ndim:
        raise InvalidArgumentError(
            f"out has dtype {out.dtype} and shape {out.shape}, but the result is "
            f"{x.dtype} with rows of shape {row}"
        )
    check_writable(out)
    check_overlap(x, out, in_place=False)
    return out


def check_writable(out: np.ndarray) -> None:
    """Raise unless the result may be written into ``out``."""
    if not out.flags.writeable:
        raise InvalidArgumentError("out is read-only; pass a writable array")


def check_overlap(x: np.ndarray, out: np.ndarray, in_place: bool) -> None:
    """Raise when ``out`` overlaps the input without being the very same memory.

    Both are C-contiguous, so their byte ranges overlap exactly when their memory
    does. Writing results while inputs are still being read would corrupt both.
    """
    # Bounds only (no exact solve): 0.5 µs, where reading both addresses
    # costs 4-5 µs, which over 200 tensors of allreduce_many added 1 ms.
    if x.nbytes == 0 or out.nbytes == 0 or not np.may_share_memory(x, out):
        return
    a = x.__array_interface__["data"][0]
    b = out.__array_interface__["data"][0]
    if in_place and a == b and x.nbytes == out.nbytes:
        return
    how = "the same memory as" if a == b and x.nbytes == out.nbytes else "memory overlapping"
    raise InvalidArgumentError(
        f"out uses {how} the input (its first byte is {b - a:+d} bytes from the input's); "
        + ("pass out=x to work in place, or " if in_place else "")
        + "pass an array of its own"
    )


def check_rank(rank: object, size: int, what: str = "rank") -> int:
    """``rank`` (a ``root``, say) as an int in ``[0, size)``."""
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {type(rank).__name__}")
    if not 0 <= rank < size:
        raise InvalidArgumentError(f"{what} must be a rank in [0, {size}), got {rank}")
    return int(rank)


def check_name(name: str | None) -> str:
    """A ``name=`` for the core: ``None`` is ""."""
    if name is None:
        return ""
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"name must be a non-empty str, got {name!r}")
    return name


def check_splits(splits: object, size: int, rows: int) -> np.ndarray:
    """``splits`` as an int64 array of ``size`` entries, each >= 0, adding up to ``rows``."""
    try:
        arr = np.asarray(splits)
    except Exception as e:
        raise InvalidArgumentError(f"splits must be a sequence of ints, got {splits!r}") from e
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise InvalidArgumentError(f"splits must be a 1-D sequence of ints, got {splits!r}")
    if arr.size != size:
        raise InvalidArgumentError(
            f"splits needs one entry per rank ({size}), got {arr.size}: {arr.tolist()}"
        )
    arr = arr.astype(np.int64)
    if (arr < 0).any():
        raise InvalidArgumentError(f"splits must be >= 0, got {arr.tolist()}")
    if int(arr.sum()) != rows:
        raise InvalidArgumentError(
            f"splits add up to {int(arr.sum())} rows but the input has {rows}: {arr.tolist()}"
        )
    return arr
