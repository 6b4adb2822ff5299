"""What :func:`resolve` reads from the environment and why: ``python -m pytfcomm info``.

:func:`explain` resolves the environment and lists, for every source that has variables
set, whether it was used or ignored, with the reason (a source higher in the order was
used, the batch shell is not an srun task, the MPI rank disagrees with Slurm's, ...).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pytfcomm.errors import ConfigError

from ._env import _first_set, _get
from .mpi import _MPI_FAMILIES, _MPI_JOB_ID_VARS
from .resolver import resolve
from .torchrun import TORCHRUN_VARS

_PYTFCOMM_VARS = (
    "PYTFCOMM_RANK",
    "PYTFCOMM_SIZE",
    "PYTFCOMM_ADDR",
    "PYTFCOMM_LOCAL_RANK",
    "PYTFCOMM_LOCAL_SIZE",
)
_OVERRIDES = ("PYTFCOMM_ADDR", "PYTFCOMM_PORT", "PYTFCOMM_BIND_HOST", "PYTFCOMM_HOST_ID")
_SLURM_VARS = (
    "SLURM_PROCID",
    "SLURM_STEP_ID",
    "SLURM_STEPID",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",
    "SLURM_JOB_ID",
    "SLURM_HET_SIZE",
    "SLURM_DISTRIBUTION",
)


def _mpi_vars() -> tuple[str, ...]:
    names: list[str] = []
    for _, rank_var, size_vars, lrank_vars, lsize_vars in _MPI_FAMILIES:
        for name in (rank_var, *size_vars, *lrank_vars, *lsize_vars):
            if name not in names:
                names.append(name)
    return (*names, *_MPI_JOB_ID_VARS)


# (source, the variables that belong to it), in resolve()'s order.
_SOURCES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("PYTFCOMM", _PYTFCOMM_VARS),
    ("TF_CONFIG", ("TF_CONFIG",)),
    ("torchrun", TORCHRUN_VARS),
    ("slurm", _SLURM_VARS),
    ("mpi", _mpi_vars()),
)


def _seen(env: Mapping[str, str], names: tuple[str, ...]) -> dict[str, str]:
    return {n: _get(env, n) or "" for n in names if _get(env, n) is not None}


def _why_ignored(source: str, used: str | None, env: Mapping[str, str]) -> str:
    order = [s for s, _ in _SOURCES]
    if source == "slurm" and _first_set(env, ("SLURM_STEP_ID", "SLURM_STEPID")) is None:
        return "not an srun task (no SLURM_STEP_ID): a batch script or salloc shell"
    if source == "slurm" and used == "mpi":
        return "the MPI rank/size differ from Slurm's: mpirun inside a Slurm allocation"
    if used in order and order.index(used) < order.index(source):
        return f"{used} comes first in the order of sources"
    return "not used"


def explain(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """The source resolve() uses, this process's view, and every source it ignored, why.

    Keys: ``source`` (None on an error), ``rank``, ``size``, ``addr``, ``job``, ``error``
    (the ConfigError's message or None), ``read`` (the chosen source's variables as set),
    ``ignored`` (source -> {"variables": ..., "why": ...}) and ``overrides`` (the
    PYTFCOMM_ADDR/PORT/BIND_HOST/HOST_ID that are set).  Never raises ConfigError.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    out: dict[str, object] = {"source": None, "error": None}
    try:
        spec = resolve(environ=env)
        used: str | None = spec.source
        out.update(source=spec.source, rank=spec.rank, size=spec.size, addr=spec.addr, job=spec.job)
    except ConfigError as exc:
        used = None
        out["error"] = str(exc)
    ignored: dict[str, object] = {}
    for source, names in _SOURCES:
        seen = _seen(env, names)
        if not seen:
            continue
        if source == used:
            out["read"] = seen
        elif used is not None:
            ignored[source] = {"variables": seen, "why": _why_ignored(source, used, env)}
        else:
            ignored[source] = {"variables": seen, "why": "not used: resolving failed"}
    out["ignored"] = ignored
    out["overrides"] = _seen(env, _OVERRIDES)
    return out
