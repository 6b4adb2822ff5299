"""Where a GPU collective's fixed cost goes: one rank, one GPU, per-call times.

    python benchmarks/gpu_overhead.py [--sizes 4K,64M] [--iters 2000]

With one rank NCCL's all-reduce moves nothing, so what a call costs is the
software around it: launching, NCCL's own enqueueing, waiting for the GPU.
Each row is one way of doing "all-reduce x in place and wait for it", timed
per call (median over --iters, after a warm-up), in a fresh process:

- ``torch add + sync``: one kernel and torch.cuda.synchronize(), the floor;
- ``torch NCCL``: torch.distributed's NCCL (world of 1) and a synchronize;
- ``raw NCCL blocking`` / ``raw NCCL non-blocking``: libnccl through ctypes,
  on a blocking and on a non-blocking communicator (``ncclConfig_t.blocking``,
  what pytfcomm uses, so a wait can be abandoned), polling
  ``ncclCommGetAsyncError`` while in progress, then a synchronize;
- ``pytfcomm NCCL``: ``comm.allreduce(x, out=x)``;
- ``pytfcomm staged``: the staged path's copies (one rank: no exchange).

Needs a GPU, PyTorch and a CUDA build of pytfcomm.

    python benchmarks/gpu_overhead.py --standin DIR [--iters 5000]

runs without a GPU, on the CPU stand-ins built in DIR (tests/gpu/standin:
libcuda.so.1, libnccl.so.2) with fake_cuda tensors, one rank, 4 bytes, and
times pytfcomm's own per-call software (median microseconds per call):

- ``python only``: ``comm.allreduce(x, out=x)`` with the native call replaced
  by a no-op: argument checks, DLPack device queries, codes, the shape tag;
- ``native only``: the native ``GpuCommunicator.allreduce`` called directly
  (DLPack import, the stand-in's stream hand-off and NCCL, the wait);
- ``whole call``: ``comm.allreduce(x, out=x)``.

The stand-in's NCCL and streams are CPU code, so ``native only`` is no GPU
figure; ``python only`` is the same code a GPU run executes.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

try:
    from benchmarks._gpu import free_port, why_no_gpu
    from benchmarks._units import fmt_bytes, parse_sizes
except ModuleNotFoundError:  # run as a file: this directory is on sys.path
    from _gpu import free_port, why_no_gpu
    from _units import fmt_bytes, parse_sizes

WAYS = [
    ("torch add + sync", {}),
    ("torch NCCL", {}),
    ("raw NCCL blocking", {}),
    ("raw NCCL non-blocking", {}),
    ("pytfcomm NCCL", {}),
    ("pytfcomm staged", {"PYTFCOMM_GPU_TRANSPORT": "staged"}),
]
IN_PROGRESS = 7  # ncclInProgress


class _Config(ctypes.Structure):
    # ncclConfig_t as of NCCL 2.14; `size` tells newer NCCLs where it ends.
    _fields_ = (
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint),
        ("version", ctypes.c_uint),
        ("blocking", ctypes.c_int),
        ("cgaClusterSize", ctypes.c_int),
        ("minCTAs", ctypes.c_int),
        ("maxCTAs", ctypes.c_int),
        ("netName", ctypes.c_char_p),
        ("splitShare", ctypes.c_int),
    )


class _UniqueId(ctypes.Structure):
    _fields_ = (("internal", ctypes.c_char * 128),)


def _raw_nccl(blocking: bool):
    """A one-rank NCCL communicator through ctypes; returns all-reduce(x) + sync."""
    import torch

    from pytfcomm._dlpack import nccl_candidates

    lib = ctypes.CDLL(nccl_candidates()[0])
    uid = _UniqueId()
    assert lib.ncclGetUniqueId(ctypes.byref(uid)) == 0
    undef = -(2**31)
    cfg = _Config(ctypes.sizeof(_Config), 0xCAFEBEEF, 21400, int(blocking), undef, undef, undef,
                  None, undef)  # fmt: skip
    comm = ctypes.c_void_p()
    state = ctypes.c_int(0)
    r = lib.ncclCommInitRankConfig(ctypes.byref(comm), 1, uid, 0, ctypes.byref(cfg))
    while r == IN_PROGRESS or (r == 0 and not blocking and state.value == IN_PROGRESS):
        lib.ncclCommGetAsyncError(comm, ctypes.byref(state))
        r = state.value
    if r != 0:
        raise RuntimeError(f"ncclCommInitRankConfig: {r}")

    def once(x) -> None:
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        p = ctypes.c_void_p(x.data_ptr())
        r = lib.ncclAllReduce(p, p, ctypes.c_size_t(x.numel()), 7, 0, comm, stream)
        while r == IN_PROGRESS:
            lib.ncclCommGetAsyncError(comm, ctypes.byref(state))
            r = state.value
        if r != 0:
            raise RuntimeError(f"ncclAllReduce: {r}")
        torch.cuda.synchronize()

    return once


def _child(way: str, nbytes: int, iters: int) -> float:
    import torch

    torch.cuda.set_device(0)
    x = torch.ones(nbytes // 4, device="cuda")
    if way == "torch add + sync":

        def once(x=x) -> None:
            x.add_(0)
            torch.cuda.synchronize()
    elif way == "torch NCCL":
        import torch.distributed as dist

        dist.init_process_group(
            "nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
        )

        def once(x=x) -> None:
            dist.all_reduce(x)
            torch.cuda.synchronize()
    elif way.startswith("raw NCCL"):
        once = _raw_nccl(blocking=way.endswith(" blocking"))
    else:
        import pytfcomm

        comm = pytfcomm.init(rank=0, size=1, addr=f"127.0.0.1:{free_port()}")

        def once(x=x) -> None:
            comm.allreduce(x, out=x)

    for _ in range(max(20, iters // 10)):
        once(x)
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        once(x)
        samples.append(time.perf_counter() - t0)
    if float(x[0]) != 1.0 or float(x[-1]) != 1.0:
        raise AssertionError(f"{way}: wrong result {float(x[0])}")
    return statistics.median(samples)


STANDIN_WAYS = ("python only", "native only", "whole call")


def _standin_child(iters: int) -> dict[str, float]:
    """One rank on the stand-ins: median seconds per call of each STANDIN_WAYS."""
    import fake_cuda
    import numpy as np

    import pytfcomm
    from pytfcomm._dtypes import algorithm_code, op_code

    fake_cuda.load(os.environ["PYTFCOMM_CUDA_DRIVER"])
    comm = pytfcomm.init(rank=0, size=1, addr=f"127.0.0.1:{free_port()}")
    x = fake_cuda.from_numpy(np.ones(1, np.float32))
    gpu = comm.gpu_communicator()
    args = (op_code("sum"), algorithm_code("auto"), comm.gpu_backend, -1.0, 0)

    class _NoNative:
        def allreduce(self, *a: object) -> None:
            return None

    def timed(once) -> float:
        for _ in range(max(20, iters // 10)):
            once()
        samples = []
        for _ in range(iters):
            t0 = time.perf_counter()
            once()
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples)

    out = {"native only": timed(lambda: gpu.allreduce(x, x, *args))}
    out["whole call"] = timed(lambda: comm.allreduce(x, out=x))
    comm._gpu = _NoNative()  # the Python layer alone
    out["python only"] = timed(lambda: comm.allreduce(x, out=x))
    comm._gpu = gpu
    if float(x.numpy()[0]) != 1.0:
        raise AssertionError(f"wrong result {x.numpy()}")
    comm.close()
    return out


def _standin(libs: str, iters: int) -> int:
    """Run _standin_child in a process set up for the stand-ins in ``libs``; print a table."""
    standin = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu",
                           "standin")  # fmt: skip
    env = {
        **os.environ,
        "PYTFCOMM_CUDA_DRIVER": os.path.join(libs, "libcuda.so.1"),
        "PYTFCOMM_NCCL_LIBRARY": os.path.join(libs, "libnccl.so.2"),
        "PYTHONPATH": os.pathsep.join([os.path.abspath(standin), os.environ.get("PYTHONPATH", "")]),
        "PTCSI_GPUS": "1",
    }
    r = subprocess.run(
        [sys.executable, __file__, "--standin-child", str(iters)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    if r.returncode != 0:
        print(r.stderr[-3000:], file=sys.stderr)
        return 1
    res = json.loads(r.stdout.strip().splitlines()[-1])
    print("| way (stand-ins, 1 rank, 4 B) | us per call |")
    print("|---|---|")
    for way in STANDIN_WAYS:
        print(f"| {way} | {res[way] * 1e6:.1f} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Time every way at every size, each in its own process; print a table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="4K,64M")
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    p.add_argument("--standin", metavar="DIR", help="time on the CPU stand-ins built in DIR")
    p.add_argument("--standin-child", type=int, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.standin_child:
        print(json.dumps(_standin_child(a.standin_child)))
        return 0
    if a.standin:
        return _standin(a.standin, a.iters)
    if a.child:
        print(json.dumps(_child(a.child[0], int(a.child[1]), int(a.child[2]))))
        return 0
    why = why_no_gpu()
    if why:
        print(why, file=sys.stderr)
        return 2
    sizes = parse_sizes(a.sizes)
    print("| way | " + " | ".join(f"{fmt_bytes(s)} (us)" for s in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for way, env in WAYS:
        cells = []
        for nbytes in sizes:
            iters = a.iters if nbytes <= 1 << 20 else max(50, a.iters // 20)
            r = subprocess.run(
                [sys.executable, __file__, "--child", way, str(nbytes), str(iters)],
                capture_output=True, text=True, timeout=120, env={**os.environ, **env},
            )  # fmt: skip
            if r.returncode == 0:
                cells.append(f"{json.loads(r.stdout.strip().splitlines()[-1]) * 1e6:.1f}")
            else:
                cells.append("failed: " + (r.stderr.strip().splitlines() or ["?"])[-1][:80])
        print(f"| {way} | " + " | ".join(cells) + " |")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
