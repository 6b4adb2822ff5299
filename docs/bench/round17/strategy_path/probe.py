"""Round17 probe: one worker of docs/bench/round17/strategy_path/run.sh (args: RANK PORT0 PORT1 PORT2 mwms|hvd hvdlike|mwmslike)."""
import os, sys, json, time, statistics
rank, p0, p1, p2, backend, mode = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
if backend == "mwms":
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"127.0.0.1:{p1}", f"127.0.0.1:{p2}"]}, "task": {"type": "worker", "index": rank}})
os.environ.update(PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE="2", PYTFCOMM_ADDR=f"127.0.0.1:{p0}")
import numpy as np, tensorflow as tf, pytfcomm
if backend == "mwms":
    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    from pytfcomm.communicator import last_communicator; comm = last_communicator()
    @tf.function
    def reduce16(x):
        return strategy.reduce("SUM", strategy.run(tf.identity, args=(x,)), axis=None)
else:
    comm = pytfcomm.init()
    @tf.function
    def reduce16(x):
        return pytfcomm.allreduce(x, op="sum")
@tf.function
def done(x):
    r = reduce16(x); return r[0] + r[-1]
@tf.function
def chain(x):
    acc, prev = [], []
    for _ in range(8):
        with tf.control_dependencies(prev):
            r = reduce16(x)
        prev = [r]; acc.append(r[0] + r[-1])
    return tf.add_n(acc)
@tf.function
def ident(x):
    r = tf.identity(x); return r[0] + r[-1]
t = tf.constant(np.full(4 << 20, rank + 1, np.float32))
xn = np.full(4 << 20, rank + 1, np.float32); yn = np.empty_like(xn)
fns = {"reduce": lambda: done(t).numpy(), "graph": lambda: chain(t).numpy()}
if mode == "hvdlike":
    fns["numpy"] = lambda: comm.allreduce(xn, op="sum", out=yn)
    fns["tfcall"] = lambda: ident(t).numpy()
for _ in range(3):
    for f in fns.values(): f()
times = {k: [] for k in fns}
for _ in range(int(os.environ.get("ITERS", "40"))):
    for k, f in fns.items():
        a = time.perf_counter(); f(); times[k].append((time.perf_counter() - a) / (8 if k == "graph" else 1))
if rank == 0:
    print(backend, mode, " ".join(f"{k} {statistics.median(v)*1e3:.2f}" for k, v in times.items()), flush=True)
