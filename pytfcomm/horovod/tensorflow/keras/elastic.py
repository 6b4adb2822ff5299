"""Horovod's elastic Keras API: not supported by pytfcomm yet (fixed-size jobs).

Use ``pytfcomm-run --restarts N`` with checkpoints instead.
"""

from __future__ import annotations

from typing import Any

from ..elastic import MESSAGE, State, run

__all__ = [
    "CommitStateCallback",
    "KerasState",
    "UpdateBatchStateCallback",
    "UpdateEpochStateCallback",
    "run",
]


class KerasState(State):
    """Not supported: raises NotImplementedError."""


class _Unsupported:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(MESSAGE)


class CommitStateCallback(_Unsupported):
    """Not supported: raises NotImplementedError."""


class UpdateBatchStateCallback(_Unsupported):
    """Not supported: raises NotImplementedError."""


class UpdateEpochStateCallback(_Unsupported):
    """Not supported: raises NotImplementedError."""
