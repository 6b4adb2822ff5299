"""Rank functions for tests/gpu/test_gpu_timeline.py (fake_cuda tensors on the
CUDA/NCCL stand-ins; tests/_harness.py calls them as ``fn(rank, size, addr, *args)``)."""

from __future__ import annotations

import os

import fake_cuda
import numpy as np

import pytfcomm


def gpu_then_cpu(rank: int, size: int, addr: str) -> str:
    """One GPU all-reduce, then one CPU all-reduce; returns this rank's timeline file."""
    fake_cuda.load(os.environ["PYTFCOMM_CUDA_DRIVER"])
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        x = fake_cuda.from_numpy(np.full(1000, rank + 1, np.float32), rank)
        out = fake_cuda.empty_like(x)
        comm.allreduce(x, out=out)
        assert out.numpy()[0] == size * (size + 1) / 2
        comm.allreduce(np.ones(1000, np.float32))
        return comm.timeline_path


def staged_calls(rank: int, size: int, addr: str) -> str:
    """A staged GPU all-reduce of one chunk, one of no elements, then a CPU all-reduce;
    returns this rank's timeline file."""
    fake_cuda.load(os.environ["PYTFCOMM_CUDA_DRIVER"])
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        x = fake_cuda.from_numpy(np.full(1000, rank + 1, np.float32), rank)
        out = fake_cuda.empty_like(x)
        comm.allreduce(x, out=out)
        assert out.numpy()[0] == size * (size + 1) / 2
        empty = fake_cuda.from_numpy(np.zeros(0, np.float32), rank)
        comm.allreduce(empty, out=fake_cuda.empty_like(empty))
        comm.allreduce(np.ones(1000, np.float32))
        assert comm._gpu.last_backend() == "staged"
        return comm.timeline_path
