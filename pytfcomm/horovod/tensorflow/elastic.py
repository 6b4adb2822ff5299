"""Horovod's elastic training API: not supported by pytfcomm yet.

pytfcomm jobs have a fixed size; ``pytfcomm-run --restarts N`` restarts every
rank after a failure (resume from a checkpoint, e.g. ``pytfcomm.tf.backup``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ObjectState", "State", "TensorFlowKerasState", "TensorFlowState", "run"]

MESSAGE = (
    "Horovod elastic training is not supported by pytfcomm: jobs have a fixed size. Use "
    "pytfcomm-run --restarts N with checkpoints (pytfcomm.tf.backup) to survive failures."
)


def run(func: Any) -> Any:
    """Not supported: raises NotImplementedError (see the module doc)."""
    raise NotImplementedError(MESSAGE)


class State:
    """Not supported: raises NotImplementedError (see the module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(MESSAGE)


class ObjectState(State):
    """Not supported."""


class TensorFlowState(ObjectState):
    """Not supported."""


class TensorFlowKerasState(ObjectState):
    """Not supported."""
