"""pytfcomm.tf.allgather, equal and unequal rows, with whichever pytfcomm is importable
(round21's before/after: run by hvd_ab.sh under PYTHONPATH=<old build> and without).
One rank per process:

    python allgather_ab.py RANK SIZE PORT

Prints, on rank 0, the median ms over 20 eager calls per size (each after a barrier),
every result checked first. Unequal: rank r brings 1 + r/8 times the rows.
"""

import statistics
import sys
import time

import numpy as np
import tensorflow as tf

rank, size, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
import pytfcomm  # noqa: E402
import pytfcomm.tf as ptf  # noqa: E402

comm = pytfcomm.init(rank=rank, size=size, addr=f"127.0.0.1:{port}")
ptf.set_default_communicator(comm)
for nbytes in (1 << 20, 4 << 20, 16 << 20):
    rows = nbytes // 4 // 16
    shares = {
        "equal": lambda r, rows=rows: rows,
        "unequal": lambda r, rows=rows: rows + r * rows // 8,
    }
    for kind, mine in shares.items():
        t = tf.constant(np.full((mine(rank), 16), rank, np.float32))
        want = np.concatenate([np.full((mine(p), 16), p, np.float32) for p in range(size)])
        assert np.array_equal(ptf.allgather(t).numpy(), want), kind
        for _ in range(3):
            ptf.allgather(t)
        ts = []
        for _ in range(20):
            comm.barrier()
            t0 = time.perf_counter()
            ptf.allgather(t)
            ts.append(time.perf_counter() - t0)
        if rank == 0:
            ms = statistics.median(ts) * 1e3
            print(f"allgather {kind} {nbytes >> 20} MiB {ms:.3f} ms", flush=True)
comm.close()
