"""The launcher's name for the job, as every rank of one job reads it.

:func:`job_label` is what ``ClusterSpec.job`` holds: two processes with different labels
belong to different launches, even when they met at one rendezvous address.
``init()`` compares the labels of all ranks (:mod:`pytfcomm._job_check`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from ._env import _first_set, _get
from .mpi import _MPI_JOB_ID_VARS


def _tf_config_label(env: Mapping[str, str]) -> str:
    """A digest of TF_CONFIG's ``cluster`` (the part every task shares), key order ignored."""
    try:
        cluster = json.loads(env["TF_CONFIG"]).get("cluster")
        text = json.dumps(cluster, sort_keys=True, separators=(",", ":"))
    except (ValueError, KeyError, AttributeError, TypeError):
        return ""
    return f"TF_CONFIG cluster sha256:{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def _vars_label(env: Mapping[str, str], names: tuple[str, ...]) -> str:
    return " ".join(f"{n}={_get(env, n)}" for n in names if _get(env, n) is not None)


def job_label(source: str, env: Mapping[str, str]) -> str:
    """The job's label for ``source`` (a ``ClusterSpec.source``), ``""`` when it has none.

    slurm: SLURM_JOB_ID and SLURM_STEP_ID; mpi: the first job id variable set (the one the
    port is derived from); torchrun: TORCHELASTIC_RUN_ID, else MASTER_ADDR and MASTER_PORT;
    TF_CONFIG: a digest of its ``cluster``. PYTFCOMM, explicit and single have none.
    """
    if source == "slurm":
        return _vars_label(env, ("SLURM_JOB_ID", "SLURM_STEP_ID"))
    if source == "mpi":
        var = _first_set(env, _MPI_JOB_ID_VARS)
        return _vars_label(env, (var,)) if var else ""
    if source == "torchrun":
        if _get(env, "TORCHELASTIC_RUN_ID") is not None:
            return _vars_label(env, ("TORCHELASTIC_RUN_ID",))
        return _vars_label(env, ("MASTER_ADDR", "MASTER_PORT"))
    if source == "TF_CONFIG":
        return _tf_config_label(env)
    return ""
