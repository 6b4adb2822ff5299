"""pytfcomm's NCCL path against plain NCCL (torch.distributed "nccl") on GPU tensors.

    python benchmarks/nccl.py --np 2 --sizes 1M,64M

Starts --np processes on this machine, each on GPU (rank % GPUs); with fewer
GPUs than ranks NCCL >= 2.30 needs NCCL_MULTI_RANK_GPU_ENABLE=1 (set here).
Both sides all-reduce the same float32 CUDA tensor in place; each iteration is
timed to completion (pytfcomm's call returns once the result is in place; the
torch side is followed by torch.cuda.synchronize()). Median of --iters after
--warmup; every result is checked. The target: pytfcomm's overhead over plain
NCCL under 5% at 64 MiB. Needs a GPU, PyTorch with CUDA and a CUDA build of
pytfcomm; it says which is missing otherwise.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import sys
import time


def _parse_size(s: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units else int(s)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, size: int, ports: tuple[int, int], sizes: list[int], args: dict, q) -> None:
    import torch
    import torch.distributed as dist

    import pytfcomm

    gpus = torch.cuda.device_count()
    torch.cuda.set_device(rank % gpus)
    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{ports[0]}", rank=rank, world_size=size
    )
    comm = pytfcomm.init(rank=rank, size=size, addr=f"127.0.0.1:{ports[1]}")
    rows = []
    for nbytes in sizes:
        n = nbytes // 4
        x = torch.full((n,), float(rank + 1), device="cuda")
        want = size * (size + 1) / 2

        def torch_once(x: torch.Tensor = x) -> None:
            x.fill_(rank + 1)
            dist.all_reduce(x)
            torch.cuda.synchronize()

        def ptc_once(x: torch.Tensor = x) -> None:
            x.fill_(rank + 1)
            comm.allreduce(x, out=x)

        times = {}
        for name, fn in (("torch-nccl", torch_once), ("pytfcomm-nccl", ptc_once)):
            for _ in range(args["warmup"]):
                fn()
            samples = []
            for _ in range(args["iters"]):
                dist.barrier()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - t0)
                if float(x[0]) != want or float(x[-1]) != want:
                    raise AssertionError(f"{name}: wrong result {float(x[0])} != {want}")
            times[name] = statistics.median(samples)
        rows.append((nbytes, times, comm._gpu.last_backend()))
    comm.close()
    dist.destroy_process_group()
    if rank == 0:
        q.put(rows)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print one table; returns the process exit code."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--sizes", default="1M,16M,64M")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    a = p.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("needs PyTorch with CUDA: pip install torch", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("no GPU visible to PyTorch", file=sys.stderr)
        return 2
    import pytfcomm._core as core

    if not core.gpu_info().get("cuda_build"):
        print(
            "pytfcomm was built without CUDA: PYTFCOMM_WITH_CUDA=ON pip install .", file=sys.stderr
        )
        return 2
    os.environ.setdefault("NCCL_MULTI_RANK_GPU_ENABLE", "1")
    os.environ["PYTFCOMM_GPU_TRANSPORT"] = "nccl"
    sizes = [_parse_size(s) for s in a.sizes.split(",")]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ports = (_free_port(), _free_port())
    args = {"iters": a.iters, "warmup": a.warmup}
    procs = [ctx.Process(target=_rank, args=(r, a.np, ports, sizes, args, q)) for r in range(a.np)]
    for pr in procs:
        pr.start()
    rows = q.get(timeout=1800)
    for pr in procs:
        pr.join(timeout=60)
    busbw = 2 * (a.np - 1) / a.np
    print(f"N = {a.np}, float32 sum, median of {a.iters} (us); busbw in GB/s")
    print("| size | torch NCCL | pytfcomm NCCL | busbw torch | busbw pytfcomm | overhead |")
    print("|---|---|---|---|---|---|")
    for nbytes, t, backend in rows:
        tt, tp = t["torch-nccl"], t["pytfcomm-nccl"]
        assert backend == "nccl", backend
        print(
            f"| {nbytes >> 20} MiB | {tt * 1e6:.0f} | {tp * 1e6:.0f} | "
            f"{nbytes / tt * busbw / 1e9:.1f} | {nbytes / tp * busbw / 1e9:.1f} | "
            f"{(tp / tt - 1) * 100:+.1f}% |"
        )
    return 0 if all(p.exitcode == 0 for p in procs) else 1


if __name__ == "__main__":
    sys.exit(main())
