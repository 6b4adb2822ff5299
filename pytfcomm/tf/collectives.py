"""pytfcomm's collectives as TensorFlow ops: ``allreduce``, ``broadcast``, ``allgather``.

Each accepts either one tensor (this process's contribution; combined across
the processes of a pytfcomm Communicator, or returned as is when there is
none) or a list with one tensor per local device (combined in-process by the
engine, then across processes). All three have gradients, so they can sit
inside a model, and work eagerly and inside ``tf.function``. Once the
communicator is closed they raise :class:`pytfcomm.CommClosedError` (ops
built before run into ``tf.errors.FailedPreconditionError``).

On GPUs (with an op library that has GPU kernels) an all-reduce over
replicas on distinct GPUs runs as one op per GPU, reduced together by NCCL
(``_gpu.py``); everything else keeps the one-op form.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from .._dtypes import OPS
from .._elastic_wire import EPOCH_VAR
from ..errors import CommClosedError, InvalidArgumentError
from . import _gpu, _ops
from ._ordering import ordered

__all__ = [
    "DEFAULT_FUSION_BYTES",
    "SUPPORTED_DTYPES",
    "allgather",
    "allreduce",
    "allreduce_replicas",
    "broadcast",
    "set_default_communicator",
]

SUPPORTED_DTYPES = (
    tf.float16,
    tf.bfloat16,
    tf.float32,
    tf.float64,
    tf.int8,
    tf.uint8,
    tf.int32,
    tf.int64,
    tf.bool,
)
DEFAULT_FUSION_BYTES = 4 << 20

_default_comm: Any = None
_HANDLE_RANKS: dict[int, int] = {}  # communicator handle -> this process's rank
# Communicators whose handle went into an op. The op library's registry holds
# them weakly: kept alive here, a graph built before its communicator closed
# finds it closed (FailedPrecondition) instead of missing (InvalidArgument).
_HANDLE_COMMS: dict[int, Any] = {}


def set_default_communicator(communicator: Any) -> None:
    """Make ``communicator`` (from :func:`pytfcomm.init`) the one TF ops use by default.

    With a communicator of size > 1, every collective first combines the local
    devices in-process, then runs one cross-process collective per fusion
    buffer through it, then hands the result to every local device.
    ``None`` goes back to purely local collectives.
    """
    global _default_comm
    _default_comm = communicator


def job_communicator(communicator: Any = None) -> Any:
    """``communicator``, else the default one, else the last one ``pytfcomm.init`` made.

    Closed or not; None when this process never made one.
    """
    if communicator is not None:
        return communicator
    if _default_comm is not None:
        return _default_comm
    from .. import communicator as comm_module

    return comm_module.last_communicator()


def active_communicator(communicator: Any = None) -> Any:
    """The open communicator of more than one process that TF ops use, or None to run locally.

    That is ``communicator``, else the default one (see :func:`job_communicator`);
    None when there is none or it has a single process. Raises
    :class:`pytfcomm.CommClosedError` when it is closed: a closed job's
    collectives must fail, not quietly become one-process ones.
    """
    comm = job_communicator(communicator)
    if comm is None or comm.size == 1:
        return None
    if comm.closed:
        raise closed_error(comm)
    return comm


def closed_error(comm: Any) -> CommClosedError:
    """The CommClosedError a collective on the closed ``comm`` raises (with its reason)."""
    try:
        # The core keeps why it closed (the first error) and says it only in
        # the error of a call on it; a barrier on a closed communicator fails
        # at once, before anything is sent.
        comm.barrier(timeout=1.0)
    except CommClosedError as exc:
        return CommClosedError(f"pytfcomm TF ops: {exc}{_replaced(comm)}")
    return CommClosedError(  # not reached: the communicator was closed
        "pytfcomm TF ops: this communicator is closed; create a new one with pytfcomm.init()"
        + _replaced(comm)
    )


def _replaced(comm: Any) -> str:
    """What to say when ``comm`` is an elastic job's communicator from before a re-forming."""
    from .. import communicator as comm_module

    now = comm_module.last_communicator()
    if now is None or now is comm or now.closed or os.environ.get(EPOCH_VAR, "0") in ("", "0"):
        return ""
    return (
        f" [this communicator (rank {comm.rank} of {comm.size}) was replaced by "
        f"pytfcomm.elastic.reform() (now rank {now.rank} of {now.size}): a strategy, "
        "CrossDeviceOps or tf.function made before reform() still uses it; make them "
        "again after reform() (docs/elastic.md)]"
    )


def comm_handle(communicator: Any = None) -> int:
    """The op attr for ``communicator`` (default: the default communicator); 0 = none.

    Raises CommClosedError for a closed communicator (see :func:`active_communicator`).
    """
    comm = active_communicator(communicator)
    if comm is None:
        return 0
    handle = comm.native_handle
    _HANDLE_RANKS[handle] = comm.rank
    _HANDLE_COMMS[handle] = comm
    return handle


def check_dtype(dtype: tf.DType, what: str = "tensor") -> None:
    """Raise InvalidArgumentError for dtypes the engine cannot combine."""
    if tf.as_dtype(dtype) not in SUPPORTED_DTYPES:
        names = ", ".join(d.name for d in SUPPORTED_DTYPES)
        raise InvalidArgumentError(
            f"pytfcomm cannot reduce a {what} of dtype {tf.as_dtype(dtype).name}; use one of "
            f"{names} (cast it first)"
        )


def _op_name(op: str) -> str:
    if not isinstance(op, str) or op.lower() not in OPS:
        raise InvalidArgumentError(f"op must be one of {', '.join(OPS)}, got {op!r}")
    return op.lower()


def _timeout(timeout: float | None) -> float:
    if timeout is None:
        return 0.0
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise InvalidArgumentError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)


def _device_of(t: Any) -> str:
    return getattr(t, "device", "") or ""


def allreduce_replicas(
    replicas: Sequence[Sequence[tf.Tensor]],
    op: str = "sum",
    *,
    devices: Sequence[str] | None = None,
    fusion_threshold_bytes: int = DEFAULT_FUSION_BYTES,
    communicator: Any = None,
    algorithm: str = "auto",
    timeout: float | None = None,
) -> list[list[tf.Tensor]]:
    """All-reduce M tensors held by each of N replicas with one op execution.

    ``replicas[i][j]`` is tensor j of replica i; every replica must hold the
    same shapes and dtypes. Returns the same layout, replica i's results
    placed on ``devices[i]`` (default: the device of ``replicas[i][0]``).
    """
    n = len(replicas)
    if n == 0:
        raise InvalidArgumentError("allreduce needs at least one replica")
    m = len(replicas[0])
    if any(len(r) != m for r in replicas):
        raise InvalidArgumentError("every replica must pass the same number of tensors")
    if m == 0:
        return [[] for _ in range(n)]
    flat = [tf.convert_to_tensor(t) for r in replicas for t in r]
    for t in flat[:m]:
        check_dtype(t.dtype)
    devices = list(devices) if devices is not None else [_device_of(r[0]) for r in replicas]
    handle = comm_handle(communicator)
    attrs = dict(
        reduce_op=_op_name(op),
        fusion_threshold_bytes=int(fusion_threshold_bytes),
        comm_handle=handle,
        algorithm=algorithm,
        timeout_seconds=_timeout(timeout),
    )
    if _gpu.use_group(devices):
        return _gpu.allreduce_group([flat[i * m : (i + 1) * m] for i in range(n)], devices, attrs)
    with tf.device(_gpu.place_ungrouped(devices[0])):
        outs = ordered(handle, lambda: _ops.ops().pytfcomm_all_reduce(flat, num_devices=n, **attrs))
    result = []
    for i in range(n):
        with tf.device(devices[i]):
            result.append([tf.identity(outs[i * m + j]) for j in range(m)])
    return result


def allreduce(
    tensor: Any,
    op: str = "sum",
    *,
    communicator: Any = None,
    algorithm: str = "auto",
    fusion_threshold_bytes: int = DEFAULT_FUSION_BYTES,
    timeout: float | None = None,
    name: str | None = None,
) -> Any:
    """All-reduce ``tensor`` (one tensor, or a list of one tensor per local device).

    ``op`` is ``"sum"``, ``"mean"``, ``"min"``, ``"max"`` or ``"prod"``. A
    list gives back a list, result i on input i's device, all bitwise
    identical. Gradients: the gradient of a sum (mean) all-reduce is the sum
    (mean) all-reduce of the incoming gradients.
    """
    with tf.name_scope(name or "pytfcomm_allreduce"):
        if isinstance(tensor, (list, tuple)):
            out = allreduce_replicas(
                [[t] for t in tensor],
                op,
                communicator=communicator,
                algorithm=algorithm,
                timeout=timeout,
                fusion_threshold_bytes=fusion_threshold_bytes,
            )
            return [r[0] for r in out]
        return allreduce_replicas(
            [[tensor]],
            op,
            communicator=communicator,
            algorithm=algorithm,
            timeout=timeout,
            fusion_threshold_bytes=fusion_threshold_bytes,
        )[0][0]


def broadcast(
    tensor: Any,
    root: int = 0,
    *,
    devices: Sequence[str] | None = None,
    communicator: Any = None,
    timeout: float | None = None,
    name: str | None = None,
) -> Any:
    """Process ``root``'s ``tensor`` on every process (and on every one of ``devices``).

    Returns one tensor, or a list (one per device) when ``devices`` is given.
    """
    if isinstance(root, bool) or not isinstance(root, int) or root < 0:
        raise InvalidArgumentError(f"root must be a non-negative int, got {root!r}")
    with tf.name_scope(name or "pytfcomm_broadcast"):
        t = tf.convert_to_tensor(tensor)
        check_dtype(t.dtype)
        devs = list(devices) if devices else [_device_of(t)]
        handle = comm_handle(communicator)
        with tf.device(_device_of(t)):
            outs = ordered(
                handle,
                lambda: _ops.ops().pytfcomm_broadcast(
                    t,
                    num_devices=len(devs),
                    root_rank=root,
                    comm_handle=handle,
                    timeout_seconds=_timeout(timeout),
                ),
            )
        result = []
        for d, o in zip(devs, outs, strict=False):
            with tf.device(d):
                result.append(tf.identity(o))
        return result if devices else result[0]


def allgather(
    tensor: Any,
    *,
    communicator: Any = None,
    timeout: float | None = None,
    name: str | None = None,
) -> Any:
    """Concatenate along axis 0: every local replica's tensor (a list) then every process's.

    A list gives back a list (one concatenation per input device). Only
    dimension 0 may differ, between replicas and between processes (the op
    first exchanges every process's row count, like ``MPI_Allgatherv``);
    processes whose dtype or other dimensions differ get
    ``tf.errors.FailedPreconditionError`` on every process.
    """
    with tf.name_scope(name or "pytfcomm_allgather"):
        as_list = isinstance(tensor, (list, tuple))
        ts = [tf.convert_to_tensor(t) for t in (tensor if as_list else [tensor])]
        if not ts:
            raise InvalidArgumentError("allgather needs at least one tensor")
        for t in ts:
            check_dtype(t.dtype)
            if t.shape.rank == 0:
                raise InvalidArgumentError("allgather needs tensors with at least one dimension")
        devs = [_device_of(t) for t in ts]
        handle = comm_handle(communicator)
        with tf.device(devs[0]):
            outs = ordered(
                handle,
                lambda: _ops.ops().pytfcomm_all_gather(
                    ts, comm_handle=handle, timeout_seconds=_timeout(timeout)
                ),
            )
        result = []
        for d, o in zip(devs, outs, strict=False):
            with tf.device(d):
                result.append(tf.identity(o))
        return result if as_list else result[0]


# -- gradients ---------------------------------------------------------------------------
def _dense(grads: Sequence[Any], like: Sequence[tf.Tensor]) -> list[tf.Tensor]:
    return [
        tf.zeros_like(o) if g is None else tf.convert_to_tensor(g)
        for g, o in zip(grads, like, strict=True)
    ]


def _op_device(op: Any) -> str:
    # Eager gradients get a mock op without a device; its outputs have one.
    return getattr(op, "device", None) or op.outputs[0].device


def _linear_reduce_op(op: tf.Operation, what: str) -> str:
    """The op's reduce_op when it has a gradient (sum, mean); LookupError otherwise."""
    reduce_op = op.get_attr("reduce_op").decode()
    if reduce_op not in ("sum", "mean"):
        raise LookupError(f"pytfcomm {what} with op {reduce_op!r} has no gradient")
    return reduce_op


@tf.RegisterGradient("PytfcommAllReduce")
def _allreduce_grad(op: tf.Operation, *grads: Any) -> list[tf.Tensor]:
    reduce_op = _linear_reduce_op(op, "all-reduce")
    handle = op.get_attr("comm_handle")
    attrs = dict(
        reduce_op=reduce_op,
        fusion_threshold_bytes=op.get_attr("fusion_threshold_bytes"),
        comm_handle=handle,
        algorithm=op.get_attr("algorithm").decode(),
        timeout_seconds=op.get_attr("timeout_seconds"),
    )
    group_size = _gpu.group_attr(op, "group_size", 1)
    if group_size > 1:
        # Each member's gradient is one member of the gradient's group.
        key = _gpu.grad_group_key(op)
        rank = _gpu.group_attr(op, "group_rank", 0)
        with tf.device(_op_device(op)):
            return ordered(
                handle,
                lambda: _ops.ops().pytfcomm_all_reduce(
                    _dense(grads, op.outputs),
                    num_devices=1,
                    group_size=group_size,
                    group_rank=rank,
                    group_key=key,
                    **attrs,
                ),
                group_key=key,
            )
    with tf.device(_op_device(op)):
        return ordered(
            handle,
            lambda: _ops.ops().pytfcomm_all_reduce(
                _dense(grads, op.outputs), num_devices=op.get_attr("num_devices"), **attrs
            ),
        )


@tf.RegisterGradient("PytfcommBroadcast")
def _broadcast_grad(op: tf.Operation, *grads: Any) -> tf.Tensor:
    with tf.device(_op_device(op)):
        total = tf.add_n(_dense(grads, op.outputs))
        handle = op.get_attr("comm_handle")
        if not handle:
            return total
        total = ordered(
            handle,
            lambda: _ops.ops().pytfcomm_all_reduce(
                [total],
                num_devices=1,
                reduce_op="sum",
                comm_handle=handle,
                timeout_seconds=op.get_attr("timeout_seconds"),
            ),
        )[0]
        is_root = _HANDLE_RANKS.get(handle, 0) == op.get_attr("root_rank")
        return total if is_root else tf.zeros_like(total)


@tf.RegisterGradient("PytfcommAllGather")
def _allgather_grad(op: tf.Operation, *grads: Any) -> list[tf.Tensor]:
    n = op.get_attr("num_devices")
    handle = op.get_attr("comm_handle")
    with tf.device(_op_device(op)):
        dense, k = _dense(grads, op.outputs), n
        if k > 1 and _gpu.is_gpu(_op_device(op)) and _ops.has_gpu_kernels():
            dense, k = [tf.add_n(dense)], 1  # the GPU kernel takes one replica per op
        total = ordered(
            handle,
            lambda: _ops.ops().pytfcomm_all_reduce(
                dense,
                num_devices=k,
                reduce_op="sum",
                comm_handle=handle,
                timeout_seconds=op.get_attr("timeout_seconds"),
            ),
        )[0]
        rows = [tf.shape(x)[0] for x in op.inputs]
        start = 0
        if handle:
            # This process's block starts after the rows of every lower rank,
            # which may differ from this process's (an uneven gather).
            mine = tf.cast(tf.reshape(tf.add_n(rows), [1]), tf.int64)
            counts = ordered(
                handle,
                lambda: _ops.ops().pytfcomm_all_gather(
                    [mine], comm_handle=handle, timeout_seconds=op.get_attr("timeout_seconds")
                ),
            )[0]
            rank = _HANDLE_RANKS.get(handle, 0)
            start = tf.cast(tf.reduce_sum(counts[:rank]), tf.int32)
        out = []
        for r in rows:
            out.append(total[start : start + r])
            start = start + r
        return out
