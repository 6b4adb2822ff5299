"""Rank functions that time how long a rank takes to raise in each misuse case
(scripts/measure_reliability.py; the tests check the same cases for correctness)."""

from __future__ import annotations

import time

import numpy as np

import pytfcomm


def timed_mismatch(rank: int, size: int, addr: str, case: str, n: int, transport: str) -> dict:
    """One disagreeing collective; how long each rank took to raise, and whether
    the communicator still works afterwards."""
    with pytfcomm.init(rank=rank, size=size, addr=addr, transport=transport) as comm:
        comm.barrier()
        x = np.ones(n, np.float32)
        t0 = time.perf_counter()
        try:
            if case == "kind":
                if rank == 0:
                    comm.broadcast(x)
                else:
                    comm.allreduce(x)
            elif case == "root":
                comm.broadcast(x, root=rank)
            elif case == "count":
                comm.allreduce(np.ones(n - (rank == 1), np.float32))
            out = {"type": None}
        except pytfcomm.CommError as exc:
            out = {"type": type(exc).__name__}
        out["ms"] = (time.perf_counter() - t0) * 1e3
        out["after"] = float(comm.allreduce(np.ones(2, np.float32))[0])
        return out
