"""Rank functions for tests/horovod/test_horovod_tf.py: pytfcomm.horovod against NumPy references.

Each rank's data is a function of its rank, so every rank computes the
expected result of the whole job locally. ``mode`` is "eager" or "function"
(every collective call wrapped in ``tf.function``).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np


def _init(rank: int, size: int, addr: str) -> Any:
    os.environ.update(PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE=str(size), PYTFCOMM_ADDR=addr)
    import pytfcomm.horovod.tensorflow as hvd

    hvd.init()
    return hvd


def _run(mode: str, fn: Any, *args: Any) -> Any:
    import tensorflow as tf

    if mode == "function":
        return tf.function(fn)(*args)
    return fn(*args)


def _close(a: Any, b: Any, tol: float = 1e-5) -> None:
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert np.allclose(a, b, atol=tol, rtol=tol), (a, b)


def basics(rank: int, size: int, addr: str) -> dict:
    import pytfcomm.horovod.tensorflow as hvd

    out: dict = {"before": hvd.is_initialized()}
    try:
        hvd.size()
    except ValueError as exc:
        out["uninit"] = str(exc)
    hvd = _init(rank, size, addr)
    hvd.init()  # idempotent
    out.update(
        size=hvd.size(),
        rank=hvd.rank(),
        local_size=hvd.local_size(),
        local_rank=hvd.local_rank(),
        cross_size=hvd.cross_size(),
        cross_rank=hvd.cross_rank(),
        homogeneous=hvd.is_homogeneous(),
        mpi_threads=hvd.mpi_threads_supported(),
        built=[hvd.mpi_built(), hvd.gloo_built(), hvd.rocm_built(), hvd.ccl_built()],
        ops=[int(hvd.rank_op()), int(hvd.size_op()), int(hvd.local_rank_op())],
        ps_size=hvd.global_process_set.size(),
        ps_rank=hvd.global_process_set.rank(),
    )
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        hvd.start_timeline(f"{folder}/x.json")
        hvd.allreduce(np.ones(2, np.float32))
        hvd.stop_timeline()
        hvd.allreduce(np.ones(2, np.float32))  # not traced
        with open(f"{folder}/x.rank{rank}.json") as f:
            events = json.load(f)["traceEvents"]
        out["timeline"] = [e["name"] for e in events if e.get("cat") == "collective"]
    try:
        hvd.add_process_set(list(range(size)))
    except ValueError as exc:
        out["process_set"] = str(exc)
    out["adasum"] = hvd.allreduce(np.ones(2, np.float32), op=hvd.Adasum).numpy().tolist()
    objs = hvd.allgather_object({"rank": rank, "pad": "x" * rank})
    out["objects"] = [o["rank"] for o in objs]
    out["bcast_obj"] = hvd.broadcast_object({"from": rank, "list": [rank] * 3}, root_rank=size - 1)
    out["bcast_fn"] = hvd.broadcast_object_fn(root_rank=0)(("a", rank))
    hvd.shutdown()
    out["after"] = hvd.is_initialized()
    return out


def collectives(rank: int, size: int, addr: str, mode: str) -> str:
    import tensorflow as tf

    hvd = _init(rank, size, addr)

    def data(r: int, shape: tuple[int, ...] = (3, 4)) -> np.ndarray:
        return (np.arange(np.prod(shape)).reshape(shape) % 7 + r + 1).astype(np.float32)

    mine, every = data(rank), np.stack([data(r) for r in range(size)])
    x = tf.constant(mine)
    refs = {
        hvd.Sum: every.sum(0),
        hvd.Average: every.mean(0),
        hvd.Min: every.min(0),
        hvd.Max: every.max(0),
        hvd.Product: every.prod(0),
    }
    for op, ref in refs.items():
        _close(_run(mode, lambda t, op=op: hvd.allreduce(t, op=op), x), ref)
    _close(_run(mode, lambda t: hvd.allreduce(t), x), refs[hvd.Average])  # default Average
    _close(_run(mode, lambda t: hvd.allreduce(t, average=False), x), refs[hvd.Sum])
    scaled = _run(
        mode, lambda t: hvd.allreduce(t, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0), x
    )
    _close(scaled, refs[hvd.Sum] * 1.5)
    fp16 = _run(mode, lambda t: hvd.allreduce(t, compression=hvd.Compression.fp16), x)
    assert fp16.dtype == tf.float32
    _close(fp16, refs[hvd.Average], 1e-2)
    ints = _run(mode, lambda t: hvd.allreduce(t, op=hvd.Sum), tf.constant([rank, 1], tf.int64))
    _close(ints, [sum(range(size)), size])
    grouped = _run(
        mode,
        lambda a, b: hvd.grouped_allreduce([a, b], op=hvd.Sum),
        x,
        tf.constant([float(rank)]),
    )
    _close(grouped[0], refs[hvd.Sum])
    _close(grouped[1], [sum(range(size))])

    # all-gather: equal and different first dimensions
    _close(_run(mode, hvd.allgather, x), every.reshape(-1, 4))
    uneven = [data(r, (r + 1, 2)) for r in range(size)]
    _close(_run(mode, hvd.allgather, tf.constant(uneven[rank])), np.concatenate(uneven))
    ga = _run(mode, lambda a, b: hvd.grouped_allgather([a, b]), x, tf.constant(uneven[rank]))
    _close(ga[1], np.concatenate(uneven))

    # broadcast, and in place on variables
    for root in range(size):
        _close(_run(mode, lambda t, root=root: hvd.broadcast(t, root), x), data(root))
    v = tf.Variable(mine)
    w = tf.Variable([rank, rank], dtype=tf.int32)
    got = _run(mode, lambda: hvd.broadcast_(([v, w]), size - 1))
    _close(v.numpy(), data(size - 1))
    _close(w.numpy(), [size - 1, size - 1])
    _close(got[0], data(size - 1))
    v.assign(mine)
    hvd.broadcast_variables([v], root_rank=0)
    _close(v.numpy(), data(0))

    # reduce-scatter: Horovod's split (the first rows % size ranks get one more row)
    for rows in (2 * size, 2 * size + 1):
        t = data(rank, (rows, 2))
        total = np.stack([data(r, (rows, 2)) for r in range(size)])
        q, m = divmod(rows, size)
        start = rank * q + min(rank, m)
        count = q + (1 if rank < m else 0)
        got = _run(mode, lambda a: hvd.reducescatter(a, op=hvd.Sum), tf.constant(t))
        _close(got, total.sum(0)[start : start + count])
        got = _run(mode, lambda a: hvd.reducescatter(a), tf.constant(t))  # default Average
        _close(got, total.mean(0)[start : start + count])
        grs = _run(mode, lambda a: hvd.grouped_reducescatter([a, a], op=hvd.Sum), tf.constant(t))
        _close(grs[1], total.sum(0)[start : start + count])

    # all-to-all with splits: rank r sends (j + r) % 3 rows to rank j
    def splits_of(r: int) -> list[int]:
        return [(j + r) % 3 for j in range(size)]

    def rows_of(r: int) -> np.ndarray:
        n = sum(splits_of(r))
        return (np.arange(n * 2).reshape(n, 2) + 100 * r).astype(np.float32)

    expected, recv = [], []
    for r in range(size):
        s = splits_of(r)
        begin = sum(s[:rank])
        expected.append(rows_of(r)[begin : begin + s[rank]])
        recv.append(s[rank])
    out, rsplits = _run(
        mode,
        lambda a, s: hvd.alltoall(a, splits=s),
        tf.constant(rows_of(rank)),
        tf.constant(splits_of(rank), tf.int32),
    )
    _close(out, np.concatenate(expected))
    assert rsplits.numpy().tolist() == recv, (rsplits, recv)
    even = np.arange(size * 2, dtype=np.float32).reshape(size * 2, 1) + 10 * rank
    got = _run(mode, hvd.alltoall, tf.constant(even))
    mine2 = np.arange(2 * rank, 2 * rank + 2)[:, None]
    _close(got, np.concatenate([mine2 + 10 * r for r in range(size)]))

    # IndexedSlices are all-gathered
    sl = tf.IndexedSlices(tf.constant([[float(rank)]]), tf.constant([rank]), tf.constant([size, 1]))
    red = hvd.allreduce(sl, op=hvd.Sum)
    _close(tf.convert_to_tensor(red), np.arange(size, dtype=np.float32)[:, None])
    hvd.shutdown()
    return "ok"


def gradients(rank: int, size: int, addr: str, mode: str) -> dict:
    import tensorflow as tf

    hvd = _init(rank, size, addr)

    def grad_of(op: Any, x: tf.Tensor, dy: Any = None) -> tf.Tensor:
        def f(x: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = op(x)
            return tape.gradient(y, x, output_gradients=dy)

        return _run(mode, f, x)

    x = tf.constant(np.full((4, 2), float(rank + 1), np.float32))
    out = {
        "allreduce_sum": grad_of(lambda t: hvd.allreduce(t, op=hvd.Sum), x).numpy(),
        "allreduce_avg": grad_of(lambda t: hvd.allreduce(t), x).numpy(),
        "broadcast": grad_of(lambda t: hvd.broadcast(t, 1), x).numpy(),
        "reducescatter_sum": grad_of(lambda t: hvd.reducescatter(t, op=hvd.Sum), x).numpy(),
        "reducescatter_avg": grad_of(lambda t: hvd.reducescatter(t), x).numpy(),
    }
    # all-gather of rank+1 rows; the incoming gradient is r on rank r's rows, the same on
    # every rank: the average of it, sliced, is `rank` on this rank (Horovod's test).
    xg = tf.constant(np.ones((rank + 1, 2), np.float32))
    dy = np.concatenate([np.full((r + 1, 2), float(r), np.float32) for r in range(size)])
    out["allgather"] = grad_of(hvd.allgather, xg, tf.constant(dy)).numpy()
    # per-rank different incoming gradients are averaged
    out["allreduce_sum_dy"] = grad_of(
        lambda t: hvd.allreduce(t, op=hvd.Sum), x, tf.fill([4, 2], float(rank))
    ).numpy()
    # all-to-all: the gradient goes back to where each row came from
    splits = tf.constant([1] * size, tf.int32)
    xa = tf.constant(np.arange(size, dtype=np.float32)[:, None] + 10 * rank)
    dya = tf.constant(np.arange(size, dtype=np.float32)[:, None] * 100 + rank)
    out["alltoall"] = grad_of(lambda t: hvd.alltoall(t, splits=splits)[0], xa, dya).numpy()
    hvd.shutdown()
    return out


def tape_and_optimizer(rank: int, size: int, addr: str, mode: str) -> dict:
    import keras
    import tensorflow as tf

    hvd = _init(rank, size, addr)
    w = tf.Variable([1.0, 2.0])
    local = tf.Variable([3.0])
    out: dict = {}

    def step(opts: dict) -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * float(rank + 1)) + tf.reduce_sum(local * float(rank + 1))
        tape = hvd.DistributedGradientTape(tape, **opts)
        tape.register_local_source(local)
        return tape.gradient(loss, [w, local])

    mean = (size + 1) / 2
    for name, opts, ref in [
        ("avg", {}, mean),
        ("sum", {"op": hvd.Sum}, size * mean),
        ("predivide", {"gradient_predivide_factor": 2.0}, mean),
        ("fp16", {"compression": hvd.Compression.fp16}, mean),
        ("bf16", {"compression": hvd.Compression.bf16}, mean),
    ]:
        g = _run(mode, lambda opts=opts: step(opts))
        _close(g[0], [ref, ref], 1e-2)
        _close(g[1], [(rank + 1) / size])  # local: this rank's, scaled by 1/size
        out[name] = True

    # sparse gradients: gathered, or densified with sparse_as_dense
    emb = tf.Variable(np.zeros((size, 2), np.float32))

    def sparse_step(sparse_as_dense: bool) -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(emb, [rank]))
        tape = hvd.DistributedGradientTape(tape, sparse_as_dense=sparse_as_dense)
        return tf.convert_to_tensor(tape.gradient(loss, [emb])[0])

    for dense in (False, True):
        _close(_run(mode, lambda dense=dense: sparse_step(dense)), np.full((size, 2), 1.0 / size))

    # Keras 3 optimizer: one step moves every rank's weights by the average gradient
    model_w = keras.Variable([0.0, 0.0])
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0))
    _run(mode, lambda: opt.apply([tf.constant([float(rank), 1.0])], [model_w]))
    _close(model_w.numpy(), [-(size - 1) / 2, -1.0])

    # backward_passes_per_step=2: the first call only accumulates
    agg_w = keras.Variable([0.0])
    agg = hvd.DistributedOptimizer(
        keras.optimizers.SGD(1.0), backward_passes_per_step=2, average_aggregated_gradients=True
    )
    apply = (
        tf.function(lambda g: agg.apply([g], [agg_w]))
        if mode == "function"
        else (lambda g: agg.apply([g], [agg_w]))
    )
    apply(tf.constant([float(rank)]))
    out["after_one"] = agg_w.numpy().tolist()
    apply(tf.constant([float(rank) + 2.0]))
    out["after_two"] = agg_w.numpy().tolist()
    hvd.shutdown()
    return out


def keras_fit(rank: int, size: int, addr: str, outdir: str) -> dict:
    """Keras 3 fit with Horovod's callbacks; then hvd.load_model of the best checkpoint."""
    import keras
    import tensorflow as tf

    os.environ.update(PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE=str(size), PYTFCOMM_ADDR=addr)
    import pytfcomm.horovod.tensorflow.keras as hvd

    hvd.init()
    keras.utils.set_random_seed(rank)  # different initial weights: the broadcast must fix them
    rng = np.random.default_rng(rank)
    x = rng.normal(size=(64, 8)).astype(np.float32)
    y = (x.sum(1) > 0).astype(np.int32)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.5))
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.1, warmup_epochs=2, verbose=1),
    ]
    best = f"{outdir}/best.keras"
    if rank == 0:
        callbacks.append(hvd.callbacks.BestModelCheckpoint(monitor="loss", filepath=best))
    hist = model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=callbacks)
    out: dict = {
        "loss": hist.history["loss"],
        "lr": hist.history["lr"],
        "weights": [w.tolist() for w in model.get_weights()],
        "opt_class": type(model.optimizer).__name__,
        "callable_variables": list(opt.variables()) == list(opt.variables) != [],
    }
    hist = model.fit(
        x,
        y,
        batch_size=16,
        epochs=2,
        verbose=0,
        callbacks=[hvd.callbacks.LearningRateScheduleCallback(initial_lr=0.1, multiplier=0.5)],
    )
    out["schedule_lr"] = hist.history["lr"]
    tf.keras  # noqa: B018 - TF's lazy keras attribute must not break anything
    hvd.callbacks.MetricAverageCallback()  # constructible more than once
    from pytfcomm.horovod.tensorflow import broadcast_object

    broadcast_object(None)  # rank 0 has written the checkpoint
    loaded = hvd.load_model(best)
    out["loaded_distributed"] = bool(getattr(type(loaded.optimizer), "_hvd_distributed", False))
    out["loaded_iterations"] = int(loaded.optimizer.iterations.numpy())
    loaded.fit(x, y, batch_size=16, epochs=1, verbose=0)
    out["loaded_weights"] = [w.tolist() for w in loaded.get_weights()]
    try:
        hvd.callbacks.BestModelCheckpoint().on_train_begin()
    except ValueError as exc:
        out["no_path"] = str(exc)
    hvd.shutdown()
    return out


def tf_keras_fit(rank: int, size: int, addr: str) -> dict:
    """tf-keras (TF_USE_LEGACY_KERAS=1): DistributedOptimizer and the callbacks in fit."""
    os.environ.update(PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE=str(size), PYTFCOMM_ADDR=addr)
    import tf_keras

    import pytfcomm.horovod.keras as hvd

    hvd.init()
    tf_keras.utils.set_random_seed(rank)
    rng = np.random.default_rng(rank)
    x = rng.normal(size=(32, 4)).astype(np.float32)
    y = (x.sum(1) > 0).astype(np.int32)
    model = tf_keras.Sequential([tf_keras.layers.Dense(2, input_shape=(4,))])
    opt = hvd.DistributedOptimizer(tf_keras.optimizers.SGD(0.1))
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
    hist = model.fit(
        x,
        y,
        batch_size=8,
        epochs=2,
        verbose=0,
        callbacks=[
            hvd.callbacks.BroadcastGlobalVariablesCallback(0),
            hvd.callbacks.MetricAverageCallback(),
            hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.1, warmup_epochs=2),
        ],
    )
    out = {
        "module": type(model).__module__,
        "callback_base": hvd.callbacks.MetricAverageCallback.__mro__[1].__module__,
        "loss": hist.history["loss"],
        "lr": hist.history["lr"],
        "weights": [w.tolist() for w in model.get_weights()],
    }
    hvd.shutdown()
    return out


def shares_pytfcomm_communicator(rank: int, size: int, addr: str) -> dict:
    """hvd.init() after pytfcomm.init() uses that communicator; hvd.shutdown() leaves it open."""
    import pytfcomm
    import pytfcomm.horovod.tensorflow as hvd
    from pytfcomm.horovod import _basics

    comm = pytfcomm.init(rank=rank, size=size, addr=addr)
    hvd.init()
    same = _basics.communicator() is comm
    total = float(hvd.allreduce(np.float32(rank + 1), op=hvd.Sum))
    hvd.shutdown()
    out = {"same": same, "total": total, "open_after": not comm.closed}
    out["numpy_after"] = float(comm.allreduce(np.array([1.0]), op="sum")[0])
    comm.close()
    return out


def sync_batch_norm(rank: int, size: int, addr: str, mode: str) -> dict:
    """SyncBatchNormalization normalises by the statistics of every rank's batch; "graph"
    builds a TF1 graph and reads the results (and the moving mean) with a Session."""
    import os

    import tensorflow as tf

    hvd = _init(rank, size, addr)
    batches = [np.random.default_rng(r).normal(r, 1 + r, size=(4 + r, 3)) for r in range(size)]
    every = np.concatenate(batches)
    expected = (batches[rank] - every.mean(0)) / np.sqrt(every.var(0) + 1e-3)

    def f(layer: Any, x: tf.Tensor) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
            loss = tf.reduce_sum(y * y)
        return y, tape.gradient(loss, x)

    if mode == "graph":
        with tf.Graph().as_default():
            layer = hvd.SyncBatchNormalization(epsilon=1e-3, momentum=0.5)
            y, g = f(layer, tf.constant(batches[rank], tf.float32))
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                y, g = sess.run([y, g])
                sess.run(layer.updates)  # tf-keras' moving statistics, as Horovod's test does
                moving_mean = sess.run(layer.moving_mean)
    else:
        layer = hvd.SyncBatchNormalization(epsilon=1e-3, momentum=0.5)
        y, g = _run(mode, lambda x: f(layer, x), tf.constant(batches[rank], tf.float32))
        y, g, moving_mean = y.numpy(), g.numpy(), layer.moving_mean.numpy()
    _close(y, expected, 1e-4)
    _close(moving_mean, 0.5 * every.mean(0), 1e-4)
    assert np.all(np.isfinite(g))
    out: dict = {"ok": True}
    if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
        import tf_keras

        out["tf_keras"] = isinstance(layer, tf_keras.layers.BatchNormalization)
    hvd.shutdown()
    return out


def _accumulation_reference(
    grad_fn: Any, w0: np.ndarray, steps: int, passes: int, average: bool, lr: float, mom: float
) -> list[np.ndarray]:
    """NumPy SGD+momentum under Horovod's backward_passes_per_step: ``grad_fn(t, w)``
    is step t's gradient already averaged over ranks (the all-reduce is linear)."""
    w, velocity, acc, out = w0.astype(np.float64), np.zeros_like(w0, np.float64), 0.0, []
    for t in range(steps):
        acc = acc + grad_fn(t, w)
        if (t + 1) % passes == 0:
            g = acc / passes if average else acc
            velocity = mom * velocity - lr * g
            w, acc = w + velocity, 0.0
        out.append(w.copy())
    return out


def optimizer_accumulation(rank: int, size: int, addr: str, flavour: str) -> dict:
    """DistributedOptimizer(backward_passes_per_step=3) against a NumPy reference, in a
    custom loop (eager and tf.function) and in fit, with and without
    average_aggregated_gradients. ``flavour``: "keras3", "tf_keras" or "tf_keras_legacy"
    (the tf-keras ones under TF_USE_LEGACY_KERAS=1)."""
    import tensorflow as tf

    _init(rank, size, addr)
    import pytfcomm.horovod.tensorflow.keras as hvd

    if flavour == "keras3":
        import keras

        sgd = keras.optimizers.SGD

        def variable(value: Any) -> Any:
            return keras.Variable(np.asarray(value, np.float32))
    else:
        import tf_keras as keras

        sgd = keras.optimizers.legacy.SGD if flavour == "tf_keras_legacy" else keras.optimizers.SGD

        def variable(value: Any) -> Any:
            return tf.Variable(np.asarray(value, np.float32))

    passes, steps, lr, mom = 3, 7, 0.1, 0.5
    out: dict = {"module": sgd.__module__}

    def target(r: int, t: int) -> np.ndarray:  # rank r's data at step t
        return np.array([1.0, -2.0, 0.5]) * (r + 1) + t

    # Custom loop: loss 0.5 |w - c(rank, t)|^2, gradient w - c; plus a variable
    # without a gradient and one registered local (not all-reduced, scaled by 1/size).
    for mode, average in [("eager", False), ("function", True)]:
        w, unused, local = variable([0.5, 0.0, -1.0]), variable([7.0]), variable([1.0, 1.0, 1.0])
        opt = hvd.DistributedOptimizer(
            sgd(lr, momentum=mom),
            backward_passes_per_step=passes,
            average_aggregated_gradients=average,
        )
        opt.register_local_var(local)

        def make_step(w: Any, unused: Any, local: Any, opt: Any) -> Any:
            def one_step(c: Any) -> None:
                with tf.GradientTape() as tape:
                    loss = 0.5 * tf.reduce_sum((w - c) ** 2)
                    loss += 0.5 * tf.reduce_sum((local - c) ** 2)
                grads = tape.gradient(loss, [w, unused, local])
                opt.apply_gradients(zip(grads, [w, unused, local], strict=True))

            return one_step

        step = make_step(w, unused, local, opt)
        run = tf.function(step) if mode == "function" else step
        trace, local_trace = [], []
        for t in range(steps):
            run(tf.constant(target(rank, t), tf.float32))
            trace.append(np.array(w.numpy()))
            local_trace.append(np.array(local.numpy()))
        mean_c = [np.mean([target(r, t) for r in range(size)], axis=0) for t in range(steps)]
        ref = _accumulation_reference(
            lambda t, v, m=mean_c: v - m[t],
            np.array([0.5, 0.0, -1.0]),
            steps,
            passes,
            average,
            lr,
            mom,
        )
        local_ref = _accumulation_reference(
            lambda t, v: (v - target(rank, t)) / size,
            np.ones(3),
            steps,
            passes,
            average,
            lr,
            mom,
        )
        for got, want in zip(trace + local_trace, ref + local_ref, strict=True):
            _close(got, want)
        assert float(unused.numpy()[0]) == 7.0
        out[f"{mode}_weights"] = [x.tolist() for x in trace]
        out[f"{mode}_iterations"] = int(opt.iterations.numpy())

    # fit: Dense(1, no bias) with mean squared error; batches of 4, rank-dependent data.
    batch = 4
    xs, ys = [], []
    for r in range(size):  # every rank's data, drawn as rank r draws its own
        g = np.random.default_rng(r)
        xs.append(g.normal(size=(steps * batch, 3)).astype(np.float32))
        ys.append(g.normal(size=(steps * batch, 1)).astype(np.float32))
    x, y = xs[rank], ys[rank]

    def fit_grad(t: int, v: np.ndarray) -> np.ndarray:
        sl = slice(t * batch, (t + 1) * batch)
        per_rank = [2.0 / batch * xs[r][sl].T @ (xs[r][sl] @ v - ys[r][sl]) for r in range(size)]
        return np.mean(per_rank, axis=0)

    for average in (False, True):
        model = keras.Sequential(
            [keras.Input((3,)), keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")]
        )
        opt = hvd.DistributedOptimizer(
            sgd(lr, momentum=mom),
            backward_passes_per_step=passes,
            average_aggregated_gradients=average,
        )
        model.compile(optimizer=opt, loss="mse")
        model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
        ref = _accumulation_reference(fit_grad, np.ones((3, 1)), steps, passes, average, lr, mom)
        _close(model.get_weights()[0], ref[-1], 1e-4)
        out[f"fit_{average}_weights"] = model.get_weights()[0].tolist()
        out[f"fit_{average}_iterations"] = int(opt.iterations.numpy())
    hvd.shutdown()
    return out
