"""Source 6: MPI launchers (Open MPI 4 and 5, MPICH/Hydra, Intel MPI, PMIx).

On one host, rank 0 is on loopback and the port is derived from the launcher's job id
(:func:`launcher_port`); across hosts MPI says nothing about rank 0's address, so
PYTFCOMM_ADDR must be forwarded to every rank.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

from pytfcomm.errors import ConfigError

from ._env import _SIZE_RANGE, _check_local, _check_rank_size, _env_int, _first_set, _get
from .spec import (
    LAUNCHER_PORT_BASE,
    LAUNCHER_PORT_SPAN,
    ClusterSpec,
    _env_addr,
    _env_port,
    _LauncherIdentity,
    _make_spec,
)

# Job identifiers that every rank of one MPI job shares, in lookup order.
_MPI_JOB_ID_VARS = (
    "OMPI_MCA_ess_base_jobid",  # Open MPI 3/4 (ORTE)
    "OMPI_MCA_orte_ess_jobid",  # older Open MPI
    "PMIX_NAMESPACE",  # PMIx: Open MPI 5 / PRRTE, srun --mpi=pmix
    "PMI_JOBID",  # PMI-2 servers (srun --mpi=pmi2, PALS)
    "I_MPI_HYDRA_UUID",  # Intel MPI's Hydra
)


def launcher_port(job_id: str) -> int:
    """An MPI job's derived port: ``20000 + zlib.crc32(job_id.encode()) % 20000``."""
    return LAUNCHER_PORT_BASE + zlib.crc32(job_id.encode("utf-8")) % LAUNCHER_PORT_SPAN


# (family, rank var, size vars, local rank vars, local size vars)
_MPI_FAMILIES: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...], tuple[str, ...]], ...] = (
    (
        "Open MPI",
        "OMPI_COMM_WORLD_RANK",
        ("OMPI_COMM_WORLD_SIZE",),
        ("OMPI_COMM_WORLD_LOCAL_RANK",),
        ("OMPI_COMM_WORLD_LOCAL_SIZE",),
    ),
    ("MPICH/Intel MPI", "PMI_RANK", ("PMI_SIZE",), ("MPI_LOCALRANKID",), ("MPI_LOCALNRANKS",)),
    (
        "PMIx",
        "PMIX_RANK",
        ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"),
    ),
)


def _mpi_identity(env: Mapping[str, str]) -> _LauncherIdentity | None:
    for family, rank_var, size_vars, lrank_vars, lsize_vars in _MPI_FAMILIES:
        if _get(env, rank_var) is None:
            continue
        rank = _env_int(env, rank_var, "this process's MPI rank")
        size_var = _first_set(env, size_vars)
        if size_var is None:
            raise ConfigError(
                f"{family}: {rank_var} is set but the world size is not (looked for "
                f"{' / '.join(size_vars)}): set PYTFCOMM_RANK, PYTFCOMM_SIZE and PYTFCOMM_ADDR "
                "instead."
            )
        size = _env_int(env, size_var, f"the number of MPI processes, {_SIZE_RANGE}")
        assert rank is not None and size is not None
        _check_rank_size(rank, size, rank_var, size_var)
        lrank_var, lsize_var = _first_set(env, lrank_vars), _first_set(env, lsize_vars)
        local_rank = _env_int(env, lrank_var, "the local rank") if lrank_var else None
        local_size = _env_int(env, lsize_var, "the ranks on this host") if lsize_var else None
        _check_local(local_rank, local_size, size, (lrank_var, lsize_var), size_var)
        return _LauncherIdentity(
            family, rank, size, local_rank, local_size, f"{rank_var}/{size_var}"
        )
    return None


_MPI_FORWARD_HINT = (
    "forward it to every rank: Open MPI 'mpirun -x PYTFCOMM_ADDR ...', MPICH/Intel MPI "
    "'mpiexec -genv PYTFCOMM_ADDR <host>:<port> ...'"
)


def _from_mpi(ident: _LauncherIdentity, env: Mapping[str, str]) -> ClusterSpec:
    port_env = _env_port(env)
    override = _env_addr(env, ident.size)
    own_host: str | None = None
    if override is not None:
        host, port = override
    elif ident.size == 1 or ident.local_size == ident.size:
        host = own_host = "127.0.0.1"
        job_var = _first_set(env, _MPI_JOB_ID_VARS)
        if port_env is not None:
            port = port_env
        elif job_var is not None:
            port = launcher_port(env[job_var].strip())
        elif ident.size == 1:
            port = 0
        else:
            raise ConfigError(
                f"{ident.kind} ({ident.names}): no job identifier to derive a port from "
                f"(looked for {', '.join(_MPI_JOB_ID_VARS)}): set PYTFCOMM_PORT=<port>, the "
                "same on every rank (mpiexec exports your environment; Open MPI needs "
                "'mpirun -x PYTFCOMM_PORT')."
            )
    elif ident.local_size is None:
        raise ConfigError(
            f"{ident.kind} ({ident.names}): the launcher does not say how many ranks share "
            "this host (OMPI_COMM_WORLD_LOCAL_SIZE / MPI_LOCALNRANKS unset), so rank 0's "
            f"host is unknown: set PYTFCOMM_ADDR=<rank0 host>:<port> and {_MPI_FORWARD_HINT}."
        )
    else:
        raise ConfigError(
            f"mpirun across hosts: set PYTFCOMM_ADDR=<rank0 host>:<port> and "
            f"{_MPI_FORWARD_HINT}. ({ident.kind} reports {ident.size} ranks, "
            f"{ident.local_size} of them on this host.)"
        )
    return _make_spec(
        rank=ident.rank,
        size=ident.size,
        host=host,
        port=port,
        source="mpi",
        env=env,
        own_host=own_host,
        local_rank=ident.local_rank,
        local_size=ident.local_size,
    )
