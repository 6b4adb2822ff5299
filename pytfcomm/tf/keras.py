"""``pytfcomm.keras``: Horovod-style Keras training (one process per device).

    opt = pytfcomm.keras.DistributedOptimizer(keras.optimizers.SGD(0.01))
    model.compile(optimizer=opt, ...)
    model.fit(x_shard, y_shard, callbacks=[
        pytfcomm.keras.callbacks.BroadcastGlobalVariablesCallback(0),
        pytfcomm.keras.callbacks.MetricAverageCallback()])

Works with Keras 3 (``keras``) and tf-keras (``tf_keras``, or ``tf.keras``
with ``TF_USE_LEGACY_KERAS=1``).
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from . import collectives as coll
from ._which_keras import keras_module
from .distributed import _check_op, _wire_dtype, allreduce_gradients, broadcast_variables

__all__ = ["DistributedOptimizer", "callbacks"]


def _is_tf_keras(obj: Any) -> bool:
    return any(c.__module__.startswith("tf_keras") for c in type(obj).__mro__)


def DistributedOptimizer(
    optimizer: Any,
    *,
    op: str = "mean",
    compression: Any = None,
    sparse_as_dense: bool = False,
    communicator: Any = None,
    algorithm: str = "auto",
    fusion_threshold_bytes: int = coll.DEFAULT_FUSION_BYTES,
    timeout: float | None = None,
) -> Any:
    """A copy of ``optimizer`` whose updates use gradients all-reduced across processes.

    The result is an instance of a subclass of ``optimizer``'s own class
    (built from its config, so wrap it before training starts), so
    ``model.compile``, checkpoints and ``isinstance`` checks keep working.
    Every dense gradient of a step goes into one fused all-reduce; ``op``
    ``"mean"`` (default) or ``"sum"``; ``compression``
    (``pytfcomm.Compression.fp16``/``bf16``) narrows float gradients on the
    wire; ``sparse_as_dense`` densifies embedding gradients.
    """
    _check_op(op)
    _wire_dtype(compression)
    reduce_kwargs = dict(
        op=op,
        compression=compression,
        sparse_as_dense=bool(sparse_as_dense),
        communicator=communicator,
        algorithm=algorithm,
        fusion_threshold_bytes=fusion_threshold_bytes,
        timeout=timeout,
    )
    base = type(optimizer)
    if _is_tf_keras(optimizer):

        def apply_gradients(self: Any, grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
            pairs = list(grads_and_vars)
            grads = allreduce_gradients([g for g, _ in pairs], **self._pytfcomm_reduce)
            return base.apply_gradients(
                self, list(zip(grads, [v for _, v in pairs], strict=True)), *args, **kwargs
            )

        body: dict[str, Any] = {"apply_gradients": apply_gradients}
    else:
        import keras

        if not isinstance(optimizer, keras.optimizers.Optimizer):
            raise InvalidArgumentError(
                "DistributedOptimizer wraps a Keras 3 or tf-keras optimizer, got "
                f"{base.__module__}.{base.__name__}"
            )

        def apply(self: Any, grads: Any, trainable_variables: Any = None) -> Any:
            reduced = allreduce_gradients(list(grads), **self._pytfcomm_reduce)
            return base.apply(self, reduced, trainable_variables)

        body = {"apply": apply}
    cls: type[Any] = types.new_class(
        f"Distributed{base.__name__}", (base,), exec_body=lambda ns: ns.update(body)
    )
    cls.__module__ = base.__module__
    wrapped = cls.from_config(optimizer.get_config())
    wrapped._pytfcomm_reduce = reduce_kwargs
    return wrapped


def _callback_base() -> type:
    return keras_module().callbacks.Callback


def _comm(communicator: Any) -> Any:
    return coll.active_communicator(communicator)


class _BroadcastMixin:
    """Broadcast the model's variables from ``root_rank`` before training starts."""

    model: Any  # set by Keras on the Callback class this is mixed into

    def __init__(self, root_rank: int = 0, *, communicator: Any = None) -> None:
        super().__init__()
        self.root_rank = root_rank
        self.communicator = communicator
        self._done = False

    def _broadcast(self) -> None:
        if self._done or not getattr(self.model, "built", True):
            return
        broadcast_variables(self.model.variables, self.root_rank, communicator=self.communicator)
        self._done = True

    def on_train_begin(self, logs: Any = None) -> None:
        self._broadcast()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        # Models built by their first step get their broadcast here (the
        # first step's update was already identical on every rank).
        self._broadcast()


class _MetricAverageMixin:
    """Replace each numeric epoch log by its mean over all processes."""

    def __init__(self, *, communicator: Any = None) -> None:
        super().__init__()
        self.communicator = communicator

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        _average_logs(_comm(self.communicator), logs)


def _average_logs(comm: Any, logs: Any) -> None:
    """Replace each numeric scalar in ``logs`` (a Keras logs dict) by its mean over
    ``comm``'s processes, in place (one all-reduce for all of them)."""
    if comm is None or not logs:
        return
    keys = sorted(k for k, v in logs.items() if np.ndim(v) == 0 and _is_number(v))
    if not keys:
        return
    vals = np.array([float(logs[k]) for k in keys], dtype=np.float64)
    if comm.size > 1:
        vals = comm.allreduce(vals, op="mean")
    for k, v in zip(keys, vals, strict=True):
        logs[k] = float(v)


def _is_number(v: Any) -> bool:
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return True


class _Callbacks:
    """``pytfcomm.keras.callbacks``: classes built on the Keras in use (Keras 3 or tf-keras)."""

    def __getattr__(self, name: str) -> type:
        mixins = {
            "BroadcastGlobalVariablesCallback": _BroadcastMixin,
            "MetricAverageCallback": _MetricAverageMixin,
        }
        if name not in mixins:
            raise AttributeError(f"pytfcomm.keras.callbacks has no attribute {name!r}")
        cls = types.new_class(name, (mixins[name], _callback_base()))
        cls.__module__ = __name__
        cls.__doc__ = mixins[name].__doc__
        setattr(self, name, cls)
        return cls


callbacks = _Callbacks()
