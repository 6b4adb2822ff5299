"""Rank functions for the order-independent matching tests (docs/negotiation.md)."""

from __future__ import annotations

import json
import os
import threading
import time

import numpy as np

import pytfcomm


def two_threads(rank: int, size: int, addr: str, n: int, iters: int, transport: str) -> dict:
    """Two threads per rank all-reduce the same shape at once, each its own values.

    Thread t of rank r contributes 1000 * (t + 1) + r + i in call i, so every
    result says which thread's calls on the other ranks it met: it must be the
    thread of the same name, call for call.
    """
    wrong: list[str] = []
    with pytfcomm.init(rank=rank, size=size, addr=addr, transport=transport) as comm:

        def work(t: int) -> None:
            for i in range(iters):
                x = np.full(n, 1000.0 * (t + 1) + rank + i, np.float64)
                y = comm.allreduce(x)
                want = size * (1000.0 * (t + 1) + i) + sum(range(size))
                if not np.all(y == want):
                    wrong.append(f"thread {t} call {i}: {y[0]} instead of {want}")

        threads = [threading.Thread(target=work, args=(t,), name=f"worker-{t}") for t in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        comm.barrier()
    return {"wrong": wrong[:10], "n_wrong": len(wrong)}


def named_out_of_order(rank: int, size: int, addr: str, transport: str) -> dict:
    """Named collectives reach the engine in a different order on every rank
    (two threads, started in turn on even ranks and the other way round on odd
    ones, with small and large sizes): each meets its namesake."""
    out: dict[str, float] = {}
    errors: list[str] = []
    with pytfcomm.init(rank=rank, size=size, addr=addr, transport=transport) as comm:

        def work(my: list[str], delay: float) -> None:
            time.sleep(delay)
            try:
                for nm in my:
                    n = 100 if nm in "ac" else 200_000
                    x = np.full(n, ord(nm) * (rank + 1), np.float32)
                    out[nm] = float(comm.allreduce(x, name=nm, timeout=30)[0])
            except pytfcomm.CommError as exc:
                errors.append(str(exc))

        first = 0.0 if rank % 2 == 0 else 0.2
        t1 = threading.Thread(target=work, args=(["a", "b"], first), name="x")
        t2 = threading.Thread(target=work, args=(["c", "d"], 0.2 - first), name="y")
        t1.start()
        t2.start()
        t1.join()
        t2.join()
    return {"out": out, "errors": errors}


def same_stream_twice(
    rank: int, size: int, addr: str, how: str, transport: str, count: int
) -> dict:
    """Two threads calling in one stream at once: refused, not guessed.

    ``how`` is "thread_name" (two live threads named 'twin', no name=) or
    "name" (threads 'a' and 'b', both passing name="grads"). On rank 0 the first
    thread waits in an all-reduce of ``count`` floats (rank 1 joins 3 s later)
    while the second calls one in the same stream: that call must be refused at
    once. The first then meets rank 1's and both get the right sum."""
    with pytfcomm.init(rank=rank, size=size, addr=addr, transport=transport) as comm:
        errors: list[str] = []
        sums: list[float] = []
        kw = {"name": "grads"} if how == "name" else {}

        def work() -> None:
            try:
                y = comm.allreduce(np.full(count, rank + 1, np.float32), timeout=20, **kw)
                sums.append(float(y[0]) if np.all(y == y[0]) else -1.0)
            except pytfcomm.CommError as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

        names = ["twin", "twin"] if how == "thread_name" else ["a", "b"]
        threads = [threading.Thread(target=work, name=names[0])]
        if rank == 0:
            threads.append(threading.Thread(target=work, name=names[1]))
        else:
            time.sleep(3.0)
        threads[0].start()
        if rank == 0:
            time.sleep(0.5)  # the first is waiting for rank 1 by now
            threads[1].start()
        for th in threads:
            th.join()
        # The refused call left nothing behind: the stream goes on in step.
        after = comm.allreduce(np.ones(count, np.float32), timeout=20, **kw)
        return {"errors": errors, "sums": sums, "after": float(after[-1])}


def unmatched_then_usable(rank: int, size: int, addr: str) -> dict:
    """Rank 1 calls a collective under a name nobody else uses: it times out
    alone, says what the others asked for instead, and the communicator works."""
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        res: dict = {}
        comm.barrier()
        t0 = time.monotonic()
        try:
            # Rank 1 gives up first, while the others still wait for theirs.
            if rank == 1:
                comm.allreduce(np.ones(5, np.float32), name="only-me", timeout=1.0)
            else:
                comm.allreduce(np.ones(5, np.float32), name="everyone-else", timeout=2.0)
        except pytfcomm.CommError as exc:
            res = {"type": type(exc).__name__, "message": str(exc)}
        res["seconds"] = time.monotonic() - t0
        res["after"] = float(comm.allreduce(np.ones(3, np.float32))[0])
        return res


def overlapping_out(rank: int, size: int, addr: str, n: int) -> dict:
    """Partially overlapping input and out: refused on every path, nothing written."""
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        b = np.arange(n, dtype=np.float32)
        before = b.copy()
        res: dict = {}
        try:
            comm.allreduce(b[:-8], out=b[8:])
            res["allreduce"] = "no error"
        except pytfcomm.InvalidArgumentError as exc:
            res["allreduce"] = str(exc)
        try:
            comm.broadcast(b[:-8], out=b[8:])
            res["broadcast"] = "no error"
        except pytfcomm.InvalidArgumentError as exc:
            res["broadcast"] = str(exc)
        try:
            comm.allreduce_many(
                [np.ones(4, np.float32), b[:-8]], out=[np.empty(4, np.float32), b[8:]]
            )
            res["allreduce_many"] = "no error"
        except pytfcomm.InvalidArgumentError as exc:
            res["allreduce_many"] = str(exc)
        try:  # the core's own check, under the Python one
            from pytfcomm._dtypes import algorithm_code, dtype_code, op_code

            code = dtype_code(b.dtype)
            comm._core.allreduce_many(
                [b[:-8]], [b[8:]], [code], op_code("sum"), algorithm_code("auto"), 30.0
            )
            res["core_allreduce_many"] = "no error"
        except pytfcomm.InvalidArgumentError as exc:
            res["core_allreduce_many"] = str(exc)
        g = np.zeros(n * size, np.float32)
        try:
            comm.allgather(g[:n], out=g)
            res["allgather"] = "no error"
        except pytfcomm.InvalidArgumentError as exc:
            res["allgather"] = str(exc)
        res["untouched"] = bool(np.array_equal(b, before))
        # In place (exact aliasing) is still fine, and the job goes on.
        y = comm.allreduce(b, out=b)
        res["in_place_ok"] = bool(np.array_equal(y, before * size))
        return res


def fork_child_uses_parent_comm(rank: int, size: int, addr: str) -> dict:
    """Rank 0 forks after init; the child's collective must raise, and the
    parent and its peer must still get the right results afterwards."""
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        child = None
        if rank == 0:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: every collective, small and past the one-shot size
                os.close(r)
                x, big = np.ones(10, np.float32), np.ones(1 << 18, np.float32)
                calls = {
                    "allreduce": lambda: comm.allreduce(x),
                    "allreduce_big": lambda: comm.allreduce(big),
                    "allreduce_async": lambda: comm.allreduce_async(x).wait(timeout=10),
                    "broadcast": lambda: comm.broadcast(big, root=0),
                    "allgather": lambda: comm.allgather(x),
                    "reduce_scatter": lambda: comm.reduce_scatter(big),
                    "alltoall": lambda: comm.alltoall(np.ones((4, 3), np.float32)),
                    "barrier": lambda: comm.barrier(),
                }
                msgs = {}
                for name, call in calls.items():
                    try:
                        call()
                        msgs[name] = "no error"
                    except Exception as exc:  # whatever it is, the parent's test says
                        msgs[name] = f"{type(exc).__name__}: {exc}"
                os.write(w, json.dumps(msgs).encode())
                os._exit(0)
            os.close(w)
            os.waitpid(pid, 0)
            with os.fdopen(r, "rb") as f:
                child = json.loads(f.read().decode())
        totals = [float(comm.allreduce(np.full(10, rank + 1.0, np.float32))[0]) for _ in range(50)]
        big = comm.allreduce(np.full(1 << 18, rank + 1.0, np.float32))
        return {"child": child, "totals": totals, "big_ok": bool(np.all(big == 3.0))}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def many_names(rank: int, size: int, addr: str, n: int, transport: str) -> dict:
    """``n`` all-reduces under distinct names, then a freed name again (its results
    checked), then a name rank 0 uses while rank 1 has joined, then close(): the
    engine's count of numbered streams and this process's RSS at each point."""
    with pytfcomm.init(rank=rank, size=size, addr=addr, transport=transport) as comm:
        core = comm._core
        comm.allreduce(np.ones(4), name="warm-up")
        out: dict = {"base": core.stream_states(), "rss_base": _rss_bytes()}
        for i in range(n):
            y = comm.allreduce(np.full(4, float(i + rank)), name=f"g{i}", timeout=60)
            assert np.all(y == size * i + size * (size - 1) / 2), (i, y)
        out["after_names"] = core.stream_states()
        out["rss_after_names"] = _rss_bytes()
        # A freed name again: it pairs with the same call on the other ranks.
        out["reused"] = [
            float(comm.allreduce(np.full(4, 10.0 * k + rank), name="g0", timeout=30)[0])
            for k in range(5)
        ]
        # A joined rank follows the others' numbering of a name it never calls.
        if rank == 0:
            for _ in range(3):
                comm.allreduce(np.ones(4), name="late", timeout=30)
        comm.join(timeout=30)
        out["after_join"] = float(
            comm.allreduce(np.full(4, rank + 1.0), name="late", timeout=30)[0]
        )
        out["before_close"] = core.stream_states()
    out["after_close"] = core.stream_states()
    return out
