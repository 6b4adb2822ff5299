"""Round19: one rank of no_out.sh. NumPy all-reduces at N=2 (shared memory), each size
20 times with ``out=`` a buffer kept across calls and 20 times without ``out=`` (the
result dropped before the next call, as a loop that uses it and moves on does), in turn.
Rank 0 prints the medians in ms.

    python no_out.py RANK PORT
"""

import os
import statistics
import sys
import time

rank, port = int(sys.argv[1]), sys.argv[2]
os.environ.update(PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE="2", PYTFCOMM_ADDR=f"127.0.0.1:{port}")
import numpy as np  # noqa: E402

import pytfcomm  # noqa: E402

comm = pytfcomm.init()
cells = []
for mib in (1, 8, 32, 64, 128):
    x = np.full(mib << 18, rank + 1, np.float32)
    y = np.empty_like(x)
    with_out, without = [], []
    for _ in range(20):
        t0 = time.perf_counter()
        comm.allreduce(x, op="sum", out=y)
        with_out.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        z = comm.allreduce(x, op="sum")
        without.append(time.perf_counter() - t0)
        assert float(z[-1]) == 3.0
        del z
    cells.append(
        f"{mib} MiB {statistics.median(with_out[3:]) * 1e3:.2f} / "
        f"{statistics.median(without[3:]) * 1e3:.2f}"
    )
if rank == 0:
    print("  out= / no out= (ms): " + "; ".join(cells), flush=True)
