"""Keras 3 ``gradient_accumulation_steps`` under strategies that reduce on pytfcomm.

Keras 3 accumulates inside a ``tf.cond`` (``BaseOptimizer._backend_apply_gradients``):
every N-th step applies ``(g + accumulated) / N``, the other steps add ``g`` to the
accumulators. Its TF optimizer reaches the strategy from both branches through
``merge_call`` (the gradient all-reduce, the variable updates, the accumulator
increments), and ``merge_call`` cannot run inside a ``tf.cond``: ``fit`` fails with
"merge_call called while defining a new graph", under every strategy, TF's own
included.

:func:`install` (called when a pytfcomm CrossDeviceOps is made: pytfcomm's
``MultiWorkerMirroredStrategy``, or ``tf.distribute.MirroredStrategy(...,
cross_device_ops=pytfcomm.RingAllReduce())``) changes that, for optimizers with
``gradient_accumulation_steps`` set whose strategy reduces on pytfcomm, and only
there:

* every step all-reduces (SUM) its gradients first, in replica context and outside
  the ``tf.cond``, as a step without accumulation does. A sum is linear, so
  accumulating all-reduced gradients equals all-reducing accumulated ones; every
  replica of every worker then holds the same, bitwise identical, gradients;
* Keras' own ``_backend_apply_gradients`` then runs unchanged (the cond, the
  ``/ N``, clipping, weight decay, the accumulator reset), with the three TF hooks
  it calls inside the cond doing replica-local work instead of ``merge_call``:
  each replica updates its own copy of the variables and accumulators with the
  same values (Keras' backend-independent versions of the hooks). No collective
  runs inside the cond, so workers can never wait on one another there.

Clipping (``clipnorm``, ``global_clipnorm``) therefore acts on the all-reduced
gradient, as it does in one process. Optimizers without accumulation, and every
other strategy, keep Keras' code as it is.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Iterator
from typing import Any

import tensorflow as tf

from ._which_keras import keras3_module_if_loaded

__all__ = ["install"]

_MODULE = "keras.src.backend.tensorflow.optimizer"
_MARK = "_pytfcomm_grad_accum"
#: The class attribute, true on pytfcomm's CrossDeviceOps, that says a strategy's
#: reductions run on pytfcomm (cross_device_ops.py imports this module, so this one
#: names no class of it).
REDUCES_ON_PYTFCOMM = "_reduces_on_pytfcomm"
_HOOKS = (
    "_backend_apply_gradients",
    "_backend_update_step",
    "_backend_increment_gradient_accumulators",
    "_apply_weight_decay",
    "_all_reduce_sum_gradients",
)
# Set while a replica's gradients are already all-reduced: Keras' cond is traced
# in the replica's own thread (MirroredStrategy runs one thread per replica).
_reduced = threading.local()


def _reduces_on_pytfcomm(optimizer: Any) -> bool:
    """Whether ``optimizer`` accumulates and runs in a replica of a pytfcomm strategy."""
    if not getattr(optimizer, "gradient_accumulation_steps", None):
        return False
    if not tf.distribute.has_strategy() or tf.distribute.in_cross_replica_context():
        return False
    extended = tf.distribute.get_strategy().extended
    ops = getattr(extended, "_cross_device_ops", None)
    # Without merge_call (XLA on GPUs) TF reduces with its own collectives.
    return bool(getattr(ops, REDUCES_ON_PYTFCOMM, False)) and extended._use_merge_call()


@contextlib.contextmanager
def _replica_local() -> Iterator[None]:
    _reduced.on = True
    try:
        yield
    finally:
        _reduced.on = False


def _local() -> bool:
    return getattr(_reduced, "on", False)


def install() -> bool:
    """Make Keras 3 gradient accumulation work on pytfcomm's reductions (idempotent).

    Patches nothing (and imports nothing) unless Keras 3 is already imported
    (``import tensorflow`` does that unless ``TF_USE_LEGACY_KERAS=1``). Returns
    whether Keras' TF optimizer is patched.
    """
    mod = keras3_module_if_loaded(_MODULE)
    if mod is None:
        return False
    cls = getattr(mod, "TFOptimizer", None)
    if cls is None:
        return False
    if getattr(cls, _MARK, False):
        return True
    if not all(callable(getattr(cls, n, None)) for n in _HOOKS):
        return False  # another Keras than the one this was written against: leave it
    _patch(cls, importlib.import_module("keras.src.optimizers.base_optimizer").BaseOptimizer)
    return True


def _patch(cls: Any, base: Any) -> None:
    apply_gradients = cls._backend_apply_gradients
    update_step = cls._backend_update_step
    increment = cls._backend_increment_gradient_accumulators
    weight_decay = cls._apply_weight_decay

    def _backend_apply_gradients(self: Any, grads: Any, trainable_variables: Any) -> Any:
        if not _reduces_on_pytfcomm(self):
            return apply_gradients(self, grads, trainable_variables)
        variables = list(trainable_variables)
        reduced = self._all_reduce_sum_gradients(list(zip(grads, variables, strict=True)))
        with _replica_local():
            return apply_gradients(self, [g for g, _ in reduced], variables)

    def _backend_update_step(self: Any, grads: Any, variables: Any, learning_rate: Any) -> Any:
        if _local():
            return base._backend_update_step(self, grads, variables, learning_rate)
        return update_step(self, grads, variables, learning_rate)

    def _backend_increment_gradient_accumulators(self: Any, grads: Any, acc_grads: Any) -> Any:
        if _local():
            return base._backend_increment_gradient_accumulators(self, grads, acc_grads)
        return increment(self, grads, acc_grads)

    def _apply_weight_decay(self: Any, variables: Any) -> Any:
        if _local():
            return base._apply_weight_decay(self, variables)
        return weight_decay(self, variables)

    cls._backend_apply_gradients = _backend_apply_gradients
    cls._backend_update_step = _backend_update_step
    cls._backend_increment_gradient_accumulators = _backend_increment_gradient_accumulators
    cls._apply_weight_decay = _apply_weight_decay
    setattr(cls, _MARK, True)
