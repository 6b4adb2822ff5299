"""Source 4: torchrun-style variables (``torchrun``, ``torch.distributed.launch``, Kubeflow
PyTorchJob and other launchers that follow PyTorch's convention).

RANK / WORLD_SIZE give rank and size, LOCAL_RANK / LOCAL_WORLD_SIZE the place on the
host.  Rank 0's host is MASTER_ADDR; the port is MASTER_PORT + 1 (:func:`torchrun_port`),
because torchrun's agent keeps its own store listening on MASTER_PORT for the whole job.
The source counts as present as soon as RANK or WORLD_SIZE is set; a partial set is a
ConfigError naming what is missing, never a one-process job.
"""

from __future__ import annotations

from collections.abc import Mapping

from pytfcomm.errors import ConfigError

from ._env import _SIZE_RANGE, _check_local, _check_rank_size, _env_int, _get
from .address import _host_problem
from .spec import ClusterSpec, _env_addr, _env_port, _LauncherIdentity, _make_spec

#: The variables this source reads (``python -m pytfcomm info`` lists them).
TORCHRUN_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
)

_HINT = (
    "torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT together; when you set them "
    "yourself, set all four on every process (or use PYTFCOMM_RANK/PYTFCOMM_SIZE/PYTFCOMM_ADDR)"
)


def torchrun_port(master_port: int) -> int:
    """pytfcomm's rendezvous port in a torchrun-style job: ``MASTER_PORT + 1``, or
    ``MASTER_PORT - 1`` when MASTER_PORT is 65535."""
    return master_port + 1 if master_port < 65535 else master_port - 1


def _torchrun_identity(env: Mapping[str, str]) -> _LauncherIdentity | None:
    if _get(env, "RANK") is None and _get(env, "WORLD_SIZE") is None:
        return None
    rank = _env_int(env, "RANK", "this process's rank, 0 <= RANK < WORLD_SIZE")
    size = _env_int(env, "WORLD_SIZE", f"the number of processes in the job, {_SIZE_RANGE}")
    if rank is None or size is None:
        have, missing = ("RANK", "WORLD_SIZE") if size is None else ("WORLD_SIZE", "RANK")
        raise ConfigError(f"torchrun-style job: {have} is set but {missing} is not: {_HINT}.")
    _check_rank_size(rank, size, "RANK", "WORLD_SIZE")
    local_rank = _env_int(env, "LOCAL_RANK", "this process's index on its host")
    local_size = _env_int(env, "LOCAL_WORLD_SIZE", "the number of processes on this host")
    _check_local(local_rank, local_size, size, ("LOCAL_RANK", "LOCAL_WORLD_SIZE"), "WORLD_SIZE")
    return _LauncherIdentity("torchrun", rank, size, local_rank, local_size, "RANK/WORLD_SIZE")


def _from_torchrun(ident: _LauncherIdentity, env: Mapping[str, str]) -> ClusterSpec:
    override = _env_addr(env, ident.size)
    if override is not None:
        host, port = override
    elif ident.size == 1 and _get(env, "MASTER_ADDR") is None:
        host, port = "127.0.0.1", 0
    else:
        host = _get(env, "MASTER_ADDR") or ""
        master_port = _env_int(env, "MASTER_PORT", "rank 0's port, 1..65535")
        have = (("MASTER_ADDR", host or None), ("MASTER_PORT", master_port))
        missing = [name for name, value in have if value is None]
        if missing:
            raise ConfigError(
                f"torchrun-style job (RANK={ident.rank}, WORLD_SIZE={ident.size}): "
                f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set, so "
                f"rank 0's address is unknown: {_HINT}."
            )
        assert master_port is not None
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        problem = _host_problem(host)
        if problem is not None:
            raise ConfigError(f"MASTER_ADDR={host!r} is not a host ({problem}): {_HINT}.")
        if not 1 <= master_port <= 65535:
            raise ConfigError(f"MASTER_PORT={master_port} is out of range: use 1..65535.")
        port_env = _env_port(env)
        port = port_env if port_env is not None else torchrun_port(master_port)
    return _make_spec(
        rank=ident.rank,
        size=ident.size,
        host=host,
        port=port,
        source="torchrun",
        env=env,
        local_rank=ident.local_rank,
        local_size=ident.local_size,
    )
