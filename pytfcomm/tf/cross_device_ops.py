"""``tf.distribute.CrossDeviceOps`` on pytfcomm: ``RingAllReduce`` and ``HierarchicalAllReduce``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf
from tensorflow.python.distribute import cross_device_ops as tf_cdo
from tensorflow.python.distribute import cross_device_utils, distribute_utils
from tensorflow.python.distribute import values as value_lib

from ..errors import InvalidArgumentError
from . import collectives as coll
from . import grad_accum

__all__ = ["HierarchicalAllReduce", "PytfcommCrossDeviceOps", "RingAllReduce"]

ReduceOp = tf.distribute.ReduceOp


def _devices(value: Any) -> tuple[str, ...]:
    return tuple(tf_cdo.get_devices_from(value))


def _mirrored(per_device: Sequence[Any]) -> Any:
    return distribute_utils.regroup(tuple(per_device), wrap_class=value_lib.Mirrored)


def _op(reduce_op: Any) -> str:
    if reduce_op == ReduceOp.SUM:
        return "sum"
    if reduce_op == ReduceOp.MEAN:
        return "mean"
    raise InvalidArgumentError(f"reduce_op must be ReduceOp.SUM or ReduceOp.MEAN, got {reduce_op}")


def _per_replica(value: Any) -> Any:
    if isinstance(value, value_lib.DistributedValues):
        return value
    if isinstance(value, (tf.Tensor, tf.IndexedSlices, tf.Variable)):
        return value_lib.PerReplica((value,))
    raise InvalidArgumentError(
        "pytfcomm CrossDeviceOps expects PerReplica values (or tensors), got "
        f"{type(value).__name__}"
    )


class PytfcommCrossDeviceOps(tf.distribute.CrossDeviceOps):
    """Base of pytfcomm's CrossDeviceOps (use RingAllReduce or HierarchicalAllReduce).

    How a batch is reduced (``batch_reduce_implementation``, which is what
    Keras 3 ``fit``, custom loops and tf-keras reach through ``merge_call``):
    all dense tensors of the batch, from all N local replicas, go into ONE
    ``PytfcommAllReduce`` op. Inside it the engine fuses tensors smaller than
    ``fusion_threshold_bytes`` into shared, 64-byte aligned buffers (one per
    dtype, filled up to the threshold; larger tensors get their own), reduces
    them in parallel cache-sized chunks, and hands every replica the same
    bytes. So 161 small gradients make one op and a handful of buffers, not
    161 collectives. ``CommunicationOptions.bytes_per_pack`` > 0 overrides
    the threshold for that call; ``timeout_seconds`` bounds the
    cross-process step.

    ``IndexedSlices`` are all-gathered (values and indices concatenated, a
    MEAN divides the values), unless ``sparse_as_dense=True`` densifies them
    into the dense batch. SUM and MEAN; float16/bfloat16/float32/float64,
    int8/uint8/int32/int64 and bool.

    With a pytfcomm Communicator of size > 1 (``communicator=``, or
    :func:`pytfcomm.tf.set_default_communicator`), the local result then goes
    through one cross-process all-reduce per fusion buffer (``algorithm``) and
    is handed to every local device.

    On GPUs, when the op library has GPU kernels (docs/gpu.md), the batch is
    one op per GPU instead, all reduced by one NCCL call on TF's streams
    (across the workers' GPUs too with a communicator); no fusion buffer.
    """

    _reduces_on_pytfcomm = True  # grad_accum.REDUCES_ON_PYTFCOMM

    _algorithm = "auto"

    def __init__(
        self,
        fusion_threshold_bytes: int = coll.DEFAULT_FUSION_BYTES,
        *,
        sparse_as_dense: bool = False,
        communicator: Any = None,
    ) -> None:
        if isinstance(fusion_threshold_bytes, bool) or not isinstance(fusion_threshold_bytes, int):
            raise InvalidArgumentError("fusion_threshold_bytes must be an int")
        if fusion_threshold_bytes < 0:
            raise InvalidArgumentError("fusion_threshold_bytes must be >= 0")
        super().__init__()
        grad_accum.install()  # Keras 3 gradient_accumulation_steps (tf/grad_accum.py)
        self.fusion_threshold_bytes = fusion_threshold_bytes
        self.sparse_as_dense = bool(sparse_as_dense)
        self.communicator = communicator

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(fusion_threshold_bytes={self.fusion_threshold_bytes}, "
            f"sparse_as_dense={self.sparse_as_dense})"
        )

    @property
    def _num_between_graph_workers(self) -> int:
        # TF skips reductions of a single replica when this is 1.
        comm = coll.active_communicator(self.communicator)
        return comm.size if comm is not None else 1

    # -- CrossDeviceOps contract ---------------------------------------------------------
    def reduce_implementation(
        self, reduce_op: Any, per_replica_value: Any, destinations: Any, options: Any
    ) -> Any:
        return self.batch_reduce_implementation(
            reduce_op, [(per_replica_value, destinations)], options
        )[0]

    def batch_reduce_implementation(
        self, reduce_op: Any, value_destination_pairs: Any, options: Any
    ) -> list[Any]:
        pairs = [(_per_replica(v), d) for v, d in value_destination_pairs]
        if not pairs:
            return []
        src = set(_devices(pairs[0][0]))
        if all(set(_devices(v)) == src and set(_devices(d)) == src for v, d in pairs):
            return self._batch_all_reduce(reduce_op, [v for v, _ in pairs], options)
        # Destinations differ from the sources: reduce where the values are,
        # then copy to the destinations (still one pytfcomm op per group).
        results = []
        for v, d in pairs:
            reduced = self._batch_all_reduce(reduce_op, [v], options)[0]
            results.append(tf_cdo.simple_broadcast(_first(reduced), d, always_mirrored=True))
        return results

    def broadcast_implementation(self, tensor: Any, destinations: Any) -> Any:
        if self._num_between_graph_workers == 1:
            # Within one process a broadcast is a copy to each device: no collective,
            # as TF's own CrossDeviceOps do (and so it also runs under XLA).
            return tf_cdo.simple_broadcast(tensor, destinations, always_mirrored=True)
        devices = _devices(destinations)
        coll.check_dtype(tensor.dtype)
        return _mirrored(coll.broadcast(tensor, 0, devices=devices, communicator=self.communicator))

    def _gather_implementation(
        self, per_replica_value: Any, destinations: Any, axis: int, options: Any
    ) -> Any:
        value = _per_replica(per_replica_value)
        if isinstance(value.values[0], tf.IndexedSlices):
            raise InvalidArgumentError("gather does not support IndexedSlices")
        vals = [tf.convert_to_tensor(v) for v in value.values]
        rank = vals[0].shape.rank
        if rank is None or not -rank <= axis < rank:
            raise InvalidArgumentError(f"axis {axis} is out of range for rank {rank}")
        axis %= rank
        perm = [axis, *[i for i in range(rank) if i != axis]]
        inv = [perm.index(i) for i in range(rank)]
        if axis:
            vals = [_on(v, lambda x: tf.transpose(x, perm)) for v in vals]
        gathered = coll.allgather(
            vals, communicator=self.communicator, timeout=_opt_timeout(options)
        )
        if axis:
            gathered = [_on(g, lambda x: tf.transpose(x, inv)) for g in gathered]
        if set(_devices(destinations)) != set(_devices(value)):
            return tf_cdo.simple_broadcast(gathered[0], destinations, always_mirrored=True)
        return _mirrored(gathered)

    # -- the batch all-reduce ------------------------------------------------------------
    def _batch_all_reduce(self, reduce_op: Any, per_replica_values: Any, options: Any) -> list[Any]:
        op = _op(reduce_op)
        values = list(per_replica_values)
        if op == "mean" and any(_mean_after_sum(v) for v in values):
            # TF's MEAN is the sum in the value's dtype divided by the number
            # of replicas with `/`: an integer mean is a float (float64 for
            # int32/int64), a float16 sum that overflows is inf. The engine's
            # mean keeps the dtype and divides before rounding, so these go
            # as a SUM and are divided here, exactly as TF does.
            summed = self._batch_all_reduce(ReduceOp.SUM, values, options)
            total = self._replicas_in_sync(values[0])
            return [_divide(s, total) for s in summed]
        if self.sparse_as_dense:
            values = [_densify(v) for v in values]
        dense, dense_idx, sparse, sparse_idx = cross_device_utils.split_by_sparsity(values)
        devices = _devices(values[0])
        n = len(devices)
        out_dense: list[Any] = []
        if dense:
            replicas = [[v.values[i] for v in dense] for i in range(n)]
            threshold = self.fusion_threshold_bytes
            if options is not None and options.bytes_per_pack:
                threshold = int(options.bytes_per_pack)
            reduced = coll.allreduce_replicas(
                replicas,
                op,
                devices=devices,
                fusion_threshold_bytes=threshold,
                communicator=self.communicator,
                algorithm=self._algorithm,
                timeout=_opt_timeout(options),
            )
            out_dense = [_mirrored([reduced[i][j] for i in range(n)]) for j in range(len(dense))]
        out_sparse = [self._sparse(op, v, devices, options) for v in sparse]
        return cross_device_utils.stitch_values(((out_dense, dense_idx), (out_sparse, sparse_idx)))

    def _replicas_in_sync(self, value: Any) -> int:
        comm = coll.active_communicator(self.communicator)
        return len(_devices(value)) * (comm.size if comm is not None else 1)

    def _sparse(self, op: str, value: Any, devices: tuple[str, ...], options: Any) -> Any:
        slices = value.values
        coll.check_dtype(slices[0].values.dtype, "IndexedSlices")
        timeout = _opt_timeout(options)
        vals = coll.allgather(
            [s.values for s in slices], communicator=self.communicator, timeout=timeout
        )
        idx = coll.allgather(
            [tf.cast(s.indices, tf.int64) for s in slices],
            communicator=self.communicator,
            timeout=timeout,
        )
        total = n = len(devices)
        comm = coll.active_communicator(self.communicator)
        if comm is not None:
            total = n * comm.size
        out = []
        for i, d in enumerate(devices):
            with tf.device(d):
                v = vals[i] / tf.cast(total, vals[i].dtype) if op == "mean" else vals[i]
                ind = tf.cast(idx[i], slices[i].indices.dtype)
                out.append(tf.IndexedSlices(v, ind, slices[i].dense_shape))
        return _mirrored(out)


def _dtype_of(value: Any) -> tf.DType:
    v = value.values[0] if isinstance(value, value_lib.DistributedValues) else value
    return v.values.dtype if isinstance(v, tf.IndexedSlices) else v.dtype


def _mean_after_sum(value: Any) -> bool:
    """Whether TF's MEAN of ``value`` differs from the engine's: integers and 16-bit floats."""
    dtype = _dtype_of(value)
    return dtype.is_integer or dtype in (tf.float16, tf.bfloat16)


def _divide(value: Any, n: int) -> Any:
    """``value / n`` on every device, as TF's reductions divide a MEAN."""
    per_device = value.values if isinstance(value, value_lib.DistributedValues) else (value,)
    out = []
    for v in per_device:
        with tf.device(_device_of_value(v)):
            if isinstance(v, tf.IndexedSlices):
                out.append(tf.IndexedSlices(v.values / n, v.indices, v.dense_shape))
            else:
                out.append(v / n)
    return _mirrored(out)


def _device_of_value(v: Any) -> str:
    return (v.values if isinstance(v, tf.IndexedSlices) else v).device


def _first(value: Any) -> Any:
    # regroup() hands back a single replica's value unwrapped.
    return value.values[0] if isinstance(value, value_lib.DistributedValues) else value


def _on(t: tf.Tensor, fn: Any) -> tf.Tensor:
    with tf.device(t.device):
        return fn(t)


def _densify(value: Any) -> Any:
    if not isinstance(value.values[0], tf.IndexedSlices):
        return value
    dense = [_on(v.values, lambda _, v=v: tf.convert_to_tensor(v)) for v in value.values]
    return value_lib.PerReplica(tuple(dense))


def _opt_timeout(options: Any) -> float | None:
    t = getattr(options, "timeout_seconds", None)
    return float(t) if t else None


class RingAllReduce(PytfcommCrossDeviceOps):
    """pytfcomm CrossDeviceOps whose cross-process step is the ring all-reduce.

    ``tf.distribute.MirroredStrategy(cross_device_ops=pytfcomm.RingAllReduce())``.
    Local devices are always combined in-process (see the base class for
    fusion, sparse handling and options).
    """

    _algorithm = "ring"


class HierarchicalAllReduce(PytfcommCrossDeviceOps):
    """pytfcomm CrossDeviceOps whose cross-process step is hierarchical.

    Local devices are combined in-process (that is the first level of the
    hierarchy); across processes the communicator reduces within each host,
    then across hosts, then broadcasts within hosts.
    """

    _algorithm = "hierarchical"
