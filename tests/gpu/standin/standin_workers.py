"""Rank functions for tests/gpu/test_standin_driver.py: pytfcomm's GPU API on
fake_cuda tensors, in a process whose PYTFCOMM_CUDA_DRIVER is the stand-in
(tests/_harness.py run_ranks calls them as ``fn(rank, size, addr, *args)``)."""

from __future__ import annotations

import os

import fake_cuda
import numpy as np
from gpu_workers import OPS, make, reference

import pytfcomm

DTYPES = ["float16", "float32", "float64", "int8", "uint8", "int32", "int64", "bool"]


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    if np.issubdtype(want.dtype, np.floating):
        tol = 1e-2 if want.dtype == np.float16 else 1e-6
        return bool(np.allclose(got, want, rtol=tol, atol=tol))
    return bool(np.array_equal(got, want))


def staged(rank: int, size: int, addr: str, counts: list[int]) -> dict:
    """All-reduce (every dtype and op), broadcast, all-gather and reduce-scatter
    of fake_cuda tensors with out=, against the NumPy reference."""
    fake_cuda.load(os.environ["PYTFCOMM_CUDA_DRIVER"])
    dev = rank % 2
    failures: list[str] = []

    def expect(what: str, got: np.ndarray, want: np.ndarray) -> None:
        if got.shape != want.shape or not _same(got, want):
            failures.append(f"{what}: got {got.ravel()[:6]}, want {want.ravel()[:6]}")

    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        for count in counts:
            for dtype in DTYPES:
                for op in OPS:
                    if dtype == "bool" and op == "mean":
                        continue
                    xs = [make(dtype, op, count, r) for r in range(size)]
                    x = fake_cuda.from_numpy(xs[rank], dev)
                    out = fake_cuda.empty_like(x)
                    y = comm.allreduce(x, op, out=out)
                    if y is not out:
                        failures.append("allreduce did not return out")
                    expect(f"allreduce {dtype} {op} n={count}", out.numpy(), reference(xs, op))
            xs = [np.arange(count, dtype=np.float32) + 1000 * r for r in range(size)]
            x = fake_cuda.from_numpy(xs[rank], dev)
            out = fake_cuda.empty_like(x)
            comm.broadcast(x, root=size - 1, out=out)
            expect(f"broadcast n={count}", out.numpy(), xs[size - 1])
            inplace = fake_cuda.from_numpy(xs[rank], dev)
            comm.broadcast(inplace, root=0, out=inplace)
            expect(f"broadcast in place n={count}", inplace.numpy(), xs[0])
            out = fake_cuda.empty((count * size,), np.float32, dev)
            comm.allgather(x, out=out)
            expect(f"allgather n={count}", out.numpy(), np.concatenate(xs))
            big = [np.arange(count * size, dtype=np.float32) * (r + 1) for r in range(size)]
            out = fake_cuda.empty((count,), np.float32, dev)
            comm.reduce_scatter(fake_cuda.from_numpy(big[rank], dev), out=out)
            expect(
                f"reduce_scatter n={count}",
                out.numpy(),
                sum(big)[rank * count : (rank + 1) * count],
            )
        backend = comm._gpu.last_backend() if comm._gpu is not None else ""
    return {"failures": failures, "backend": backend}


def fault(rank: int, size: int, addr: str) -> str:
    """PTCSI_CUDA_FAIL_COPY on rank 0: both ranks must fail cleanly, not hang."""
    fake_cuda.load(os.environ["PYTFCOMM_CUDA_DRIVER"])
    with pytfcomm.init(rank=rank, size=size, addr=addr, timeout=20) as comm:
        x = fake_cuda.from_numpy(np.ones(1000, np.float32), rank % 2)
        try:
            comm.allreduce(x, out=fake_cuda.empty_like(x))
        except Exception as e:
            return f"{type(e).__name__}: {e}"
        return "no error"
