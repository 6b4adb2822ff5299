"""A rank program for tests/gpu/test_elastic_gpu.py (``pytfcomm-run --elastic``).

``elastic_gpu_workers.py OUTDIR AFTER MODE``. Every rank, known by its worker id ``i``
(the rank it was started as), runs back-to-back sum all-reduces of GPU tensors
(fake_cuda on the stand-ins) through NCCL: in step ``s`` member ``i`` gives
``(i + 1) * (s % 50 + 1) * (arange(N) % 256)`` (float32 sums of these are exact), and
every result is checked against NumPy for the members of the step's communicator
(worker ids ``0 .. size - 1``: the victim is the last). After its 4th step the victim
(the last worker) writes OUTDIR/victim, and the test SIGKILLs it 0.3 s later:

* ``stream``: every rank goes on all-reducing meanwhile, so the victim dies at whatever
  point of a collective it then is (the test may also hold it inside NCCL with the
  stand-in's PTCSI_NCCL_HANG_AT);
* ``between``: every rank sleeps 1.5 s after its 4th step, so no GPU call runs when the
  victim dies;
* ``host``: every step also does a NumPy all-reduce after the GPU one, and the victim
  waits for the SIGKILL before its 5th: the survivors' error comes from a host
  collective, with their NCCL communicator intact.

A survivor's failing call must be recoverable (:func:`pytfcomm.elastic.recoverable`):
it re-forms (:func:`pytfcomm.elastic.reform`) and redoes the step on the new
communicator, AFTER steps in all. Survivors write OUTDIR/result<i>.json: pid, the
package imported, (rank, size) and whether the result was right for every step, the
backend, NCCL mode and re-forming path (``gpu_info()``), the error, and the times of
the error, of the new communicator and of its first GPU step done.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import gpu_workers as gw
import numpy as np

import pytfcomm
import pytfcomm._core as core

MAX_S = 90.0  # the whole run, a bound for every loop
COUNT = 1 << 18  # float32 elements per all-reduce (1 MiB)


def _publish_pid(path: Path) -> None:
    """Writes this process's pid to ``path`` in one step (the test reads it as soon as
    the name exists)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, path)


def main() -> None:
    out, after, mode = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    me = int(os.environ["PYTFCOMM_ELASTIC_ID"])
    victim = int(os.environ["PYTFCOMM_SIZE"]) - 1
    gw.setup(me)
    comm = pytfcomm.init()
    base = (np.arange(COUNT) % 256).astype(np.float32)
    res: dict = {"pid": os.getpid(), "package": pytfcomm.__file__, "steps": [], "times": {}}
    times = res["times"]
    step, done_after = 0, 0
    end = time.monotonic() + MAX_S
    while done_after < after:
        if time.monotonic() > end:
            sys.exit(f"worker {me}: not done after {MAX_S} s: {res}")
        x = gw.to_gpu(base * np.float32((me + 1) * (step % 50 + 1)))
        y = gw.empty((COUNT,), np.dtype(np.float32))
        try:
            comm.allreduce(x, out=y)
            if mode == "host":
                if me == victim and step == 4:
                    _publish_pid(out / "victim")
                    time.sleep(MAX_S)
                comm.allreduce(np.ones(1))
        except pytfcomm.CommError as exc:
            if "error" in times or not pytfcomm.elastic.recoverable(exc):
                raise
            times["error"] = time.time()
            res["error"] = f"{type(exc).__name__}: {exc}"
            comm = pytfcomm.elastic.reform()
            times["reformed"] = time.time()
            continue  # redo the step in the new communicator
        members = range(comm.size)
        want = base * np.float32(sum(i + 1 for i in members) * (step % 50 + 1))
        ok = bool(np.array_equal(gw.to_cpu(y), want))
        res["steps"].append([comm.rank, comm.size, ok])
        res["backend"] = comm._gpu.last_backend()
        step += 1
        if "reformed" in times:
            times.setdefault("next_step", time.time())
            done_after += 1
        if step == 4 and "reformed" not in times:
            if me == victim and mode != "host":
                _publish_pid(out / "victim")
            if mode == "between":
                time.sleep(1.5)
    gpu = core.gpu_info()
    res.update(
        epoch=pytfcomm.elastic.epoch(),
        nccl_mode=gpu.get("nccl_mode", "-"),
        nccl_reform=gpu.get("nccl_reform", "-"),
    )
    (out / f"result{me}.json").write_text(json.dumps(res))
    comm.close()


if __name__ == "__main__":
    main()
