"""Keras 3 ``ModelCheckpoint`` and ``TensorBoard`` on several workers of pytfcomm's strategy.

Keras 3's callbacks write from every process: under ``pytfcomm.MultiWorkerMirroredStrategy``
with two or more workers and one path for all, ``ModelCheckpoint`` made two processes
write one ``.weights.h5`` (h5py's ``unable to lock file``, the job lost) or one ``.keras``
file, and ``TensorBoard`` wrote one events file per worker into the same log directory.
:func:`install` (called by the strategy's constructor) changes a few methods of the two
classes, and only while the callback's model is under this strategy with two or more
workers; in every other case the methods are Keras' own. There, as TF documents for
``MultiWorkerMirroredStrategy`` (pytfcomm/tf/_chief.py):

* the chief (worker 0) writes to the path the user gave;
* every other worker writes the same checkpoint into ``workertemp_<task id>`` inside the
  checkpoint's directory and removes it right after the save; its TensorBoard logs go to
  ``log_dir/workertemp_<task id>``, removed at the end of ``fit``;
* ``save_best_only``: every worker must save, or not, together (saving may read values
  that need a collective). The monitored value is the all-reduced one, the same on every
  worker; the workers still take the chief's decision (one small broadcast per save
  check), so a value that differs per worker (a callback that edits ``logs``) cannot
  make them diverge.

docs/multiworker.md, "Callbacks that write files", says what this gives and what not.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import numpy as np

from ._chief import Job, fresh_dir, job_of, makedirs, remove_dir, worker_dir
from ._which_keras import keras3_module_if_loaded

__all__ = ["install"]

_MARK = "_pytfcomm_multiworker"
#: The name under which the workers' own collectives run (docs/negotiation.md).
_STREAM = "pytfcomm.callback_files"
_WRITE_DIR = "_pytfcomm_write_dir"  # a non-chief's workertemp_<id> while it saves
_log = logging.getLogger(__name__)


def install() -> bool:
    """Make Keras 3's ``ModelCheckpoint`` and ``TensorBoard`` write once on several workers.

    Idempotent. Patches nothing (and imports nothing) unless Keras 3 is already imported
    (``import tensorflow`` does that unless ``TF_USE_LEGACY_KERAS=1``). Returns whether
    both classes are patched.
    """
    if "keras" not in sys.modules:
        return False
    done = [
        _install("keras.src.callbacks.model_checkpoint", "ModelCheckpoint", _CHECKPOINT),
        _install("keras.src.callbacks.tensorboard", "TensorBoard", _TENSORBOARD),
    ]
    return all(done)


def _install(module: str, name: str, patch: tuple[tuple[str, ...], Any]) -> bool:
    mod = keras3_module_if_loaded(module)
    if mod is None:
        return False
    cls = getattr(mod, name, None)
    if cls is None:
        return False
    if getattr(cls, _MARK, False):
        return True
    needed, apply = patch
    if not all(callable(getattr(cls, n, None)) for n in needed):
        return False  # another Keras than the one this was written against: leave it
    for fn in apply(cls):
        fn.__qualname__ = f"{cls.__qualname__}.{fn.__name__}"
        fn.__doc__ = (
            f"Keras' ``{fn.__name__}``; on several workers of pytfcomm.MultiWorkerMirrored"
            "Strategy only the chief writes the user's path (pytfcomm.tf.callback_files)."
        )
        setattr(cls, fn.__name__, fn)
    setattr(cls, _MARK, True)
    return True


# --------------------------------------------------------------------------- ModelCheckpoint


def _patch_checkpoint(cls: Any) -> list[Any]:  # a Keras class: untyped
    keras_path, keras_should, keras_save = (
        cls._get_file_path,
        cls._should_save_model,
        cls._save_model,
    )

    def _get_file_path(self: Any, epoch: int, batch: Any, logs: Any) -> str:
        path = keras_path(self, epoch, batch, logs)
        temp = getattr(self, _WRITE_DIR, None)
        return path if temp is None else _in_dir(temp, path)

    def _should_save_model(self: Any, epoch: int, batch: Any, logs: Any, filepath: str) -> bool:
        mine = bool(keras_should(self, epoch, batch, logs, filepath))
        job = job_of(self.model)
        if job is None or not self.save_best_only:
            return mine
        return _chiefs_decision(job, mine, self.monitor, logs)

    def _save_model(self: Any, epoch: int, batch: Any, logs: Any) -> None:
        job = job_of(self.model)
        if job is None:
            return keras_save(self, epoch, batch, logs)
        directory = os.path.dirname(keras_path(self, epoch, batch, logs))
        # Keras creates the directory if it is missing (os.makedirs without exist_ok):
        # made here first, another worker creating it meanwhile cannot fail the save.
        makedirs(directory)
        if job.is_chief:
            return keras_save(self, epoch, batch, logs)
        temp = worker_dir(directory, job.task_id)
        fresh_dir(temp)
        setattr(self, _WRITE_DIR, temp)
        try:
            keras_save(self, epoch, batch, logs)
        finally:
            delattr(self, _WRITE_DIR)
            remove_dir(temp)

    return [_get_file_path, _should_save_model, _save_model]


def _chiefs_decision(job: Job, mine: bool, monitor: str, logs: Any) -> bool:
    """Whether to save: the chief's decision, on every worker."""
    flag = np.array([int(mine)], dtype=np.int32)
    chief = bool(job.comm.broadcast(flag, root=0, name=_STREAM)[0])
    if chief != mine:
        _log.warning(
            "ModelCheckpoint(save_best_only=True): worker %s %s while the chief %s: %r is "
            "not the same on every worker (%r here). Following the chief, whose file is "
            "the one kept.",
            job.task_id,
            "would save" if mine else "would not save",
            "does" if chief else "does not",
            monitor,
            (logs or {}).get(monitor),
        )
    return chief


def _in_dir(directory: str, path: str) -> str:
    from keras.src.utils import file_utils

    return file_utils.join(directory, os.path.basename(path))


_CHECKPOINT = (("_get_file_path", "_should_save_model", "_save_model"), _patch_checkpoint)


# --------------------------------------------------------------------------- TensorBoard


def _patch_tensorboard(cls: Any) -> list[Any]:  # a Keras class: untyped
    keras_set_model, keras_train_end = cls.set_model, cls.on_train_end

    def set_model(self: Any, model: Any) -> None:
        job = job_of(model)
        if job is None or job.is_chief:
            return keras_set_model(self, model)
        # Keras derives every path it writes (train/, validation/, the projector
        # config, embedding checkpoints) from log_dir here.
        temp = worker_dir(self.log_dir, job.task_id)
        fresh_dir(temp)
        setattr(self, _WRITE_DIR, temp)
        log_dir, self.log_dir = self.log_dir, temp
        try:
            keras_set_model(self, model)
        finally:
            self.log_dir = log_dir

    def on_train_end(self: Any, logs: Any = None) -> None:
        keras_train_end(self, logs)  # closes the writers
        temp = getattr(self, _WRITE_DIR, None)
        if temp is not None:
            delattr(self, _WRITE_DIR)
            remove_dir(temp)

    return [set_model, on_train_end]


_TENSORBOARD = (("set_model", "on_train_end"), _patch_tensorboard)
