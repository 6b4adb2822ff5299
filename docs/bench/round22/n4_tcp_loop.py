"""One of 4 ranks all-reducing 4 MiB of float32 (out=) in a loop for argv[3] seconds; rank 0
prints the median time. Usage: n4_tcp_loop.py RANK PORT SECONDS (perf_n4_tcp.sh)."""

import os
import sys
import time

import numpy as np

import pytfcomm

rank, port, seconds = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
os.sched_setaffinity(0, {rank % 2})
comm = pytfcomm.init(rank=rank, size=4, addr=f"127.0.0.1:{port}")
x = np.ones(1 << 20, np.float32)
y = np.empty_like(x)
for _ in range(20):
    comm.allreduce(x, out=y)
comm.barrier()
times = []
start = time.perf_counter()
while time.perf_counter() - start < seconds:
    t0 = time.perf_counter()
    comm.allreduce(x, out=y)
    times.append(time.perf_counter() - t0)
comm.barrier()
if rank == 0:
    print(f"median {1000 * float(np.median(times)):.2f} ms over {len(times)} calls")
assert y[0] == 4
comm.close()
