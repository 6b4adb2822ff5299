"""hvd.grouped_reducescatter of 64 tensors of 8x16 float32 and of 16 of 4096x16, eager
and in a tf.function, with whichever pytfcomm is importable (round21: run under
PYTHONPATH=<8b9c818 build> and without). One rank per process: python grouped.py RANK SIZE PORT
(GLIBC_TUNABLES=glibc.malloc.hugetlb=1). Rank 0 prints the median of 15 calls.
"""

import os, sys, statistics, time
import numpy as np, tensorflow as tf

rank, size, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
os.environ.update(
    PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE=str(size), PYTFCOMM_ADDR=f"127.0.0.1:{port}"
)
import pytfcomm.horovod.tensorflow as hvd
from pytfcomm.horovod._basics import communicator

hvd.init()
comm = communicator()
for k, rows in ((64, 8), (16, 4096)):
    ts = [tf.constant(np.full((rows, 16), rank + i, np.float32)) for i in range(k)]
    f = tf.function(lambda *xs: hvd.grouped_reducescatter(list(xs), op=hvd.Sum))
    for mode, fn in (
        ("eager", lambda: hvd.grouped_reducescatter(ts, op=hvd.Sum)),
        ("function", lambda: f(*ts)),
    ):
        for _ in range(3):
            fn()
        tt = []
        for _ in range(15):
            comm.barrier()
            t0 = time.perf_counter()
            fn()
            tt.append(time.perf_counter() - t0)
        if rank == 0:
            print(f"{mode} {k} x {rows}x16 f32: {statistics.median(tt) * 1e3:.2f} ms", flush=True)
hvd.shutdown()
