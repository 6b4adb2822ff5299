"""pytfcomm on GPU tensors against the plain alternatives, in one run.

    python benchmarks/nccl.py --np 2 --sizes 4K,1M,64M,1G

Starts --np processes on this machine, each on GPU (rank % GPUs); with fewer
GPUs than ranks NCCL >= 2.30 needs NCCL_MULTI_RANK_GPU_ENABLE=1 (set here).
Every rank all-reduces the same float32 CUDA tensor (sum) in place, four ways:

- ``torch NCCL``: plain NCCL through torch.distributed, then
  torch.cuda.synchronize();
- ``pytfcomm NCCL``: ``comm.allreduce(x, out=x)`` on a communicator whose GPU
  transport is NCCL (it returns once the result is in place);
- ``pytfcomm staged``: the same call on a communicator with
  ``transport="shm"``: pipelined copies through pinned host memory around the
  CPU all-reduce;
- ``copy + CPU``: the plain way without NCCL: the whole tensor copied to a
  pinned host buffer, pytfcomm's CPU all-reduce on it (NumPy), copied back.

Each iteration starts after a barrier and a device synchronisation and is timed
to completion; the median of --iters (a quarter of that, at least 3, above
64 MiB) after --warmup. Every result is checked. Targets (issue 17):
pytfcomm's NCCL overhead over plain NCCL under 5% at 64 MiB and above; the
staged path faster than ``copy + CPU``. Needs a GPU, PyTorch with CUDA and a
CUDA build of pytfcomm; it says which is missing otherwise.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import statistics
import sys
import time
from collections.abc import Callable

try:
    from benchmarks._gpu import free_port, why_no_gpu
    from benchmarks._units import fmt_bytes, parse_sizes
except ModuleNotFoundError:  # run as a file: this directory is on sys.path
    from _gpu import free_port, why_no_gpu
    from _units import fmt_bytes, parse_sizes

WAYS = ("torch NCCL", "pytfcomm NCCL", "pytfcomm staged", "copy + CPU")
SHORT = {"torch": "torch NCCL", "nccl": "pytfcomm NCCL", "staged": "pytfcomm staged",
         "copy": "copy + CPU"}  # fmt: skip


def _one_size(nbytes: int, rank: int, size: int, nccl, staged, args: dict) -> tuple:
    """The median seconds of each way at one size, and the GPU backend each
    pytfcomm communicator used."""
    import torch
    import torch.distributed as dist

    n = nbytes // 4
    want = float(size * (size + 1) // 2)
    x = torch.empty((n,), device="cuda")
    host = torch.empty((n,), pin_memory=True)
    host_np = host.numpy()

    def torch_once() -> None:
        dist.all_reduce(x)
        torch.cuda.synchronize()

    def copy_cpu_once() -> None:
        host.copy_(x)
        staged.allreduce(host_np, out=host_np)
        x.copy_(host)
        torch.cuda.synchronize()

    every: dict[str, Callable[[], None]] = {
        "torch NCCL": torch_once,
        "pytfcomm NCCL": lambda: nccl.allreduce(x, out=x),
        "pytfcomm staged": lambda: staged.allreduce(x, out=x),
        "copy + CPU": copy_cpu_once,
    }
    ways = {w: fn for w, fn in every.items() if w in args["ways"]}
    iters = args["iters"] if nbytes <= 64 << 20 else max(3, args["iters"] // 4)
    times: dict[str, float] = {}
    for name, fn in ways.items():
        samples = []
        for i in range(args["warmup"] + iters):
            x.fill_(rank + 1)
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            took = time.perf_counter() - t0
            if i >= args["warmup"]:
                samples.append(took)
            wrong = int((x != want).sum())
            if wrong:
                raise AssertionError(f"{name} {nbytes} B: {wrong} wrong elements")
        times[name] = statistics.median(samples)
    backends = {w: c._gpu.last_backend() for w, c in
                (("pytfcomm NCCL", nccl), ("pytfcomm staged", staged)) if w in ways}  # fmt: skip
    return times, backends


def _rank(rank: int, size: int, ports: tuple[int, ...], sizes: list[int], args: dict, q) -> None:
    import torch
    import torch.distributed as dist

    import pytfcomm

    gpus = torch.cuda.device_count()
    torch.cuda.set_device(rank % gpus)
    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{ports[0]}", rank=rank, world_size=size
    )
    nccl = pytfcomm.init(rank=rank, size=size, addr=f"127.0.0.1:{ports[1]}")
    staged = pytfcomm.init(rank=rank, size=size, addr=f"127.0.0.1:{ports[2]}", transport="shm")
    for nbytes in sizes:
        times, backends = _one_size(nbytes, rank, size, nccl, staged, args)
        if rank == 0:
            q.put((nbytes, times, backends))
        torch.cuda.empty_cache()
    staged.close()
    nccl.close()
    dist.destroy_process_group()
    if rank == 0:
        q.put(None)


def _table(rows: list, np_: int, iters: int) -> str:
    busbw = 2 * (np_ - 1) / np_ if np_ > 1 else 1.0
    lines = [
        f"N = {np_}, float32 sum in place, median of {iters} (above 64 MiB "
        f"{max(3, iters // 4)}), microseconds; busbw GB/s = size x 2(N-1)/N / time",
        "",
        "| size | torch NCCL | pytfcomm NCCL | NCCL overhead | busbw torch | busbw pytfcomm "
        "| pytfcomm staged | copy + CPU | staged speedup |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    nan = float("nan")  # a way left out by --ways: its cells read "-"
    for nbytes, t, _ in rows:
        tt, tp, ts, tc = (t.get(w, nan) for w in WAYS)
        cells = [
            fmt_bytes(nbytes),
            _cell(tt * 1e6, ".0f"),
            _cell(tp * 1e6, ".0f"),
            _cell((tp / tt - 1) * 100, "+.1f", "%"),
            _cell(nbytes / tt * busbw / 1e9, ".1f"),
            _cell(nbytes / tp * busbw / 1e9, ".1f"),
            _cell(ts * 1e6, ".0f"),
            _cell(tc * 1e6, ".0f"),
            _cell(tc / ts, ".2f", "x"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(value: float, spec: str, unit: str = "") -> str:
    return "-" if math.isnan(value) else f"{value:{spec}}{unit}"


def _wait_for_rows(q, procs: list, deadline: float, rows: list) -> None:
    """Rank 0's rows into ``rows``, each printed as it comes (a run cut short keeps
    what it measured); raises as soon as a rank dies first or the deadline passes."""
    import queue

    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            row = q.get(timeout=1.0)
            if row is None:
                return
            rows.append(row)
            nbytes, t, _ = row
            took = ", ".join(f"{w} {v * 1e6:.0f} us" for w, v in t.items())
            print(f"{fmt_bytes(nbytes)}: {took}")
            sys.stdout.flush()
            continue
        except queue.Empty:
            pass
        dead = [r for r, pr in enumerate(procs) if pr.exitcode not in (None, 0)]
        if dead:
            codes = [procs[r].exitcode for r in dead]
            raise RuntimeError(f"rank(s) {dead} exited with {codes} before the table")
    raise TimeoutError(f"no table after {deadline:.0f} s")


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print one table; returns the process exit code."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--sizes", default="4K,64K,1M,16M,64M,256M,1G")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--deadline", type=float, default=1200, help="seconds for the whole run")
    p.add_argument("--ways", default=",".join(SHORT), help="a subset of " + ",".join(SHORT))
    a = p.parse_args(argv)
    why = why_no_gpu()
    if why:
        print(why, file=sys.stderr)
        return 2
    os.environ.setdefault("NCCL_MULTI_RANK_GPU_ENABLE", "1")
    os.environ.pop("PYTFCOMM_GPU_TRANSPORT", None)  # NCCL by default, staged on the shm comm
    sizes = parse_sizes(a.sizes)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ports = (free_port(), free_port(), free_port())
    unknown = set(a.ways.split(",")) - set(SHORT)
    if unknown:
        p.error(f"unknown --ways {sorted(unknown)}: choose from {','.join(SHORT)}")
    args = {"iters": a.iters, "warmup": a.warmup, "ways": [SHORT[w] for w in a.ways.split(",")]}
    procs = [ctx.Process(target=_rank, args=(r, a.np, ports, sizes, args, q)) for r in range(a.np)]
    for pr in procs:
        pr.start()
    rows: list = []
    try:
        _wait_for_rows(q, procs, a.deadline, rows)
    except (RuntimeError, TimeoutError) as e:
        for pr in procs:
            pr.kill()
        print(_table(rows, a.np, a.iters))
        print(f"cut short: {e}", file=sys.stderr)
        return 1
    for pr in procs:
        pr.join(timeout=60)
        if pr.is_alive():
            pr.kill()
    for _, _, backends in rows:
        want = {w: b for w, b in (("pytfcomm NCCL", "nccl"), ("pytfcomm staged", "staged"))
                if w in args["ways"]}  # fmt: skip
        if backends != want:
            print(f"unexpected GPU backends {backends}, want {want}", file=sys.stderr)
            return 1
    print(_table(rows, a.np, a.iters))
    return 0 if all(p.exitcode == 0 for p in procs) else 1


if __name__ == "__main__":
    sys.exit(main())
