"""``pin_gpu``: one process per GPU, each rank seeing only its own GPU(s).

The classic layout of a multi-GPU job is one process per GPU (``pytfcomm-run -np 4``
on a 4-GPU machine): rank ``r`` of a host takes GPUs ``r*N .. r*N+N-1`` of that host.
:func:`pin_gpu` does that inside the process with ``tf.config.set_visible_devices``;
``pytfcomm-run --gpus-per-rank N`` does it from outside with ``CUDA_VISIBLE_DEVICES``
(docs/gpu.md, "GPU placement"). Both may be used together.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from .. import _cluster
from .._launch.gpus import GPUS_PER_RANK_VAR
from ..errors import ConfigError, InvalidArgumentError

__all__ = ["pin_gpu"]

_log = logging.getLogger("pytfcomm")


def pin_gpu(
    local_rank: int | None = None, gpus_per_rank: int = 1, *, memory_growth: bool = True
) -> list[Any]:
    """Make this rank's GPUs the only ones TensorFlow uses; returns them.

    Call it first thing, before TensorFlow creates a tensor, runs an op, builds a model or
    a strategy (TensorFlow fixes its devices then). Of the GPUs TensorFlow sees
    (``tf.config.list_physical_devices("GPU")``) this process keeps
    ``gpus[local_rank * gpus_per_rank : (local_rank + 1) * gpus_per_rank]``, with
    ``tf.config.set_visible_devices``, and returns them (``tf.config.PhysicalDevice``\\ s).

    ``local_rank`` defaults to this process's index on its host as the launcher gives it
    (``pytfcomm-run``'s PYTFCOMM_LOCAL_RANK, ``srun``'s SLURM_LOCALID, ``mpirun``'s local
    rank; 0 for a single-process job). Under ``pytfcomm-run --gpus-per-rank N`` the
    launcher already narrowed CUDA_VISIBLE_DEVICES to this rank's N GPUs, so all of them
    are kept (``gpus_per_rank`` must then be N too).

    ``memory_growth`` (default True) makes TensorFlow take GPU memory as it needs it
    instead of nearly all of it at start: NCCL, which pytfcomm's GPU collectives run on,
    allocates its buffers outside TensorFlow's allocator and fails when TensorFlow holds
    the whole GPU. GPUs split into logical devices keep their configuration.

    Without GPUs (a CPU build of TensorFlow, or none installed) it returns ``[]`` and
    changes nothing, so one script runs on CPU and GPU machines alike (logged at INFO).

    Raises ``InvalidArgumentError`` (a ``ValueError``) for a negative ``local_rank`` or a
    ``gpus_per_rank`` below 1; ``ConfigError`` when the host has fewer GPUs than its ranks
    need (naming local rank, local size and the GPUs seen) or when the local rank is
    unknown; ``RuntimeError`` when TensorFlow already fixed its devices to others.
    """
    _check_count("local_rank", local_rank, 0, allow_none=True)
    _check_count("gpus_per_rank", gpus_per_rank, 1)
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        _log.info("pytfcomm.tf.pin_gpu: TensorFlow sees no GPU; running on the CPU")
        return []
    index, local_size, launcher = _place(local_rank, gpus_per_rank, os.environ)
    start = index * gpus_per_rank
    need = max(local_size or 0, index + 1) * gpus_per_rank
    if len(gpus) < need:
        raise ConfigError(_too_few(index, local_size, gpus_per_rank, gpus, launcher))
    mine = gpus[start : start + gpus_per_rank]
    try:
        tf.config.set_visible_devices(mine, "GPU")
        for gpu in mine:
            if memory_growth and tf.config.get_logical_device_configuration(gpu) is None:
                tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError as exc:
        raise RuntimeError(
            f"pytfcomm.tf.pin_gpu() came too late: TensorFlow has already initialised its "
            f"devices ({exc}). Call pin_gpu() right after importing TensorFlow, before any "
            "tensor, op, model or strategy is created (or launch with pytfcomm-run "
            "--gpus-per-rank N, which needs no call)."
        ) from exc
    return list(tf.config.get_visible_devices("GPU"))


def _check_count(name: str, value: object, low: int, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidArgumentError(f"pin_gpu: {name} must be an integer >= {low}, got {value!r}")


def _place(
    local_rank: int | None, gpus_per_rank: int, env: Mapping[str, str]
) -> tuple[int, int | None, int | None]:
    """(this rank's slot among the visible GPUs, ranks sharing them or None if unknown,
    the launcher's --gpus-per-rank or None)."""
    launcher = _launcher_gpus(env)
    if launcher is not None and launcher != gpus_per_rank:
        raise ConfigError(
            f"pytfcomm-run --gpus-per-rank {launcher} gave this rank {launcher} GPU(s) "
            f"(CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES', '')!r}) but pin_gpu() "
            f"asks for gpus_per_rank={gpus_per_rank}: pass the same number to both."
        )
    spec = _cluster.resolve(environ=env)
    if local_rank is not None:
        return local_rank, spec.local_size, launcher
    if launcher is not None:  # the launcher already handed out the GPUs
        return 0, 1, launcher
    if spec.local_rank is not None:
        return spec.local_rank, spec.local_size, None
    if spec.size == 1:
        return 0, 1, None
    raise ConfigError(
        f"pin_gpu: this process's local rank is unknown (rank {spec.rank} of {spec.size}, "
        f"from {spec.source}, which does not say which ranks share a host): launch with "
        "pytfcomm-run, srun or mpirun, or pass pin_gpu(local_rank=...)."
    )


def _launcher_gpus(env: Mapping[str, str]) -> int | None:
    raw = env.get(GPUS_PER_RANK_VAR, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(
            f"{GPUS_PER_RANK_VAR}={raw!r} is not a positive integer (pytfcomm-run sets it "
            "with --gpus-per-rank; unset it otherwise)."
        )
    return value


def _too_few(
    index: int, local_size: int | None, per_rank: int, gpus: list[Any], launcher: int | None
) -> str:
    names = ", ".join(g.name for g in gpus)
    if local_size is None:
        last = (index + 1) * per_rank
        ranks = f"local rank {index} (local size unknown) needs at least {last} GPUs on this host"
    else:
        ranks = (
            f"local rank {index} of local size {local_size} with gpus_per_rank={per_rank} "
            f"needs {local_size * per_rank} GPUs on this host"
        )
    hint = (
        "start fewer ranks on this host, lower gpus_per_rank, or make more GPUs visible "
        "(CUDA_VISIBLE_DEVICES)"
    )
    if launcher is not None:
        hint = "pytfcomm-run --gpus-per-rank already gave this rank its GPUs: call pin_gpu() "
        hint += "without local_rank"
    return f"pin_gpu: {ranks}, but TensorFlow sees {len(gpus)} ({names}): {hint}."
