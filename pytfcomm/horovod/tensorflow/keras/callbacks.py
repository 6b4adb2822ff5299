"""Horovod's Keras callbacks on pytfcomm (subclasses of the Keras in use).

``BroadcastGlobalVariablesCallback``, ``MetricAverageCallback``,
``LearningRateScheduleCallback``, ``LearningRateWarmupCallback`` and
``BestModelCheckpoint``, with Horovod's arguments and behaviour. Momentum
correction applies when the optimizer's ``momentum`` is a variable (tf-keras);
Keras 3's SGD keeps it as a Python float compiled into the train step, so
there it is left alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ....tf._which_keras import keras_module
from ....tf.keras import _average_logs
from ..._basics import communicator, rank, size
from ..functions import broadcast_variables

__all__ = [
    "BestModelCheckpoint",
    "BroadcastGlobalVariablesCallback",
    "LearningRateScheduleCallback",
    "LearningRateWarmupCallback",
    "MetricAverageCallback",
]


_K: Any = keras_module()
# The classes of the Keras in use (Keras 3 or tf-keras), as bases of type Any.
_Callback: Any = _K.callbacks.Callback
_ModelCheckpoint: Any = _K.callbacks.ModelCheckpoint


def _optimizer_variables(opt: Any) -> list[Any]:
    v = getattr(opt, "variables", [])
    return list(v() if callable(v) else v)


class BroadcastGlobalVariablesCallback(_Callback):
    """Broadcast the model's (and, after the first batch, the optimizer's) variables from
    ``root_rank``, so that every process starts from the same state.

    ``local_variables`` (variables or a list) are left out. ``device`` is accepted.
    """

    def __init__(self, root_rank: int, device: str = "", local_variables: Any = None) -> None:
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        if local_variables is None:
            local_variables = []
        elif not isinstance(local_variables, (list, tuple)):
            local_variables = [local_variables]
        self._local = {id(v) for v in local_variables}
        self.broadcast_done = False

    def _variables(self, with_optimizer: bool) -> list[Any]:
        vs = list(self.model.variables)
        if with_optimizer and getattr(self.model, "optimizer", None) is not None:
            vs += _optimizer_variables(self.model.optimizer)
        return [v for v in vs if id(v) not in self._local]

    def on_train_begin(self, logs: Any = None) -> None:
        if getattr(self.model, "built", False):
            broadcast_variables(self._variables(False), self.root_rank)

    def on_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.broadcast_done:
            return
        broadcast_variables(self._variables(True), self.root_rank)
        self.broadcast_done = True

    on_train_batch_end = on_batch_end


class MetricAverageCallback(_Callback):
    """At the end of every epoch, replace each numeric log by its average over processes.

    Put it before callbacks that read the logs (checkpoints, LR schedules). ``device`` is
    accepted.
    """

    def __init__(self, device: str = "") -> None:
        super().__init__()
        self.device = device

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if logs:
            _average_logs(communicator(), logs)


def _get(var: Any) -> float:
    return float(np.asarray(var.numpy() if hasattr(var, "numpy") else var))


def _lr_attr(opt: Any) -> str:
    return "learning_rate" if hasattr(opt, "learning_rate") else "lr"


class LearningRateScheduleCallback(_Callback):
    """Set the learning rate to ``initial_lr * multiplier(epoch)`` from ``start_epoch`` up to
    (not including) ``end_epoch``.

    ``multiplier`` is a number (``multiplier ** (epoch - start_epoch)``) or a
    function of the (fractional) epoch; ``staircase`` changes it once per
    epoch, otherwise every batch (``steps_per_epoch`` found from ``fit`` when
    not given). The epoch's learning rate is logged as ``lr``.
    """

    def __init__(
        self,
        initial_lr: float,
        multiplier: Any,
        start_epoch: int = 0,
        end_epoch: int | None = None,
        staircase: bool = True,
        momentum_correction: bool = True,
        steps_per_epoch: int | None = None,
    ) -> None:
        super().__init__()
        if initial_lr is None:
            raise ValueError("Parameter `initial_lr` is required")
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch: int | None = None
        self.restore_momentum: float | None = None
        if callable(multiplier):
            self.multiplier = multiplier
        else:
            self.multiplier = lambda epoch: multiplier ** (epoch - start_epoch)

    def _autodetect_steps_per_epoch(self) -> int:
        params = self.params or {}
        if params.get("steps"):
            return int(params["steps"])
        if params.get("samples") and params.get("batch_size"):
            return int(params["samples"]) // int(params["batch_size"])
        raise ValueError(
            "Could not autodetect the number of steps per epoch. Please specify the "
            f"steps_per_epoch parameter to the {type(self).__name__}()."
        )

    def _adjust_learning_rate(self, epoch: float) -> None:
        opt = self.model.optimizer
        attr = _lr_attr(opt)
        old_lr = _get(getattr(opt, attr))
        new_lr = self.initial_lr * self.multiplier(epoch)
        setattr(opt, attr, new_lr)
        momentum: Any = getattr(opt, "momentum", None)  # a variable, a float or None
        if self.momentum_correction and hasattr(momentum, "assign") and old_lr:
            self.restore_momentum = _get(momentum)
            momentum.assign(self.restore_momentum * new_lr / old_lr)

    def _restore_momentum_if_needed(self) -> None:
        if self.restore_momentum is not None:
            self.model.optimizer.momentum.assign(self.restore_momentum)
            self.restore_momentum = None

    def _steps(self) -> int:
        """``steps_per_epoch``: as given, else detected from ``fit``'s parameters."""
        if not self.steps_per_epoch:
            self.steps_per_epoch = self._autodetect_steps_per_epoch()
        return self.steps_per_epoch

    def on_train_begin(self, logs: Any = None) -> None:
        if not self.staircase:
            self._steps()

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.current_epoch = epoch

    def on_batch_begin(self, batch: int, logs: Any = None) -> None:
        epoch = self.current_epoch or 0
        if epoch < self.start_epoch or (self.end_epoch is not None and epoch >= self.end_epoch):
            return
        if self.staircase and batch == 0:
            self._adjust_learning_rate(epoch)
        elif not self.staircase:
            self._adjust_learning_rate(epoch + float(batch) / self._steps())

    def on_batch_end(self, batch: int, logs: Any = None) -> None:
        self._restore_momentum_if_needed()

    on_train_batch_begin = on_batch_begin
    on_train_batch_end = on_batch_end

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if logs is not None:
            logs["lr"] = _get(getattr(self.model.optimizer, _lr_attr(self.model.optimizer)))


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramp the learning rate from ``initial_lr / size()`` to ``initial_lr`` over
    ``warmup_epochs`` epochs, batch by batch (Goyal et al., as Horovod)."""

    def __init__(
        self,
        initial_lr: float,
        warmup_epochs: int = 5,
        momentum_correction: bool = True,
        steps_per_epoch: int | None = None,
        verbose: int = 0,
    ) -> None:
        def multiplier(epoch: float) -> float:
            # Horovod adjusts at a batch's start to the value at its end.
            epoch += 1.0 / self._steps()
            n = size()
            return 1.0 / n * (epoch * (n - 1) / warmup_epochs + 1)

        super().__init__(
            initial_lr,
            multiplier,
            start_epoch=0,
            end_epoch=warmup_epochs,
            staircase=False,
            momentum_correction=momentum_correction,
            steps_per_epoch=steps_per_epoch,
        )
        self.verbose = verbose

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        super().on_epoch_end(epoch, logs)
        if epoch + 1 == self.end_epoch and self.verbose > 0 and rank() == 0:
            lr = _get(getattr(self.model.optimizer, _lr_attr(self.model.optimizer)))
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to {lr:g}.")


class BestModelCheckpoint(_ModelCheckpoint):
    """Save the model only when ``monitor`` improves (``ModelCheckpoint(save_best_only=True)``).

    As Horovod's, it is built without a file path; set ``callback.filepath``
    (``.keras``, or ``.weights.h5`` with ``save_weights_only``) before
    ``fit``, or pass ``filepath=`` (pytfcomm's addition).
    """

    def __init__(
        self,
        monitor: str = "val_loss",
        verbose: int = 0,
        save_weights_only: bool = False,
        mode: str = "auto",
        save_freq: Any = "epoch",
        filepath: str | None = None,
    ) -> None:
        # Keras 3 checks the path's extension at construction: give it a valid
        # placeholder, then keep the user's (possibly None) path.
        placeholder = "unset.weights.h5" if save_weights_only else "unset.keras"
        super().__init__(
            filepath=filepath or placeholder,
            monitor=monitor,
            verbose=verbose,
            save_best_only=True,
            save_weights_only=save_weights_only,
            mode=mode,
            save_freq=save_freq,
        )
        self.filepath = filepath

    def on_train_begin(self, logs: Any = None) -> None:
        if not self.filepath:
            raise ValueError(
                "BestModelCheckpoint has no file path: set callback.filepath (e.g. "
                "'best.keras') before fit"
            )
        parent = getattr(super(), "on_train_begin", None)
        if parent is not None:
            parent(logs)
