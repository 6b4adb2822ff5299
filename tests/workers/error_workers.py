"""Rank functions for the error-path tests: each returns what the user would see."""

from __future__ import annotations

import os
import signal
import time

import numpy as np

import pytfcomm


def _describe(exc: BaseException) -> dict:
    return {"type": type(exc).__name__, "message": str(exc)}


def _then_usable(comm: pytfcomm.Communicator, out: dict) -> dict:
    """After a disagreement the communicator must still work, on every rank."""
    try:
        out["after"] = float(comm.allreduce(np.ones(4, np.float32))[0])
    except pytfcomm.CommError as again:
        out["after"] = _describe(again)
    return out


def mismatched_count(rank: int, size: int, addr: str, n: int = 1000) -> dict:
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        count = n if rank != 1 else n - 1
        try:
            comm.allreduce(np.ones(count, np.float32), algorithm="ring")
        except pytfcomm.CommError as exc:
            return _then_usable(comm, _describe(exc))
    return {"type": None}


def mismatched_dtype(rank: int, size: int, addr: str, n: int = 100) -> dict:
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        dt = np.float32 if rank else np.int32
        try:
            comm.allreduce(np.ones(n, dt))
        except pytfcomm.CommError as exc:
            return _then_usable(comm, _describe(exc))
    return {"type": None}


def mismatched_order(rank: int, size: int, addr: str, n: int = 10) -> dict:
    """Rank 0 broadcasts while the others all-reduce: a root only sends, yet it
    must learn of the disagreement in the same call, as every other rank."""
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        try:
            if rank == 0:
                comm.broadcast(np.ones(n, np.float32))
            else:
                comm.allreduce(np.ones(n, np.float32))
        except pytfcomm.CommError as exc:
            return _then_usable(comm, _describe(exc))
    return {"type": None}


def mismatched_root(rank: int, size: int, addr: str, n: int = 10) -> dict:
    """Every rank broadcasts from itself: nobody may keep its own data silently."""
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        try:
            comm.broadcast(np.full(n, rank, np.float32), root=rank)
        except pytfcomm.CommError as exc:
            return _then_usable(comm, _describe(exc))
    return {"type": None}


def peer_dies(rank: int, size: int, addr: str) -> dict:
    """The last rank kills itself in the middle of the job; the others must raise.

    The first all-reduce is inside the try too: the last rank returns from it
    once every record reached it, and may die before its own record reached
    every other rank (a SIGKILL drops what it had not written yet), so a
    survivor can already fail there, as it must."""
    comm = pytfcomm.init(rank=rank, size=size, addr=addr)
    t0 = time.monotonic()
    try:
        comm.allreduce(np.ones(10, np.float32))
        if rank == size - 1:
            os.kill(os.getpid(), signal.SIGKILL)
        t0 = time.monotonic()
        for _ in range(100):
            comm.allreduce(np.ones(1 << 16, np.float32))
    except pytfcomm.CommError as exc:
        out = _describe(exc)
        out["seconds"] = time.monotonic() - t0
        return out
    return {"type": None}


def peer_hangs(rank: int, size: int, addr: str) -> dict:
    """The last rank stops answering (SIGSTOP); the others must time out."""
    comm = pytfcomm.init(rank=rank, size=size, addr=addr, timeout=2.0)
    comm.barrier()
    if rank == size - 1:
        os.kill(os.getpid(), signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        comm.allreduce(np.ones(1000, np.float32))
    except pytfcomm.CommError as exc:
        out = _describe(exc)
        out["seconds"] = time.monotonic() - t0
        return out
    return {"type": None}


def local_identity(rank: int, size: int, addr: str) -> dict:
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        x = np.arange(100_000, dtype=np.float64) * (rank + 1)
        y = comm.allreduce(x, algorithm="hierarchical")
        ok = bool(np.array_equal(y, np.arange(100_000, dtype=np.float64) * sum(range(1, size + 1))))
        return {
            "local_rank": comm.local_rank,
            "local_size": comm.local_size,
            "num_hosts": comm.num_hosts,
            "auto": comm._core.choose_allreduce(1 << 24),
            "hierarchical_ok": ok,
        }


def from_environment(rank: int, size: int, addr: str) -> dict:
    """init() with no arguments: the launcher variables decide everything."""
    with pytfcomm.init() as comm:
        total = comm.allreduce(np.array([comm.rank + 1], np.int64))
        return {"rank": comm.rank, "size": comm.size, "total": int(total[0])}
