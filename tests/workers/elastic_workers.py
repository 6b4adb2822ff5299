"""A rank program for tests/reliability/test_elastic.py (``pytfcomm-run --elastic``).

``elastic_workers.py MODE OUTDIR STEPS AT``. Every rank, known by its worker id ``i``
(the rank it was started as), runs STEPS steps of ``w -= 0.01 * sum(g) / size`` with
``g = (i + 1) * (step + 1) * arange(4)`` from each member, committing ``(step, w)``
after each step; on a recoverable error (:func:`pytfcomm.elastic.recoverable`) it re-forms
(:func:`pytfcomm.elastic.reform`), takes rank 0's commit and goes on. Each process start
appends a line to OUTDIR/starts<i>.jsonl, a recoverable error writes OUTDIR/lost<i>;
survivors write OUTDIR/result<i>.json (pid,
the (rank, size) of every step, the epoch, the times of the error, of the new
communicator and of the first step done in it, ``w`` as hex floats).

At step AT the victim (the last worker) writes OUTDIR/victim and, by MODE:

* ``kill``: waits (bounded) for the test's SIGKILL;
* ``kill2``: the same, and at step AT + 2 the worker before it writes OUTDIR/victim2 and
  waits for its SIGKILL too (two losses one after another);
* ``kill-self``: SIGKILLs itself in the job's first run, goes on in a restart;
* ``stop``: waits (bounded) for OUTDIR/go; the test SIGSTOPs it meanwhile and lets it
  go on once the survivors finished. It then runs the step on its old communicator,
  which fails, asks to re-form, is refused, writes OUTDIR/refused.json and exits 3.
  The survivors wait (bounded) for that file before they exit.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

import pytfcomm

MAX_WAIT = 60.0


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + MAX_WAIT
    while not path.exists():
        if time.monotonic() > deadline:
            sys.exit(f"never appeared: {path}")
        time.sleep(0.02)


def _layout(comm: pytfcomm.Communicator) -> dict:
    """Where this rank sits: as its communicator works it out, and as its environment
    (pytfcomm-run's, then reform()'s) says."""
    names = (
        "PYTFCOMM_LOCAL_RANK",
        "PYTFCOMM_LOCAL_SIZE",
        "HOROVOD_CROSS_RANK",
        "HOROVOD_CROSS_SIZE",
    )
    return {
        "comm": [comm.local_rank, comm.local_size, comm.num_hosts],
        "env": [int(os.environ[n]) for n in names],
    }


def main() -> None:
    mode, out, steps, at = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    me = int(os.environ["PYTFCOMM_ELASTIC_ID"])
    last = int(os.environ["PYTFCOMM_SIZE"]) - 1
    victims = {last: (at, "victim")}
    if mode == "kill2":
        victims[last - 1] = (at + 2, "victim2")
    first_run = os.environ.get("PYTFCOMM_RESTART_COUNT") == "0"
    with open(out / f"starts{me}.jsonl", "a") as f:
        f.write(json.dumps({"pid": os.getpid()}) + "\n")
    comm = pytfcomm.init()
    w = np.zeros(4, np.float64)
    step = 0
    saved = (step, w.copy())
    seen: list[list[int]] = []
    times: dict[str, float] = {}
    while step < steps:
        try:
            if me in victims and step == victims[me][0] and "victim" not in times:
                times["victim"] = time.time()
                (out / victims[me][1]).write_text(str(os.getpid()))
                if mode == "kill-self" and first_run:
                    os.kill(os.getpid(), signal.SIGKILL)
                if mode in ("kill", "kill2"):
                    time.sleep(MAX_WAIT)
                    sys.exit("the test never killed the victim")
                if mode == "stop":
                    _wait_for(out / "go")
            g = (me + 1) * (step + 1) * np.arange(4, dtype=np.float64)
            total = comm.allreduce(g, op="sum")
            w = w - 0.01 * (total / comm.size)
            seen.append([comm.rank, comm.size])
            step += 1
            saved = (step, w.copy())
            if "reformed" in times and "next_step" not in times:
                times["next_step"] = time.time()
        except pytfcomm.CommError as exc:
            if not pytfcomm.elastic.recoverable(exc):
                raise
            times.setdefault("error", time.time())
            (out / f"lost{me}").write_text("")
            try:
                comm = pytfcomm.elastic.reform()
            except pytfcomm.MembershipError as refused:
                (out / "refused.json").write_text(
                    json.dumps({"error": str(refused), "after": str(exc)})
                )
                sys.exit(3)
            times.setdefault("reformed", time.time())
            w = comm.broadcast(saved[1].copy(), root=0)
            step = int(comm.broadcast(np.array([saved[0]], np.int64), root=0)[0])
    result = {
        "pid": os.getpid(),
        "seen": seen,
        "epoch": pytfcomm.elastic.epoch(),
        "layout": _layout(comm),
        "times": times,
        "w": [float(x).hex() for x in w],
    }
    (out / f"result{me}.json").write_text(json.dumps(result))
    if mode == "stop":
        _wait_for(out / "refused.json")
    comm.close()


if __name__ == "__main__":
    main()
