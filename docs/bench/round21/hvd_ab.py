"""hvd.reducescatter and hvd.alltoall, whichever pytfcomm is importable (round21's
before/after: run under PYTHONPATH=<old build> and without). One rank per process:

    python hvd_ab.py RANK SIZE PORT

Prints, on rank 0, the median ms over 20 calls per size (each after a barrier),
every result checked first.
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
for nbytes in (1 << 20, 4 << 20, 16 << 20):
    elems = nbytes // 4
    base = np.arange(elems, dtype=np.float32) % 1024
    t = tf.constant((base + rank).reshape(-1, 16))
    rows = elems // 16 // size
    total = sum(base + p for p in range(size)).reshape(-1, 16)
    want_rs = total[rank * rows : (rank + 1) * rows]
    want_a2a = np.concatenate(
        [(base + p).reshape(-1, 16)[rank * rows : (rank + 1) * rows] for p in range(size)]
    )
    fns = {
        "reducescatter": (lambda t=t: hvd.reducescatter(t, op=hvd.Sum), want_rs),
        "alltoall": (lambda t=t: hvd.alltoall(t), want_a2a),
    }
    for name, (fn, want) in fns.items():
        assert np.array_equal(fn().numpy(), want), name
        for _ in range(3):
            fn()
        ts = []
        for _ in range(20):
            comm.barrier()
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        if rank == 0:
            print(f"{name} {nbytes >> 20} MiB {statistics.median(ts) * 1e3:.3f} ms", flush=True)
hvd.shutdown()
