"""Keras 3 ``keras.callbacks.BackupAndRestore`` for several workers of pytfcomm's strategy.

Keras 3's callback writes ``latest.weights.h5`` and ``training_metadata.json`` into
``backup_dir`` from every process, creates the directory from every process
(``os.makedirs`` without ``exist_ok``) and deletes it from every process: under
``pytfcomm.MultiWorkerMirroredStrategy`` with two or more workers the processes collide
(``FileExistsError``, h5py's ``unable to lock file``, a half-written or deleted backup).
:func:`install` (called by the strategy's constructor) changes three methods of that
class, and only while its model is under this strategy with two or more workers; in
every other case the methods are Keras' own. There, as TF documents for
``MultiWorkerMirroredStrategy`` checkpoints:

* the chief (worker 0) writes the backup into ``backup_dir``. It writes it into
  ``backup_dir/.pytfcomm-staging`` first and moves the files into place with
  ``os.replace``, so a process killed at any moment leaves the previous backup or the
  new one, never a torn file; the weights file also carries its epoch and batch (an
  HDF5 attribute) so that weights and ``training_metadata.json`` cannot disagree;
* every other worker saves too (saving may read values that need a collective), into
  ``backup_dir/workertemp_<task id>``, and removes that directory at once;
* on ``fit`` start every worker restores from the chief's files (read only: ``backup_dir``
  must be storage every worker sees, as with TF) and the workers check with one small
  all-gather that they restored the same epoch; otherwise every worker raises
  :class:`~pytfcomm.errors.ConfigError`;
* at the end of ``fit`` the workers meet in a barrier and only then does the chief delete
  the backup (``delete_checkpoint=True``): a worker lost after its last step still finds
  the backup when the job restarts. A second barrier keeps every worker from going on
  (to another ``fit`` that restores) before the backup is gone.

docs/multiworker.md, "BackupAndRestore and restarts", says what this gives and what not.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import ConfigError
from ._chief import Job, fresh_dir, job_of, local, makedirs, worker_dir
from ._which_keras import keras3_module_if_loaded

__all__ = ["install"]

_MODULE = "keras.src.callbacks.backup_and_restore"
_MARK = "_pytfcomm_multiworker"
#: HDF5 attribute of the chief's weights file: the training metadata it belongs to.
ATTR = "pytfcomm_training_metadata"
STAGING = ".pytfcomm-staging"
#: The name under which the workers' own collectives run (docs/negotiation.md).
_STREAM = "pytfcomm.backup_and_restore"
_UNREADABLE = -2  # a worker's restore raised (it raises that error itself)
_PATH_ATTRS = (
    "backup_dir",
    "_weights_path",
    "_training_metadata_path",
    "_prev_weights_path",
    "_prev_training_metadata_path",
)


def install() -> bool:
    """Make Keras 3's ``BackupAndRestore`` safe on several workers of pytfcomm's strategy.

    Idempotent. Patches nothing (and imports nothing) unless Keras 3 is already imported
    (``import tensorflow`` does that unless ``TF_USE_LEGACY_KERAS=1``). Returns whether
    the class is patched.
    """
    mod = keras3_module_if_loaded(_MODULE)
    if mod is None:
        return False
    cls = getattr(mod, "BackupAndRestore", None)
    if cls is None:
        return False
    if getattr(cls, _MARK, False):
        return True
    needed = ("on_train_begin", "_load_model", "_save_model", "on_train_end")
    if not all(callable(getattr(cls, n, None)) for n in needed):
        return False  # another Keras than the one this was written against: leave it
    _patch(cls)
    return True


def _job(callback: Any) -> Job | None:
    return job_of(getattr(callback, "model", None))


def _patch(cls: type[Any]) -> None:
    keras_begin, keras_save, keras_end = cls.on_train_begin, cls._save_model, cls.on_train_end

    def on_train_begin(self: Any, logs: Any = None) -> None:
        job = _job(self)
        if job is None:
            return keras_begin(self, logs)
        _restore(self, job)

    def _save_model(self: Any) -> None:
        job = _job(self)
        if job is None:
            return keras_save(self)
        if job.is_chief:
            _save_as_chief(self, keras_save)
        else:
            _save_as_worker(self, keras_save, job)

    def on_train_end(self: Any, logs: Any = None) -> None:
        job = _job(self)
        if job is None:
            return keras_end(self, logs)
        job.comm.barrier(name=_STREAM)  # every worker is done saving: the backup may go
        try:
            if job.is_chief:
                keras_end(self, logs)
        finally:  # and it is gone before any worker goes on (to the next fit's restore)
            job.comm.barrier(name=_STREAM)

    for fn in (on_train_begin, _save_model, on_train_end):
        fn.__qualname__ = f"{cls.__qualname__}.{fn.__name__}"
        fn.__doc__ = (
            f"Keras' ``{fn.__name__}``; on several workers of pytfcomm.MultiWorkerMirrored"
            "Strategy only the chief writes (pytfcomm.tf.backup)."
        )
        setattr(cls, fn.__name__, fn)
    setattr(cls, _MARK, True)


# --------------------------------------------------------------------------- paths


@contextlib.contextmanager
def _redirected(callback: Any, directory: str) -> Iterator[None]:
    """Let Keras' own ``_save_model`` write into ``directory`` (no .bkp copies there)."""
    from keras.src.utils import file_utils

    saved = {a: getattr(callback, a) for a in _PATH_ATTRS}
    double = callback.double_checkpoint
    callback.backup_dir = directory
    callback._weights_path = file_utils.join(directory, "latest.weights.h5")
    callback._training_metadata_path = file_utils.join(directory, "training_metadata.json")
    callback._prev_weights_path = callback._weights_path + ".bkp"
    callback._prev_training_metadata_path = callback._training_metadata_path + ".bkp"
    callback.double_checkpoint = False
    try:
        yield
    finally:
        for a, v in saved.items():
            setattr(callback, a, v)
        callback.double_checkpoint = double


# --------------------------------------------------------------------------- saving


def _save_as_worker(callback: Any, keras_save: Any, job: Job) -> None:
    from keras.src.utils import file_utils

    temp = worker_dir(callback.backup_dir, job.task_id)
    fresh_dir(temp)
    try:
        with _redirected(callback, temp):
            keras_save(callback)
    finally:
        file_utils.rmtree(temp)


def _save_as_chief(callback: Any, keras_save: Any) -> None:
    backup = callback.backup_dir
    makedirs(backup)
    if not local(backup):  # no atomic rename on gfile paths: Keras' own writes
        return keras_save(callback)
    staging = os.path.join(backup, STAGING)
    fresh_dir(staging)
    with _redirected(callback, staging):
        keras_save(callback)
        weights, meta = callback._weights_path, callback._training_metadata_path
    _mark(weights, meta)
    if callback.double_checkpoint:  # keep the backup being replaced as Keras' .bkp
        _keep(callback._weights_path, callback._prev_weights_path)
        _keep(callback._training_metadata_path, callback._prev_training_metadata_path)
    os.replace(weights, callback._weights_path)
    os.replace(meta, callback._training_metadata_path)
    shutil.rmtree(staging, ignore_errors=True)


def _mark(weights: str, meta: str) -> None:
    """Write the metadata into the weights file too: the two files move one at a time."""
    import h5py

    with open(meta) as f:
        text = f.read()
    with h5py.File(weights, "a") as h5:
        h5.attrs[ATTR] = text


def _keep(current: str, previous: str) -> None:
    """``previous`` becomes a copy of ``current`` (if any), in one rename."""
    if not os.path.exists(current):
        return
    tmp = previous + ".pytfcomm-tmp"
    with contextlib.suppress(FileNotFoundError):
        os.remove(tmp)
    try:
        os.link(current, tmp)  # the old inode lives on under the .bkp name
    except OSError:
        shutil.copy2(current, tmp)
    os.replace(tmp, previous)


# --------------------------------------------------------------------------- restoring


def _marked_epoch(weights: str) -> int | None:
    """The epoch the chief's weights file says it holds (None: not marked, not local)."""
    if not (local(weights) and os.path.exists(weights)):
        return None
    import h5py

    with h5py.File(weights, "r") as h5:
        text = h5.attrs.get(ATTR)
    if text is None:
        return None
    return int(json.loads(text)["epoch"])


def _load(callback: Any) -> int:
    """Keras' ``_load_model`` from the current paths; the epoch restored (-1: no backup)."""
    from keras.src.utils import file_utils

    model = callback.model
    found = file_utils.exists(callback._weights_path) or file_utils.exists(
        callback._training_metadata_path
    )
    callback._load_model()
    marked = _marked_epoch(callback._weights_path)
    if marked is not None:
        model._initial_epoch = marked
    return int(model._initial_epoch or 0) if found else -1


def _read(callback: Any) -> tuple[int, int]:
    """(epoch restored or -1, 0 from the current pair / 1 from the .bkp pair)."""
    from keras.src.utils import file_utils

    try:
        return _load(callback), 0
    except OSError:
        # Keras falls back to the .bkp pair, copying it over the current one; here the
        # workers only read it and the chief repairs the files once all have read.
        if not file_utils.exists(callback._prev_weights_path):
            raise
        with _prev_paths(callback):
            return _load(callback), 1


def _restore(callback: Any, job: Job) -> None:
    """Every worker reads the chief's backup (read only), then they compare epochs."""
    failure: BaseException | None = None
    try:
        epoch, source = _read(callback)
    except Exception as exc:  # still take part in the all-gather, then raise it
        failure, epoch, source = exc, _UNREADABLE, 0
    mine = np.array([[epoch, source]], dtype=np.int64)
    every = job.comm.allgather(mine, name=_STREAM)
    if failure is not None:
        raise failure
    if not (every == every[0]).all():
        seen = ", ".join(f"worker {r}: {_said(e)}" for r, (e, _) in enumerate(every))
        raise ConfigError(
            f"BackupAndRestore: the workers found different backups in "
            f"{callback.backup_dir!r} ({seen}). Every worker restores from the chief's "
            "backup, so backup_dir must be storage every worker reads (a shared "
            "filesystem), the same path on every worker."
        )
    if source == 1 and job.is_chief:  # every worker has read: now mend the current pair
        _keep(callback._prev_weights_path, callback._weights_path)
        if os.path.exists(callback._prev_training_metadata_path):
            _keep(callback._prev_training_metadata_path, callback._training_metadata_path)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.remove(callback._training_metadata_path)


def _said(epoch: int) -> str:
    if epoch == _UNREADABLE:
        return "could not read it"
    return "no backup" if epoch < 0 else f"epoch {epoch}"


@contextlib.contextmanager
def _prev_paths(callback: Any) -> Iterator[None]:
    """Point the callback at the .bkp pair; Keras loads only ``*.weights.h5`` names, so
    the weights are read through a private copy (never written where others read)."""
    from keras.src.utils import file_utils

    weights, meta = callback._weights_path, callback._training_metadata_path
    private = tempfile.mkdtemp(prefix="pytfcomm-backup-")
    try:
        callback._weights_path = os.path.join(private, "latest.weights.h5")
        file_utils.copy(callback._prev_weights_path, callback._weights_path)
        callback._training_metadata_path = callback._prev_training_metadata_path
        yield
    finally:
        callback._weights_path, callback._training_metadata_path = weights, meta
        shutil.rmtree(private, ignore_errors=True)
