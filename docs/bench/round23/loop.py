"""One rank all-reducing float32 (out=) in a loop for SECONDS; rank 0 prints the median time.

Usage: loop.py RANK SIZE PORT SECONDS BYTES (profile.sh, round22/perf_n4_tcp.sh). The
transport comes from PYTFCOMM_TRANSPORT; rank r runs on core r mod the cores, as the
benchmarks bind them.
"""

import os
import sys
import time

import numpy as np

import pytfcomm

rank, size, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
seconds, nbytes = float(sys.argv[4]), int(sys.argv[5])
os.sched_setaffinity(0, {rank % os.cpu_count()})
comm = pytfcomm.init(rank=rank, size=size, addr=f"127.0.0.1:{port}")
x = np.ones(nbytes // 4, np.float32)
y = np.empty_like(x)
for _ in range(10):
    comm.allreduce(x, out=y)
comm.barrier()
times = []
start = time.perf_counter()
while time.perf_counter() - start < seconds:
    t0 = time.perf_counter()
    comm.allreduce(x, out=y)
    times.append(time.perf_counter() - t0)
comm.barrier()
assert y[0] == size and y[-1] == size
if rank == 0:
    print(f"# median {1000 * float(np.median(times)):.3f} ms over {len(times)} calls")
comm.close()
