"""Round18 probe: one worker of sequence.sh. Times the 16 MiB per-call all-reduce of
pytfcomm's strategy (``mwms``) or its Horovod-style path (``hvd``) when each iteration
calls SEQ in turn (comma-separated: reduce, graph, numpy, tfcall); BARRIER=1 puts an
untimed ``comm.barrier()`` before every call. Prints this rank's medians in ms.

    python sequence.py RANK PORT0 PORT1 PORT2 mwms|hvd
"""

import json
import os
import statistics
import sys
import time

rank, ports, backend = int(sys.argv[1]), sys.argv[2:5], sys.argv[5]
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
if backend == "mwms":
    workers = [f"127.0.0.1:{p}" for p in ports[1:]]
    tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}
    os.environ["TF_CONFIG"] = json.dumps(tf_config)
os.environ.update(PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE="2", PYTFCOMM_ADDR=f"127.0.0.1:{ports[0]}")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import pytfcomm  # noqa: E402

if backend == "mwms":
    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    comm = strategy.communicator

    def one(x):
        return strategy.reduce("SUM", strategy.run(tf.identity, args=(x,)), axis=None)
else:
    comm = pytfcomm.init()

    def one(x):
        return pytfcomm.allreduce(x, op="sum")


@tf.function
def reduce_call(x):
    r = one(x)
    return r[0] + r[-1]


@tf.function
def chain_call(x):
    acc, prev = [], []
    for _ in range(8):
        with tf.control_dependencies(prev):
            r = one(x)
        prev = [r]
        acc.append(r[0] + r[-1])
    return tf.add_n(acc)


@tf.function
def identity_call(x):
    r = tf.identity(x)
    return r[0] + r[-1]


t = tf.constant(np.full(4 << 20, rank + 1, np.float32))
xn, yn = np.full(4 << 20, rank + 1, np.float32), np.empty(4 << 20, np.float32)
calls = {
    "reduce": (lambda: reduce_call(t).numpy(), 1),
    "graph": (lambda: chain_call(t).numpy(), 8),
    "numpy": (lambda: comm.allreduce(xn, op="sum", out=yn), 1),
    "tfcall": (lambda: identity_call(t).numpy(), 1),
}
seq = os.environ["SEQ"].split(",")
barrier = os.environ.get("BARRIER") == "1"
assert float(reduce_call(t)) == 6.0
times: dict[str, list[float]] = {k: [] for k in seq}
for i in range(3 + int(os.environ.get("ITERS", "10"))):
    for k in seq:
        fn, per = calls[k]
        if barrier:
            comm.barrier()
        t0 = time.perf_counter()
        fn()
        if i >= 3:
            times[k].append((time.perf_counter() - t0) / per)
cells = " ".join(f"{k} {statistics.median(v) * 1e3:.2f}" for k, v in times.items())
print(f"rank {rank} {backend} seq={','.join(seq)} barrier={int(barrier)}: {cells}", flush=True)
