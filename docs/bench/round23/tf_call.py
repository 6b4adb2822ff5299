"""TF's own share of a per-call all-reduce: a `tf.function` of an identity of 16 MiB (two
elements fetched, as benchmarks/tf_multiworker.py's "TF's own call" row) timed back to back,
right after a 16 MiB NumPy all-reduce, and after one plus a 3 ms sleep; beside them the NumPy
all-reduce and the same all-reduce as a TF op, one `tf.function` call each. Two ranks, rank r
on core r, as the benchmarks bind them. Rank 0 prints medians of 100.

Usage: tf_call.py RANK PORT (tf_call.sh starts both).
"""

import os
import sys
import time

import numpy as np

rank, port = int(sys.argv[1]), sys.argv[2]
os.sched_setaffinity(0, {rank})
import tensorflow as tf  # noqa: E402

import pytfcomm  # noqa: E402

comm = pytfcomm.init(rank=rank, size=2, addr=f"127.0.0.1:{port}")
t = tf.constant(np.ones(1 << 22, np.float32))
xn = np.ones(1 << 22, np.float32)
yn = np.empty_like(xn)


@tf.function
def identity_done(x):
    r = tf.identity(x)
    return r[0] + r[-1]


@tf.function
def reduce_done(x):
    r = pytfcomm.allreduce(x, op="sum")
    return r[0] + r[-1]


def timed(f):
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def identity():
    identity_done(t).numpy()


def numpy_allreduce():
    comm.allreduce(xn, out=yn)


for _ in range(10):
    identity()
    reduce_done(t).numpy()
    numpy_allreduce()
res: dict[str, list[float]] = {
    k: []
    for k in (
        "TF identity, back to back",
        "TF identity, right after a NumPy all-reduce",
        "TF identity, after a NumPy all-reduce and 3 ms asleep",
        "NumPy all-reduce",
        "TF all-reduce, one call",
    )
}
keys = list(res)
comm.barrier()
for _ in range(100):
    res[keys[0]].append(timed(identity))
comm.barrier()
for _ in range(100):
    res[keys[3]].append(timed(numpy_allreduce))
    res[keys[1]].append(timed(identity))
    res[keys[4]].append(timed(lambda: reduce_done(t).numpy()))
comm.barrier()
for _ in range(100):
    numpy_allreduce()
    time.sleep(0.003)
    res[keys[2]].append(timed(identity))
comm.barrier()
assert yn[0] == 2 and yn[-1] == 2
if rank == 0:
    for k, v in res.items():
        print(f"{k:55s} {1e3 * float(np.median(v)):.3f} ms")
comm.close()
