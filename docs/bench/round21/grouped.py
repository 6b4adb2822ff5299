"""hvd.grouped_reducescatter of 64 tensors of 8x16 float32 and of 16 of 4096x16, eager
and in a tf.function, with whichever pytfcomm is importable (round21: run under
PYTHONPATH=<8b9c818 build> and without). One rank per process, with
GLIBC_TUNABLES=glibc.malloc.hugetlb=1:

    python grouped.py RANK SIZE PORT

Rank 0 prints the median of 15 calls (each after a barrier).
"""

import os
import statistics
import sys
import time

import numpy as np
import tensorflow as tf

rank, size, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
os.environ.update(PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE=str(size))
os.environ["PYTFCOMM_ADDR"] = f"127.0.0.1:{port}"
import pytfcomm.horovod.tensorflow as hvd  # noqa: E402
from pytfcomm.horovod._basics import communicator  # noqa: E402

hvd.init()
comm = communicator()
for k, rows in ((64, 8), (16, 4096)):
    ts = [tf.constant(np.full((rows, 16), rank + i, np.float32)) for i in range(k)]
    traced = tf.function(lambda *xs: hvd.grouped_reducescatter(list(xs), op=hvd.Sum))
    calls = {
        "eager": lambda ts=ts: hvd.grouped_reducescatter(ts, op=hvd.Sum),
        "function": lambda ts=ts, traced=traced: traced(*ts),
    }
    for mode, fn in calls.items():
        for _ in range(3):
            fn()
        tt = []
        for _ in range(15):
            comm.barrier()
            t0 = time.perf_counter()
            fn()
            tt.append(time.perf_counter() - t0)
        if rank == 0:
            ms = statistics.median(tt) * 1e3
            print(f"{mode} {k} x {rows}x16 f32: {ms:.2f} ms", flush=True)
hvd.shutdown()
