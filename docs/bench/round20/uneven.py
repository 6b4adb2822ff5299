"""Round20: one rank of uneven.sh. NumPy all-gathers with unequal counts at N=2 (shared
memory): rank 1 brings 4,099 elements fewer, so the result is not the size pytfcomm
guesses and the core allocates it once it knows the sum. Each total size 20 times with
``out=`` an array of the exact size kept across calls, and 20 times without ``out=`` (the
result dropped before the next call), in turn. Rank 0 prints the medians in ms.

    python uneven.py RANK PORT
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
    half = mib << 17  # float32 elements: each rank about mib/2 MiB
    counts = (half, half - 4099)
    x = np.full(counts[rank], rank + 1, np.float32)
    y = np.empty(sum(counts), np.float32)
    with_out, without = [], []
    for _ in range(20):
        t0 = time.perf_counter()
        comm.allgather(x, out=y)
        with_out.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        z = comm.allgather(x)
        without.append(time.perf_counter() - t0)
        assert z.size == y.size and float(z[0]) == 1.0 and float(z[-1]) == 2.0
        del z
    cells.append(
        f"{mib} MiB {statistics.median(with_out[3:]) * 1e3:.2f} / "
        f"{statistics.median(without[3:]) * 1e3:.2f}"
    )
if rank == 0:
    print("  out= / no out= (ms): " + "; ".join(cells), flush=True)
