"""Horovod's elastic Keras API (``hvd.elastic`` of ``horovod.tensorflow.keras``) on
``pytfcomm-run --restarts``: see :mod:`pytfcomm.horovod.tensorflow.elastic`.

``KerasState`` tracks a model, its optimizer and objects such as ``epoch`` and
``batch``; the three callbacks commit it and keep ``epoch``/``batch`` current,
so a restarted job's ``fit(epochs=epochs - state.epoch)`` resumes where the
last commit left it.
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
    """Horovod's ``KerasState``: :class:`TensorFlowKerasState` of a compiled Keras model."""


class CommitStateCallback(_Callback):
    """Commit ``state`` every ``batches_per_commit`` batches and at every epoch's end."""

    def __init__(self, state: State, batches_per_commit: int = 1) -> None:
        super().__init__()
        if batches_per_commit < 1:
            raise ValueError(f"batches_per_commit must be >= 1, got {batches_per_commit}")
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs: Any = None) -> None:
        self.batches_remaining = self.batches_per_commit

    def on_batch_end(self, batch: int, logs: Any = None) -> None:
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.state.commit()


class UpdateBatchStateCallback(_Callback):
    """Keep ``state.batch`` at the last finished batch (0 at an epoch's end), and
    shorten the first epoch after a restart by the batches already done."""

    def __init__(self, state: ObjectState) -> None:
        super().__init__()
        self.state = state
        self.steps_per_epoch: int | None = None

    def on_train_begin(self, logs: Any = None) -> None:
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        steps = (self.params or {}).get("steps")
        if steps:
            if self.steps_per_epoch is None:
                self.steps_per_epoch = steps
            self.params["steps"] = self.steps_per_epoch - self.state.batch

    def on_batch_end(self, batch: int, logs: Any = None) -> None:
        self.state.batch = batch

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.state.batch = 0


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
