"""Functions run inside each rank by the core tests (see tests/_harness.py)."""

from __future__ import annotations

import numpy as np
import reference as ref

import pytfcomm
from pytfcomm._rows import reduce_scatter_rows


def allreduce_matrix(
    rank: int, size: int, addr: str, sizes: list[int], algorithms: list[str], in_place: bool
) -> dict:
    """Every dtype x op x size x algorithm against NumPy; returns failures and digests."""
    failures, digests = [], {}
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        for alg in algorithms:
            for dtype in ref.DTYPES:
                for op in ref.OPS:
                    if not ref.valid(dtype, op):
                        continue
                    for count in sizes:
                        x = ref.make_input(dtype, op, count, rank)
                        if in_place:
                            y = comm.allreduce(x, op, out=x, algorithm=alg)
                            assert y is x
                        else:
                            before = x.copy()
                            y = comm.allreduce(x, op, algorithm=alg)
                            assert np.array_equal(x.view(np.uint8), before.view(np.uint8)), (
                                "input modified"
                            )
                        want = ref.expected(dtype, op, count, size)
                        problem = ref.compare(y, want, ref.tolerance(dtype, op, size))
                        key = f"{alg}/{dtype}/{op}/{count}"
                        if problem:
                            failures.append(f"{key}: {problem}")
                        digests[key] = ref.digest(y)
    return {"failures": failures, "digests": digests}


def random_floats_identical(
    rank: int, size: int, addr: str, count: int, algorithms: list[str] | None = None
) -> dict:
    """Random (not exactly summable) floats: results must be bitwise equal on all
    ranks, and sums close to a float64 reference."""
    out, failures = {}, []
    tol = {"float16": 2e-2, "bfloat16": 1e-1, "float32": 1e-4, "float64": 1e-10}
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        for dtype in ["float16", "bfloat16", "float32", "float64"]:
            dt = ref.np_dtype(dtype)
            inputs = [
                np.random.default_rng(r).standard_normal(count).astype(dt) for r in range(size)
            ]
            want = np.sum([a.astype(np.float64) for a in inputs], axis=0)
            for op in ["sum", "mean"]:
                for alg in algorithms or ["ring", "recursive_doubling", "halving_doubling"]:
                    y = comm.allreduce(inputs[rank], op, algorithm=alg)
                    out[f"{dtype}/{op}/{alg}"] = ref.digest(y)
                    w = want / size if op == "mean" else want
                    err = np.max(np.abs(y.astype(np.float64) - w), initial=0.0)
                    if err > tol[dtype] * size:
                        failures.append(f"{dtype}/{op}/{alg}: max error {err}")
    return {"failures": failures, "digests": out}


def other_collectives(rank: int, size: int, addr: str, counts: list[int]) -> dict:
    """broadcast / allgather / reduce_scatter / barrier against NumPy."""
    failures, digests = [], {}
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        for dtype in ref.DTYPES:
            dt = ref.np_dtype(dtype)
            for count in counts:
                for root in sorted({0, size - 1}):
                    x = ref.make_input(dtype, "sum", count, rank).reshape(count, 1)
                    y = comm.broadcast(x, root=root)
                    want = ref.make_input(dtype, "sum", count, root).reshape(count, 1)
                    if not np.array_equal(y.view(np.uint8), want.view(np.uint8)):
                        failures.append(f"broadcast {dtype} {count} root {root}")
                x = ref.make_input(dtype, "max", count, rank).reshape(count, 1)
                y = comm.allgather(x)
                want = np.concatenate(
                    [ref.make_input(dtype, "max", count, r).reshape(count, 1) for r in range(size)]
                )
                if y.shape != want.shape or not np.array_equal(
                    y.view(np.uint8), want.view(np.uint8)
                ):
                    failures.append(f"allgather {dtype} {count}")
                digests[f"ag/{dtype}/{count}"] = ref.digest(y)
                n = count * size
                for op in ["sum", "max"]:
                    x = ref.make_input(dtype, op, n, rank).astype(dt).reshape(n, 1)
                    y = comm.reduce_scatter(x, op)
                    want = ref.expected(dtype, op, n, size).reshape(n, 1)[
                        rank * count : (rank + 1) * count
                    ]
                    problem = ref.compare(y, want, 0.0)
                    if problem:
                        failures.append(f"reduce_scatter {dtype} {op} {count}: {problem}")
                # Rows that do not divide evenly: Horovod's split, with and without out=.
                rows = n + 1
                shares = reduce_scatter_rows(rows, size)
                first = sum(shares[:rank])
                x = ref.make_input(dtype, "sum", rows, rank).astype(dt).reshape(rows, 1)
                want = ref.expected(dtype, "sum", rows, size).reshape(rows, 1)
                want = want[first : first + shares[rank]]
                out = np.full((shares[rank], 1), 7, dt)
                for y in (comm.reduce_scatter(x), comm.reduce_scatter(x, out=out)):
                    problem = ref.compare(y, want, 0.0)
                    if problem:
                        failures.append(f"reduce_scatter uneven {dtype} {rows}: {problem}")
        comm.barrier()
        comm.barrier(timeout=10)
    return {"failures": failures, "digests": digests}


def identity(rank: int, size: int, addr: str) -> dict:
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        return {
            "rank": comm.rank,
            "size": comm.size,
            "local_rank": comm.local_rank,
            "local_size": comm.local_size,
            "num_hosts": comm.num_hosts,
            "auto_large": comm._core.choose_allreduce(1 << 24),
        }


def from_environment(rank: int, size: int, addr: str) -> dict:
    """init() with no arguments: the launcher variables decide everything."""
    with pytfcomm.init() as comm:
        total = comm.allreduce(np.array([comm.rank + 1], np.int64))
        return {"rank": comm.rank, "size": comm.size, "total": int(total[0])}


def large_buffer(rank: int, size: int, addr: str, nbytes: int) -> list:
    """A buffer over 2 GiB, in place: every byte must come back as the sum."""
    x = np.full(nbytes, rank + 1, dtype=np.uint8)
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        comm.allreduce(x, out=x, algorithm="ring")
    want = size * (size + 1) // 2
    idx = np.linspace(0, nbytes - 1, 4097).astype(np.int64)
    ok = bool(np.all(x[idx] == want)) and bool(np.all(x[-1_000_000:] == want))
    ok = ok and int(np.count_nonzero(x != want)) == 0
    return [ok]


def fast_and_full_paths(rank: int, size: int, addr: str) -> dict:
    """Even ranks call allreduce the common way (C++ fast path), odd ranks with
    a timeout (the full Python path); shapes of every rank count."""
    failures, digests = [], {}
    shapes = [(), (7,), (3, 5, 2), (1, 1, 1000), (4, 6), (20_000,)]
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        for dtype in ("float32", "int64", "float16"):
            for shape in shapes:
                x = np.full(shape, rank + 1, dtype=dtype)
                if rank % 2 == 0:
                    y = comm.allreduce(x)
                else:
                    y = comm.allreduce(x, timeout=60.0)
                want = np.full(shape, size * (size + 1) // 2, dtype=dtype)
                key = f"{dtype}/{shape}"
                if y.shape != want.shape or not np.array_equal(y, want):
                    failures.append(f"{key}: got {y.ravel()[:4]} want {want.ravel()[:4]}")
                digests[key] = ref.digest(y)
    return {"failures": failures, "digests": digests}


def accessors(rank: int, size: int, addr: str, bind_hosts: list[str]) -> dict:
    """Communicator.host_of / native_handle as each rank sees them (PYTFCOMM_BIND_HOST set)."""
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        return {
            "hosts": [comm.host_of(r) for r in range(size)],
            "handles": [comm.native_handle, comm.native_handle],
            "gpu_backend": comm.gpu_backend,
        }
