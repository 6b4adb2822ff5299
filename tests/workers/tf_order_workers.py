"""TF collectives that ranks issue in different orders (tests/tf/test_tf_ordering.py).

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


def scatter_in_control_flow(rank: int, size: int, addr: str, steps: int, big_rows: int) -> dict:
    """reduce_scatter and alltoall where each rank may issue them in its own order
    (and all-reduce and all-gather in the loop):
    in both branches of a tf.cond (decided by an all-reduce), in a tf.while_loop
    whose 4 iterations run at once and reach the ops in reverse order on even
    ranks (each iteration's results kept apart, scaled by its index, so iterations
    paired across ranks wrongly show), and in a tf.compat.v1 graph: that loop, and
    two ops whose inputs are delayed oppositely per rank, with 4 inter-op threads
    and with 1."""
    from scatter_workers import a2a_expected, a2a_splits, data, rs_expected

    tf, ptf, comm = _init(rank, size, addr)
    small = data(rank, 7)
    big = data(rank, big_rows, 4)
    mine = a2a_splits(rank, size)
    a2a_in = data(rank, sum(mine))
    want_rs = rs_expected(rank, size, 7, "sum")
    want_big = rs_expected(rank, size, big_rows, "sum", 4)
    want_a2a, want_splits = a2a_expected(rank, size)
    want_ar = sum(data(p, 7) for p in range(size))
    want_ag = np.concatenate([data(p, 7) for p in range(size)])

    def stagger(scale):
        s = int(scale)
        time.sleep(0.04 * ((4 - s) if rank % 2 == 0 else (s - 1)))
        return float(s)

    def loop_of(small, big, a2a_in, splits):
        """Iteration i (of 4, run at once) waits 40 ms * (3 - i) on even ranks and
        40 ms * i on odd ones, then runs five collectives on its inputs times i + 1."""
        arrays = [tf.TensorArray(tf.float32, size=4, infer_shape=False) for _ in range(5)]

        def body(i, *arrays):
            scale = tf.reshape(tf.py_function(stagger, [i + 1], tf.float32), [])
            results = (
                ptf.reduce_scatter(small * scale),
                ptf.alltoall(a2a_in * scale, splits)[0],
                ptf.reduce_scatter(big * scale),
                ptf.allreduce(small * scale),
                ptf.allgather(small * scale),
            )
            return (i + 1, *(a.write(i, y) for a, y in zip(arrays, results, strict=True)))

        _, *arrays = tf.while_loop(
            lambda i, *_: i < 4, body, [tf.constant(0), *arrays], parallel_iterations=4
        )
        return [a.stack() for a in arrays]

    wrong: list = []

    def check_loop(where, stacks) -> None:
        wants = (
            ("rs", want_rs),
            ("a2a", want_a2a),
            ("big", want_big),
            ("allreduce", want_ar),
            ("allgather", want_ag),
        )
        for (name, w), got in zip(wants, stacks, strict=True):
            for i in range(4):
                if not np.array_equal(np.asarray(got[i]), w * (i + 1)):
                    wrong.append((*where, name, i))

    @tf.function
    def step(k, small, big, a2a_in, splits):
        flag = ptf.allreduce(tf.reshape(tf.cast(k % 2, tf.float32), [1]), op="max")
        branch = tf.cond(
            flag[0] > 0,
            lambda: ptf.reduce_scatter(small),
            lambda: ptf.alltoall(a2a_in * 2.0, splits)[0],
        )
        return branch, loop_of(small, big, a2a_in, splits)

    for k in range(steps):
        branch, stacks = step(tf.constant(k), small, big, a2a_in, tf.constant(mine, tf.int64))
        if not np.array_equal(branch.numpy(), want_rs if k % 2 else want_a2a * 2.0):
            wrong.append(("cond", k))
        check_loop(("function", k), [t.numpy() for t in stacks])

    def slow(x, delay: float):
        return tf.py_function(lambda t: (time.sleep(delay), t)[1], [x], tf.float32)

    graph = tf.Graph()
    with graph.as_default():
        rs = ptf.reduce_scatter(slow(tf.constant(big), 0.3 if rank % 2 == 0 else 0.0))
        a2a = ptf.alltoall(slow(tf.constant(a2a_in), 0.3 if rank % 2 == 1 else 0.0), mine)
        loop = loop_of(tf.constant(small), tf.constant(big), tf.constant(a2a_in), mine)
    for threads in (4, 1):
        cfg = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=threads)
        with tf.compat.v1.Session(graph=graph, config=cfg) as sess:
            for it in range(3):
                got_rs, (got_a2a, got_splits), got_loop = sess.run([rs, a2a, loop])
                ok = np.array_equal(got_rs, want_big) and np.array_equal(got_a2a, want_a2a)
                if not ok or got_splits.tolist() != want_splits:
                    wrong.append(("graph", threads, it))
                check_loop(("graph loop", threads, it), got_loop)
    comm.close()
    return {"wrong": wrong[:10], "n_wrong": len(wrong)}


def one_function_from_two_threads(rank: int, size: int, addr: str, transport: str, n: int) -> dict:
    """One tf.function called from two threads at once on rank 0: its two executions
    would share one count, so which pairs with rank 1's would depend on timing.

    Rank 0's thread 'a' calls it and waits (rank 1 calls 3 s later); once it waits,
    thread 'b' calls it too: 'b' must be refused at once, 'a' must then get the sum
    of rank 1's call, and a later call on both ranks must pair up rightly (nothing of
    the refused one left behind)."""
    import tensorflow as tf

    import pytfcomm
    import pytfcomm.tf as ptf

    comm = pytfcomm.init(rank=rank, size=size, addr=addr, transport=transport)
    ptf.set_default_communicator(comm)
    f = tf.function(lambda x: ptf.allreduce(x, op="sum"))
    sums: dict[str, float] = {}
    errors: list[str] = []

    def call(tag: str, value: float) -> None:
        try:
            y = f(tf.fill([n], value)).numpy()
            sums[tag] = float(y[0]) if np.all(y == y[0]) else -1.0
        except tf.errors.OpError as exc:
            errors.append(f"{type(exc).__name__}: {exc.message}")

    call("warm", float(rank + 1))  # traced and run once on both ranks
    if rank == 0:
        a = threading.Thread(target=call, args=("a", 10.0), name="a")
        a.start()
        end = time.monotonic() + 20
        while pytfcomm._core.unattended_waits() == 0 and time.monotonic() < end:
            time.sleep(0.005)
        waiting = pytfcomm._core.unattended_waits() > 0
        b = threading.Thread(target=call, args=("b", 100.0), name="b")
        b.start()
        b.join()
        a.join()
    else:
        waiting = True
        time.sleep(3.0)
        call("a", 1.0)
    call("after", float(rank + 1))
    comm.close()
    return {"sums": sums, "errors": errors, "waiting": waiting}
