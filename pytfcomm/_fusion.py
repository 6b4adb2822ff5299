"""Helpers of the fused and asynchronous all-reduce (``Communicator.allreduce_many``,
``Communicator.allreduce_async``): list validation and the async handle."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import _core
from .errors import CommTimeoutError, InvalidArgumentError

__all__ = ["AllreduceHandle", "as_array_list", "check_fusion_bytes", "list_tag"]


def as_array_list(arrays: object, what: str) -> list:
    """``arrays`` as a list, or a clear error when it is not a list/tuple."""
    if isinstance(arrays, np.ndarray) or not isinstance(arrays, (list, tuple)):
        raise TypeError(
            f"{what} must be a list or tuple of numpy arrays, got {type(arrays).__name__}"
        )
    return list(arrays)


def list_tag(arrays: Sequence[np.ndarray]) -> int:
    """32-bit digest of every array's shape, so ranks with different lists fail loudly.

    (The engine adds counts and dtypes; shapes catch a reshaped tensor of equal size.)
    """
    return _core.shapes_digest([a.shape for a in arrays])


def check_fusion_bytes(value: int | None) -> int:
    """0 (the PYTFCOMM_FUSION_BYTES default) or a positive byte count."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidArgumentError(f"fusion_bytes must be a positive int, got {value!r}")
    return int(value)


class AllreduceHandle:
    """A queued all-reduce (``Communicator.allreduce_async``).

    ``wait()`` returns the result array once the all-reduce has run on every
    rank; ``done()`` tells without blocking. Keep the input and output
    unchanged until then. Dropping an unfinished handle waits for it, so the
    engine never writes into freed memory.
    """

    def __init__(self, core: _core.AsyncHandle, out: np.ndarray) -> None:
        self._core = core
        self._out = out

    def done(self) -> bool:
        """True once the all-reduce finished (successfully or not)."""
        return self._core.done()

    def wait(self, timeout: float | None = None) -> np.ndarray:
        """Block (GIL released) until the result is ready and return it.

        ``timeout`` (seconds, default no limit beyond the collective's own
        deadline): past it, raise :class:`pytfcomm.CommTimeoutError`; the
        all-reduce keeps running and ``wait`` may be called again. Errors of
        the all-reduce itself (mismatch, lost peer, ...) are raised here.
        """
        if timeout is None:
            limit = -1.0
        elif isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            raise InvalidArgumentError(f"timeout must be >= 0 seconds or None, got {timeout!r}")
        else:
            limit = float(timeout)
        if not self._core.wait(limit):
            raise CommTimeoutError(
                f"all-reduce not finished after {limit:g} s (wait(timeout=...)); it is still "
                "queued or running: call wait() again, and check every rank submitted it"
            )
        return self._out

    def __repr__(self) -> str:
        return f"<pytfcomm.AllreduceHandle {'done' if self.done() else 'pending'}>"
