"""Rank functions for the mismatch-recovery tests (Horovod's contract).

One session makes every kind of bad call in a row on one communicator, as a
test suite migrated from Horovod does: each must raise MismatchError on every
rank, and the correct collectives right after it must return the right values.
"""

from __future__ import annotations

import numpy as np

import pytfcomm

# name -> what rank `rank` of `size` calls; rank 1 (or rank 0) is the odd one out.


def _count(comm: pytfcomm.Communicator, n: int) -> None:
    comm.allreduce(np.ones(n - (comm.rank == 1), np.float32))


def _dtype(comm: pytfcomm.Communicator, n: int) -> None:
    comm.allreduce(np.ones(n, np.float64 if comm.rank == 1 else np.float32))


def _shape(comm: pytfcomm.Communicator, n: int) -> None:
    shape = (2, n // 2) if comm.rank == 1 else (n // 2, 2)
    comm.allreduce(np.ones(shape, np.float32))


def _op(comm: pytfcomm.Communicator, n: int) -> None:
    comm.allreduce(np.ones(n, np.float32), op="max" if comm.rank == 1 else "sum")


def _algorithm(comm: pytfcomm.Communicator, n: int) -> None:
    alg = "ring" if comm.rank == 1 else "recursive_doubling"
    comm.allreduce(np.ones(n, np.float32), algorithm=alg)


def _root(comm: pytfcomm.Communicator, n: int) -> None:
    comm.broadcast(np.full(n, comm.rank, np.float32), root=comm.rank)


def _kind(comm: pytfcomm.Communicator, n: int) -> None:
    if comm.rank == 0:
        comm.broadcast(np.ones(n, np.float32), root=0)
    else:
        comm.allreduce(np.ones(n, np.float32))


def _allgather_rows(comm: pytfcomm.Communicator, n: int) -> None:
    comm.allgather(np.ones((n // 4, 4 if comm.rank != 1 else 2), np.float32))


def _allgatherv_dtype(comm: pytfcomm.Communicator, n: int) -> None:
    comm.allgatherv(np.ones(n + comm.rank, np.float64 if comm.rank == 1 else np.float32))


def _reduce_scatter_op(comm: pytfcomm.Communicator, n: int) -> None:
    m = (n // comm.size) * comm.size
    comm.reduce_scatter(np.ones(m, np.float32), op="min" if comm.rank == 1 else "sum")


def _reduce_scatter_rows(comm: pytfcomm.Communicator, n: int) -> None:
    # Rank 1 one row more: its rows no longer divide evenly (it pads), the others' do.
    m = (n // comm.size) * comm.size + (comm.rank == 1)
    comm.reduce_scatter(np.ones(m, np.float32))


def _barrier_vs_allreduce(comm: pytfcomm.Communicator, n: int) -> None:
    if comm.rank == 1:
        comm.barrier()
    else:
        comm.allreduce(np.ones(n, np.float32))


def _fused_list(comm: pytfcomm.Communicator, n: int) -> None:
    counts = [8, n] if comm.rank == 1 else [n, 8]
    comm.allreduce_many([np.ones(c, np.float32) for c in counts])


def _fused_small(comm: pytfcomm.Communicator, n: int) -> None:
    # same total bytes and dtype: only the list digest tells them apart
    counts = [8, 4] if comm.rank == 1 else [4, 8]
    comm.allreduce_many([np.ones(c, np.float32) for c in counts])


def _async_order(comm: pytfcomm.Communicator, n: int) -> None:
    counts = [8, n] if comm.rank == 1 else [n, 8]
    handles = [comm.allreduce_async(np.ones(c, np.float32)) for c in counts]
    first: BaseException | None = None
    for h in handles:
        try:
            h.wait(timeout=60)
        except pytfcomm.CommError as exc:
            first = first or exc
    if first is not None:
        raise first


def _async_partial(comm: pytfcomm.Communicator, n: int) -> None:
    """Rank 1's first request mismatches and it submits its second one late, so
    the ranks' queues differ when the mismatch strikes: only the request every
    rank agreed to reduce may fail; the second one must still pair up and be right."""
    import time

    if comm.rank == 1:
        h1 = comm.allreduce_async(np.ones(n - 1, np.float32))
        time.sleep(0.3)  # past the fusion cycle: rank 1 agrees on a queue of one
        h2 = comm.allreduce_async(np.full(8, comm.rank + 1, np.float32))
    else:
        h1 = comm.allreduce_async(np.ones(n, np.float32))
        h2 = comm.allreduce_async(np.full(8, comm.rank + 1, np.float32))
    err: BaseException | None = None
    try:
        h1.wait(timeout=60)
    except pytfcomm.CommError as exc:
        err = exc
    y = h2.wait(timeout=20)
    s = comm.size
    if not np.all(y == s * (s + 1) / 2):
        raise AssertionError(f"the request after the mismatch gave {y}")
    if err is not None:
        raise err


KINDS = {
    "count": _count,
    "dtype": _dtype,
    "shape": _shape,
    "op": _op,
    "algorithm": _algorithm,
    "root": _root,
    "kind": _kind,
    "allgather_rows": _allgather_rows,
    "allgatherv_dtype": _allgatherv_dtype,
    "reduce_scatter_op": _reduce_scatter_op,
    "reduce_scatter_rows": _reduce_scatter_rows,
    "barrier_vs_allreduce": _barrier_vs_allreduce,
    "fused_list": _fused_list,
    "fused_small": _fused_small,
    "async_order": _async_order,
    "async_partial": _async_partial,
}


def _then_correct(comm: pytfcomm.Communicator, n: int) -> str | None:
    """Correct collectives of both sizes right after a mismatch; None when all are right."""
    r, s = comm.rank, comm.size
    try:
        for m in (n, 8):
            y = comm.allreduce(np.full(m, r + 1, np.float32))
            if not np.all(y == s * (s + 1) / 2):
                return f"allreduce({m}) gave {y[:4]}"
            y = comm.broadcast(np.full(m, r + 7, np.float32), root=s - 1)
            if not np.all(y == s + 6):
                return f"broadcast({m}) gave {y[:4]}"
            y = comm.allgather(np.full(m, r, np.int32))
            if not np.array_equal(y, np.repeat(np.arange(s, dtype=np.int32), m)):
                return f"allgather({m}) gave {y[:4]}..."
        return None
    except pytfcomm.CommError as exc:
        return f"{type(exc).__name__}: {exc}"


def session(rank: int, size: int, addr: str, transport: str, n: int, kinds: list[str]) -> dict:
    """Every mismatch kind in `kinds`, one after another, on one communicator."""
    out: dict[str, dict] = {}
    with pytfcomm.init(rank=rank, size=size, addr=addr, transport=transport, timeout=30) as comm:
        if _then_correct(comm, n) is not None:  # the job works before anything goes wrong
            raise AssertionError("a correct collective failed before any mismatch")
        for kind in kinds:
            res: dict = {}
            try:
                KINDS[kind](comm, n)
                res["type"] = None
            except pytfcomm.CommError as exc:
                res["type"] = type(exc).__name__
                res["is_mismatch"] = isinstance(exc, pytfcomm.MismatchError)
                res["message"] = str(exc)
            res["closed"] = comm.closed
            res["after"] = _then_correct(comm, n)
            out[kind] = res
            if comm.closed:
                break
    return out
