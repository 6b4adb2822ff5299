"""The TensorFlow internals pytfcomm's preemption handling uses, in one place.

``tf.distribute.experimental.PreemptionCheckpointHandler`` is a public class, but
making it work without TF's coordination service needs four things TF keeps private
(``tensorflow.python.distribute.failure_handling``, checked against TF 2.21):

* the class itself, to construct pytfcomm's handler in its place (``__new__``);
* the name of the run counter it adds to the checkpoint (``checkpointed_runs``), so
  that checkpoints of TF's handler and of pytfcomm's restore into each other;
* where a non-chief worker writes (``_non_chief_checkpoint_dir``: ``workertemp_<id>``
  beside the checkpoint directory), TF's rule;
* the "preemption save" context, in which an async checkpoint first finishes the
  writes still in flight.

:func:`check` raises a clear error when the running TF lacks any of them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..errors import ConfigError

__all__ = [
    "DEFAULT_EXIT_CODE",
    "ITERATION_VARIABLE",
    "check",
    "handler_class",
    "non_chief_dir",
    "save_context",
]

#: The attribute (and checkpoint key) TF's handler counts finished runs in.
ITERATION_VARIABLE = "checkpointed_runs"
#: TF's default exit code after a preemption checkpoint, outside Google Cloud.
DEFAULT_EXIT_CODE = 42
_NEEDED = ("_ITERATION_VARIABLE", "_non_chief_checkpoint_dir", "PreemptionCheckpointHandler")


def _modules() -> tuple[Any, Any]:
    from tensorflow.python.checkpoint import checkpoint_context
    from tensorflow.python.distribute.failure_handling import failure_handling

    return failure_handling, checkpoint_context


def check() -> None:
    """Raise :class:`~pytfcomm.errors.ConfigError` unless this TF has what is used here."""
    import tensorflow as tf

    try:
        fh, ctx = _modules()
        missing = [n for n in _NEEDED if not hasattr(fh, n)]
        if not callable(getattr(ctx, "preemption_save_context", None)):
            missing.append("checkpoint_context.preemption_save_context")
        if not missing and fh._ITERATION_VARIABLE != ITERATION_VARIABLE:
            missing.append(f"_ITERATION_VARIABLE == {ITERATION_VARIABLE!r}")
    except ImportError as exc:
        missing = [str(exc)]
    if missing:
        raise ConfigError(
            "PreemptionCheckpointHandler under pytfcomm.MultiWorkerMirroredStrategy was "
            f"written against TensorFlow 2.21's failure_handling module; TensorFlow "
            f"{tf.__version__} lacks {', '.join(missing)}. Use keras.callbacks."
            "BackupAndRestore with `pytfcomm-run --restarts N` instead (docs/multiworker.md)"
        )


def handler_class() -> type:
    """TF's ``PreemptionCheckpointHandler`` class."""
    return _modules()[0].PreemptionCheckpointHandler


def non_chief_dir(checkpoint_dir: str, task_id: int) -> str:
    """Where a non-chief worker writes its copy (TF's rule; the directory is created)."""
    return _modules()[0]._non_chief_checkpoint_dir(checkpoint_dir, task_id)


@contextlib.contextmanager
def save_context() -> Iterator[None]:
    """TF's preemption-save context: async checkpoint writes in flight finish first."""
    with _modules()[1].preemption_save_context():
        yield
