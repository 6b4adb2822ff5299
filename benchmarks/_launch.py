"""Start the N worker processes of one backend, enforce a hard timeout, collect rank files.

spawn mode: N ``python -m <module>`` processes, each in its own session, with BENCH_RANK,
BENCH_SIZE and BENCH_PORTS (free loopback ports, found by binding port 0) in the env.
mpirun mode: one ``mpirun -np N <mca args> python -m <module>``.
Every worker writes ``rank<r>.json`` into a private temp dir (see backends/_harness.py).
The processes are one job of ``pytfcomm._launch.local``: on failure, timeout, or a worker
that lingers after reporting done, the whole process tree is killed (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import glob
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from benchmarks._registry import (
    Spec,
    import_installed_pytfcomm,
    open_mpi_mpirun,
    worker_pythonpath,
)
from benchmarks.backends._harness import PROGRESS_TAG

FAIL_GRACE_S = 5.0  # after one rank fails, how long the others get before being killed
DONE_GRACE_S = 15.0  # after all ranks reported done, how long they get to exit


@dataclass
class LaunchResult:
    status: str  # "ok" | "failed" | "timeout"
    reason: str = ""
    wall_s: float = 0.0
    command: list[str] = field(default_factory=list)
    ranks: list[dict] = field(default_factory=list)  # the rank<r>.json documents
    log_tail: str = ""


def free_ports(k: int) -> list[int]:
    """k distinct free TCP ports on 127.0.0.1 (pytfcomm._launch.ports)."""
    import_installed_pytfcomm()
    from pytfcomm._launch.ports import free_ports as package_free_ports

    return package_free_ports("127.0.0.1", k)


def local_jobs():
    """``pytfcomm._launch.local``, the one helper that starts and stops local processes
    (the installed package's: the checkout's ``pytfcomm/`` may lack ``_core``)."""
    import_installed_pytfcomm()
    from pytfcomm._launch import local

    return local


def _read_ranks(outdir: str) -> list[dict]:
    docs = []
    for path in sorted(glob.glob(os.path.join(outdir, "rank*.json"))):
        with open(path) as f:
            docs.append(json.load(f))
    return sorted(docs, key=lambda d: d["rank"])


class _Echo:
    """Copies the rank-0 progress lines of a log file to our stderr while it is written."""

    def __init__(self, path: str, prefix: str) -> None:
        self.path, self.prefix, self.pos = path, prefix, 0

    def poll(self) -> None:
        try:
            with open(self.path, errors="replace") as f:
                f.seek(self.pos)
                chunk = f.read()
        except OSError:
            return
        lines = chunk.split("\n")
        self.pos += len(chunk.encode()) - len(lines[-1].encode())
        for line in lines[:-1]:
            if line.startswith(PROGRESS_TAG):
                msg = line.removeprefix(PROGRESS_TAG)
                print(f"  {self.prefix}: {msg}", file=sys.stderr, flush=True)


BIND_CHOICES = ("none", "core")


def bindings(bind_to: str, nproc: int) -> list[frozenset[int]] | None:
    """Each rank's CPUs under ``--bind-to core``: ``pytfcomm-run``'s own rule, from the
    installed package (the checkout's ``pytfcomm/`` may lack ``_core``); None for ``none``."""
    if bind_to == "none":
        return None
    import_installed_pytfcomm()
    from pytfcomm._launch.binding import local_bindings

    return local_bindings(nproc)


def pin_env(cpus: Sequence[frozenset[int]] | None) -> dict[str, str]:
    """What ``benchmarks._pin`` reads: every rank's CPU list (empty without binding)."""
    if cpus is None:
        return {}
    from pytfcomm._launch.binding import cpu_list

    return {"BENCH_CPUS": ";".join(cpu_list(c) for c in cpus)}


def _commands(
    spec: Spec, nproc: int, worker_args: list[str], pinned: bool = False
) -> list[list[str]]:
    py = [sys.executable, "-u", "-m", spec.module, *worker_args]
    if pinned:  # each rank binds itself before the library starts (benchmarks/_pin.py)
        py = [sys.executable, "-m", "benchmarks._pin", *py]
    if spec.launcher == "mpirun":
        root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        mpirun = open_mpi_mpirun() or "mpirun"
        return [[mpirun, "-np", str(nproc), *root, *spec.mpi_args, *py]]
    return [py] * nproc


def run_backend(
    spec: Spec,
    nproc: int,
    worker_args: list[str],
    timeout_s: float,
    verbose: bool = False,
    cpus: Sequence[frozenset[int]] | None = None,
) -> LaunchResult:
    """Run one backend to completion (or timeout); the caller turns ranks into a report.
    ``cpus``: rank r's CPUs (``bindings()``), None to leave every rank unbound."""
    with tempfile.TemporaryDirectory(prefix=f"allreduce-{spec.name}-") as outdir:
        args = [*worker_args, "--outdir", outdir]
        cmds = _commands(spec, nproc, args, pinned=cpus is not None)
        pypath = worker_pythonpath(os.path.join(outdir, "py"))
        base_env = dict(os.environ, PYTHONPATH=pypath, GLOO_SOCKET_IFNAME="lo")
        # No worker does linear algebra; OpenBLAS's idle threads would only
        # take CPU from the ranks on small machines (the same for every backend).
        base_env.setdefault("OPENBLAS_NUM_THREADS", "1")
        base_env.update(spec.env)
        base_env.update(pin_env(cpus))
        if spec.pythonpath:  # another build of pytfcomm comes first
            base_env["PYTHONPATH"] = spec.pythonpath + os.pathsep + pypath
        ports = ",".join(map(str, free_ports(max(nproc, 1))))
        envs = [
            dict(base_env, BENCH_RANK=str(r), BENCH_SIZE=str(nproc), BENCH_PORTS=ports)
            for r in range(len(cmds))
        ]
        logs = [os.path.join(outdir, f"proc{r}.log") for r in range(len(cmds))]
        echo = _Echo(logs[0], spec.name) if verbose else None
        done_at: list[float] = []

        def watch() -> str | None:
            """Echo rank 0's progress; end the job once its workers linger after done."""
            if echo:
                echo.poll()
            if not done_at:
                ranks = _read_ranks(outdir)
                if len(ranks) == nproc and all(d.get("done") for d in ranks):
                    done_at.append(time.monotonic())
            elif time.monotonic() - done_at[0] > DONE_GRACE_S:
                return "killed workers lingering after they reported done"
            return None

        job = local_jobs().run(
            cmds, envs, cwd=outdir, timeout_s=timeout_s, logs=logs,
            fail_grace_s=FAIL_GRACE_S, watch=watch,
        )  # fmt: skip
        res = LaunchResult(status=job.status, reason=job.reason, command=cmds[0])
        if job.status == "timeout":
            res.reason = f"exceeded --timeout {timeout_s:.0f}s"
        res.wall_s = job.wall_s
        if echo:
            echo.poll()
        res.ranks = _read_ranks(outdir)
        if res.status != "ok":
            res.log_tail = job.log_tail()
        return res
