"""A task of tests/launch/test_slurm.py started by srun, or of
tests/launch/test_job_agreement.py started by mpirun: ``pytfcomm.init()`` from the
launcher's variables alone, one all-reduce, and one JSON line on stdout saying what it saw
(or, for a ConfigError, the error; exit code 3).

With PTC_RESULT_DIR set, the same record also goes to ``<dir>/<pid>.json``: mpirun's
output forwarding may glue two ranks' lines together, a file per process cannot be."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

import pytfcomm


def _emit(record: dict) -> None:
    text = json.dumps(record)
    print(text, flush=True)
    out = os.environ.get("PTC_RESULT_DIR")
    if out:
        (Path(out) / f"{os.getpid()}.json").write_text(text)


def main() -> None:
    try:
        comm = pytfcomm.init()
    except pytfcomm.ConfigError as exc:
        _emit({"error": type(exc).__name__, "message": str(exc)})
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
        _emit(view)


if __name__ == "__main__":
    main()
