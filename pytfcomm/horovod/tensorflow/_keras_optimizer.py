"""Horovod's Keras ``DistributedOptimizer`` and ``PartialDistributedOptimizer`` on pytfcomm.

Shared by ``pytfcomm.horovod.tensorflow`` (its ``DistributedOptimizer`` of a Keras
optimizer) and ``pytfcomm.horovod.tensorflow.keras``, which re-exports them; this module
imports neither, so neither import closes a cycle.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from .._basics import Average, global_process_set
from ._gradients import make_allreduce_grads_fn, reduce_filtered, var_key
from .compression import Compression

__all__ = ["DistributedOptimizer", "PartialDistributedOptimizer"]


class _Setup:
    """What a distributed optimizer needs (an attribute Keras' tracking leaves alone)."""

    def __init__(
        self,
        allreduce_grads: Any,
        backward_passes_per_step: int,
        average_aggregated_gradients: bool,
        scale_local_gradients: bool,
        sparse_as_dense: bool,
    ) -> None:
        self.allreduce_grads = allreduce_grads
        self.passes = int(backward_passes_per_step)
        self.average = bool(average_aggregated_gradients)
        self.scale_local = bool(scale_local_gradients)
        self.sparse_as_dense = bool(sparse_as_dense)
        self.local: dict[int, Any] = {}
        self.accumulators: dict[int, tf.Variable] = {}
        self.counter: tf.Variable | None = None
        # The gradients _compute_gradients last returned, already all-reduced: held (not
        # their ids, which a freed tensor's successor could reuse) so that applying
        # exactly them does not all-reduce them again.
        self.reduced: list[Any] = []


class _AggregationView:
    """What Horovod's ``optimizer._agg_helper`` shows: ``counter``, the backward passes
    since the last all-reduce (``backward_passes_per_step`` > 1 only)."""

    def __init__(self, counter: tf.Variable) -> None:
        self.counter = counter


class _CallableList(list):
    """A list that returns itself when called (Horovod's CallableList)."""

    def __call__(self) -> list:
        return self


def _is_tf_keras(obj: Any) -> bool:
    return any(c.__module__.startswith("tf_keras") for c in type(obj).__mro__)


def _reduce(self: Any, grads: list[Any], variables: list[Any]) -> list[Any]:
    s = self._hvd_setup
    done, s.reduced = s.reduced, []
    if done and len(done) == len(grads) and all(g is r for g, r in zip(grads, done, strict=True)):
        return list(grads)  # _compute_gradients' result (Horovod's minimize): reduced once
    return reduce_filtered(s.allreduce_grads, grads, variables, s.local, s.scale_local)


def _compute_gradients(
    self: Any, loss: Any, var_list: Any, grad_loss: Any = None, tape: Any = None
) -> list[tuple[Any, Any]]:
    """Horovod's: ``(gradient, variable)`` pairs of ``loss`` (a tensor recorded on
    ``tape``, or a callable) over ``var_list``, all-reduced as the optimizer reduces
    them. With ``backward_passes_per_step`` > 1 they stay local: ``apply_gradients``
    accumulates them and all-reduces every N-th call. Applying exactly these pairs
    does not all-reduce them again."""
    tape = tf.GradientTape() if tape is None else tape
    if callable(loss):
        with tape:
            if not callable(var_list):
                tape.watch(var_list)
            loss = loss()
    if callable(var_list):
        var_list = var_list()
    variables = list(tf.nest.flatten(var_list))
    grads = list(tape.gradient(loss, variables, grad_loss))
    s = self._hvd_setup
    if s.passes > 1:
        return list(zip(grads, variables, strict=True))
    reduced = _reduce(self, grads, variables)
    s.reduced = list(reduced)
    return list(zip(reduced, variables, strict=True))


def _compute_gradients_public(self: Any, loss: Any, var_list: Any, tape: Any = None) -> Any:
    """Horovod's ``compute_gradients``: :func:`_compute_gradients` without ``grad_loss``."""
    return _compute_gradients(self, loss, var_list, None, tape)


def _agg_helper(self: Any) -> _AggregationView | None:
    """Horovod's aggregation helper, as far as its tests read it (its ``counter``);
    None without ``backward_passes_per_step`` > 1, as Horovod's."""
    s = self._hvd_setup
    if s.passes <= 1:
        return None
    _accumulators(s, [])
    assert s.counter is not None
    return _AggregationView(s.counter)


def _register_local_var(self: Any, var: Any) -> None:
    """Keep ``var``'s gradient local (not all-reduced; divided by size() when
    ``scale_local_gradients``)."""
    self._hvd_setup.local[var_key(var)] = var


def _accumulators(s: _Setup, variables: list[Any]) -> list[tf.Variable]:
    """One zero-initialised accumulator per variable (made once, outside any tf.function)."""
    missing = [v for v in variables if var_key(v) not in s.accumulators]
    if missing or s.counter is None:
        with tf.init_scope():
            for v in missing:
                s.accumulators[var_key(v)] = tf.Variable(
                    tf.zeros(tuple(v.shape), v.dtype), trainable=False
                )
            if s.counter is None:
                s.counter = tf.Variable(0, dtype=tf.int64, trainable=False)
    return [s.accumulators[var_key(v)] for v in variables]


def _aggregate_then_apply(
    self: Any, grads: list[Any], variables: list[Any], apply_fn: Callable[[list[Any]], Any]
) -> Any:
    """Horovod 0.28.1's ``backward_passes_per_step`` N: add this call's gradients to
    local accumulators; on every N-th call all-reduce the sums (divided by N when
    ``average_aggregated_gradients``), ``apply_fn`` them and zero the accumulators;
    on the other calls only advance ``iterations`` (so it counts every call, as
    Horovod's). ``IndexedSlices`` are added densely. Returns a bool tensor: applied."""
    s = self._hvd_setup
    accs = _accumulators(s, variables)
    with tf.init_scope():
        iterations = self.iterations  # tf-keras legacy optimizers make it lazily: not in a branch
    present = [g is not None for g in grads]
    for acc, g in zip(accs, grads, strict=True):
        if g is not None:
            acc.assign_add(tf.cast(tf.convert_to_tensor(g), acc.dtype))
    counter = s.counter
    assert counter is not None  # _accumulators made it
    count = counter.assign_add(1)

    def step() -> tf.Tensor:
        sums = [a.read_value() if there else None for a, there in zip(accs, present, strict=True)]
        reduced = _reduce(self, sums, variables)
        if s.average:
            reduced = [None if g is None else g / s.passes for g in reduced]
        apply_fn(reduced)
        for acc in accs:
            acc.assign(tf.zeros_like(acc))
        counter.assign(0)  # Horovod's counter: backward passes since the last all-reduce
        return tf.constant(True)

    def skip() -> tf.Tensor:
        iterations.assign_add(1)
        return tf.constant(False)

    boundary = tf.equal(count % s.passes, 0)
    if tf.executing_eagerly():
        return step() if bool(boundary) else skip()
    return tf.cond(boundary, step, skip)


def _distributed_class(base: type[Any], tf_keras: bool) -> type[Any]:
    if tf_keras:

        def apply_gradients(self: Any, grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
            pairs = list(grads_and_vars)
            variables = [v for _, v in pairs]
            grads = [g for g, _ in pairs]
            if self._hvd_setup.passes > 1:

                def apply_fn(reduced: list[Any]) -> Any:
                    pairs = list(zip(reduced, variables, strict=True))
                    return base.apply_gradients(self, pairs, *args, **kwargs)

                _aggregate_then_apply(self, grads, variables, apply_fn)
                return self.iterations
            pairs = list(zip(_reduce(self, grads, variables), variables, strict=True))
            return base.apply_gradients(self, pairs, *args, **kwargs)

        body: dict[str, Any] = {"apply_gradients": apply_gradients}
    else:

        def apply(self: Any, grads: Any, trainable_variables: Any = None) -> Any:
            grads = list(grads)
            if trainable_variables is None:
                if not self.built:
                    raise ValueError("apply() needs trainable_variables before build()")
                variables = list(self._trainable_variables)
            else:
                variables = list(trainable_variables)
            if not self.built:
                self.build(variables)
            if self._hvd_setup.passes > 1:
                _aggregate_then_apply(
                    self, grads, variables, lambda reduced: base.apply(self, reduced, variables)
                )
                return None
            return base.apply(self, _reduce(self, grads, variables), variables)

        body = {"apply": apply}
        variables_property = getattr(base, "variables", None)
        if isinstance(variables_property, property) and variables_property.fget is not None:
            # Horovod (TF >= 2.12): opt.variables and opt.variables() both work.
            fget = variables_property.fget
            body["variables"] = property(lambda self: _CallableList(fget(self)))
    body["register_local_var"] = _register_local_var
    body["_compute_gradients"] = _compute_gradients
    body["compute_gradients"] = _compute_gradients_public
    body["_agg_helper"] = property(_agg_helper)
    # Horovod keeps the class name, so a saved model names the plain optimizer
    # and hvd.load_model wraps it again.
    cls: type[Any] = types.new_class(base.__name__, (base,), exec_body=lambda ns: ns.update(body))
    cls.__module__ = base.__module__
    cls.__qualname__ = base.__qualname__
    cls._hvd_distributed = True
    return cls


def _setup(optimizer: Any, setup: _Setup) -> Any:
    base = type(optimizer)
    if getattr(base, "_hvd_distributed", False):
        base = base.__mro__[1]
    tf_keras = _is_tf_keras(optimizer)
    if not tf_keras:
        import keras

        if not isinstance(optimizer, keras.optimizers.Optimizer):
            raise ValueError(
                "DistributedOptimizer wraps a Keras 3 or tf-keras optimizer, got "
                f"{base.__module__}.{base.__name__}"
            )
    return _distributed_class(base, tf_keras)


def _make_setup(
    compression: Any,
    sparse_as_dense: bool,
    gradient_predivide_factor: float,
    op: Any,
    backward_passes_per_step: int,
    average_aggregated_gradients: bool,
    process_set: Any,
    scale_local_gradients: bool,
) -> _Setup:
    if backward_passes_per_step < 1:
        raise ValueError(f"backward_passes_per_step must be >= 1, got {backward_passes_per_step}")
    fn = make_allreduce_grads_fn(
        compression, sparse_as_dense, op, gradient_predivide_factor, process_set
    )
    return _Setup(
        fn,
        backward_passes_per_step,
        average_aggregated_gradients,
        scale_local_gradients,
        sparse_as_dense,
    )


def DistributedOptimizer(
    optimizer: Any,
    name: str | None = None,
    device_dense: str = "",
    device_sparse: str = "",
    compression: Any = Compression.none,
    sparse_as_dense: bool = False,
    gradient_predivide_factor: float = 1.0,
    op: Any = Average,
    backward_passes_per_step: int = 1,
    average_aggregated_gradients: bool = False,
    num_groups: int = 0,
    groups: Any = None,
    process_set: Any = global_process_set,
    scale_local_gradients: bool = True,
) -> Any:
    """A copy of ``optimizer`` (same class name, built from its config) whose updates use
    gradients averaged (``op``) over all processes; with ``op=hvd.Adasum`` combined by
    Adasum, each gradient its own vector and not divided by size(), as Horovod's.

    ``backward_passes_per_step`` N > 1 adds N calls' gradients locally and
    all-reduces (and applies) on every N-th call only; divided by N first when
    ``average_aggregated_gradients``. ``register_local_var(var)`` keeps a
    variable's gradient local. ``name``, ``device_*``, ``num_groups`` and
    ``groups`` are accepted (every dense gradient goes into one fused all-reduce).
    """
    setup = _make_setup(
        compression,
        sparse_as_dense,
        gradient_predivide_factor,
        op,
        backward_passes_per_step,
        average_aggregated_gradients,
        process_set,
        scale_local_gradients,
    )
    cls = _setup(optimizer, setup)
    wrapped = cls.from_config(optimizer.get_config())
    object.__setattr__(wrapped, "_hvd_setup", setup)
    return wrapped


def PartialDistributedOptimizer(
    optimizer: Any,
    name: str | None = None,
    device_dense: str = "",
    device_sparse: str = "",
    compression: Any = Compression.none,
    sparse_as_dense: bool = False,
    gradient_predivide_factor: float = 1.0,
    op: Any = Average,
    backward_passes_per_step: int = 1,
    average_aggregated_gradients: bool = False,
    groups: Any = None,
    process_set: Any = global_process_set,
    local_layers: Any = None,
    scale_local_gradients: bool = True,
) -> Any:
    """:func:`DistributedOptimizer` whose ``local_layers``' weights keep local gradients."""
    opt = DistributedOptimizer(
        optimizer,
        name=name,
        compression=compression,
        sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor,
        op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients,
        groups=groups,
        process_set=process_set,
        scale_local_gradients=scale_local_gradients,
    )
    layers = [] if local_layers is None else local_layers
    for layer in layers if isinstance(layers, (list, tuple)) else [layers]:
        for var in layer.trainable_weights:
            opt.register_local_var(var)
    return opt
