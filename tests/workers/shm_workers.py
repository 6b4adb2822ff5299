"""Functions run inside each rank by tests/core/test_shm.py (see tests/_harness.py)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np

import pytfcomm

SHM_DIR = Path("/dev/shm")


def segments_of(pids: list[int]) -> list[str]:
    """Names in /dev/shm that pytfcomm segments of these processes would have."""
    prefixes = tuple(f"pytfcomm-{pid}-" for pid in pids)
    return sorted(p.name for p in SHM_DIR.iterdir() if p.name.startswith(prefixes))


def mapped_segments() -> list[str]:
    """pytfcomm segments this process maps: they must all be unlinked already."""
    lines = Path("/proc/self/maps").read_text().splitlines()
    return sorted({ln.split(None, 5)[-1] for ln in lines if "/pytfcomm-" in ln})


def _describe(exc: BaseException) -> dict:
    return {"type": type(exc).__name__, "message": str(exc)}


def normal_run(rank: int, size: int, addr: str, transport: str) -> dict:
    """Collectives over shared memory; what is mapped and what is left in /dev/shm."""
    with pytfcomm.init(rank=rank, size=size, addr=addr, transport=transport) as comm:
        comm.barrier()  # every rank finished its setup: every name is unlinked
        x = np.arange(1 << 18, dtype=np.float32) + rank
        y = comm.allreduce(x)
        ok = bool(np.array_equal(y, np.arange(1 << 18, dtype=np.float32) * size + sum(range(size))))
        mapped = mapped_segments()
        comm.barrier()
    return {"pid": os.getpid(), "ok": ok, "mapped": mapped, "after": mapped_segments()}


def raise_after_init(rank: int, size: int, addr: str) -> dict:
    """Rank 1 raises out of its collectives without closing; the others see it go."""
    comm = pytfcomm.init(rank=rank, size=size, addr=addr, transport="shm")
    comm.barrier()
    if rank == 1:
        raise RuntimeError("user code failed on purpose")
    try:
        comm.allreduce(np.ones(1000, np.float32), timeout=20)
        return {"pid": os.getpid(), "type": None}
    except pytfcomm.CommError as exc:
        return {"pid": os.getpid(), **_describe(exc)}


def mismatch(rank: int, size: int, addr: str) -> dict:
    """A mismatch over shared memory is an error on every rank, and the job ends cleanly."""
    with pytfcomm.init(rank=rank, size=size, addr=addr, transport="shm") as comm:
        try:
            comm.allreduce(np.ones(1000 + (rank == 0), np.float32), timeout=20)
            return {"pid": os.getpid(), "type": None}
        except pytfcomm.CommError as exc:
            after = float(comm.allreduce(np.ones(4, np.float32))[0])  # still usable
            return {"pid": os.getpid(), **_describe(exc), "after": after}


def killed(rank: int, size: int, addr: str, pid_dir: str) -> dict:
    """The last rank dies by SIGKILL in the middle of a large all-reduce."""
    Path(pid_dir, f"{rank}.pid").write_text(str(os.getpid()))
    comm = pytfcomm.init(rank=rank, size=size, addr=addr, transport="shm")
    comm.allreduce(np.ones(1 << 20, np.float32))
    if rank == size - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        for _ in range(100):
            comm.allreduce(np.ones(1 << 22, np.float32), timeout=30)
        return {"pid": os.getpid(), "type": None}
    except pytfcomm.CommError as exc:
        return {"pid": os.getpid(), "seconds": time.monotonic() - start, **_describe(exc)}
    finally:
        comm.close()


def idle_wait(rank: int, size: int, addr: str, delay: float) -> dict:
    """Rank 0 waits `delay` seconds in an all-reduce for a late rank 1: CPU time used."""
    with pytfcomm.init(rank=rank, size=size, addr=addr, transport="shm") as comm:
        comm.barrier()
        if rank == 1:
            time.sleep(delay)
        cpu0, wall0 = time.process_time(), time.monotonic()
        comm.allreduce(np.ones(16, np.float32))
        return {"cpu": time.process_time() - cpu0, "wall": time.monotonic() - wall0}


def host_ids(rank: int, size: int, addr: str, transport: str) -> dict:
    """init() on ranks told they run on different hosts."""
    try:
        with pytfcomm.init(rank=rank, size=size, addr=addr, transport=transport) as comm:
            y = comm.allreduce(np.full(100_000, rank + 1, np.int64), algorithm="hierarchical")
            return {"ok": bool(np.all(y == size * (size + 1) // 2)), "mapped": mapped_segments()}
    except pytfcomm.CommError as exc:
        return _describe(exc)


def large_sums(rank: int, size: int, addr: str, counts: list[int]) -> list[bool]:
    """Sum all-reduces of float32 ``counts`` (rank r gives r + 1 + i % 7): each exact?"""
    ok = []
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        for count in counts:
            pattern = np.arange(count, dtype=np.float32) % 7
            got = comm.allreduce(pattern + (rank + 1), "sum")
            want = pattern * size + size * (size + 1) // 2
            ok.append(bool(np.array_equal(got, want)))
    return ok
