"""``pytfcomm.MultiWorkerMirroredStrategy``: TF's multi-worker strategy, reducing on pytfcomm.

TF's ``MultiWorkerMirroredStrategy`` keeps doing what it does well (one
replica per local device, variable creation and initial broadcast, dataset
sharding across workers, checkpointing); every cross-worker *reduction*
(gradient aggregation through ``merge_call``, ``strategy.reduce``,
``strategy.gather``, the dataset's end-of-data check) runs on a pytfcomm
:class:`~pytfcomm.Communicator` instead of TF's gRPC collectives.

TF 2.21 has no public hook for custom cross-device ops in this strategy, so
the two private attributes that hold them (``extended._cross_device_ops`` for
per-replica values and ``extended._host_cross_device_ops`` for per-worker
host tensors) are replaced right after construction; TF routes every
reduction through one of them (checked against TF 2.21's sources).
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.distribute import collective_all_reduce_strategy as tf_mwms
from tensorflow.python.distribute import collective_util, distribute_lib
from tensorflow.python.distribute.cluster_resolver import (
    SimpleClusterResolver,
    TFConfigClusterResolver,
)

from .. import _cluster
from .. import communicator as comm_lib
from ..errors import ConfigError, InvalidArgumentError
from . import collectives as coll
from .cross_device_ops import HierarchicalAllReduce, PytfcommCrossDeviceOps, RingAllReduce

_ALGORITHMS = {
    "auto": PytfcommCrossDeviceOps,
    "ring": RingAllReduce,
    "hierarchical": HierarchicalAllReduce,
}


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _tf_config_env(resolver: Any) -> dict[str, str]:
    """The environment ``pytfcomm.init`` would see if ``resolver`` were TF_CONFIG."""
    cluster = resolver.cluster_spec().as_dict()
    task = {"type": resolver.task_type, "index": int(resolver.task_id)}
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTFCOMM_RANK", "PYTFCOMM_SIZE", "TF_CONFIG")}
    env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": task})
    return env


def _join_from_resolver(resolver: Any) -> comm_lib.Communicator:
    spec = _cluster.resolve(environ=_tf_config_env(resolver))
    return comm_lib.init(spec.rank, spec.size, spec.addr)


def _resolver_from_communicator(comm: comm_lib.Communicator) -> Any:
    """A TF cluster for a job pytfcomm joined from PYTFCOMM_*, Slurm or MPI variables.

    Every worker picks a free port for TF's own server on the address its
    peers reach it by, and the (host, port) list is all-gathered through
    pytfcomm, so no TF_CONFIG needs writing.
    """
    host = comm._core.host_of(comm.rank)
    port = _free_port(host)
    ports = comm.allgather(np.array([port], dtype=np.int64))
    workers = [_cluster.format_addr(comm._core.host_of(r), int(ports[r]))
               for r in range(comm.size)]
    return SimpleClusterResolver(
        tf.train.ClusterSpec({"worker": workers}), task_type="worker", task_id=comm.rank,
        rpc_layer="grpc")


def _join(cluster_resolver: Any, communicator: Any) -> tuple[Any, Any]:
    """(pytfcomm communicator, TF cluster resolver or None) for this worker."""
    if cluster_resolver is not None:
        comm = communicator or comm_lib.default_communicator()
        return comm or _join_from_resolver(cluster_resolver), cluster_resolver
    if "TF_CONFIG" in os.environ:
        comm = communicator or comm_lib.default_communicator() or comm_lib.init()
        return comm, TFConfigClusterResolver()
    comm = communicator or comm_lib.default_communicator() or comm_lib.init()
    if comm.size == 1:
        return comm, None
    return comm, _resolver_from_communicator(comm)


def _is_nested(value: Any) -> bool:
    return isinstance(value, (tuple, list, dict))  # namedtuples are tuples


def _device_suffix(name: str) -> tuple[str, int]:
    spec = tf.DeviceSpec.from_string(name if "/" in name else f"/device:{name}")
    if spec.device_type is None or spec.device_index is None:
        raise InvalidArgumentError(
            f"local_devices entries name one device, like 'CPU:1' or '/device:GPU:0'; got {name!r}")
    return spec.device_type.upper(), int(spec.device_index)


class _Extended(tf_mwms.CollectiveAllReduceExtended):
    """TF's extended strategy, with an explicit list of this worker's devices."""

    def __init__(self, container: Any, *, local_devices: Any, **kwargs: Any) -> None:
        self._pytfcomm_local = [_device_suffix(d) for d in local_devices or ()]
        super().__init__(container, **kwargs)

    def _initialize_local_devices(self, cluster_resolver: Any, worker_device: str) -> Any:
        if not self._pytfcomm_local:
            return super()._initialize_local_devices(cluster_resolver, worker_device)
        types = {t for t, _ in self._pytfcomm_local}
        if len(types) != 1:
            raise InvalidArgumentError(
                f"local_devices must all be of one type, got {sorted(types)}")
        devices = tuple(f"{worker_device}/device:{t}:{i}" for t, i in self._pytfcomm_local)
        return devices, types.pop()


class MultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """A ``tf.distribute.MultiWorkerMirroredStrategy`` whose reductions run on pytfcomm.

    Use it where you would use TF's::

        strategy = pytfcomm.MultiWorkerMirroredStrategy()
        with strategy.scope():
            model = make_model(); model.compile(...)
        model.fit(dataset, ...)            # Keras 3, tf-keras, or a custom loop

    The job comes from ``cluster_resolver`` if given, else TF_CONFIG (what
    ``pytfcomm-run`` sets), else PYTFCOMM_*, Slurm or MPI variables (TF's
    cluster is then built through pytfcomm: each worker's TF server gets a
    free port). ``communicator``: an existing pytfcomm communicator of this
    job (default: the one :func:`pytfcomm.init` made, or a new one).

    ``algorithm`` is the cross-worker all-reduce: ``"auto"`` (by size and
    topology), ``"ring"`` (flat ring over all workers) or ``"hierarchical"``
    (within each host, then across hosts, then within hosts). Local replicas
    are always combined in-process first and every replica of every worker
    ends with bitwise-identical values. ``fusion_threshold_bytes`` and
    ``sparse_as_dense`` are those of :class:`pytfcomm.RingAllReduce`;
    ``communication_options.timeout_seconds`` bounds each collective.

    ``local_devices`` lists this worker's replicas (``["CPU:0", "CPU:1"]``
    for logical CPU devices; default: TF's choice, all GPUs or one CPU).

    ``strategy.reduce`` also accepts nested structures (tuples, lists, dicts
    of values), which Keras 3 ``fit`` passes and TF's strategy rejects.
    """

    def __init__(
        self,
        cluster_resolver: Any = None,
        communication_options: Any = None,
        *,
        communicator: Any = None,
        algorithm: str = "auto",
        fusion_threshold_bytes: int = coll.DEFAULT_FUSION_BYTES,
        sparse_as_dense: bool = False,
        local_devices: Any = None,
    ) -> None:
        if algorithm not in _ALGORITHMS:
            raise InvalidArgumentError(
                f"algorithm must be one of {', '.join(_ALGORITHMS)}, got {algorithm!r}")
        comm, resolver = _join(cluster_resolver, communicator)
        if communication_options is None:
            communication_options = collective_util.Options()
        # What tf.distribute.MultiWorkerMirroredStrategy.__init__ does, with
        # an extended object that can take an explicit device list.
        distribute_lib.Strategy.__init__(self, _Extended(
            self, cluster_resolver=resolver, communication_options=communication_options,
            local_devices=local_devices))
        ext = self.extended
        workers = int(ext._num_workers)
        if workers != comm.size:
            raise ConfigError(
                f"TensorFlow's cluster has {workers} worker(s) but the pytfcomm job has "
                f"{comm.size} rank(s): give both the same job (one pytfcomm rank per TF "
                "worker; an evaluator must not join)")
        make = _ALGORITHMS[algorithm]
        options = dict(fusion_threshold_bytes=fusion_threshold_bytes,
                       sparse_as_dense=sparse_as_dense, communicator=comm)
        ext._cross_device_ops = make(**options)
        ext._host_cross_device_ops = make(**options)
        self._pytfcomm_comm = comm

    @property
    def communicator(self) -> Any:
        """The pytfcomm communicator that carries this strategy's reductions."""
        return self._pytfcomm_comm

    def reduce(self, reduce_op: Any, value: Any, axis: int | None = None) -> Any:
        """``tf.distribute.Strategy.reduce``, also for nested structures of values.

        An ``axis`` given for scalar values (Keras 3 ``fit`` reduces its
        scalar logs with ``axis=0``) reduces across replicas only.
        """
        if _is_nested(value):
            return tf.nest.map_structure(lambda v: self._reduce_one(reduce_op, v, axis), value)
        return self._reduce_one(reduce_op, value, axis)

    def _reduce_one(self, reduce_op: Any, value: Any, axis: int | None) -> Any:
        if axis is not None and _rank(value) == 0:
            axis = None
        return super().reduce(reduce_op, value, axis)


def _rank(value: Any) -> int | None:
    """Rank of one replica's value (None when unknown)."""
    if isinstance(value, tf.distribute.DistributedValues):
        value = value.values[0]
    shape = getattr(value, "shape", None)
    return None if shape is None else shape.rank
