"""The extended object of ``pytfcomm.MultiWorkerMirroredStrategy``: TF's, without TF's server.

TF 2.21's ``CollectiveAllReduceExtended._initialize_multi_worker`` configures
TF's collective ops and coordination service and starts TF's gRPC server,
which listens on ``*:PORT`` for the whole job and runs any op anyone sends it
(list devices, read files), unauthenticated. pytfcomm's strategy does every
cross-worker exchange on pytfcomm, so it needs none of that: this class sets
up what the strategy uses (the job from the cluster resolver, the chief,
dataset sharding, this worker's devices) and starts nothing. The worker's
devices keep their local names (``/job:localhost/replica:0/task:0/...``),
which are the only ones TF knows without a server.

The initial values of variables, which TF broadcasts from the chief with
its own collectives, are broadcast by pytfcomm from rank 0 (the chief).
Every distributed dataset (``experimental_distribute_dataset``,
``distribute_datasets_from_function``) goes through
:func:`~pytfcomm.tf.uneven_data.agree_on_batches`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf
from tensorflow.python.distribute import collective_all_reduce_strategy as tf_mwms
from tensorflow.python.distribute import cross_device_ops as tf_cdo
from tensorflow.python.distribute import (
    cross_device_utils,
    mirrored_strategy,
    multi_worker_util,
    numpy_dataset,
)
from tensorflow.python.trackable import base as trackable

from ..errors import ConfigError, InvalidArgumentError
from . import collectives as coll
from . import uneven_data
from .distributed import _as_bytes, _from_bytes

# The host of this worker's devices without a TF server: the eager context's own.
LOCAL_HOST = "/job:localhost/replica:0/task:0"
_NOT_SENDABLE = (tf.string, tf.variant, tf.resource)


def _device_suffix(name: str) -> tuple[str, int]:
    spec = tf.DeviceSpec.from_string(name if "/" in name else f"/device:{name}")
    if spec.device_type is None or spec.device_index is None:
        raise InvalidArgumentError(
            f"local_devices entries name one device, like 'CPU:1' or '/device:GPU:0'; got {name!r}"
        )
    return spec.device_type.upper(), int(spec.device_index)


def from_chief(value: tf.Tensor, communicator: Any) -> tf.Tensor:
    """Rank 0's ``value`` on every worker (a pytfcomm broadcast; raw bytes for other dtypes)."""
    if value.dtype in coll.SUPPORTED_DTYPES:
        return coll.broadcast(value, 0, communicator=communicator)
    if value.dtype in _NOT_SENDABLE:
        return value  # no bytes to send: each worker keeps its own, as initialised
    got = _from_bytes(coll.broadcast(_as_bytes(value), 0, communicator=communicator), value)
    return tf.ensure_shape(got, value.shape)  # a variable takes its shape from this


class Extended(tf_mwms.CollectiveAllReduceExtended):
    """TF's multi-worker extended strategy: no TF server, pytfcomm's cross-device ops.

    ``local_devices``: this worker's replicas (None: TF's choice).
    ``communicator``: the job's pytfcomm communicator. ``make_cross_device_ops``
    builds the CrossDeviceOps that replace TF's (for replicas and host tensors).
    """

    # pytfcomm notices lost or hung peers itself (closed socket, deadline);
    # TF's health checks would need TF's server.
    _enable_check_health = False

    def __init__(
        self,
        container: Any,
        *,
        local_devices: Any,
        communicator: Any,
        make_cross_device_ops: Callable[[], Any],
        **kwargs: Any,
    ) -> None:
        self._pytfcomm_local = [_device_suffix(d) for d in local_devices or ()]
        self._pytfcomm_comm = communicator
        self._pytfcomm_make_ops = make_cross_device_ops
        super().__init__(container, **kwargs)
        self._use_pytfcomm_ops()

    def _use_pytfcomm_ops(self) -> None:
        # TF 2.21 has no hook for custom cross-device ops in this strategy:
        # replace the two attributes TF routes every reduction through.
        self._cross_device_ops = self._pytfcomm_make_ops()
        self._host_cross_device_ops = self._pytfcomm_make_ops()

    def _configure(self, *args: Any, **kwargs: Any) -> None:
        # A cluster given here re-runs _initialize_multi_worker (TF's ops again).
        super()._configure(*args, **kwargs)
        self._use_pytfcomm_ops()

    def _initialize_local_devices(self, cluster_resolver: Any, worker_device: str) -> Any:
        if not self._pytfcomm_local:
            return super()._initialize_local_devices(cluster_resolver, worker_device)
        types = {t for t, _ in self._pytfcomm_local}
        if len(types) != 1:
            raise InvalidArgumentError(
                f"local_devices must all be of one type, got {sorted(types)}"
            )
        devices = tuple(f"{worker_device}/device:{t}:{i}" for t, i in self._pytfcomm_local)
        return devices, types.pop()

    def _initialize_multi_worker(self, cluster_resolver: Any) -> None:
        """What TF's version sets up, minus collective ops, coordination service and server."""
        spec = multi_worker_util.normalize_cluster_spec(cluster_resolver.cluster_spec())
        task_type, task_id = cluster_resolver.task_type, cluster_resolver.task_id
        if task_type is None or task_id is None:
            raise ConfigError(
                "the cluster resolver names no task_type and task_id for this "
                'worker; TF_CONFIG needs a "task" entry'
            )
        self._cluster_spec = spec
        self._task_type, self._task_id = task_type, task_id
        self._id_in_cluster = multi_worker_util.id_in_cluster(spec, task_type, task_id)
        self._num_workers = multi_worker_util.worker_count(spec, task_type)
        self._is_chief = multi_worker_util.is_chief(spec, task_type, task_id)
        self._check_job()
        self._worker_device = LOCAL_HOST
        self._host_input_device = numpy_dataset.SingleDevice(self._worker_device)
        local_devices, device_type = self._initialize_local_devices(
            cluster_resolver, self._worker_device
        )
        self._collective_keys = cross_device_utils.CollectiveKeys(
            group_key_start=1 + self._collective_key_base
        )
        # TF's constructor checks for its own class here; __init__ replaces both.
        self._cross_device_ops = tf_cdo.CollectiveAllReduce(
            devices=local_devices,
            group_size=len(local_devices) * self._num_workers,
            options=self._communication_options,
            collective_keys=self._collective_keys,
        )
        self._host_cross_device_ops = tf_cdo.CollectiveAllReduce(
            devices=[self._worker_device],
            group_size=self._num_workers,
            options=self._communication_options,
            collective_keys=self._collective_keys,
        )
        mirrored_strategy.MirroredExtended._initialize_single_worker(self, local_devices)
        self._num_devices_per_worker = len(local_devices)
        self._local_device_type = device_type
        self._rpc_layer = cluster_resolver.rpc_layer

    def _check_job(self) -> None:
        comm = self._pytfcomm_comm
        if self._num_workers != comm.size:
            raise ConfigError(
                f"TensorFlow's cluster has {self._num_workers} worker(s) but the pytfcomm job "
                f"has {comm.size} rank(s): give both the same job (one pytfcomm rank per TF "
                "worker; an evaluator must not join: docs/migrating.md#no-evaluator-task)"
            )
        if self._id_in_cluster != comm.rank:
            raise ConfigError(
                f"this worker is {self._task_type}:{self._task_id} (worker "
                f"{self._id_in_cluster} of TF's cluster) but pytfcomm rank {comm.rank}: the "
                "chief must be rank 0 and workers follow in TF_CONFIG order (pytfcomm.init() "
                "from the same TF_CONFIG does this)"
            )

    def _experimental_distribute_dataset(self, dataset: Any, options: Any) -> Any:
        distributed = super()._experimental_distribute_dataset(dataset, options)
        return uneven_data.agree_on_batches(distributed, self._pytfcomm_comm)

    def _distribute_datasets_from_function(self, dataset_fn: Any, options: Any) -> Any:
        # TF calls dataset_fn (once: one input pipeline per worker) before this
        # returns, so the worker's dataset and its cardinality exist here.
        distributed = super()._distribute_datasets_from_function(dataset_fn, options)
        return uneven_data.agree_on_batches(distributed, self._pytfcomm_comm)

    def _update_config_proto(self, config_proto: Any) -> Any:
        # TF adds a collective group leader and device filters that name
        # /job:<type>/task:<id>, devices of a TF server that does not run
        # here: a session would then see none of this worker's devices.
        spec, self._cluster_spec = self._cluster_spec, None
        try:
            return super()._update_config_proto(config_proto)
        finally:
            self._cluster_spec = spec

    def _get_variable_creator_initial_value(
        self, replica_id: int, device: Any, primary_var: Any, **kwargs: Any
    ) -> Any:
        if replica_id != 0 or self._num_workers == 1:
            return super()._get_variable_creator_initial_value(
                replica_id=replica_id, device=device, primary_var=primary_var, **kwargs
            )
        comm = self._pytfcomm_comm

        def initial_value_fn() -> tf.Tensor:
            # The first replica of each worker takes the chief's value; the
            # other local replicas copy the first (TF's MirroredExtended).
            with tf.device(device):
                value = kwargs["initial_value"]
                if callable(value):
                    value = value()
                if isinstance(value, trackable.CheckpointInitialValue):
                    value = value.wrapped_value
                value = tf.convert_to_tensor(value, dtype=kwargs.get("dtype", None))
                return from_chief(value, comm)

        return initial_value_fn

    def _to_own_device(self, pairs: Any) -> list[Any]:
        # ReplicaContext.all_reduce/all_gather with one replica per worker pass
        # the value's own device as its destination; inside a tf.function that
        # is often "" (no device scope), which TF rejects ("destinations can
        # not be empty"): the destination is then this worker's device.
        return [
            (v, d if tf_cdo.check_destinations(d) else self.worker_devices[0]) for v, d in pairs
        ]

    def _batch_reduce_to(self, reduce_op: Any, value_destination_pairs: Any, options: Any) -> Any:
        return super()._batch_reduce_to(
            reduce_op, self._to_own_device(value_destination_pairs), options
        )

    def _batch_gather_to(self, value_destination_pairs: Any, axis: Any, options: Any = None) -> Any:
        return super()._batch_gather_to(self._to_own_device(value_destination_pairs), axis, options)
