"""Equal-size allgather: comm.allgather (the core's allgatherv: counts in the negotiation)
against the path it replaced (np.empty + _core.allgather, the equal-only kind), in one
build and one run, interleaved; also both with a preallocated out (the old one without
the public method's checks). Run one process per rank:

    python benchmarks/allgather_equal.py RANK SIZE PORT   (PYTFCOMM_TRANSPORT=shm|tcp)

Prints, on rank 0, the 10th percentile of each run, the least over 5 interleaved runs.
"""

import sys
import time

import numpy as np

import pytfcomm
from pytfcomm._dtypes import dtype_code
from pytfcomm.communicator import shape_tag

rank, size, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
comm = pytfcomm.init(rank=rank, size=size, addr=f"127.0.0.1:{port}")


def old(x):
    out = np.empty((x.shape[0] * size, *x.shape[1:]), x.dtype)
    comm._core.allgather(x, out, dtype_code(x.dtype), -1.0, shape_tag(x.shape), "")
    return out


res = {}
for nbytes in [4 << 10, 256 << 10, 4 << 20, 32 << 20]:
    x = np.full(nbytes // 4, rank, np.float32)
    iters = 200 if nbytes <= (256 << 10) else (40 if nbytes <= (4 << 20) else 12)
    pre = np.empty((x.shape[0] * size,), x.dtype)

    def old_pre(x, pre=pre):
        comm._core.allgather(x, pre, dtype_code(x.dtype), -1.0, shape_tag(x.shape), "")
        return pre

    def new_pre(x, pre=pre):
        return comm.allgather(x, out=pre)

    for name, fn in [
        ("old", old),
        ("new", comm.allgather),
        ("old_pre", old_pre),
        ("new_pre", new_pre),
    ] * 5:
        assert np.array_equal(fn(x), np.repeat(np.arange(size, dtype=np.float32), x.size))
        for _ in range(5):
            fn(x)
        ts = []
        for _ in range(iters):
            comm.barrier()
            t = time.perf_counter()
            fn(x)
            ts.append(time.perf_counter() - t)
        res.setdefault((nbytes, name), []).append(float(np.percentile(ts, 10)))
if rank == 0:
    for nbytes in [4 << 10, 256 << 10, 4 << 20, 32 << 20]:
        o, n = min(res[(nbytes, "old")]), min(res[(nbytes, "new")])
        print(f"{nbytes >> 10:>6} KiB  old {o * 1e6:9.1f} us  new {n * 1e6:9.1f} us", end="")
        print(f"  new/old {n / o:.3f}", end="")
        o, n = min(res[(nbytes, "old_pre")]), min(res[(nbytes, "new_pre")])
        print(f"   | out=: old {o * 1e6:9.1f} us  new {n * 1e6:9.1f} us  new/old {n / o:.3f}")
comm.close()
