"""Functions run inside each rank by the GPU tests (tests/_harness.py puts this
directory on PYTHONPATH). Tensors are CuPy arrays, else PyTorch tensors."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

import pytfcomm

DTYPES = ["float16", "float32", "float64", "int32", "int64", "uint8", "bool"]
OPS = ["sum", "mean", "min", "max", "prod"]


def _lib() -> str:
    want = os.environ.get("PYTFCOMM_TEST_GPU_LIB", "")
    for name in [want] if want else ["cupy", "torch"]:
        try:
            __import__(name)
            return name
        except ImportError:
            continue
    raise RuntimeError("neither CuPy nor PyTorch is importable")


def to_gpu(a: np.ndarray) -> Any:
    """A CUDA tensor holding a copy of ``a`` on this rank's GPU."""
    if _lib() == "cupy":
        import cupy

        return cupy.asarray(a)
    import torch

    return torch.from_numpy(np.ascontiguousarray(a)).to("cuda")


def to_cpu(t: Any) -> np.ndarray:
    """A NumPy copy of a CUDA tensor."""
    if _lib() == "cupy":
        return t.get()
    return t.cpu().numpy()


def make(dtype: str, op: str, count: int, rank: int) -> np.ndarray:
    """Inputs that reduce exactly (no overflow, no rounding) for every op."""
    rng = np.random.default_rng(1000 + rank)
    if dtype == "bool":
        return rng.integers(0, 2, count).astype(bool)
    hi = 3 if op == "prod" else 50
    lo = 1 if op == "prod" else (0 if dtype == "uint8" else -50)
    return rng.integers(lo, hi, count).astype(dtype)


def reference(inputs: list[np.ndarray], op: str) -> np.ndarray:
    """What pytfcomm's CPU path computes (mean: sum then one division, ints truncate)."""
    stack = np.stack(inputs)
    dt = inputs[0].dtype
    if dt == np.bool_:
        return stack.any(0) if op in ("sum", "max") else stack.all(0)
    if op == "sum":
        return stack.sum(0, dtype=dt)
    if op == "prod":
        return stack.prod(0, dtype=dt)
    if op == "min":
        return stack.min(0)
    if op == "max":
        return stack.max(0)
    s = stack.sum(0, dtype=np.float64)
    if np.issubdtype(dt, np.integer):
        return np.trunc(s / len(inputs)).astype(dt)
    return (s / len(inputs)).astype(dt)


def collectives(rank: int, size: int, addr: str, transport: str | None, counts: list[int]) -> dict:
    """Every collective on GPU tensors against the NumPy reference; returns failures."""
    failures: list[str] = []
    with pytfcomm.init(rank=rank, size=size, addr=addr, transport=transport) as comm:
        for count in counts:
            for dtype in DTYPES:
                for op in OPS:
                    if dtype == "bool" and op == "mean":
                        continue
                    for alg in ("auto", "hierarchical"):
                        xs = [make(dtype, op, count, r) for r in range(size)]
                        want = reference(xs, op)
                        x = to_gpu(xs[rank])
                        got = to_cpu(comm.allreduce(x, op, algorithm=alg))
                        tol = 1e-2 if dtype == "float16" else 1e-6
                        ok = (
                            np.allclose(got, want, rtol=tol, atol=tol)
                            if np.issubdtype(want.dtype, np.floating)
                            else np.array_equal(got, want)
                        )
                        if not ok:
                            failures.append(f"allreduce {dtype} {op} {alg} n={count}")
                        # in place
                        y = comm.allreduce(x, op, out=x, algorithm=alg)
                        if y is not x:
                            failures.append("out=x did not return x")
            xs = [np.arange(count, dtype=np.float32) + 1000 * r for r in range(size)]
            got = to_cpu(comm.broadcast(to_gpu(xs[rank]), root=size - 1))
            if not np.array_equal(got, xs[size - 1]):
                failures.append(f"broadcast n={count}")
            got = to_cpu(comm.allgather(to_gpu(xs[rank])))
            if not np.array_equal(got, np.concatenate(xs)):
                failures.append(f"allgather n={count}")
            big = [np.arange(count * size, dtype=np.float32) * (r + 1) for r in range(size)]
            got = to_cpu(comm.reduce_scatter(to_gpu(big[rank])))
            part = sum(big)[rank * count : (rank + 1) * count]
            if not np.array_equal(got, part):
                failures.append(f"reduce_scatter n={count}")
        backend = comm._gpu.last_backend() if comm._gpu is not None else ""
    return {"failures": failures, "backend": backend}


def mismatch(rank: int, size: int, addr: str, transport: str | None) -> str:
    """Ranks pass different counts: every rank must raise MismatchError."""
    with pytfcomm.init(rank=rank, size=size, addr=addr, transport=transport, timeout=20) as comm:
        x = to_gpu(np.ones(100 + rank, np.float32))
        try:
            comm.allreduce(x)
        except pytfcomm.MismatchError as e:
            return f"MismatchError: {e}"
        return "no error"


def one_rank_missing(rank: int, size: int, addr: str, transport: str | None) -> str:
    """Rank 1 never joins the second all-reduce: rank 0 must time out, not hang."""
    import time

    with pytfcomm.init(rank=rank, size=size, addr=addr, transport=transport, timeout=5) as comm:
        x = to_gpu(np.ones(1 << 20, np.float32))
        comm.allreduce(x)  # NCCL (or staging) is set up and works
        if rank == 1:
            time.sleep(15)
            return "slept"
        t0 = time.monotonic()
        try:
            comm.allreduce(x)
        except (pytfcomm.CommTimeoutError, pytfcomm.PeerLostError) as e:
            return f"{type(e).__name__} after {time.monotonic() - t0:.1f}s: {e}"
        return "no error"
