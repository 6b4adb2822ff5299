"""Communicator.join (Horovod's join) in separate processes, run by tests/core/test_join.py.

Rank r runs r + 1 steps, then joins: at step s the active ranks are s..n-1.
"""

from __future__ import annotations

import numpy as np
from reference import error_text as _err

import pytfcomm


def steps(rank: int, size: int, addr: str, elems: int) -> dict:
    failures: list[str] = []
    out: dict = {}
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        for rnd in range(2):  # join twice: the second round starts from a clean state
            for step in range(rank + 1):
                active = list(range(step, size))
                x = np.full(elems, rank + 1, dtype=np.float32)
                checks = {
                    "sum": (comm.allreduce(x), sum(q + 1 for q in active)),
                    "mean": (comm.allreduce(x, op="mean"), sum(q + 1 for q in active) / size),
                    "min": (comm.allreduce(x.astype(np.int64), op="min"), step + 1),
                    "max": (comm.allreduce(-x.astype(np.float64), op="max"), -(step + 1)),
                    "bcast": (comm.broadcast(np.full(elems, float(rank)), root=size - 1), size - 1),
                }
                for name, (got, want) in checks.items():
                    if not np.all(got == want):
                        failures.append(f"round {rnd} step {step} {name}: {got[:3]} != {want}")
                rows = comm.allgather(np.full((rank + 1, 2), rank, dtype=np.int32))
                want_rows = [q for q in active for _ in range(q + 1)]
                if rows[:, 0].tolist() != want_rows:
                    failures.append(f"round {rnd} step {step} allgather: {rows[:, 0].tolist()}")
                rs = comm.reduce_scatter(np.ones(size * 4, dtype=np.float32))
                if not np.all(rs == len(active)):
                    failures.append(f"round {rnd} step {step} reduce_scatter: {rs}")
                got, recv = comm.alltoall(np.full(size, rank, dtype=np.int64), splits=[1] * size)
                if got.tolist() != active or list(recv) != [int(q in active) for q in range(size)]:
                    failures.append(f"round {rnd} step {step} alltoall: {got.tolist()} {recv}")
            out[f"last{rnd}"] = comm.join()
            # everyone is back: plain calls pair up again
            y = comm.allreduce(np.ones(elems, np.float32))
            if not np.all(y == size):
                failures.append(f"round {rnd} after join: {y[:3]}")
        # what cannot run with a joined rank raises on the askers, and leaves it usable
        if rank == 0:
            out["last_bad"] = comm.join()
        else:
            out["equal_gather"] = _err(
                lambda: comm.allgather(np.ones(3, np.float32), out=np.empty(3 * size, np.float32))
            )
            out["root_joined"] = _err(lambda: comm.broadcast(np.ones(3), root=0))
            out["after_bad"] = float(comm.allreduce(np.ones(2))[0])
            out["last_bad"] = comm.join()
    out["failures"] = failures
    return out
