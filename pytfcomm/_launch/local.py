"""Local processes started, watched and stopped as one job, with a bound on time.

The one helper that benchmarks, the tests' harness and scripts use to start ranks on this
machine (``pytfcomm-run`` supervises its own ranks in :mod:`.procs`); free ports come from
:mod:`.ports`.

* :func:`start`: one process in its own session (so a signal to its group reaches whatever
  it starts), stdin from ``/dev/null``, stdout and stderr into a log file (or inherited).
* :func:`kill_tree`: SIGTERM, then SIGKILL, to processes, their process groups and every
  descendant found in ``/proc`` (``mpirun``'s children and ``ip netns exec``'s may leave the
  group), bounded; every process given is reaped.
* :func:`run`: N processes to completion. The job ends when all exited, when one failed and
  the others did not follow within ``fail_grace_s``, at ``timeout_s``, or when ``watch``
  says so; then the whole tree is killed. The result has each exit code and the log files.
"""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

__all__ = ["JobResult", "kill_tree", "run", "start"]

KILL_GRACE_S = 3.0  # after SIGTERM, how long the tree gets before SIGKILL
_REAP_S = 10.0  # how long a killed process gets to be reaped


class Proc(Protocol):
    """What :func:`kill_tree` needs of a process: ``subprocess.Popen`` or the like."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


def start(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: str | os.PathLike[str],
    log: str | os.PathLike[str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own session, stdin ``/dev/null``; stdout and stderr go into
    ``log`` (created anew) or, without one, wherever ours go."""
    if log is None:
        return subprocess.Popen(
            list(argv), env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL, start_new_session=True
        )
    with open(log, "wb") as out:  # the child keeps its own copy
        return subprocess.Popen(
            list(argv), env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def _descendants(pids: Sequence[int]) -> list[int]:
    """Every live descendant of ``pids``, from ``/proc`` (children that left the group too)."""
    children: dict[int, list[int]] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.split("/")[2]))
    out, todo = [], list(pids)
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_tree(procs: Sequence[Proc], term_grace_s: float = KILL_GRACE_S) -> None:
    """Stop every process of ``procs`` that still runs, with its group and descendants:
    SIGTERM first (none when ``term_grace_s`` is 0), SIGKILL to what is left after
    ``term_grace_s``; then reap them all (bounded)."""
    live = [p for p in procs if p.poll() is None]
    sigs = (signal.SIGTERM, signal.SIGKILL) if term_grace_s > 0 else (signal.SIGKILL,)
    for sig in sigs:
        # Each launched process leads its own session; descendants may have left it.
        pids = _descendants([p.pid for p in live]) + [p.pid for p in live]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        for p in live:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, sig)
        if sig == signal.SIGKILL:
            break
        deadline = time.monotonic() + term_grace_s
        while time.monotonic() < deadline and any(p.poll() is None for p in live):
            time.sleep(0.05)
        live = [p for p in live if p.poll() is None]
        if not live:
            break
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=_REAP_S)


@dataclass
class JobResult:
    """How a :func:`run` ended. ``status``: "ok" (every process exited 0, or ``watch``
    ended the job: then ``reason`` says why), "failed" or "timeout"; ``codes``: each
    process's exit code (negative: killed by that signal), None if it was still running
    when the job ended; ``logs``: each process's log file, None where output was inherited."""

    status: str
    reason: str = ""
    codes: list[int | None] = field(default_factory=list)
    wall_s: float = 0.0
    logs: list[Path | None] = field(default_factory=list)

    def log_tail(self, lines: int = 25) -> str:
        """The last ``lines`` lines of each log, each under a ``--- name`` header."""
        out = []
        for path in self.logs:
            if path is None:
                continue
            try:
                text = path.read_text(errors="replace").splitlines(keepends=True)
            except OSError:
                text = []
            out.append(f"--- {path.name}\n" + "".join(text[-lines:]))
        return "".join(out)


def run(
    argvs: Sequence[Sequence[str]],
    envs: Sequence[Mapping[str, str]],
    cwd: str | os.PathLike[str],
    timeout_s: float,
    logs: Sequence[str | os.PathLike[str] | None] | None = None,
    fail_grace_s: float = 0.0,
    watch: Callable[[], str | None] | None = None,
    tick_s: float = 0.25,
    term_grace_s: float = KILL_GRACE_S,
) -> JobResult:
    """Run ``argvs[i]`` with ``envs[i]`` (logging to ``logs[i]``), all at once, and wait.

    After a process exits non-zero the others get ``fail_grace_s`` to exit on their own
    (they may be about to report the same failure); ``watch``, called every ``tick_s``,
    ends the job by returning the reason. However it ends, what still runs is killed
    (:func:`kill_tree`) before this returns, within ``timeout_s`` plus the kill's bound.
    """
    if len(envs) != len(argvs) or (logs is not None and len(logs) != len(argvs)):
        raise ValueError("run: argvs, envs and logs must have one entry per process")
    log_paths = [Path(p) if p is not None else None for p in (logs or [None] * len(argvs))]
    t0 = time.monotonic()
    procs: list[subprocess.Popen[bytes]] = []
    res = JobResult(status="ok", logs=log_paths)
    try:
        for argv, env, log in zip(argvs, envs, log_paths, strict=True):
            procs.append(start(argv, env, cwd, log))
        fail_at = None
        while True:
            rcs = [p.poll() for p in procs]
            failed = next((i for i, rc in enumerate(rcs) if rc not in (None, 0)), None)
            now = time.monotonic()
            if all(rc is not None for rc in rcs):
                if failed is not None:
                    res.status, res.reason = "failed", f"process {failed} exited {rcs[failed]}"
                break
            if failed is not None:
                fail_at = now if fail_at is None else fail_at
                if now - fail_at >= fail_grace_s:
                    res.status, res.reason = "failed", f"process {failed} exited {rcs[failed]}"
                    break
            if now - t0 > timeout_s:
                res.status, res.reason = "timeout", f"exceeded the {timeout_s:.0f} s time limit"
                break
            stop = watch() if watch is not None else None
            if stop:
                res.reason = stop
                break
            time.sleep(tick_s)
    finally:
        res.codes = [p.poll() for p in procs]
        kill_tree(procs, term_grace_s)
        res.wall_s = time.monotonic() - t0
    return res
