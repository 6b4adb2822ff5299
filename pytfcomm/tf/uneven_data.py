"""Workers with a different number of batches: every worker stops at the global end of data.

TF's distributed iterator already agrees on the end of data across workers:
in multi-worker mode every ``get_next`` all-reduces how many replicas still
have data (an int64 SUM, on pytfcomm here); while any has, the others get an
empty batch, and when none has, every worker raises ``OutOfRangeError`` at
the same step. Custom loops (``for batch in dist``, in or out of a
``tf.function``, or ``get_next_as_optional``) get this as is. Keras 3 never
lets it: its epoch iterator counts steps from the *local* cardinality, so a
worker with 4 batches ends its epoch while one with 5 waits in that
all-reduce (a timeout, or a mismatch with the next collective).

So :func:`agree_on_batches` (called by the strategy for every distributed
dataset, from ``experimental_distribute_dataset`` and from
``distribute_datasets_from_function``) exchanges the local cardinalities
once, when the dataset is distributed; when they differ, the distributed
dataset is marked, and Keras' epoch iterator (patched once by
:func:`install`) then runs on an unknown count, that is until TF's agreement
says every worker is out of data. Equal cardinalities (the usual,
auto-sharded case) change nothing, and no step costs more.

TF skips its agreement for an infinite dataset (``repeat()``): a worker whose
dataset is infinite while another's is finite (or of unknown size, e.g.
after ``filter``) would leave that all-reduce to the others alone, so that is
refused when the dataset is distributed. Unknown sizes on every worker need
nothing: Keras then runs to TF's agreed end anyway.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from ..errors import InvalidArgumentError

__all__ = ["agree_on_batches", "install", "uneven"]

_MARK = "_pytfcomm_uneven_batches"
_INFINITE = int(tf.data.INFINITE_CARDINALITY)
_UNKNOWN = int(tf.data.UNKNOWN_CARDINALITY)


def _describe(cardinality: int) -> str:
    if cardinality == _INFINITE:
        return "infinite"
    if cardinality == _UNKNOWN:
        return "of unknown size"
    return f"{cardinality} batch(es)"


def _check_infinite(every: np.ndarray) -> None:
    infinite = every == _INFINITE
    if infinite.any() and not infinite.all():
        workers = ", ".join(f"worker {r}: {_describe(int(c))}" for r, c in enumerate(every))
        raise InvalidArgumentError(
            "the workers' datasets are infinite on some workers and finite on others "
            f"({workers}): TensorFlow agrees on the end of data only among finite "
            "datasets, so the finite workers would wait for the infinite ones at every "
            "step. repeat() the dataset on every worker (and give steps_per_epoch) or "
            "on none"
        )


def agree_on_batches(distributed: Any, communicator: Any) -> Any:
    """Mark ``distributed`` when workers' batch counts differ; returns it.

    The count is ``distributed.cardinality``: what TF's iterator and Keras go
    by (the dataset given to ``experimental_distribute_dataset``, or the one
    ``dataset_fn`` returned on this worker). Every worker must call this for
    the same datasets in the same order (it is one all-gather). Raises
    :class:`~pytfcomm.InvalidArgumentError` on every worker when some
    workers' datasets are infinite and others' are not.
    """
    if communicator is None or communicator.size == 1:
        return distributed
    mine = np.array([int(getattr(distributed, "cardinality", _UNKNOWN))], np.int64)
    every = communicator.allgather(mine, name="pytfcomm.dataset_cardinality")
    _check_infinite(every)
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
