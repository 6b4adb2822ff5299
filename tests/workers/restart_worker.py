"""A rank program for tests/launch/test_launcher_restarts.py.

``restart_worker.py MODE OUTDIR [ARGS]``.

Every run appends one JSON line to OUTDIR/runs<rank>.jsonl (its restart count, pid,
rendezvous address and a digest of its secret), so the test sees each run of each rank.

* ``once HOW FAIL_RANK``: FAIL_RANK fails in the first run only (PYTFCOMM_RESTART_COUNT
  is 0), once every rank has recorded that run: HOW is an exit code or ``kill`` (SIGKILL
  itself); every other run exits 0;
* ``always CODE FAIL_RANK [DELAY]``: FAIL_RANK exits with CODE in every run, after DELAY
  seconds (default 0) and once every rank has recorded the run;
* ``wait``: write OUTDIR/pid<rank>, wait (bounded) for SIGINT/SIGTERM, record it in
  OUTDIR/got<rank>, exit 0;
* ``stubborn CODE``: rank 1 exits with CODE once rank 0 has written its pid; rank 0
  records the SIGTERM that stopping the job sends (OUTDIR/got0) and keeps running
  (bounded), so the test can signal the launcher while the failed job is being stopped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path

MAX_WAIT = 60.0


def _record(out: Path) -> tuple[int, int]:
    rank, count = int(os.environ["PYTFCOMM_RANK"]), int(os.environ["PYTFCOMM_RESTART_COUNT"])
    line = {
        "count": count,
        "max": int(os.environ["PYTFCOMM_MAX_RESTARTS"]),
        "pid": os.getpid(),
        "addr": os.environ["PYTFCOMM_ADDR"],
        "tf_config": os.environ["TF_CONFIG"],
        "secret": hashlib.sha256(os.environ["PYTFCOMM_SECRET"].encode()).hexdigest(),
    }
    with open(out / f"runs{rank}.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")
    print(f"rank {rank} run {count}", flush=True)
    return rank, count


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.rename(path)


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + MAX_WAIT
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def _wait_all_recorded(out: Path, count: int) -> None:
    """Until every rank has recorded run ``count`` (bounded): only then may one fail."""
    deadline = time.monotonic() + MAX_WAIT
    for r in range(int(os.environ["PYTFCOMM_SIZE"])):
        path = out / f"runs{r}.jsonl"
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if sum(1 for line in path.read_text().splitlines() if line.endswith("}")) > count:
                    break
            time.sleep(0.02)


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    rank, count = _record(out)
    if mode == "once":
        how, fail_rank = sys.argv[3], int(sys.argv[4])
        if rank == fail_rank and count == 0:
            _wait_all_recorded(out, count)
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            sys.exit(int(how))
    elif mode == "always":
        code, fail_rank = int(sys.argv[3]), int(sys.argv[4])
        if rank == fail_rank:
            time.sleep(float(sys.argv[5]) if len(sys.argv) > 5 else 0.0)
            _wait_all_recorded(out, count)
            sys.exit(code)
    elif mode == "wait":
        got: list[int] = []
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, lambda signum, _f: got.append(signum))
        _write(out / f"pid{rank}", str(os.getpid()))
        deadline = time.monotonic() + MAX_WAIT
        while not got and time.monotonic() < deadline:
            time.sleep(0.02)
        _write(out / f"got{rank}", ",".join(map(str, got)))
    elif mode == "stubborn":
        code = int(sys.argv[3])
        if rank == 1:
            _wait_for(out / "pid0")
            sys.exit(code)
        got = []
        signal.signal(signal.SIGTERM, lambda signum, _f: got.append(signum))
        _write(out / "pid0", str(os.getpid()))
        deadline = time.monotonic() + MAX_WAIT
        while not got and time.monotonic() < deadline:
            time.sleep(0.02)
        _write(out / "got0", ",".join(map(str, got)))
        time.sleep(max(0.0, deadline - time.monotonic()))  # ignore SIGTERM: only SIGKILL ends it
    else:
        sys.exit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
