"""Round19: one rank of dest_cache.sh. NumPy 16 MiB all-reduces at N=2 over shared memory,
30 calls per case, four rounds of the cases in turn: the same input and output every call,
or one of six in rotation for the input, the output or both (a buffer in rotation was last
used six calls ago, so its lines have left the cache). Then six input/output pairs used in
turn for 20 rounds, each pair's median: how much two pairs of the same size differ.
Rank 0 prints medians in ms.

    python dest_cache.py RANK PORT
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
n = 4 << 20
xs = [np.full(n, rank + 1, np.float32) for _ in range(6)]
ys = [np.empty(n, np.float32) for _ in range(6)]


def call(x: np.ndarray, y: np.ndarray) -> float:
    t0 = time.perf_counter()
    comm.allreduce(x, op="sum", out=y)
    return time.perf_counter() - t0


cases = {
    "same input, same output": lambda i: (xs[0], ys[0]),
    "same input, 6 outputs": lambda i: (xs[0], ys[i % 6]),
    "6 inputs, same output": lambda i: (xs[i % 6], ys[0]),
    "6 inputs, 6 outputs": lambda i: (xs[i % 6], ys[i % 6]),
}
res: dict[str, list[float]] = {k: [] for k in cases}
for _ in range(4):
    for k, pick in cases.items():
        ts = [call(*pick(i)) for i in range(30)]
        res[k].append(statistics.median(ts[6:]) * 1e3)
pairs: list[list[float]] = [[] for _ in range(6)]
for _ in range(20):
    for k in range(6):
        pairs[k].append(call(xs[k], ys[k]))
assert float(ys[0][0]) == 3.0 and float(ys[5][-1]) == 3.0
if rank == 0:
    for k, v in res.items():
        print(f"  {k:24s} " + " ".join(f"{t:.2f}" for t in v))
    print("  pairs in turn: " + " ".join(f"{statistics.median(p[2:]) * 1e3:.2f}" for p in pairs))
