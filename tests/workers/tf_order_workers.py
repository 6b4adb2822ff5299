"""TF collectives that ranks issue in different orders (tests/test_tf_ordering.py).

Every function checks each result against what the sum over ranks must be, so a
collective paired with another rank's different collective shows up as a wrong
value (or a shape mismatch), never passes silently.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
from multiworker_workers import GLOBAL_BATCH, _data, _loss, _model, _set_tf_config, _weights


def _init(rank: int, size: int, addr: str):
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(4)
    import pytfcomm
    import pytfcomm.tf as ptf

    comm = pytfcomm.init(rank=rank, size=size, addr=addr)
    ptf.set_default_communicator(comm)
    return tf, ptf, comm


def _ranks_sum(size: int) -> float:
    return float(sum(range(1, size + 1)))


def two_functions_concurrently(rank: int, size: int, addr: str, iters: int) -> dict:
    """Two tf.functions, each in its own Python thread, each all-reducing every
    step; the threads are delayed differently on every rank, so the ops reach the
    engine in a different order everywhere."""
    tf, ptf, comm = _init(rank, size, addr)
    fa = tf.function(lambda x: ptf.allreduce(x, op="sum"))
    fb = tf.function(lambda x: ptf.allreduce(x * 2.0, op="sum"))
    wrong: list[str] = []
    rng = np.random.default_rng(rank)

    def run(f, scale: float, n: int, jitter: bool) -> None:
        for i in range(iters):
            if jitter:
                time.sleep(float(rng.uniform(0, 0.004)))
            y = f(tf.fill([n], float(rank + 1 + i)))
            want = scale * (_ranks_sum(size) + size * i)
            if float(y[0]) != want or float(y[-1]) != want:
                wrong.append(f"scale {scale} step {i}: {float(y[0])} != {want}")

    ta = threading.Thread(target=run, args=(fa, 1.0, 1000, rank % 2 == 0))
    tb = threading.Thread(target=run, args=(fb, 2.0, 200_000, rank % 2 == 1))
    ta.start()
    tb.start()
    ta.join()
    tb.join()
    comm.close()
    return {"wrong": wrong[:5], "n_wrong": len(wrong)}


def graph_reversed(rank: int, size: int, addr: str, threads: int = 4) -> dict:
    """A tf.compat.v1 graph (no automatic control dependencies): two independent
    all-reduces, the first one's input delayed on even ranks, the second one's on
    odd ranks, so each rank issues them in the opposite order of its neighbour;
    also with a single inter-op thread, whose ops now run their collectives on it."""
    tf, ptf, comm = _init(rank, size, addr)

    def slow(x, delay: float):
        return tf.py_function(lambda t: (time.sleep(delay), t)[1], [x], tf.float32)

    graph = tf.Graph()
    with graph.as_default():
        a_in = tf.fill([1000], float(rank + 1))
        b_in = tf.fill([50_000], float(10 * (rank + 1)))
        a_in = slow(a_in, 0.3 if rank % 2 == 0 else 0.0)
        b_in = slow(b_in, 0.3 if rank % 2 == 1 else 0.0)
        a = ptf.allreduce(a_in, op="sum")
        b = ptf.allreduce(b_in, op="sum")
    results = []
    cfg = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=threads)
    with tf.compat.v1.Session(graph=graph, config=cfg) as sess:
        for _ in range(5):
            ra, rb = sess.run([a, b])
            results.append((float(ra[0]), float(rb[-1])))
    comm.close()
    want = (_ranks_sum(size), 10 * _ranks_sum(size))
    return {"ok": all(r == want for r in results), "results": results}


def cond_and_while(rank: int, size: int, addr: str, steps: int) -> dict:
    """Collectives inside both branches of a tf.cond (the branch decided by an
    all-reduce, so every rank takes the same one) and inside a tf.while_loop, then
    one after them, in one tf.function, many steps."""
    tf, ptf, comm = _init(rank, size, addr)

    @tf.function
    def step(x, k):
        flag = ptf.allreduce(tf.reshape(tf.cast(k % 2, tf.float32), [1]), op="max")
        y = tf.cond(
            flag[0] > 0,
            lambda: ptf.allreduce(x, op="sum"),
            lambda: ptf.allreduce(x * 3.0, op="sum"),
        )

        def body(i, acc):
            return i + 1, acc + ptf.allreduce(tf.fill([7], tf.cast(i, tf.float32)), op="sum")

        _, acc = tf.while_loop(
            lambda i, acc: i < 4, body, [tf.constant(0), tf.zeros([7])], parallel_iterations=4
        )
        z = ptf.allreduce(y[:3] + acc[:3], op="max")
        return y, acc, z

    wrong = []
    for k in range(steps):
        y, acc, z = step(tf.fill([500], float(rank + 1)), tf.constant(k))
        want_y = _ranks_sum(size) * (1.0 if k % 2 else 3.0)
        want_acc = size * (0 + 1 + 2 + 3)
        if float(y[0]) != want_y or float(acc[0]) != want_acc or float(z[0]) != want_y + want_acc:
            wrong.append((k, float(y[0]), float(acc[0]), float(z[0])))
    comm.close()
    return {"wrong": wrong[:5]}


def keras_fit(rank: int, size: int, addr: str, tf_ports: list[int], case: str) -> dict:
    """Keras 3 fit under pytfcomm.MultiWorkerMirroredStrategy where TF ran the
    collectives in a different order per worker: mixed precision (a
    LossScaleOptimizer: all-reduces under tf.cond) or steps_per_execution=4
    (the train step in a tf.while_loop)."""
    _set_tf_config(rank, tf_ports, addr)
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(4)
    import keras

    import pytfcomm

    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    if case == "mixed_float16":
        keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat(3).batch(GLOBAL_BATCH)
    with strategy.scope():
        model = _model(keras)
        opt = keras.optimizers.SGD(0.05, momentum=0.9)
        steps = 4 if case == "steps_per_execution" else 1
        model.compile(opt, _loss(keras), steps_per_execution=steps)
    hist = model.fit(ds, epochs=2, verbose=0)
    weights = _weights(model)
    return {
        "checksum": [float(np.sum(w.astype(np.float64))) for w in weights],
        "loss": [float(v) for v in hist.history["loss"]],
        "optimizer": type(model.optimizer).__name__,
        "finite": all(bool(np.all(np.isfinite(w))) for w in weights),
        "pid": os.getpid(),
    }
