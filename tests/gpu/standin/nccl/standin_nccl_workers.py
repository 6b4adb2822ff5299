"""Rank functions for tests/gpu/test_standin_nccl.py's end-to-end tests:
pytfcomm's GPU API over the NCCL stand-in (PYTFCOMM_GPU_TRANSPORT=nccl) on
fake_cuda tensors (``fn(rank, size, addr, *args)``, tests/_harness.py)."""

from __future__ import annotations

import os
import time

import fake_cuda
import numpy as np

import pytfcomm


def failing(rank: int, size: int, addr: str, timeout: float) -> dict:
    """One all-reduce that an NCCL fault knob breaks: how each rank ends, and when."""
    fake_cuda.load(os.environ["PYTFCOMM_CUDA_DRIVER"])
    start = time.monotonic()
    with pytfcomm.init(rank=rank, size=size, addr=addr, timeout=timeout) as comm:
        x = fake_cuda.from_numpy(np.ones(1000, np.float32), rank % 2)
        t0 = time.monotonic()
        try:
            comm.allreduce(x, out=fake_cuda.empty_like(x))
            outcome = "no error"
        except Exception as e:
            outcome = f"{type(e).__name__}: {e}"
        took = time.monotonic() - t0
    return {"outcome": outcome, "took": took, "total": time.monotonic() - start}
