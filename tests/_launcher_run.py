"""Running pytfcomm-run from a test: bounded, and killed with its whole process group.

Shared by the launcher tests (tests/launch) and the TF tests that launch their
workers through pytfcomm-run (tests/tf). Ranks run on 127.0.0.1, or in network
namespaces a test made (``prefix``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import proc_state
from _paths import WORKERS

WORKER = str(WORKERS / "launcher_worker.py")
FAKE_SSH = str(WORKERS / "launcher_fake_ssh.sh")
LAUNCHER = Path(sys.executable).with_name("pytfcomm-run")
PY = sys.executable


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTFCOMM_", "SLURM_", "OMPI_", "PMI", "TF_CONFIG"))
    }
    env.update(PYTFCOMM_CONNECT_TIMEOUT="30", PYTFCOMM_TIMEOUT="60", **extra)
    return env


def launch(
    *args: str,
    cwd: Path,
    timeout: float = 60,
    env: dict[str, str] | None = None,
    prefix: Sequence[str] = (),
) -> subprocess.CompletedProcess[bytes]:
    """Run the launcher to completion (killed with its group at the deadline)."""
    with started(*args, cwd=cwd, env=env, prefix=prefix) as proc:
        out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@contextlib.contextmanager
def started(
    *args: str, cwd: Path, env: dict[str, str] | None = None, prefix: Sequence[str] = ()
) -> Iterator[subprocess.Popen[bytes]]:
    """The launcher with ``args``, run through ``prefix`` (e.g. ``ip netns exec NS``,
    which execs it: the same process group)."""
    proc = subprocess.Popen(
        [*prefix, str(LAUNCHER), *args],
        cwd=cwd,
        env=env or _env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone); pids come from our workers only."""
    return proc_state.state(pid) not in (None, "Z", "X")


def wait_gone(pids: list[int], timeout: float = 10) -> list[int]:
    """The pids still running after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def wait_files(paths: list[Path], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        assert time.monotonic() < deadline, f"never written: {[p for p in paths if not p.exists()]}"
        time.sleep(0.05)
