"""TF all-reduce latency with whichever pytfcomm is importable (round22's before/after of
the Ctrl-C change, 4741a34: run by ops_ab.sh under PYTHONPATH=<old build> and without).
One rank per process:

    python ops_ab.py RANK SIZE PORT

Prints, on rank 0, the median us of 200 back-to-back calls (4 KiB) or 20 (16 MiB),
eager and in a tf.function, every result checked first.
"""

import statistics
import sys
import time

import tensorflow as tf

rank, size, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
import pytfcomm  # noqa: E402
import pytfcomm.tf as ptf  # noqa: E402

comm = pytfcomm.init(rank=rank, size=size, addr=f"127.0.0.1:{port}")
ptf.set_default_communicator(comm)
traced = tf.function(lambda x: ptf.allreduce(x))
want = size * (size + 1) / 2
for nbytes, calls in ((4 << 10, 200), (16 << 20, 20)):
    x = tf.fill([nbytes // 4], float(rank + 1))
    for form, fn in (("eager", ptf.allreduce), ("tf.function", traced)):
        y = fn(x)
        assert float(y[0]) == want and float(y[-1]) == want, (form, nbytes)
        for _ in range(5):
            fn(x)
        comm.barrier()
        ts = []
        for _ in range(calls):
            t0 = time.perf_counter()
            y = fn(x)
            float(y[0])
            ts.append(time.perf_counter() - t0)
        if rank == 0:
            med = statistics.median(ts) * 1e6
            print(f"{nbytes >> 10:>6} KiB {form:<12} {med:9.1f} us")
comm.close()
