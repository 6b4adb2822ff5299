"""Horovod's elastic Keras API (``hvd.elastic`` of ``horovod.tensorflow.keras``) on
``pytfcomm-run --elastic`` or ``--restarts``: see :mod:`pytfcomm.horovod.tensorflow.elastic`.

``KerasState`` tracks a model, its optimizer and objects such as ``epoch`` and
``batch``; the three callbacks commit it and keep ``epoch``/``batch`` current, so
``fit(epochs=epochs - state.epoch)`` called again by ``hvd.elastic.run`` (in place after
a re-forming, or in a restarted job) resumes where the last commit left it, the
interrupted epoch with the batches it had left. After a re-forming, ``KerasState``'s
reset drops the model's compiled functions, which hold the closed communicator.
"""

from __future__ import annotations

from typing import Any

from ..elastic import ObjectState, State, TensorFlowKerasState, restarted, run
from .callbacks import _Callback

__all__ = [
    "CommitStateCallback",
    "KerasState",
    "ObjectState",
    "State",
    "UpdateBatchStateCallback",
    "UpdateEpochStateCallback",
    "restarted",
    "run",
]


class KerasState(TensorFlowKerasState):
    """Horovod's ``KerasState``: :class:`TensorFlowKerasState` of a compiled Keras model
    (its reset drops the model's compiled functions, so ``fit`` goes on after a
    re-forming)."""


class CommitStateCallback(_Callback):
    """Commit ``state`` after every ``batches_per_commit`` batches and every epoch.

    The commit is made once every callback has seen the batch (or epoch) end: at the
    next batch's or epoch's begin, or at the end of training. So it holds the
    ``batch``/``epoch`` that :class:`UpdateBatchStateCallback` and
    :class:`UpdateEpochStateCallback` recorded for the same weights, in whatever order
    the callbacks are listed (nothing runs collectives in between).
    """

    def __init__(self, state: State, batches_per_commit: int = 1) -> None:
        super().__init__()
        if batches_per_commit < 1:
            raise ValueError(f"batches_per_commit must be >= 1, got {batches_per_commit}")
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit
        self._pending = False

    def _commit_pending(self) -> None:
        if self._pending:
            self._pending = False
            self.state.commit()

    def on_train_begin(self, logs: Any = None) -> None:
        self.batches_remaining = self.batches_per_commit
        self._pending = False

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._commit_pending()

    def on_batch_begin(self, batch: int, logs: Any = None) -> None:
        self._commit_pending()

    def on_batch_end(self, batch: int, logs: Any = None) -> None:
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self._pending = True
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self._pending = True

    def on_train_end(self, logs: Any = None) -> None:
        self._commit_pending()


class UpdateBatchStateCallback(_Callback):
    """Keep ``state.batch`` at the number of batches finished in the current epoch (0 at
    an epoch's end), and make the first epoch of a resumed ``fit`` run only the batches
    its commit had left: it ends after ``steps - state.batch`` batches.

    Keras has no way to end one epoch early but ``model.stop_training``; this callback
    sets it after that epoch's last batch and clears it again at the epoch's end, so
    ``fit`` goes on with the next epoch.
    """

    def __init__(self, state: ObjectState) -> None:
        super().__init__()
        self.state = state
        self.steps_per_epoch: int | None = None
        self._done_before = 0  # batches of this epoch finished before this fit
        self._ended_epoch = False

    def on_train_begin(self, logs: Any = None) -> None:
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._done_before = int(self.state.batch)
        self._ended_epoch = False
        steps = (self.params or {}).get("steps")
        if steps:
            if self.steps_per_epoch is None:
                self.steps_per_epoch = steps
            self.params["steps"] = self.steps_per_epoch - self._done_before

    def on_batch_end(self, batch: int, logs: Any = None) -> None:
        self.state.batch = self._done_before + batch + 1
        if (
            self._done_before
            and self.steps_per_epoch is not None
            and self.state.batch >= self.steps_per_epoch
            and not self.model.stop_training
        ):
            self.model.stop_training = True  # the rest of a resumed epoch is done
            self._ended_epoch = True

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.state.batch = 0
        self._done_before = 0
        if self._ended_epoch:
            self._ended_epoch = False
            self.model.stop_training = False


class UpdateEpochStateCallback(_Callback):
    """Set ``state.epoch`` to the epochs finished in all (Keras counts from 0 in
    every ``fit``; the state counts across restarts)."""

    def __init__(self, state: ObjectState) -> None:
        super().__init__()
        self.state = state
        self.initial_epoch = state.epoch

    def on_train_begin(self, logs: Any = None) -> None:
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.state.epoch = self.initial_epoch + epoch + 1
