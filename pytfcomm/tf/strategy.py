"""``pytfcomm.MultiWorkerMirroredStrategy``: TF's multi-worker strategy, reducing on pytfcomm.

TF's ``MultiWorkerMirroredStrategy`` keeps doing what it does well (one
replica per local device, variable creation, dataset sharding across
workers, checkpointing); every cross-worker exchange (gradient aggregation
through ``merge_call``, ``strategy.reduce``, ``strategy.gather``, the
dataset's end-of-data check, the chief's initial values of variables) runs
on a pytfcomm :class:`~pytfcomm.Communicator` instead of TF's gRPC
collectives. TF's gRPC server is therefore never started: it would listen on
every interface, unauthenticated, for the whole job (``_extended.py``).
"""

from __future__ import annotations

import json
import os
from typing import Any

import tensorflow as tf
from tensorflow.python.distribute import collective_util, distribute_lib
from tensorflow.python.distribute.cluster_resolver import (
    SimpleClusterResolver,
    TFConfigClusterResolver,
)

from .. import _cluster
from .. import communicator as comm_lib
from ..errors import ConfigError, InvalidArgumentError
from . import backup, callback_files, preemption, uneven_data
from . import collectives as coll
from ._extended import Extended
from .cross_device_ops import HierarchicalAllReduce, PytfcommCrossDeviceOps, RingAllReduce

__all__ = ["MultiWorkerMirroredStrategy"]

_ALGORITHMS = {
    "auto": PytfcommCrossDeviceOps,
    "ring": RingAllReduce,
    "hierarchical": HierarchicalAllReduce,
}


def _tf_config_env(resolver: Any) -> dict[str, str]:
    """The environment ``pytfcomm.init`` would see if ``resolver`` were TF_CONFIG."""
    cluster = resolver.cluster_spec().as_dict()
    task = {"type": resolver.task_type, "index": int(resolver.task_id)}
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTFCOMM_RANK", "PYTFCOMM_SIZE", "TF_CONFIG")
    }
    env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": task})
    return env


def _join_from_resolver(resolver: Any) -> comm_lib.Communicator:
    spec = _cluster.resolve(environ=_tf_config_env(resolver))
    return comm_lib.init(spec.rank, spec.size, spec.addr)


def _resolver_from_communicator(comm: comm_lib.Communicator) -> Any:
    """A TF cluster for a job pytfcomm joined from PYTFCOMM_*, Slurm or MPI variables.

    It only tells TF the job's shape (worker i on rank i's host) and this
    worker's task: no TF server runs, so no port is needed or opened (port 0
    in the addresses says so).
    """
    workers = [_cluster.format_addr(comm.host_of(r), 0) for r in range(comm.size)]
    return SimpleClusterResolver(
        tf.train.ClusterSpec({"worker": workers}),
        task_type="worker",
        task_id=comm.rank,
        rpc_layer="grpc",
    )


def _existing(communicator: Any) -> Any:
    """``communicator``, else the one the last ``pytfcomm.init`` made, if any.

    A closed job raises CommClosedError rather than quietly starting another
    (or a one-process) job; only a closed one-process default is replaced.
    """
    comm = communicator if communicator is not None else comm_lib.last_communicator()
    if comm is None or not comm.closed:
        return comm
    if comm.size > 1:
        raise coll.closed_error(comm)
    return comm if communicator is not None else None


def _join(cluster_resolver: Any, communicator: Any) -> tuple[Any, Any]:
    """(pytfcomm communicator, TF cluster resolver or None) for this worker."""
    comm = _existing(communicator)
    if cluster_resolver is not None:
        return comm or _join_from_resolver(cluster_resolver), cluster_resolver
    if "TF_CONFIG" in os.environ:
        return comm or comm_lib.init(), TFConfigClusterResolver()
    comm = comm or comm_lib.init()
    if comm.size == 1:
        return comm, None
    return comm, _resolver_from_communicator(comm)


def _is_nested(value: Any) -> bool:
    return isinstance(value, (tuple, list, dict))  # namedtuples are tuples


class MultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """A ``tf.distribute.MultiWorkerMirroredStrategy`` whose reductions run on pytfcomm.

    Use it where you would use TF's::

        strategy = pytfcomm.MultiWorkerMirroredStrategy()
        with strategy.scope():
            model = make_model(); model.compile(...)
        model.fit(dataset, ...)            # Keras 3, tf-keras, or a custom loop

    The job comes from ``cluster_resolver`` if given, else TF_CONFIG (what
    ``pytfcomm-run`` sets), else PYTFCOMM_*, Slurm or MPI variables (TF's
    cluster is then described from pytfcomm's ranks). ``communicator``: an
    existing pytfcomm communicator of this job (default: the one
    :func:`pytfcomm.init` made, or a new one).

    TF's gRPC server is not started and the ports TF_CONFIG lists stay
    closed: nothing but pytfcomm's authenticated bootstrap listens, and only
    while ranks join. The workers' devices keep local names
    (``/job:localhost/replica:0/task:0/device:CPU:0``).

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

    Workers may have a different number of batches: datasets from
    ``experimental_distribute_dataset`` and ``distribute_datasets_from_function``
    run to the end of every worker's data in Keras 3 ``fit``/``evaluate`` and
    custom loops alike; workers already out get empty batches
    (:mod:`pytfcomm.tf.uneven_data`).
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
                f"algorithm must be one of {', '.join(_ALGORITHMS)}, got {algorithm!r}"
            )
        comm, resolver = _join(cluster_resolver, communicator)
        if communication_options is None:
            communication_options = collective_util.Options()
        make = _ALGORITHMS[algorithm]
        options = dict(
            fusion_threshold_bytes=fusion_threshold_bytes,
            sparse_as_dense=sparse_as_dense,
            communicator=comm,
        )
        # What tf.distribute.MultiWorkerMirroredStrategy.__init__ does, with
        # an extended object that starts no TF server and reduces on pytfcomm.
        distribute_lib.Strategy.__init__(
            self,
            Extended(
                self,
                cluster_resolver=resolver,
                communication_options=communication_options,
                local_devices=local_devices,
                communicator=comm,
                make_cross_device_ops=lambda: make(**options),
            ),
        )
        workers = int(self.extended._num_workers)
        if workers != comm.size:  # a one-worker TF cluster for a bigger pytfcomm job
            raise ConfigError(
                f"TensorFlow's cluster has {workers} worker(s) but the pytfcomm job has "
                f"{comm.size} rank(s): give both the same job (one pytfcomm rank per TF "
                "worker; an evaluator must not join: docs/migrating.md#no-evaluator-task)"
            )
        self._pytfcomm_comm = comm
        backup.install()  # Keras 3 BackupAndRestore: only the chief writes (tf/backup.py)
        callback_files.install()  # Keras 3 ModelCheckpoint, TensorBoard: the same
        uneven_data.install()  # Keras 3 epochs end where every worker's data does
        preemption.register(self)  # TF's PreemptionCheckpointHandler agrees on pytfcomm

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
