"""``import pytfcomm.horovod.tensorflow.keras as hvd``: Horovod 0.28.1's Keras API on pytfcomm.

Keras 3 first; tf-keras optimizers (new and ``optimizers.legacy``) work too,
``backward_passes_per_step`` included. The callbacks subclass the Keras in use (tf-keras when
``TF_USE_LEGACY_KERAS=1``). See docs/horovod.md.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from ... import tensorflow as _hvd
from ..._basics import (
    Adasum,
    Average,
    ProcessSet,
    Sum,
    add_process_set,
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    global_process_set,
    gloo_built,
    gloo_enabled,
    init,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    remove_process_set,
    rocm_built,
    shutdown,
    size,
    start_timeline,
    stop_timeline,
)
from .._keras_optimizer import (
    DistributedOptimizer,
    PartialDistributedOptimizer,
    _make_setup,
    _setup,
)
from ..compression import Compression
from . import callbacks, elastic

__all__ = [
    "Adasum",
    "Average",
    "Compression",
    "DistributedOptimizer",
    "PartialDistributedOptimizer",
    "ProcessSet",
    "Sum",
    "add_process_set",
    "allgather",
    "allreduce",
    "broadcast",
    "broadcast_global_variables",
    "callbacks",
    "ccl_built",
    "cross_rank",
    "cross_size",
    "cuda_built",
    "ddl_built",
    "elastic",
    "global_process_set",
    "gloo_built",
    "gloo_enabled",
    "init",
    "is_initialized",
    "load_model",
    "local_rank",
    "local_size",
    "mpi_built",
    "mpi_enabled",
    "mpi_threads_supported",
    "nccl_built",
    "rank",
    "reducescatter",
    "remove_process_set",
    "rocm_built",
    "shutdown",
    "size",
    "start_timeline",
    "stop_timeline",
]


def broadcast_global_variables(root_rank: int) -> Any:
    """Horovod's TF1-session broadcast: a RuntimeError eagerly, as Horovod's; use
    ``callbacks.BroadcastGlobalVariablesCallback(root_rank)`` or
    ``hvd.broadcast_variables(model.variables, root_rank)``."""
    return _hvd.broadcast_global_variables(root_rank)


def _eval(result: tf.Tensor) -> Any:
    """Horovod's: the tensor itself when TF runs eagerly; in a TF1 graph its value from
    the default session (the symbolic tensor when there is none, e.g. in tf.function)."""
    if tf.executing_eagerly():
        return result
    session = tf.compat.v1.get_default_session()
    return session.run(result) if session is not None else result


def allreduce(
    value: Any,
    name: str | None = None,
    average: Any = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    op: Any = None,
    compression: Any = Compression.none,
) -> Any:
    """All-reduce a tensor-compatible value (default op Average); a ``tf.Tensor`` eagerly,
    as Horovod."""
    return _eval(
        _hvd.allreduce(
            tf.constant(value, name=name),
            average=average,
            prescale_factor=prescale_factor,
            postscale_factor=postscale_factor,
            op=op,
            compression=compression,
        )
    )


def allgather(value: Any, name: str | None = None) -> Any:
    """All-gather a tensor-compatible value along dimension 0; a ``tf.Tensor`` eagerly."""
    return _eval(_hvd.allgather(tf.constant(value, name=name)))


def broadcast(value: Any, root_rank: int, name: str | None = None) -> Any:
    """Rank ``root_rank``'s value on every rank; a ``tf.Tensor`` eagerly."""
    return _eval(_hvd.broadcast(tf.constant(value, name=name), root_rank))


def reducescatter(value: Any, name: str | None = None, op: Any = Average) -> Any:
    """Reduce-scatter a tensor-compatible value (Average or Sum); a ``tf.Tensor`` eagerly."""
    return _eval(_hvd.reducescatter(tf.constant(value, name=name), op=op))


def load_model(
    filepath: Any,
    custom_optimizers: Any = None,
    custom_objects: Any = None,
    compression: Any = Compression.none,
    legacy_opts: bool = False,
) -> Any:
    """Load a saved Keras model and make its optimizer a :func:`DistributedOptimizer`
    in place, keeping its state (slots, iterations).

    ``custom_optimizers`` (classes) join ``custom_objects``; ``legacy_opts``
    loads with tf-keras (``tf_keras.models.load_model``).
    """
    objects = dict(custom_objects or {})
    for cls in custom_optimizers or []:
        objects.setdefault(cls.__name__, cls)
    if legacy_opts:
        import tf_keras as keras_module
    else:
        import keras as keras_module
    model = keras_module.models.load_model(filepath, custom_objects=objects)
    opt = getattr(model, "optimizer", None)
    if opt is not None:
        setup = _make_setup(compression, False, 1.0, Average, 1, False, global_process_set, True)
        object.__setattr__(opt, "__class__", _setup(opt, setup))
        object.__setattr__(opt, "_hvd_setup", setup)
    return model
