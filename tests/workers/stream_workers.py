"""Rank functions for tests/core/test_tcp_streams.py (multi-stream TCP between hosts)."""

from __future__ import annotations

import os
import signal
import time

import core_workers
import numpy as np

import pytfcomm


def _describe(exc: BaseException) -> dict:
    return {"type": type(exc).__name__, "message": str(exc)}


def tcp_sockets() -> int:
    """Sockets this process holds (data connections plus shm liveness sockets)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:  # the listing's own descriptor, gone already
            pass
    return n


def matrix_and_sockets(rank: int, size: int, addr: str, sizes: list[int]) -> dict:
    """Socket count right after init, then the all-reduce matrix and the other
    collectives, all over striped connections."""
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        sockets = tcp_sockets()
        big = np.arange((1 << 21) + 5, dtype=np.float64) * (rank + 1)
        ok = bool(np.array_equal(comm.allreduce(big), big / (rank + 1) * size * (size + 1) / 2))
    out = core_workers.allreduce_matrix(rank, size, addr, sizes, ["ring", "hierarchical"], False)
    other = core_workers.other_collectives(rank, size, addr, [0, 3, 70_001])
    out["failures"] += other["failures"]
    out["digests"].update(other["digests"])
    out["sockets"], out["big_ok"] = sockets, ok
    return out


def killed_mid_transfer(rank: int, size: int, addr: str) -> dict:
    """The last rank dies while striped 16 MiB all-reduces are in flight."""
    comm = pytfcomm.init(rank=rank, size=size, addr=addr, timeout=30)
    x = np.ones(1 << 22, np.float32)
    comm.allreduce(x)
    if rank == size - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    try:
        for _ in range(50):
            comm.allreduce(x)
        return {"type": None}
    except pytfcomm.CommError as exc:
        return {**_describe(exc), "seconds": time.monotonic() - t0}
    finally:
        comm.close()


def init_only(rank: int, size: int, addr: str) -> dict:
    try:
        with pytfcomm.init(rank=rank, size=size, addr=addr, connect_timeout=20) as comm:
            comm.barrier()
            return {"type": None}
    except pytfcomm.CommError as exc:
        return _describe(exc)


def big_exchanges(rank: int, size: int, addr: str, iters: int) -> dict:
    """Back-to-back 64 MiB all-reduces, all-gathers and broadcasts over TCP with
    small pipeline segments: the pattern that used to wedge loopback TCP."""
    worst, bad = 0.0, 0
    with pytfcomm.init(rank=rank, size=size, addr=addr, transport="tcp", timeout=30) as comm:
        x = np.full((64 << 20) // 4, rank + 1, np.float32)
        y = np.empty_like(x)
        half = np.full(x.size // size, rank, np.float32)
        for i in range(iters):
            t0 = time.monotonic()
            comm.allreduce(x, out=y)
            bad += int(y[0] != size * (size + 1) / 2 or y[-1] != y[0])
            g = comm.allgather(half)
            bad += int(g[0] != 0 or g[-1] != size - 1)
            comm.broadcast(y, root=i % size)
            worst = max(worst, time.monotonic() - t0)
    return {"bad": bad, "worst": worst}


def close_right_after_broadcast(
    rank: int, size: int, addr: str, transport: str, ports: list[int]
) -> dict:
    """One job per port, ending with a 16 MiB broadcast from the last rank,
    which closes at once (results are checked after the close: checking first
    would give the tail time to arrive). Its kernel may still hold the tail
    of the data then; closing must not reset the connection under it (the
    receiver used to get 'Connection reset by peer' in the last collective
    while the root returned fine)."""
    host = addr.rsplit(":", 1)[0]
    failures: list[str] = []
    want = size * (size + 1) // 2 * size**2  # three sums, broadcasts between
    bad = 0
    for port in ports:
        comm = pytfcomm.init(
            rank=rank, size=size, addr=f"{host}:{port}", transport=transport, timeout=30
        )
        y = np.full((16 << 20) // 4, rank + 1, np.float32)
        try:
            for _ in range(3):
                comm.allreduce(y, out=y)
                y = comm.broadcast(y, root=size - 1)
        except pytfcomm.CommError as exc:
            failures.append(f"{type(exc).__name__}: {exc}")
            y = None
        comm.close()
        bad += int(y is not None and not (y == want).all())
    return {"failures": failures, "bad": bad, "jobs": len(ports)}
