"""Rank functions for test_dlpack_host.py: DLPack objects that are not NumPy arrays."""

from __future__ import annotations

from typing import Any

import numpy as np

import pytfcomm


class HostTensor:
    """A minimal non-NumPy DLPack producer over a NumPy array (CPU device)."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a
        self.shape = a.shape

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self.a.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


class FakeDevice:
    """Claims a DLPack device; exporting it is a bug the test must catch."""

    def __init__(self, kind: int, shape: tuple[int, ...] = (4,)) -> None:
        self.kind = kind
        self.shape = shape

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        raise AssertionError("exported before its device was checked")

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self.kind, 0)


def host_collectives(rank: int, size: int, addr: str) -> dict:
    """CPU DLPack tensors through every collective; results as lists."""
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        x = np.arange(6, dtype=np.float32) + rank
        res = {
            "allreduce": comm.allreduce(HostTensor(x), "sum").tolist(),
            "broadcast": comm.broadcast(HostTensor(x), root=1).tolist(),
            "allgather": comm.allgather(HostTensor(x)).tolist(),
            "reduce_scatter": comm.reduce_scatter(HostTensor(x)).tolist(),
        }
        out = np.zeros(6, np.float32)
        got = comm.allreduce(HostTensor(x), "max", out=HostTensor(out))
        res["out_is_returned"] = isinstance(got, HostTensor) and got.a is out
        res["out"] = out.tolist()
    return res


def bad_inputs(rank: int, size: int, addr: str) -> list[str]:
    """Each bad DLPack input must raise a pytfcomm error naming the problem."""
    said = []
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        cases = [
            lambda: comm.allreduce(FakeDevice(10)),  # ROCm
            lambda: comm.allreduce(FakeDevice(2)),  # CUDA
            lambda: comm.allreduce(HostTensor(np.ones(4, np.float32)), out=FakeDevice(2)),
            lambda: comm.allreduce(HostTensor(np.ones(4, np.complex64))),
            lambda: comm.allgather(FakeDevice(2, ())),
        ]
        for case in cases:
            try:
                case()
                said.append("no error")
            except pytfcomm.CommError as e:
                said.append(f"{type(e).__name__}: {e}")
        comm.barrier()  # bad inputs left the communicator usable
    return said


def cuda_inputs(rank: int, size: int, addr: str) -> list[str]:
    """CUDA DLPack tensors that pytfcomm must refuse, each with a pytfcomm error
    naming the problem; then a 2-D bfloat16 all-reduce still works."""
    import gpu_workers as g

    g.setup(rank)
    said = []
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        x = g.to_gpu(np.ones((4, 3), np.float32))
        cases = [
            lambda: comm.allreduce(x, out=g.empty((3, 4), np.float32)),  # wrong shape
            lambda: comm.allreduce(x, out=np.zeros((4, 3), np.float32)),  # host out
            lambda: comm.allgather(x, out=g.empty((4, 3), np.float32)),  # needs (4 * size, 3)
        ]
        if g._lib() == "fake":
            cases.append(lambda: comm.allreduce(x))  # no out=: pytfcomm cannot allocate
        for case in cases:
            try:
                case()
                said.append("no error")
            except pytfcomm.CommError as e:
                said.append(f"{type(e).__name__}: {e}")
        if "bfloat16" in g.dtypes():
            xs = [g.make("bfloat16", "sum", 12, r).reshape(4, 3) for r in range(size)]
            got = g.to_cpu(g.call(comm, "allreduce", g.to_gpu(xs[rank]), (4, 3)))
            said.append(f"bfloat16 ok={g.same(got, g.reference(xs, 'sum'))}")
    return said
