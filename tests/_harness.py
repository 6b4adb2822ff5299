"""Run a test function in N processes on 127.0.0.1, with hard time limits.

``run_ranks(n, "module:function", *args)`` starts n Python processes; each
imports ``module`` from tests/workers and calls ``function(rank, size, addr,
*args)``. Return values come back as a list indexed by rank. If any rank
raises, or the whole run passes its deadline, every process is killed and
``RankFailure`` reports what each rank said. Ranks of TensorFlow workers are
forked from a process that imported TF once, where that changes nothing they
run (tests/_warm.py).
"""

from __future__ import annotations

import os
import pickle
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import _warm
from _warm import WarmProc

from pytfcomm._launch import local
from pytfcomm._launch.ports import free_port

TESTS = Path(__file__).resolve().parent
ENTRY = TESTS / "_rank_entry.py"


class RankFailure(AssertionError):
    """At least one rank failed; ``outcomes`` maps rank -> (ok, value or error text)."""

    def __init__(self, message: str, outcomes: dict[int, tuple[bool, Any]]):
        super().__init__(message)
        self.outcomes = outcomes


def start_ranks(
    n: int,
    target: str,
    *args: Any,
    env: Mapping[str, str] | None = None,
    per_rank_env: list[Mapping[str, str]] | None = None,
    workdir: Path,
    port: int | None = None,
    host: str = "127.0.0.1",
    per_rank_prefix: list[list[str]] | None = None,
) -> tuple[list[subprocess.Popen | WarmProc], list[Path], str]:
    """Start the ranks without waiting; see run_ranks.

    ``per_rank_prefix[r]`` is put in front of rank r's command (e.g. ``ip netns
    exec NS``); ``host`` is rank 0's rendezvous host.
    """
    port = port or free_port()
    addr = f"{host}:{port}"
    args_path = workdir / "args.pkl"
    args_path.write_bytes(pickle.dumps(args))
    procs: list[subprocess.Popen | WarmProc] = []
    results = []
    for r in range(n):
        child_env = dict(os.environ)
        child_env.setdefault("PYTFCOMM_CONNECT_TIMEOUT", "30")
        child_env.setdefault("PYTFCOMM_TIMEOUT", "60")
        child_env.update(env or {})
        if per_rank_env:
            child_env.update(per_rank_env[r])
        out = workdir / f"rank{r}.pkl"
        results.append(out)
        paths = [str(args_path), str(out)]
        argv = [str(ENTRY), target, str(r), str(n), addr, *paths]
        log_path = workdir / f"rank{r}.log"
        warm = None if per_rank_prefix else _warm.spawn(argv, child_env, workdir, log_path)
        if warm is not None:
            procs.append(warm)
            continue
        argv = [*(per_rank_prefix[r] if per_rank_prefix else []), sys.executable, *argv]
        # cwd: never the repo root, tests must import the installed package
        procs.append(local.start(argv, child_env, cwd=workdir, log=log_path))
    return procs, results, addr


def kill_all(procs: list[subprocess.Popen | WarmProc]) -> None:
    """SIGKILL every rank still running, with its group and descendants; reap them."""
    local.kill_tree(procs, term_grace_s=0)


def collect_survivors(
    procs: list[subprocess.Popen | WarmProc],
    results: list[Path],
    workdir: Path,
    skip: int,
    timeout: float = 60,
) -> dict[int, tuple[bool, Any]]:
    """Wait for every rank but ``skip`` (a stopped or dying one), kill all, load results."""
    try:
        for r, p in enumerate(procs):
            if r != skip:
                try:
                    p.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    break
    finally:
        kill_all(procs)
    return collect(procs, results, workdir, 1)


def collect(
    procs: list[subprocess.Popen | WarmProc], results: list[Path], workdir: Path, timeout: float
) -> dict[int, tuple[bool, Any]]:
    """Wait for every rank (killing all at the deadline) and load what each returned."""
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        for p in procs:
            left = deadline - time.monotonic()
            try:
                p.wait(timeout=max(left, 0.01))
            except subprocess.TimeoutExpired:
                timed_out = True
                break
    finally:
        kill_all(procs)
    outcomes: dict[int, tuple[bool, Any]] = {}
    for r, path in enumerate(results):
        log = (workdir / f"rank{r}.log").read_text(errors="replace")[-4000:]
        if path.exists():
            outcomes[r] = pickle.loads(path.read_bytes())
        elif timed_out and procs[r].returncode in (None, -signal.SIGKILL):
            outcomes[r] = (False, f"killed at the {timeout:.0f} s test deadline\n{log}")
        else:
            outcomes[r] = (False, f"exited with code {procs[r].returncode}, no result\n{log}")
    return outcomes


def run_ranks(
    n: int,
    target: str,
    *args: Any,
    timeout: float = 120,
    env: Mapping[str, str] | None = None,
    per_rank_env: list[Mapping[str, str]] | None = None,
    allow_failure: bool = False,
    host: str = "127.0.0.1",
    port: int | None = None,
    per_rank_prefix: list[list[str]] | None = None,
    victim: int | None = None,
) -> list[Any]:
    """Run ``target`` in n ranks and return each rank's return value (see module doc).

    With ``allow_failure`` the raw outcomes (ok, value-or-error) are returned
    instead of raising on a failed rank. ``victim`` names a rank the test stops or
    hangs on purpose: only the others are waited for (up to ``timeout``), then it
    is killed, so the test does not sit out the victim's own sleep.
    """
    with tempfile.TemporaryDirectory(prefix="pytfcomm-test-") as tmp:
        workdir = Path(tmp)
        procs, results, _ = start_ranks(
            n,
            target,
            *args,
            env=env,
            per_rank_env=per_rank_env,
            workdir=workdir,
            host=host,
            port=port,
            per_rank_prefix=per_rank_prefix,
        )
        if victim is None:
            outcomes = collect(procs, results, workdir, timeout)
        else:
            outcomes = collect_survivors(procs, results, workdir, victim, timeout)
    if allow_failure:
        return [outcomes[r] for r in range(n)]
    bad = {r: o for r, o in outcomes.items() if not o[0]}
    if bad:
        text = "\n".join(f"--- rank {r}:\n{o[1]}" for r, o in sorted(bad.items()))
        raise RankFailure(f"{len(bad)} of {n} ranks failed in {target}:\n{text}", outcomes)
    return [outcomes[r][1] for r in range(n)]


_REFUSED_ONE = re.compile(r"refused connection from ")
_REFUSED_MANY = re.compile(r"refused (\d+) (?:more )?connections? from ")


def logged_refusals(log: str) -> tuple[int, int]:
    """(lines about refused connections, refusals they account for) in a rank's log.

    A listener logs its first refusals one line each ("refused connection from A to
    W: why"), then summaries ("refused N [more] connection(s) from A to W in the last
    T s ...", csrc/transport/tcp/handshake.h RefusalLog).
    """
    lines = counted = 0
    for line in log.splitlines():
        many = _REFUSED_MANY.search(line)
        if many:
            lines, counted = lines + 1, counted + int(many.group(1))
        elif _REFUSED_ONE.search(line):
            lines, counted = lines + 1, counted + 1
    return lines, counted


def check_matrix(results: list[dict]) -> None:
    """No rank reported a failure, and every rank holds the same result bytes.

    ``results`` are per-rank dicts with ``failures`` (list of text) and
    ``digests`` (case -> digest), as the matrix workers return them.
    """
    for r, res in enumerate(results):
        assert not res["failures"], f"rank {r}: " + "\n".join(res["failures"][:20])
    first = results[0]["digests"]
    for r, res in enumerate(results[1:], start=1):
        differ = [k for k in first if res["digests"][k] != first[k]]
        assert not differ, f"rank {r} result bytes differ from rank 0 in {differ[:10]}"


def more_ranks_than_cores(power_of_two: bool = False) -> int:
    """The fewest ranks (at least 4 and a power of two if asked) that outnumber this
    machine's cores, as pytfcomm counts them; skips where that would take over 16."""
    import pytest

    n = (os.cpu_count() or 1) + 1
    if power_of_two:
        n = max(4, 1 << (n - 1).bit_length())
    if n > 16:
        pytest.skip(f"{n} ranks would be needed to outnumber this machine's cores")
    return n
