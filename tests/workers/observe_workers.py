"""Rank functions for the observability tests.

tests/timeline/test_timeline.py and tests/reliability/test_stall.py.
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np

import pytfcomm

SMALL = 1024  # float32 elements: 4 KiB, one-shot (shm) or recursive doubling (tcp) under auto
LARGE = 1 << 18  # 1 MiB: ring (or hierarchical across hosts) under auto


def timeline_run(rank: int, size: int, addr: str) -> dict:
    """A few collectives, each checked; returns what each rank expects in its timeline."""
    calls = []
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        path = comm.timeline_path

        def expect(name: str, nbytes: int, algorithm: str) -> None:
            calls.append({"name": name, "bytes": nbytes, "algorithm": algorithm})

        for count, alg in [(SMALL, "auto"), (LARGE, "auto"), (LARGE, "ring")]:
            x = np.full(count, rank + 1, np.float32)
            y = comm.allreduce(x, algorithm=alg)
            assert np.all(y == size * (size + 1) / 2), (count, alg)
            expect("allreduce", x.nbytes, comm._core.last_algorithm())
        b = comm.broadcast(np.full(LARGE, rank, np.float32), root=size - 1)
        assert np.all(b == size - 1)
        expect("broadcast", b.nbytes, "")
        g = comm.allgather(np.full(SMALL, rank, np.int32))
        assert np.array_equal(g, np.repeat(np.arange(size, dtype=np.int32), SMALL))
        # NumPy allgather runs the per-rank-count all-gather (counts in the negotiation).
        expect("allgatherv", SMALL * 4, "oneshot")  # small: within the round
        rs = comm.reduce_scatter(np.ones(SMALL * size, np.float64))
        assert np.all(rs == size)
        expect("reduce_scatter", SMALL * size * 8, "ring")
        comm.barrier()
        expect("barrier", 0, "negotiation")
    return {"path": path, "calls": calls}


def hierarchical_run(rank: int, size: int, addr: str) -> dict:
    """One large auto all-reduce on a job that spans (simulated) hosts."""
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        x = np.full(LARGE, rank + 1, np.float32)
        y = comm.allreduce(x)
        assert np.all(y == size * (size + 1) / 2)
        return {"path": comm.timeline_path, "algorithm": comm._core.last_algorithm()}


def no_timeline(rank: int, size: int, addr: str) -> str:
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        comm.allreduce(np.ones(SMALL, np.float32))
        return comm.timeline_path


def late_rank(rank: int, size: int, addr: str, late: int, delay: float, stall: float) -> dict:
    """Rank `late` sleeps before its second collective; the others wait for it there."""
    with pytfcomm.init(rank=rank, size=size, addr=addr, stall_warning=stall) as comm:
        x = np.full(LARGE, rank + 1, np.float32)
        comm.allreduce(x)  # everyone is connected and in step
        if rank == late:
            time.sleep(delay)
        t0 = time.monotonic()
        y = comm.allreduce(x)
        waited = time.monotonic() - t0
        ok = bool(np.all(y == size * (size + 1) / 2))
        comm.barrier()
    return {"ok": ok, "waited": waited}


def stopped_rank(
    rank: int, size: int, addr: str, victim: int, stall: float, timeout: float
) -> dict:
    """Rank `victim` stops itself (SIGSTOP) between two collectives; the others
    must name it in their stall warnings before their deadline fails them."""
    comm = pytfcomm.init(rank=rank, size=size, addr=addr, stall_warning=stall, timeout=timeout)
    x = np.ones(LARGE, np.float32)
    comm.allreduce(x)
    if rank == victim:
        os.kill(os.getpid(), signal.SIGSTOP)
    try:
        comm.allreduce(x)
        return {"error": None}
    except pytfcomm.CommError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    finally:
        comm.close()


def different_names(
    rank: int, size: int, addr: str, names: list[str], stall: float, timeout: float
) -> dict:
    """Rank r calls an all-reduce under names[r]: unless the names agree, the ranks
    wait in different collectives until the deadline. Then the communicator must
    still work."""
    with pytfcomm.init(
        rank=rank, size=size, addr=addr, stall_warning=stall, timeout=timeout
    ) as comm:
        comm.allreduce(np.ones(SMALL, np.float32))  # everyone is connected and in step
        t0 = time.monotonic()
        try:
            comm.allreduce(np.ones(SMALL, np.float32), name=names[rank])
            out = {"error": None}
        except pytfcomm.CommError as exc:
            out = {"error": type(exc).__name__, "message": str(exc)}
        out["waited"] = time.monotonic() - t0
        y = comm.allreduce(np.full(SMALL, rank + 1, np.float32))
        out["after_ok"] = bool(np.all(y == size * (size + 1) / 2))
    return out


def different_functions(
    rank: int, size: int, addr: str, fn_names: list[str], stall: float, timeout: float
) -> dict:
    """Rank r runs an all-reduce in a tf.function named fn_names[r]: the ranks wait in
    different TF ops until the deadline. Then the communicator must still work."""
    import tensorflow as tf

    import pytfcomm.tf as ptf

    comm = pytfcomm.init(rank=rank, size=size, addr=addr, stall_warning=stall, timeout=timeout)
    ptf.set_default_communicator(comm)

    def step(x):
        return ptf.allreduce(x)

    step.__name__ = step.__qualname__ = fn_names[rank]
    fn = tf.function(step)
    ptf.allreduce(tf.ones([8])).numpy()  # everyone is connected and in step
    t0 = time.monotonic()
    try:
        fn(tf.ones([SMALL])).numpy()
        out = {"error": None}
    except tf.errors.OpError as exc:
        out = {"error": type(exc).__name__, "message": exc.message}
    out["waited"] = time.monotonic() - t0
    y = ptf.allreduce(tf.fill([8], float(rank + 1))).numpy()
    out["after_ok"] = bool(np.all(y == size * (size + 1) / 2))
    comm.close()
    return out
