"""Ctrl-C (SIGINT) ends a blocked collective or init() within about a second: the
caller gets KeyboardInterrupt, the communicator is closed and its peers are told
(docs/reliability.md)."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

import pytest
from _harness import collect, free_port, start_ranks


def _signal_when_blocked(workdir: Path, pid: int, wait: float = 0.5) -> float:
    """Send SIGINT `wait` seconds after rank 0 said it is about to block."""
    mark = workdir / "blocked0"
    deadline = time.monotonic() + 60
    while not mark.exists():
        assert time.monotonic() < deadline, "the rank never got to block"
        time.sleep(0.01)
    time.sleep(wait)
    t = time.time()
    os.kill(pid, signal.SIGINT)
    return t


def _assert_told_of_the_interrupt(peer: dict) -> None:
    """Rank 1's call learns that rank 0 was interrupted (PeerLostError), or its engine
    thread already had and closed the communicator (CommClosedError naming that loss);
    either way within a few seconds."""
    assert peer["type"] in ("PeerLostError", "CommClosedError"), peer
    if peer["type"] == "CommClosedError":
        assert "closed after an earlier error: peer lost" in peer["message"], peer
    assert "interrupted by the user" in peer["message"] and "rank 0" in peer["message"], peer
    assert peer["seconds"] < 5, peer


@pytest.mark.parametrize("transport", ["tcp", "shm"])
@pytest.mark.parametrize("n", [16, 1 << 18], ids=["small", "large"])
def test_ctrl_c_in_a_blocked_collective(transport: str, n: int) -> None:
    with tempfile.TemporaryDirectory(prefix="pytfcomm-sigint-") as tmp:
        workdir = Path(tmp)
        procs, results, _ = start_ranks(
            2,
            "interrupt_workers:interrupted_collective",
            n,
            workdir=workdir,
            env={"PYTFCOMM_TRANSPORT": transport, "PYTFCOMM_TIMEOUT": "600"},
        )
        t_sent = _signal_when_blocked(workdir, procs[0].pid)
        outcomes = collect(procs, results, workdir, 60)
    (ok0, r0), (ok1, r1) = outcomes[0], outcomes[1]
    assert ok0 and ok1, outcomes
    assert r0["type"] == "KeyboardInterrupt", r0
    assert r0["t_raised"] - t_sent < 1.5, r0["t_raised"] - t_sent
    assert r0["closed"], r0
    # The peer is told why, at once: at its first call, or, when rank 0's input
    # had already reached it, after that call completed with the right sum.
    assert r1["results"] in ([], [2.0]), r1
    _assert_told_of_the_interrupt(r1)


@pytest.mark.parametrize("transport", ["tcp", "shm"])
@pytest.mark.parametrize("case", ["eager_small", "function_large", "reduce_scatter", "alltoall"])
def test_ctrl_c_in_a_tf_op(transport: str, case: str) -> None:
    """TF's caller waits inside TensorFlow, where Python runs no signal handler, for
    up to PYTFCOMM_TIMEOUT (600 s here); pytfcomm's SIGINT handler stops the op."""
    pytest.importorskip("tensorflow")
    with tempfile.TemporaryDirectory(prefix="pytfcomm-sigint-") as tmp:
        workdir = Path(tmp)
        procs, results, _ = start_ranks(
            2,
            "interrupt_workers:interrupted_tf_op",
            case,
            workdir=workdir,
            env={"PYTFCOMM_TRANSPORT": transport, "PYTFCOMM_TIMEOUT": "600"},
        )
        t_sent = _signal_when_blocked(workdir, procs[0].pid)
        deadline = time.monotonic() + 60
        while not (workdir / "raised").exists():
            assert time.monotonic() < deadline, "rank 0's op never returned"
            time.sleep(0.01)
        time.sleep(0.3)
        os.kill(procs[0].pid, signal.SIGINT)  # nothing pending now: Python's own
        outcomes = collect(procs, results, workdir, 90)
    (ok0, r0), (ok1, r1) = outcomes[0], outcomes[1]
    assert ok0 and ok1, outcomes
    assert r0["type"] == "CancelledError", r0
    assert "interrupted by the user (Ctrl-C)" in r0["message"], r0
    assert "other ranks were told" in r0["message"], r0
    assert r0["t_raised"] - t_sent < 1.5, r0["t_raised"] - t_sent
    assert r0["closed"], r0
    assert r0["second"] == "KeyboardInterrupt", r0
    # At most one call pairs with what rank 0 asked before it gave up (and differs).
    assert len(r1["before"]) <= 1 and all("rank 0 called" in m for m in r1["before"]), r1
    _assert_told_of_the_interrupt(r1)


def test_ctrl_c_in_keras_fit_waiting_for_a_stalled_worker() -> None:
    """What a user does when a 2-worker fit hangs: Ctrl-C. fit raises on that worker at
    once and on the other when it next reaches a collective, instead of both waiting
    for PYTFCOMM_TIMEOUT."""
    pytest.importorskip("tensorflow")
    with tempfile.TemporaryDirectory(prefix="pytfcomm-sigint-") as tmp:
        workdir = Path(tmp)
        procs, results, _ = start_ranks(
            2,
            "interrupt_workers:interrupted_fit",
            [free_port(), free_port()],
            workdir=workdir,
            env={"PYTFCOMM_TIMEOUT": "600"},
        )
        t_sent = _signal_when_blocked(workdir, procs[0].pid, wait=1.0)
        outcomes = collect(procs, results, workdir, 180)
    (ok0, r0), (ok1, r1) = outcomes[0], outcomes[1]
    assert ok0 and ok1, outcomes
    assert r0["type"] == "CancelledError", r0
    assert "interrupted by the user (Ctrl-C)" in r0["message"], r0
    assert r0["t_raised"] - t_sent < 1.5, r0["t_raised"] - t_sent
    assert r1["type"] == "UnavailableError", r1  # PeerLostError's TF class
    assert "interrupted by the user" in r1["message"], r1


def test_ctrl_c_in_init() -> None:
    """Rank 0 of 2 waits in init() for a rank 1 that never comes."""
    with tempfile.TemporaryDirectory(prefix="pytfcomm-sigint-") as tmp:
        workdir = Path(tmp)
        procs, results, _ = start_ranks(
            2,
            "interrupt_workers:interrupted_init",
            workdir=workdir,
            env={"PYTFCOMM_CONNECT_TIMEOUT": "600"},
        )
        procs[1].kill()  # rank 1 never joins
        procs[1].wait()
        t_sent = _signal_when_blocked(workdir, procs[0].pid, wait=1.0)
        outcomes = collect(procs[:1], results[:1], workdir, 30)
    ok, res = outcomes[0]
    assert ok, res
    assert res["type"] == "KeyboardInterrupt", res
    assert res["t_raised"] - t_sent < 1.5, res["t_raised"] - t_sent
