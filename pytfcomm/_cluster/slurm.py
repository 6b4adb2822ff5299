"""Source 5: a task started by Slurm's ``srun``.

Rank 0's host is the first node of the step's host list; the port is derived from the
job and step ids (:func:`slurm_port`) unless PYTFCOMM_PORT or PYTFCOMM_ADDR say otherwise.
The local size is this node's count in SLURM_STEP_TASKS_PER_NODE (``2(x3),1``,
:func:`slurm_tasks_per_node`).  Heterogeneous jobs are refused (:func:`_refuse_het`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pytfcomm.errors import ConfigError

from ._env import _SIZE_RANGE, MAX_SIZE, _check_local, _check_rank_size, _env_int, _first_set, _get
from .address import _DIGITS_RE, _host_problem
from .spec import (
    LAUNCHER_PORT_BASE,
    LAUNCHER_PORT_SPAN,
    ClusterSpec,
    _env_addr,
    _env_port,
    _LauncherIdentity,
    _make_spec,
)


def slurm_port(job_id: int, step_id: int = 0) -> int:
    """Slurm's derived port: ``20000 + (job_id * 31 + step_id) % 20000``.

    Different steps of one job and nearby job ids get different ports.
    """
    return LAUNCHER_PORT_BASE + (job_id * 31 + step_id) % LAUNCHER_PORT_SPAN


def slurm_first_host(nodelist: str, what: str = "SLURM_JOB_NODELIST") -> str:
    """The first host of a Slurm hostlist, e.g. ``"node[03-05,7],gpu1"`` -> ``"node03"``.

    Only the first entry is expanded; every ``[...]`` in it contributes the start of its
    first range with its zero padding, so ``"rack[1-2]-n[08-09]"`` -> ``"rack1-n08"``.
    ``what`` names the variable in errors.
    """
    text = nodelist.strip()

    def bad(reason: str) -> ConfigError:
        return ConfigError(
            f"{what}={nodelist!r} is not a Slurm host list ({reason}): expected e.g. "
            '"node[01-04],gpu7"; or set PYTFCOMM_ADDR=<rank 0 host>:<port>.'
        )

    if not text:
        raise bad("it is empty")
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == ",":
            break
        if c == "]":
            raise bad("']' without '['")
        if c == "[":
            end = text.find("]", i)
            if end < 0:
                raise bad("'[' is never closed")
            inner = text[i + 1 : end]
            if "[" in inner:
                raise bad("nested '['")
            first = inner.split(",", 1)[0].split("-", 1)[0].strip()
            if not _DIGITS_RE.fullmatch(first):
                raise bad(f"range [{inner}] does not start with a number")
            out.append(first)
            i = end + 1
            continue
        out.append(c)
        i += 1
    host = "".join(out)
    problem = _host_problem(host)
    if problem is not None:
        raise bad(f"first host: {problem}")
    return host


_TASKS_RE = re.compile(r"([0-9]+)(?:\(x([0-9]+)\))?")


def slurm_tasks_per_node(text: str, what: str = "SLURM_STEP_TASKS_PER_NODE") -> list[int]:
    """Expand Slurm's tasks-per-node list, e.g. ``"2(x2),1"`` -> ``[2, 2, 1]``."""
    counts: list[int] = []
    for item in text.strip().split(","):
        m = _TASKS_RE.fullmatch(item.strip())
        if m is None or len(item) > 24:
            raise ConfigError(
                f"{what}={text!r} is not a Slurm tasks-per-node list (at {item!r}): expected "
                'e.g. "2(x3),1"; or set PYTFCOMM_RANK, PYTFCOMM_SIZE and PYTFCOMM_ADDR.'
            )
        repeat = int(m.group(2) or 1)
        if repeat > MAX_SIZE or len(counts) + repeat > MAX_SIZE:
            raise ConfigError(f"{what}={text!r} lists more than {MAX_SIZE} nodes.")
        counts.extend([int(m.group(1))] * repeat)
    return counts


def _slurm_local_size(env: Mapping[str, str], size: int, size_var: str) -> int | None:
    """This node's task count from SLURM_STEP_TASKS_PER_NODE and SLURM_NODEID; None if unset."""
    raw = _get(env, "SLURM_STEP_TASKS_PER_NODE")
    node = _env_int(env, "SLURM_NODEID", "this node's index in the step")
    if raw is None or node is None:
        return None
    counts = slurm_tasks_per_node(raw)
    if sum(counts) != size or not 0 <= node < len(counts):
        raise ConfigError(
            f"Slurm: SLURM_STEP_TASKS_PER_NODE={raw!r} ({sum(counts)} tasks on {len(counts)} "
            f"nodes) does not fit {size_var}={size} and SLURM_NODEID={node}: the step's "
            "variables contradict each other; set PYTFCOMM_RANK, PYTFCOMM_SIZE and "
            "PYTFCOMM_ADDR instead."
        )
    return counts[node]


_HET_VARS_RE = re.compile(r"SLURM_[A-Z_]+_HET_GROUP_[0-9]+")


def _refuse_het(env: Mapping[str, str]) -> None:
    """A heterogeneous job (SLURM_HET_SIZE, SLURM_*_HET_GROUP_<n>): refused, see docs."""
    het = "SLURM_HET_SIZE" if _get(env, "SLURM_HET_SIZE") is not None else None
    if het is None:
        het = next((n for n in sorted(env) if _HET_VARS_RE.fullmatch(n)), None)
    if het is not None:
        raise ConfigError(
            f"Slurm: this task belongs to a heterogeneous job ({het} is set); pytfcomm does "
            "not derive one job from several components. Run one component per pytfcomm job, "
            "or set PYTFCOMM_RANK, PYTFCOMM_SIZE and PYTFCOMM_ADDR for every task yourself "
            "(docs/launching.md, Slurm)."
        )


def _slurm_identity(env: Mapping[str, str]) -> _LauncherIdentity | None:
    if _get(env, "SLURM_PROCID") is None:
        return None
    # The batch script of sbatch and the shell of salloc carry SLURM_PROCID=0 and the
    # allocation's SLURM_NTASKS but are not srun tasks; only srun sets a step id.
    if _first_set(env, ("SLURM_STEP_ID", "SLURM_STEPID")) is None:
        return None
    _refuse_het(env)
    rank = _env_int(env, "SLURM_PROCID", "this task's rank, 0 <= rank < the task count")
    size_var = _first_set(env, ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"))
    if size_var is None:
        raise ConfigError(
            "Slurm: SLURM_PROCID is set but none of SLURM_STEP_NUM_TASKS, SLURM_NTASKS or "
            "SLURM_NPROCS is: launch with srun -n <tasks>, or set PYTFCOMM_RANK, "
            "PYTFCOMM_SIZE and PYTFCOMM_ADDR."
        )
    size = _env_int(env, size_var, f"the number of tasks in the step, {_SIZE_RANGE}")
    assert rank is not None and size is not None
    _check_rank_size(rank, size, "SLURM_PROCID", size_var)
    local_rank = _env_int(env, "SLURM_LOCALID", "the task's index on its node")
    local_size = _slurm_local_size(env, size, size_var)
    names = ("SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE")
    _check_local(local_rank, local_size, size, names, size_var)
    return _LauncherIdentity(
        "slurm", rank, size, local_rank, local_size, f"SLURM_PROCID/{size_var}"
    )


def _from_slurm(ident: _LauncherIdentity, env: Mapping[str, str]) -> ClusterSpec:
    port_env = _env_port(env)
    override = _env_addr(env, ident.size)
    if override is not None:
        host, port = override
    elif (_get(env, "SLURM_DISTRIBUTION") or "").startswith("arbitrary"):
        raise ConfigError(
            "Slurm: SLURM_DISTRIBUTION=arbitrary places task 0 on a node of your choosing, "
            "not necessarily the first of the host list: set PYTFCOMM_ADDR=<task 0's "
            "host>:<port>, the same for all tasks."
        )
    else:
        list_var = _first_set(env, ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"))
        if list_var is None:
            raise ConfigError(
                "Slurm: neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set, so rank "
                "0's host is unknown: set PYTFCOMM_ADDR=<rank 0 host>:<port>."
            )
        host = slurm_first_host(env[list_var], what=list_var)
        if port_env is not None:
            port = port_env
        else:
            job_var = _first_set(env, ("SLURM_JOB_ID", "SLURM_JOBID"))
            job_id = _env_int(env, job_var, "the numeric Slurm job id") if job_var else None
            if job_id is None or job_id < 0:
                raise ConfigError(
                    "Slurm: SLURM_JOB_ID is not set to a job number, so no port can be derived: "
                    "set PYTFCOMM_PORT=<port>, the same for all tasks."
                )
            step_var = _first_set(env, ("SLURM_STEP_ID", "SLURM_STEPID"))
            step_id = _env_int(env, step_var, "the numeric step id") if step_var else None
            port = slurm_port(job_id, max(step_id or 0, 0))
    return _make_spec(
        rank=ident.rank,
        size=ident.size,
        host=host,
        port=port,
        source="slurm",
        env=env,
        local_rank=ident.local_rank,
        local_size=ident.local_size,
    )
