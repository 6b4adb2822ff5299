"""A rank program for tests/launch/test_launcher.py.

``python launcher_worker.py MODE OUTDIR [ARGS]``.

Modes (every wait is bounded, so a broken launcher cannot leave these running long):

* ``env``: write this rank's view of the job to OUTDIR/rank<r>.json (secret included,
  so the test can compare it without the secret ever reaching stdout);
* ``lines``: many whole lines on stdout and stderr, then odd output (invalid UTF-8, a
  line longer than the relay's limit, a last line without newline);
* ``fail CODE|kill FAIL_RANK``: every rank writes its pid (and a grandchild's) and
  sleeps; FAIL_RANK, once all pids are written, exits with CODE or SIGKILLs itself;
* ``stop CODE FAIL_RANK STOP_RANK [own-group]``: like ``fail``, but STOP_RANK stops
  itself with SIGSTOP (first moving into a process group of its own with
  ``own-group``, as a remote rank sits outside the ssh client's group), and
  FAIL_RANK exits only once STOP_RANK is seen stopped, writing the time to
  OUTDIR/failed_at;
* ``wait``: write the pid, record the first SIGINT/SIGTERM in OUTDIR/got<r>, exit 0;
* ``allreduce``: ``pytfcomm.init()`` and print an all-reduce, its argv and TF_CONFIG;
* ``cpus``: write the CPUs this rank's main thread and a thread it starts may run on
  to OUTDIR/cpus<r>.json (``--bind-to``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from proc_state import stopped

MAX_WAIT = 60.0


def _rank() -> int:
    return int(os.environ["PYTFCOMM_RANK"])


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.rename(path)


def env_mode(out: Path) -> None:
    named = ("TF_CONFIG", "FOO", "CUDA_VISIBLE_DEVICES", "GLIBC_TUNABLES")
    keys = [k for k in os.environ if k.startswith("PYTFCOMM_") or k in named]
    view = {k: os.environ[k] for k in keys}
    view["argv"] = sys.argv
    view["cwd"] = os.getcwd()
    _write(out / f"rank{_rank()}.json", json.dumps(view))
    print(f"rank {_rank()} wrote its environment")


def lines_mode(out: Path) -> None:
    r = _rank()
    for i in range(200):
        print(f"rank {r} line {i} " + "x" * (i % 50 + 1), flush=(i % 7 == 0))
        print(f"rank {r} err {i} " + "y" * (i % 30 + 1), file=sys.stderr, flush=(i % 5 == 0))
    sys.stdout.flush()
    sys.stdout.buffer.write(b"bin \xff\xfe\x00 end\n")
    sys.stdout.buffer.write(b"L" * 70000 + b"\n")
    sys.stdout.buffer.write(b"no newline at the end")
    sys.stdout.flush()


def fail_mode(out: Path, how: str, fail_rank: int, size: int) -> None:
    r = _rank()
    child = subprocess.Popen(["sleep", str(MAX_WAIT)])
    _write(out / f"pid{r}", f"{os.getpid()} {child.pid}")
    if r == fail_rank:
        deadline = time.monotonic() + MAX_WAIT
        while time.monotonic() < deadline:
            if all((out / f"pid{i}").exists() for i in range(size)):
                break
            time.sleep(0.05)
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        sys.exit(int(how))
    time.sleep(MAX_WAIT)


def stop_mode(out: Path, code: int, fail_rank: int, stop_rank: int, own_group: bool) -> None:
    r = _rank()
    child = subprocess.Popen(["sleep", str(MAX_WAIT)])
    if r == stop_rank and own_group:
        os.setpgid(0, 0)
    _write(out / f"pid{r}", f"{os.getpid()} {child.pid}")
    if r == stop_rank:
        os.kill(os.getpid(), signal.SIGSTOP)
    elif r == fail_rank:
        deadline = time.monotonic() + MAX_WAIT
        stop_file = out / f"pid{stop_rank}"
        size = int(os.environ["PYTFCOMM_SIZE"])
        while time.monotonic() < deadline:
            # Every rank has started (the test counts them all), and the one
            # meant to stop has.
            started = all((out / f"pid{i}").exists() for i in range(size))
            if started and stopped(int(stop_file.read_text().split()[0])):
                _write(out / "failed_at", repr(time.time()))  # when the stop began
                sys.exit(code)
            time.sleep(0.05)
        sys.exit(f"rank {stop_rank} never stopped")
    time.sleep(MAX_WAIT)


def wait_mode(out: Path) -> None:
    r = _rank()

    def handler(signum: int, _frame: object) -> None:
        _write(out / f"got{r}", str(signum))
        sys.exit(0)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    _write(out / f"pid{r}", str(os.getpid()))
    time.sleep(MAX_WAIT)


def allreduce_mode() -> None:
    import numpy as np

    import pytfcomm

    with pytfcomm.init() as c:
        total = c.allreduce(np.ones(4) * (c.rank + 1))
        print(json.dumps({"rank": c.rank, "sum": total.tolist(), "argv": sys.argv[3:]}))


def cpus_mode(out: Path) -> None:
    import threading

    seen: dict[str, list[int]] = {"main": sorted(os.sched_getaffinity(0))}
    t = threading.Thread(target=lambda: seen.update(thread=sorted(os.sched_getaffinity(0))))
    t.start()
    t.join(MAX_WAIT)
    _write(out / f"cpus{_rank()}.json", json.dumps(seen))


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    if mode == "env":
        env_mode(out)
    elif mode == "lines":
        lines_mode(out)
    elif mode == "fail":
        fail_mode(out, sys.argv[3], int(sys.argv[4]), int(os.environ["PYTFCOMM_SIZE"]))
    elif mode == "stop":
        own_group = sys.argv[6:7] == ["own-group"]
        stop_mode(out, int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), own_group)
    elif mode == "wait":
        wait_mode(out)
    elif mode == "allreduce":
        allreduce_mode()
    elif mode == "cpus":
        cpus_mode(out)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
