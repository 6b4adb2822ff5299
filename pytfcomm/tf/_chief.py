"""Who writes a Keras callback's files on several workers of pytfcomm's strategy.

TF's rule for ``MultiWorkerMirroredStrategy`` (tf-keras' ``distributed_file_utils``):
the chief writes to the path the user gave; every other worker writes the same
things (writing may read values that need a collective) into ``workertemp_<task id>``
inside the directory it would have written to, and removes that directory afterwards.
Used by :mod:`pytfcomm.tf.backup` and :mod:`pytfcomm.tf.callback_files`.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any


class Job:
    """This worker's part in a multi-worker job (None from :func:`job_of` otherwise)."""

    def __init__(self, strategy: Any) -> None:
        ext = strategy.extended
        self.comm = strategy.communicator
        self.is_chief = bool(ext.should_checkpoint)
        self.task_id = ext._task_id


def job_of(model: Any) -> Job | None:
    """The job of ``model`` when it is under pytfcomm's strategy with 2 or more workers."""
    # pytfcomm's MultiWorkerMirroredStrategy is the one strategy whose extended is an
    # Extended (strategy.py imports this module: naming the strategy here is a cycle).
    from ._extended import Extended

    strategy: Any = getattr(model, "distribute_strategy", None)
    if not isinstance(getattr(strategy, "extended", None), Extended):
        return None
    if strategy.communicator.size < 2:
        return None
    return Job(strategy)


def worker_dir(directory: str, task_id: int) -> str:
    """Where a non-chief worker writes what it would have written into ``directory``."""
    from keras.src.utils import file_utils

    name = f"workertemp_{task_id}"
    return file_utils.join(directory, name) if directory else name


def local(path: str) -> bool:
    """Whether ``path`` is on a local or mounted filesystem (not ``gs://``-style)."""
    from keras.src.utils import file_utils

    return not file_utils.is_remote_path(path)


def makedirs(path: str) -> None:
    """Create ``path`` and its parents; another worker making them meanwhile is fine."""
    from keras.src.utils import file_utils

    if not path:
        return
    if local(path):
        os.makedirs(path, exist_ok=True)
    elif not file_utils.exists(path):
        with contextlib.suppress(FileExistsError):
            file_utils.makedirs(path)


def fresh_dir(path: str) -> None:
    """An empty directory at ``path`` (what a killed save left there goes first)."""
    from keras.src.utils import file_utils

    if file_utils.exists(path):
        file_utils.rmtree(path)
    makedirs(path)


def remove_dir(path: str) -> None:
    """Remove ``path`` and everything in it, if it is there."""
    from keras.src.utils import file_utils

    if file_utils.exists(path):
        file_utils.rmtree(path)
