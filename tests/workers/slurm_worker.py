"""A task of tests/launch/test_slurm.py started by srun, or of
tests/launch/test_job_agreement.py started by mpirun: ``pytfcomm.init()`` from the
launcher's variables alone, one all-reduce, and one JSON line on stdout saying what it saw
(or, for a ConfigError, the error; exit code 3)."""

from __future__ import annotations

import json
import sys

import numpy as np

import pytfcomm


def main() -> None:
    try:
        comm = pytfcomm.init()
    except pytfcomm.ConfigError as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
        sys.exit(3)
    with comm:
        total = comm.allreduce(np.full(4, comm.rank + 1, dtype=np.int64))
        spec = comm.spec
        view = {
            "rank": comm.rank,
            "size": comm.size,
            "source": spec.source,
            "addr": spec.addr,
            "all_loopback": spec.all_loopback,
            "local_size": spec.local_size,
            "job": getattr(spec, "job", None),  # ClusterSpec.job is new
            "sum": total.tolist(),
        }
        print(json.dumps(view), flush=True)


if __name__ == "__main__":
    main()
