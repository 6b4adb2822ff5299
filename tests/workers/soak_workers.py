"""Rank function for the soak test: many random collectives checked against NumPy."""

from __future__ import annotations

import time

import numpy as np
from reference import DTYPES, OPS, compare, expected, make_input, tolerance, valid

import pytfcomm

KINDS = ["allreduce", "broadcast", "allgather", "reduce_scatter", "barrier"]


def _plan(seed: int, i: int, size: int) -> tuple[str, str, str, int, int]:
    """The i-th collective, identical on every rank (shared seed)."""
    rng = np.random.default_rng([seed, i])
    kind = KINDS[int(rng.integers(len(KINDS)))]
    dtype = DTYPES[int(rng.integers(len(DTYPES)))]
    op = OPS[int(rng.integers(len(OPS)))]
    while not valid(dtype, op):
        op = OPS[int(rng.integers(len(OPS)))]
    count = int(np.exp(rng.uniform(0, np.log(200_000))))  # log-uniform, 1 .. 200k
    count -= count % size  # reduce_scatter needs a multiple of size
    count = max(count, size)
    root = int(rng.integers(size))
    return kind, dtype, op, count, root


def soak(rank: int, size: int, addr: str, seed: int, iters: int) -> dict:
    done: dict[str, int] = {}
    t0 = time.monotonic()
    with pytfcomm.init(rank=rank, size=size, addr=addr, timeout=60) as comm:
        for i in range(iters):
            kind, dtype, op, count, root = _plan(seed, i, size)
            x = make_input(dtype, op, count, rank, seed + i)
            rtol = 0.0
            if kind == "allreduce":
                alg = ("auto", "ring", "recursive_doubling")[i % 3]
                got = comm.allreduce(x, op, algorithm=alg)
                want = expected(dtype, op, count, size, seed + i)
                rtol = tolerance(dtype, op, size)
            elif kind == "broadcast":
                got = comm.broadcast(x, root)
                want = make_input(dtype, op, count, root, seed + i)
            elif kind == "allgather":
                got = comm.allgather(x)
                want = np.concatenate(
                    [make_input(dtype, op, count, r, seed + i) for r in range(size)]
                )
            elif kind == "reduce_scatter":
                got = comm.reduce_scatter(x, op)
                part = count // size
                want = expected(dtype, op, count, size, seed + i)[rank * part : (rank + 1) * part]
                rtol = tolerance(dtype, op, size)
            else:
                comm.barrier()
                got = want = np.zeros(0)
            bad = compare(got, want, rtol)
            if bad:
                raise AssertionError(f"#{i} {kind} {dtype} {op} n={count} root={root}: {bad}")
            done[kind] = done.get(kind, 0) + 1
    return {"counts": done, "seconds": time.monotonic() - t0}
