"""The entry point: :func:`resolve` asks each source in turn, highest precedence first."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from pytfcomm.errors import ConfigError

from ._env import _get
from .explicit import _from_explicit, _from_pytfcomm_env
from .job_label import job_label
from .mpi import _from_mpi, _mpi_identity
from .slurm import _from_slurm, _slurm_identity
from .spec import ClusterSpec, _make_spec
from .tf_config import _from_tf_config
from .torchrun import _from_torchrun, _torchrun_identity


def resolve(
    rank: int | None = None,
    size: int | None = None,
    addr: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ClusterSpec:
    """Decide this process's rank, the job size, rank 0's address and what to bind.

    Explicit arguments win: give ``rank``, ``size`` and ``addr`` together (``addr`` may be
    left out when ``size == 1``).  With none given, the environment (``environ``, default
    ``os.environ``) is read in this order: PYTFCOMM_RANK/SIZE/ADDR, TF_CONFIG, torchrun-style
    RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, Slurm (srun tasks), MPI launchers; when none
    is present the job is a single process.
    PYTFCOMM_ADDR also overrides the address derived from TF_CONFIG, torchrun, Slurm or MPI;
    PYTFCOMM_PORT the derived port; PYTFCOMM_BIND_HOST the bind host; PYTFCOMM_HOST_ID the
    host identity.  Raises ConfigError, naming the argument or variable at fault.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    spec = _resolve(rank, size, addr, env)
    return dataclasses.replace(spec, job=job_label(spec.source, env))


def _resolve(
    rank: int | None, size: int | None, addr: str | None, env: Mapping[str, str]
) -> ClusterSpec:
    if rank is not None or size is not None or addr is not None:
        return _from_explicit(rank, size, addr, env)

    spec = _from_pytfcomm_env(env)
    if spec is not None:
        return spec
    spec = _from_tf_config(env)
    if spec is not None:
        return spec
    torchrun = _torchrun_identity(env)
    if torchrun is not None:
        return _from_torchrun(torchrun, env)

    slurm = _slurm_identity(env)
    mpi = _mpi_identity(env)
    # mpirun inside a Slurm allocation: the ranks inherit the Slurm variables of the step
    # that started the MPI daemons, which describe that step, not the MPI job.
    if slurm is not None and (mpi is None or (mpi.rank, mpi.size) == (slurm.rank, slurm.size)):
        return _from_slurm(slurm, env)
    if mpi is not None:
        return _from_mpi(mpi, env)

    if _get(env, "PYTFCOMM_ADDR") is not None:
        raise ConfigError(
            "PYTFCOMM_ADDR is set but this process's rank and the job size are unknown "
            "(no PYTFCOMM_RANK/PYTFCOMM_SIZE, TF_CONFIG, RANK/WORLD_SIZE, srun or MPI launcher "
            "found): set "
            "PYTFCOMM_RANK and PYTFCOMM_SIZE too, or unset PYTFCOMM_ADDR for a "
            "single-process run."
        )
    return _make_spec(rank=0, size=1, host="127.0.0.1", port=0, source="single", env=env)
