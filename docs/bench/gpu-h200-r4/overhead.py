"""Where pytfcomm's extra 0.3-0.6 ms per NCCL all-reduce goes, 2 ranks on one GPU.

    python overhead.py --out DIR [--timeline] [--iters 40]

The second and third H200 checks (docs/gpu.md) measured pytfcomm's NCCL path
0.3-0.6 ms slower per call than torch.distributed's NCCL at every size, with 2
ranks sharing the one GPU, and did not find where. This records, per rank and
per iteration, CLOCK_MONOTONIC times (shared by the processes of one host) of:

- ``t0``: the call starts (after a torch barrier and a device synchronise, as
  benchmarks/nccl.py times it);
- ``launched``: the all-reduce is enqueued (torch: ``dist.all_reduce``
  returned; pytfcomm: the end of the timeline's ``nccl_launch`` phase, with
  ``--timeline``);
- ``t1``: the result is in place (torch: ``torch.cuda.synchronize()``
  returned; pytfcomm: ``allreduce(x, out=x)`` returned).

Ways (--ways), interleaved per iteration: ``torch`` (the barrier's own process
group), ``torch_g2`` (a second NCCL process group, as pytfcomm has its own NCCL
communicator), ``pytfcomm``; ``raw_b`` / ``raw_nb``: libnccl through ctypes on a
blocking / non-blocking 2-rank communicator (pytfcomm's kind), its
``ncclAllReduce`` on torch's stream, busy-polling ``ncclCommGetAsyncError``
while in progress, then a synchronise; ``dlpack``: only the
``x.__dlpack__(stream=s)`` hand-off pytfcomm's call starts with; ``cupy``:
pytfcomm on a CuPy view of the same memory; ``torch_b2b`` / ``pytfcomm_b2b``: the
second of two back-to-back calls (no barrier between them; ``t0`` is its start).
PYTFCOMM_GPU_VERIFY is taken from the environment.
Each rank writes ``DIR/rank<r>.json`` (and its timeline ``DIR/tl.rank<r>.json``);
``overhead_report.py`` reads them.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def raw_comm(r: int, blocking: bool, dist):
    """A 2-rank NCCL communicator through ctypes (the id travels over torch's group)."""
    import ctypes

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "benchmarks"))
    from gpu_overhead import IN_PROGRESS, _Config, _UniqueId

    from pytfcomm._dlpack import nccl_candidates

    lib = ctypes.CDLL(nccl_candidates()[0])
    uid = _UniqueId()
    if r == 0:
        assert lib.ncclGetUniqueId(ctypes.byref(uid)) == 0
    box = [ctypes.string_at(ctypes.addressof(uid), ctypes.sizeof(uid)) if r == 0 else None]
    dist.broadcast_object_list(box, src=0)
    ctypes.memmove(ctypes.addressof(uid), box[0], ctypes.sizeof(uid))
    undef = -(2**31)
    cfg = _Config(ctypes.sizeof(_Config), 0xCAFEBEEF, 21400, int(blocking), undef, undef, undef,
                  None, undef)  # fmt: skip
    comm = ctypes.c_void_p()
    state = ctypes.c_int(0)
    res = lib.ncclCommInitRankConfig(ctypes.byref(comm), 2, uid, r, ctypes.byref(cfg))
    lib.ncclCommGetAsyncError(comm, ctypes.byref(state))
    while res == IN_PROGRESS or (res == 0 and state.value == IN_PROGRESS):
        lib.ncclCommGetAsyncError(comm, ctypes.byref(state))
        res = state.value
    if res != 0:
        raise RuntimeError(f"ncclCommInitRankConfig: {res}")

    def allreduce(x, torch, ns):
        t0 = ns()
        p = ctypes.c_void_p(x.data_ptr())
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        res = lib.ncclAllReduce(p, p, ctypes.c_size_t(x.numel()), 7, 0, comm, stream)
        while res == IN_PROGRESS:
            lib.ncclCommGetAsyncError(comm, ctypes.byref(state))
            res = state.value
        if res != 0:
            raise RuntimeError(f"ncclAllReduce: {res}")
        t_l = ns()
        torch.cuda.synchronize()
        return t0, t_l, ns()

    return allreduce


def rank_main(r: int, ports: tuple[int, int], a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    import pytfcomm

    backend, dev = ("gloo", "cpu") if a.cpu else ("nccl", "cuda")
    sync = (lambda: None) if a.cpu else torch.cuda.synchronize
    if not a.cpu:
        torch.cuda.set_device(0)
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{ports[0]}", rank=r, world_size=2
    )
    g2 = dist.new_group([0, 1], backend=backend)
    comm = pytfcomm.init(rank=r, size=2, addr=f"127.0.0.1:{ports[1]}")
    want = a.ways.split(",")
    raw = {w: raw_comm(r, w == "raw_b", dist) for w in ("raw_b", "raw_nb") if w in want}
    side = None if a.cpu else torch.cuda.Stream(device=0).cuda_stream
    if a.timeline:
        comm.start_timeline(os.path.join(a.out, "tl.json"))
    ns = time.monotonic_ns
    rows = []
    for nbytes in (4096, 64 << 20, 256 << 20):
        x = torch.empty(nbytes // 4, device=dev)

        def torch_way(group=None):
            t0 = ns()
            dist.all_reduce(x, group=group)
            t_l = ns()
            sync()
            return t0, t_l, ns()

        def ptc_way():
            t0 = ns()
            comm.allreduce(x, out=x)
            return t0, 0, ns()

        def dlpack_way():
            t0 = ns()
            x.__dlpack__(stream=side)
            return t0, 0, ns()

        def b2b(fn):
            def way():
                fn()
                return fn()

            return way

        every = {"torch": torch_way, "torch_g2": lambda: torch_way(g2), "pytfcomm": ptc_way,
                 "dlpack": dlpack_way, "torch_b2b": b2b(torch_way), "pytfcomm_b2b": b2b(ptc_way)}  # fmt: skip
        for w, f in raw.items():
            every[w] = lambda f=f: f(x, torch, ns)
        if "cupy" in want:
            import cupy

            xc = cupy.from_dlpack(x)

            def cupy_way():
                t0 = ns()
                comm.allreduce(xc, out=xc)
                return t0, 0, ns()

            every["cupy"] = cupy_way
        ways = {w: every[w] for w in want}
        for i in range(3 + a.iters):
            for w, fn in ways.items():
                x.fill_(r + 1)
                dist.barrier()
                sync()
                t0, t_l, t1 = fn()
                expect = r + 1 if w == "dlpack" else 6 if w.endswith("b2b") else 3
                if not bool((x == expect).all()):
                    raise AssertionError(f"{w} {nbytes}: wrong result")
                rows.append({"bytes": nbytes, "iter": i, "way": w, "t0": t0, "launched": t_l,
                             "t1": t1})  # fmt: skip
        del x
        if not a.cpu:
            torch.cuda.empty_cache()
    if a.timeline:
        comm.stop_timeline()
    with open(os.path.join(a.out, f"rank{r}.json"), "w") as f:
        json.dump({"rank": r, "verify": os.environ.get("PYTFCOMM_GPU_VERIFY", "1"),
                   "rows": rows}, f)  # fmt: skip
    comm.close()
    dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--timeline", action="store_true")
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--ways", default="torch,torch_g2,pytfcomm")
    p.add_argument("--cpu", action="store_true", help="gloo and CPU tensors: checks this script")
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--ports", default="", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.rank >= 0:
        rank_main(a.rank, tuple(int(x) for x in a.ports.split(",")), a)
        return 0
    import subprocess

    os.makedirs(a.out, exist_ok=True)
    os.environ.setdefault("NCCL_MULTI_RANK_GPU_ENABLE", "1")
    ports = f"{free_port()},{free_port()}"
    argv = [sys.executable, __file__, "--out", a.out, "--iters", str(a.iters), "--ports", ports,
            "--ways", a.ways]  # fmt: skip
    argv += ["--timeline"] * a.timeline + ["--cpu"] * a.cpu
    procs = [subprocess.Popen(argv + ["--rank", str(r)]) for r in range(2)]
    try:
        codes = [pr.wait(timeout=240) for pr in procs]
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
    print("exit codes", codes)
    return 0 if codes == [0, 0] else 1


if __name__ == "__main__":
    sys.exit(main())
