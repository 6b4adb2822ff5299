"""Ranks of tests/launch/test_job_agreement.py: ``pytfcomm.init()`` from an environment the test
writes per rank (every launcher variable inherited from the test run removed first)."""

from __future__ import annotations

import os
import time

import numpy as np

import pytfcomm

# Variables of every source pytfcomm._cluster reads, removed before the rank's own are set.
_PREFIXES = ("PYTFCOMM_RANK", "PYTFCOMM_SIZE", "PYTFCOMM_ADDR", "PYTFCOMM_PORT", "PYTFCOMM_LOCAL_")
_PREFIXES += ("SLURM_", "OMPI_", "PMI_", "PMIX_", "MPI_LOCAL", "I_MPI_", "TF_CONFIG")
_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_NAMES += ("TORCHELASTIC_RUN_ID",)


def init_from(rank: int, size: int, addr: str, envs: list[dict[str, str]]) -> dict:
    """Join with ``envs[rank]`` as the launcher's variables; report the job or the error."""
    for name in list(os.environ):
        if name.startswith(_PREFIXES) or name in _NAMES:
            del os.environ[name]
    os.environ.update(envs[rank])
    start = time.monotonic()
    try:
        comm = pytfcomm.init()
    except pytfcomm.ConfigError as exc:
        return {"error": str(exc), "seconds": time.monotonic() - start}
    with comm:
        total = comm.allreduce(np.array([comm.rank + 1], np.int64))
        spec = comm.spec
        return {
            "rank": comm.rank,
            "size": comm.size,
            "source": spec.source,
            "job": getattr(spec, "job", None),  # ClusterSpec.job is new
            "local_size": spec.local_size,
            "sum": int(total[0]),
        }
