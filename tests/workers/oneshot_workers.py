"""Rank functions for tests/core/test_oneshot.py: the one-shot shared-memory all-reduce."""

from __future__ import annotations

import os
import signal
import time

import numpy as np

import pytfcomm


def _describe(exc: BaseException) -> dict:
    return {"type": type(exc).__name__, "message": str(exc)}


def algorithms_picked(rank: int, size: int, addr: str, nbytes: list[int]) -> dict:
    """What `auto` picks per size, and the result of each call."""
    picked, ok = {}, True
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        for n in nbytes:
            x = np.full(n // 4, rank + 1, np.float32)
            y = comm.allreduce(x)
            picked[n] = comm._core.last_algorithm()
            ok &= bool(np.all(y == size * (size + 1) / 2))
    return {"picked": picked, "ok": ok}


def refused(rank: int, size: int, addr: str, transport: str, count: int) -> dict:
    """Asking for the one-shot algorithm where it cannot run."""
    with pytfcomm.init(rank=rank, size=size, addr=addr, transport=transport) as comm:
        try:
            comm.allreduce(np.ones(count, np.float32), algorithm="oneshot")
            return {"type": None}
        except pytfcomm.CommError as exc:
            out = _describe(exc)
        # An argument error leaves the communicator usable.
        out["after"] = float(comm.allreduce(np.ones(4, np.float32))[0])
        return out


def mismatch(rank: int, size: int, addr: str, case: str) -> dict:
    """Ranks that disagree on a small collective all raise, then go on."""
    with pytfcomm.init(rank=rank, size=size, addr=addr, timeout=20) as comm:
        comm.allreduce(np.ones(8, np.float32))  # one good exchange first
        try:
            if case == "count":
                comm.allreduce(np.ones(100 + (rank == 1), np.float32))
            elif case == "dtype":
                comm.allreduce(np.ones(100, np.float64 if rank == 1 else np.float32))
            elif case == "op":
                comm.allreduce(np.ones(100, np.float32), op="max" if rank == 1 else "sum")
            elif case == "algorithm":  # rank 1 runs the ring while the others publish
                alg = "ring" if rank == 1 else "oneshot"
                comm.allreduce(np.ones(100, np.float32), algorithm=alg)
            elif case == "collective":  # rank 1 broadcasts while the others all-reduce
                if rank == 1:
                    comm.broadcast(np.ones(100, np.float32), root=1)
                    comm.barrier()
                else:
                    comm.allreduce(np.ones(100, np.float32))
            return {"type": None}
        except pytfcomm.CommError as exc:
            out = _describe(exc)
        out["after"] = float(comm.allreduce(np.ones(2, np.float32))[0])
        return out


def peer_dies(rank: int, size: int, addr: str) -> dict:
    """The last rank is killed between one-shot all-reduces; the others raise."""
    comm = pytfcomm.init(rank=rank, size=size, addr=addr, timeout=30)
    try:
        comm.allreduce(np.ones(8, np.float32))
        if rank == size - 1:
            os.kill(os.getpid(), signal.SIGKILL)
        t0 = time.monotonic()
        try:
            for _ in range(1000):
                comm.allreduce(np.ones(256, np.float32))
            return {"type": None}
        except pytfcomm.CommError as exc:
            return {**_describe(exc), "seconds": time.monotonic() - t0}
    finally:
        comm.close()


def many_in_a_row(rank: int, size: int, addr: str, iters: int) -> dict:
    """Back-to-back one-shot all-reduces with rank-dependent pauses: the double
    buffer must never hand a rank a peer's next input instead of this one's."""
    rng = np.random.default_rng(rank)
    bad = 0
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        for i in range(iters):
            x = np.full(64 + i % 7, i * size + rank, np.int64)
            y = comm.allreduce(x, algorithm="oneshot")
            bad += int(np.any(y != i * size * size + size * (size - 1) // 2))
            if rng.random() < 0.05:
                time.sleep(0.001)
            if i % 97 == 0:  # interleave a collective that is not one-shot
                z = comm.broadcast(np.full(3, i, np.int64), root=i % size)
                bad += int(np.any(z != i))
    return {"bad": bad}
