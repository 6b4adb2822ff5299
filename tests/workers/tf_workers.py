"""Functions run in TF worker processes by the TF tests (see tests/_harness.py)."""

from __future__ import annotations

import os

import numpy as np
from tf_setup import devices, digits, tf_with_devices


def cross_worker(rank: int, size: int, addr: str) -> dict:
    """2 logical devices per process; the ops' cross-process step through the communicator."""
    tf = tf_with_devices(2)
    import pytfcomm
    import pytfcomm.tf as ptf

    devs = devices(2)
    comm = pytfcomm.init(rank=rank, size=size, addr=addr)
    ptf.set_default_communicator(comm)
    xs = []
    for i, d in enumerate(devs):
        with tf.device(d):
            xs.append(tf.fill([1000], float(2 * rank + i + 1)))
    total = sum(range(1, 2 * size + 1))
    out: dict = {}
    s = ptf.allreduce(xs, op="sum")
    m = tf.function(lambda xs: ptf.allreduce(xs, op="mean"))(xs)
    assert np.all(s[1].numpy() == total) and np.all(m[0].numpy() == total / (2 * size))
    with tf.GradientTape() as tape:
        tape.watch(xs)
        loss = tf.add_n([tf.reduce_sum(y) for y in ptf.allreduce(xs, op="sum")])
    g = tape.gradient(loss, xs)
    assert np.all(g[0].numpy() == 2 * size), g[0].numpy()[:3]  # sum over 4 replicas of 1
    b = ptf.broadcast(tf.fill([3], float(rank + 7)), root=1, devices=devs)
    assert np.all(b[1].numpy() == 8.0)
    ga = ptf.allgather([tf.fill([1, 2], float(2 * rank + i)) for i in range(2)])
    assert ga[0].numpy()[:, 0].tolist() == [0.0, 1.0, 2.0, 3.0], ga[0].numpy()
    strategy = tf.distribute.MirroredStrategy(devs, cross_device_ops=pytfcomm.RingAllReduce())
    v = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.fill([5], float(2 * rank + ctx.replica_id_in_sync_group))
    )
    r = strategy.extended.batch_reduce_to(tf.distribute.ReduceOp.MEAN, [(v, v)])[0]
    assert np.all(r.values[1].numpy() == 1.5)
    out["counters"] = ptf.counters()
    comm.close()
    return out


def cached_outputs(rank: int, size: int, addr: str) -> dict:
    """Large outputs come from the reuse cache: results held across steps stay intact."""
    import tensorflow as tf

    import pytfcomm
    import pytfcomm.tf as ptf

    comm = pytfcomm.init(rank=rank, size=size, addr=addr)
    ptf.set_default_communicator(comm)
    n = 1 << 20  # 4 MiB of float32: above the cache's threshold
    step = tf.function(lambda x: ptf.allreduce(x, op="sum"))
    held = []
    for k in range(6):  # every output kept alive: the cache must not hand its buffer out again
        held.append(step(tf.fill([n], float(10 * k + rank + 1))))
    for k, y in enumerate(held):
        want = sum(10 * k + r + 1 for r in range(size))
        got = y.numpy()
        assert got[0] == want and got[-1] == want and np.all(got == want), (k, got[:3], want)
    before = ptf.counters()
    del held, y, got
    for k in range(4):  # released buffers come back for the same shapes
        y = step(tf.fill([n], float(k + rank)))
        assert np.all(y.numpy() == sum(k + r for r in range(size)))
        del y
    b = ptf.broadcast(tf.fill([n], float(rank + 3)), root=0)
    g = ptf.allgather(tf.fill([n // size, 1], float(rank)))
    assert np.all(b.numpy() == 3.0)
    assert g.shape == (n // size * size, 1) and np.all(g.numpy()[-1] == size - 1)
    after = ptf.counters()
    comm.close()
    return {"before": before, "after": after}


def in_place_inputs(rank: int, size: int, addr: str) -> dict:
    """A lone tensor no one else holds is all-reduced in place; any other input stays intact."""
    import tensorflow as tf

    import pytfcomm
    import pytfcomm.tf as ptf

    comm = pytfcomm.init(rank=rank, size=size, addr=addr)
    ptf.set_default_communicator(comm)
    n = 1 << 20  # 4 MiB of float32
    ranks_sum = sum(r + 1 for r in range(size))
    taken = lambda: ptf.counters()["in_place_inputs"]  # noqa: E731
    out: dict = {}

    # Computed in the step and used by nothing else, like a gradient: TF hands it over.
    fresh = tf.function(lambda x, op: ptf.allreduce(x * 2.0, op=op))
    x = tf.fill([n], float(rank + 1))
    before = taken()
    y = fresh(x, "sum")
    out["fresh_taken"] = taken() - before
    assert np.all(y.numpy() == 2.0 * ranks_sum), y.numpy()[:3]
    assert np.all(x.numpy() == rank + 1)  # the caller's tensor, read by the multiply only
    ym = fresh(x, "mean")
    assert np.all(ym.numpy() == 2.0 * ranks_sum / size), ym.numpy()[:3]
    xi = tf.fill([n + 3], rank + 1)  # int32, an odd count
    yi = tf.function(lambda x: ptf.allreduce(x + 0, op="max"))(xi)
    assert np.all(yi.numpy() == size), yi.numpy()[:3]

    # The caller keeps its tensor: it is never written.
    before = taken()
    held = tf.function(lambda x: ptf.allreduce(x, op="sum"))
    y2 = held(x)
    out["held_taken"] = taken() - before
    assert np.all(x.numpy() == rank + 1), x.numpy()[:3]
    assert np.all(y2.numpy() == ranks_sum)

    # A tensor the step reads again after the all-reduce: never taken over either.
    def twice(x):
        g = x * 3.0
        return ptf.allreduce(g, op="sum"), g + 0.0

    before = taken()
    y3, g = tf.function(twice)(x)
    out["reread_taken"] = taken() - before
    assert np.all(g.numpy() == 3.0 * (rank + 1)), g.numpy()[:3]
    assert np.all(y3.numpy() == 3.0 * ranks_sum)

    # Eager: the op's input is a Python-held tensor.
    before = taken()
    y4 = ptf.allreduce(x, op="sum")
    out["eager_taken"] = taken() - before
    assert np.all(x.numpy() == rank + 1) and np.all(y4.numpy() == ranks_sum)
    comm.close()
    return out


def legacy_keras_fit(rank: int, size: int, addr: str) -> dict:
    """tf-keras (TF_USE_LEGACY_KERAS=1) fit with RingAllReduce, inter-op threads = 1."""
    assert os.environ.get("TF_USE_LEGACY_KERAS") == "1"
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(1)  # before TF initialises
    tf_with_devices(4)
    import pytfcomm
    import pytfcomm.tf as ptf

    x, y = digits(256)
    weights = {}
    for name, ops in [
        ("ring", pytfcomm.RingAllReduce()),
        ("one", tf.distribute.ReductionToOneDevice()),
    ]:
        strategy = tf.distribute.MirroredStrategy(devices(4), cross_device_ops=ops)
        tf.keras.utils.set_random_seed(0)
        with strategy.scope():
            model = tf.keras.Sequential(
                [tf.keras.layers.Dense(16, "relu", input_shape=(64,)), tf.keras.layers.Dense(10)]
            )
            model.compile(
                tf.keras.optimizers.SGD(0.1),
                tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            )
        assert "tf_keras" in type(model).__module__ or "keras.src" not in type(model).__module__
        model.fit(x, y, batch_size=64, epochs=2, shuffle=False, verbose=0)
        weights[name] = [w.numpy() for w in model.weights]
    diff = max(
        float(np.max(np.abs(a - b))) for a, b in zip(weights["ring"], weights["one"], strict=True)
    )
    return {"diff": diff, "counters": ptf.counters(), "keras_module": type(model).__module__}
