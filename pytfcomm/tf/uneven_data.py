"""Workers with a different number of batches: Keras stops every worker at the global end.

TF's distributed iterator already agrees on the end of data across workers:
in multi-worker mode every ``get_next`` all-reduces how many replicas still
have data (an int64 SUM, on pytfcomm here); while any has, the others get an
empty batch, and when none has, every worker raises ``OutOfRangeError`` at
the same step. Keras 3 never lets it: its epoch iterator counts steps from the
*local* dataset's cardinality, so a worker with 4 batches ends its epoch
while one with 5 waits in that all-reduce (a timeout, or a mismatch with the
next collective).

So :func:`agree_on_batches` (called by the strategy's
``experimental_distribute_dataset``) exchanges the local cardinalities; when
they differ, the distributed dataset is marked, and Keras' epoch iterator
(patched once by :func:`install`) then runs on an unknown count, that is
until TF's agreement says every worker is out of data. Equal cardinalities
(the usual, auto-sharded case) change nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

__all__ = ["agree_on_batches", "install", "uneven"]

_MARK = "_pytfcomm_uneven_batches"


def agree_on_batches(dataset: Any, distributed: Any, communicator: Any) -> Any:
    """Mark ``distributed`` when workers' ``dataset`` cardinalities differ; returns it."""
    if communicator is None or communicator.size == 1 or not isinstance(dataset, tf.data.Dataset):
        return distributed
    mine = np.array([int(dataset.cardinality())], np.int64)
    every = communicator.allgather(mine, name="pytfcomm.dataset_cardinality")
    if not (every == every[0]).all():
        try:
            setattr(distributed, _MARK, True)
        except AttributeError:  # a type without a __dict__: Keras keeps its count
            pass
    return distributed


def uneven(distributed: Any) -> bool:
    """Whether the workers' datasets behind ``distributed`` have different batch counts."""
    return bool(getattr(distributed, _MARK, False))


def install() -> None:
    """Make Keras 3's TF epoch iterator run marked datasets to the agreed end (idempotent)."""
    try:
        from keras.src.backend.tensorflow import trainer
    except ImportError:  # no Keras 3: tf-keras counts with TF's own iterator
        return
    cls = trainer.TFEpochIterator
    if getattr(cls, "_pytfcomm_uneven_installed", False):
        return
    init, reset = cls.__init__, cls.reset

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if uneven(getattr(self, "_distributed_dataset", None)):
            self._num_batches = None

    def reset_(self: Any) -> None:
        reset(self)
        if uneven(getattr(self, "_distributed_dataset", None)):
            self._num_batches = None

    cls.__init__ = __init__
    cls.reset = reset_
    cls._pytfcomm_uneven_installed = True
