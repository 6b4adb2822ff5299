"""What comes before a `tf.function` call moves TF's own share of it.

Two ranks, rank r on core r (as the benchmarks bind them). Each times, 100 times, a
`tf.function` holding an identity of a 16 MiB tensor with two elements fetched (the "TF's
own call" row of benchmarks/tf_multiworker.py), called back to back or 3 ms after the step
before, where the step before is nothing, a pytfcomm all-reduce of BYTES (NumPy, `out=`), or
the same bytes through NumPy alone (an add and a copy, no pytfcomm). Rank 0 prints medians.

Usage: tf_cold.py RANK PORT MODE BYTES, MODE in none|allreduce|numpy (tf_cold.sh).
"""

import os
import sys
import time

import numpy as np

rank, port, mode, nbytes = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
os.sched_setaffinity(0, {rank})
import tensorflow as tf  # noqa: E402

import pytfcomm  # noqa: E402

comm = pytfcomm.init(rank=rank, size=2, addr=f"127.0.0.1:{port}")
t = tf.constant(np.ones(1 << 22, np.float32))
x = np.ones(nbytes // 4, np.float32)
y = np.empty_like(x)
z = np.empty_like(x)


@tf.function
def identity_done(v):
    r = tf.identity(v)
    return r[0] + r[-1]


def step_before():
    if mode == "allreduce":
        comm.allreduce(x, out=y)
    elif mode == "numpy":
        np.add(x, x, out=y)
        np.copyto(z, y)


for _ in range(20):
    identity_done(t).numpy()
    step_before()
comm.barrier()
out = []
for gap in (0.0, 0.003):
    times = []
    for _ in range(100):
        step_before()
        if gap:
            time.sleep(gap)
        t0 = time.perf_counter()
        identity_done(t).numpy()
        times.append(time.perf_counter() - t0)
    out.append(f"{'3 ms after' if gap else 'right after'} {1e3 * float(np.median(times)):.3f} ms")
comm.barrier()
comm.close()
if rank == 0:
    print(f"{mode:9s} {nbytes:>9d} bytes | TF identity call " + "; ".join(out))
