"""Uneven work across processes, run in separate processes by tests/tf/test_tf_uneven.py.

All-gathers whose dimension 0 differs per process (NumPy ``allgatherv``, the
TF op eagerly, in ``tf.function`` and under a gradient, ``strategy.gather``,
``ReplicaContext.all_gather``, sparse gradients with a different number of
slices per worker, Keras ``predict`` with a remainder) and Keras ``fit`` on
a different number of batches per worker.
"""

from __future__ import annotations

import os

import numpy as np
from tf_setup import digits

PREDICT_ROWS = 261  # 8 global batches of 32 and 5 rows: the last batch splits 3 + 2
PREDICT_BATCH = 32


def _tf(ndev: int = 1):
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * ndev)
    return tf


def _rows(rank: int, width: int = 3) -> np.ndarray:
    """rank + 1 rows of ``width``, each value naming its rank and row."""
    return np.arange((rank + 1) * width, dtype=np.float32).reshape(rank + 1, width) + 100 * rank


def _expected(size: int, width: int = 3) -> np.ndarray:
    return np.concatenate([_rows(r, width) for r in range(size)])


def core_allgatherv(rank: int, size: int, addr: str) -> dict:
    """NumPy: uneven rows, an empty contribution, equal rows, and a row-shape mismatch."""
    import pytfcomm

    comm = pytfcomm.init(rank=rank, size=size, addr=addr)
    out: dict = {}
    try:
        out["uneven"] = comm.allgatherv(_rows(rank)).tolist()
        empty = np.zeros((0 if rank == 0 else 2, 4), np.int64) + rank
        out["empty"] = comm.allgatherv(empty).tolist()
        out["even"] = comm.allgatherv(np.full((2, 2), rank, np.int32)).tolist()
        try:
            comm.allgatherv(np.zeros((2, 3 + rank), np.float32))
            out["row_mismatch"] = "no error"
        except pytfcomm.MismatchError as e:
            out["row_mismatch"] = str(e)
        try:
            comm.allgatherv(np.zeros((2, 3), np.float32 if rank else np.float64))
            out["dtype_mismatch"] = "no error"
        except pytfcomm.MismatchError as e:
            out["dtype_mismatch"] = str(e)
        out["after"] = comm.allgatherv(_rows(rank)).tolist()  # still usable
    finally:
        comm.close()
    return out


def tf_allgather(rank: int, size: int, addr: str) -> dict:
    """The TF op with uneven dimension 0: eager, tf.function, gradient, mismatch, sparse."""
    tf = _tf()
    import pytfcomm
    import pytfcomm.tf as ptf

    comm = pytfcomm.init(rank=rank, size=size, addr=addr)
    ptf.set_default_communicator(comm)
    out: dict = {}
    try:
        out["eager"] = ptf.allgather(tf.constant(_rows(rank))).numpy().tolist()

        @tf.function
        def traced(x):
            return ptf.allgather(x)

        # The same function with a different row count every call.
        out["traced"] = [
            traced(tf.constant(_rows(rank + k) + k)).numpy().tolist() for k in range(3)
        ]
        # d(sum(w * gather(x)))/dx: this process's rows of w.
        x = tf.Variable(_rows(rank))
        w = tf.constant(
            np.arange(_expected(size).size, dtype=np.float32).reshape(_expected(size).shape)
        )
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * ptf.allgather(x))
        out["grad"] = tape.gradient(loss, x).numpy().tolist()
        try:
            ptf.allgather(tf.zeros([2, 3 + rank]))
            out["row_mismatch"] = "no error"
        except tf.errors.FailedPreconditionError as e:
            out["row_mismatch"] = e.message
        out["after"] = ptf.allgather(tf.constant(_rows(rank))).numpy().tolist()
    finally:
        comm.close()
    return out


def strategy_gather(rank: int, size: int, addr: str, ndev: int) -> dict:
    """strategy.gather and ReplicaContext.all_gather with rows that differ per replica,
    and a custom loop whose embedding gradient has a different number of slices per worker."""
    os.environ.update(PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE=str(size), PYTFCOMM_ADDR=addr)
    os.environ.pop("TF_CONFIG", None)
    tf = _tf(ndev)
    import pytfcomm

    strategy = pytfcomm.MultiWorkerMirroredStrategy(
        local_devices=[f"CPU:{i}" for i in range(ndev)] if ndev > 1 else None
    )
    out: dict = {}

    def rows_of(ctx):  # replica i contributes i + 1 rows of value i
        i = ctx.replica_id_in_sync_group
        return tf.fill([i + 1, 2], float(i))

    values = strategy.experimental_distribute_values_from_function(rows_of)
    out["gather0"] = strategy.gather(values, axis=0).numpy()[:, 0].tolist()

    def cols_of(ctx):  # axis 1: replica i contributes i + 1 columns
        i = ctx.replica_id_in_sync_group
        return tf.fill([2, i + 1], float(i))

    cols = strategy.experimental_distribute_values_from_function(cols_of)
    out["gather1"] = strategy.gather(cols, axis=1).numpy()[0].tolist()

    @tf.function
    def replica_all_gather(v):
        def fn(x):
            return tf.distribute.get_replica_context().all_gather(x, axis=0)

        return strategy.run(fn, args=(v,))

    gathered = strategy.experimental_local_results(replica_all_gather(values))
    out["all_gather"] = [g.numpy()[:, 0].tolist() for g in gathered]
    out["sparse"] = _sparse_loop(tf, strategy, rank)
    return out


def _sparse_loop(tf, strategy, rank: int) -> list[list[float]]:
    """An embedding trained on ids whose count differs per worker (IndexedSlices gradients)."""
    with strategy.scope():
        table = tf.Variable(tf.zeros([8, 2]))
    n_ids = 1 + 2 * rank  # this worker looks up 1, 3, 5, ... ids

    @tf.function
    def step():
        def fn():
            ids = tf.range(n_ids) % 8
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.gather(table, ids))
            (g,) = tape.gradient(loss, [table])
            ctx = tf.distribute.get_replica_context()
            total = ctx.all_reduce("SUM", g)
            table.assign_sub(0.5 * tf.convert_to_tensor(total))

        strategy.run(fn)

    step()
    return table.numpy().tolist()


def _predict_model(k):
    k.utils.set_random_seed(3)
    return k.Sequential([k.Input((64,)), k.layers.Dense(16, activation="relu"), k.layers.Dense(10)])


def predict_remainder(rank: int, size: int, addr: str, legacy: bool) -> dict:
    """Keras predict on PREDICT_ROWS rows: the last global batch splits unevenly."""
    os.environ.update(PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE=str(size), PYTFCOMM_ADDR=addr)
    os.environ.pop("TF_CONFIG", None)
    if legacy:
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
    tf = _tf()
    if legacy:
        import tf_keras as k
    else:
        import keras as k
    import pytfcomm

    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    x, _ = digits(PREDICT_ROWS)
    with strategy.scope():
        model = _predict_model(k)
    ds = tf.data.Dataset.from_tensor_slices(x).batch(PREDICT_BATCH)
    got = model.predict(ds, verbose=0)
    ref = _predict_model(k).predict(x, batch_size=PREDICT_BATCH, verbose=0)
    return {"shape": list(got.shape), "got": got, "ref": ref}


FIT_BATCH = 16  # per worker


def fit_uneven(
    rank: int,
    size: int,
    addr: str,
    steps_per_epoch: int | None,
    repeat: bool = False,
    epochs: int = 2,
) -> dict:
    """Keras 3 fit where worker w has 4 + w batches of its own (no auto-sharding)."""
    os.environ.update(PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE=str(size), PYTFCOMM_ADDR=addr)
    os.environ.pop("TF_CONFIG", None)
    tf = _tf()
    import keras

    import pytfcomm

    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    x, y = digits(FIT_BATCH * (4 + size))
    rows = FIT_BATCH * (4 + rank)
    ds = tf.data.Dataset.from_tensor_slices((x[:rows], y[:rows])).batch(FIT_BATCH)
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    ds = ds.with_options(opts)
    if repeat:
        ds = ds.repeat()
    with strategy.scope():
        model = _predict_model(keras)
        model.compile(
            keras.optimizers.SGD(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
    hist = model.fit(ds, epochs=epochs, steps_per_epoch=steps_per_epoch, verbose=0)
    return {
        "weights": [w.numpy() for w in model.weights],
        "loss": hist.history["loss"],
        "steps": int(model.optimizer.iterations.numpy()),
    }


def _batches_of(rank: int, longer: int) -> int:
    """Worker ``longer`` has 5 batches, the other 4."""
    return 5 if rank == longer else 4


def from_function_uneven(rank: int, size: int, addr: str, longer: int) -> dict:
    """distribute_datasets_from_function with 5 batches on worker ``longer``, 4 on the other:
    Keras 3 fit and evaluate, custom loops (eager ``for``, ``for`` in a tf.function,
    ``get_next_as_optional``) and fit on an unknown cardinality (filter)."""
    os.environ.update(PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE=str(size), PYTFCOMM_ADDR=addr)
    os.environ.pop("TF_CONFIG", None)
    tf = _tf()
    import keras

    import pytfcomm

    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    sizes = [FIT_BATCH * _batches_of(r, longer) for r in range(size)]
    x, y = digits(sum(sizes))
    start = sum(sizes[:rank])
    mine = (x[start : start + sizes[rank]], y[start : start + sizes[rank]])

    def dataset_fn(ctx, filtered: bool = False):
        assert ctx.input_pipeline_id == rank and ctx.num_input_pipelines == size
        ds = tf.data.Dataset.from_tensor_slices(mine).batch(FIT_BATCH)
        return ds.filter(lambda xb, yb: True) if filtered else ds

    with strategy.scope():
        model = _predict_model(keras)
        model.compile(
            keras.optimizers.SGD(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
    out: dict = {}
    dist = strategy.distribute_datasets_from_function(dataset_fn)
    hist = model.fit(dist, epochs=2, verbose=0)
    out["fit_steps"] = int(model.optimizer.iterations.numpy())
    out["fit_loss"] = hist.history["loss"]

    batches = []
    count = keras.callbacks.LambdaCallback(on_test_batch_end=lambda b, logs: batches.append(b))
    out["eval_loss"] = float(model.evaluate(dist, verbose=0, callbacks=[count]))
    out["eval_steps"] = len(batches)
    logits = model(x, training=False)
    out["eval_ref"] = float(keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, logits))
    out["weights"] = [w.numpy() for w in model.weights]

    def rows(xb, yb):
        return tf.shape(xb)[0]

    def global_rows(batch):
        return strategy.reduce("SUM", strategy.run(rows, args=batch), axis=None)

    eager_steps, eager_rows = 0, 0
    for batch in dist:
        eager_steps += 1
        eager_rows += int(global_rows(batch))
    out["eager_loop"] = [eager_steps, eager_rows]

    @tf.function
    def traced_loop(d):
        steps, total = tf.constant(0), tf.constant(0)
        for batch in d:
            steps += 1
            total += global_rows(batch)
        return steps, total

    out["traced_loop"] = [int(v) for v in traced_loop(dist)]

    iterator = iter(dist)
    opt_steps, opt_rows = 0, 0
    for _ in range(20):  # bounded: the data ends after 5 steps
        opt = iterator.get_next_as_optional()
        if not bool(opt.has_value()):
            break
        opt_steps += 1
        opt_rows += int(global_rows(opt.get_value()))
    out["optional_loop"] = [opt_steps, opt_rows]

    before = int(model.optimizer.iterations.numpy())
    filtered = strategy.distribute_datasets_from_function(lambda c: dataset_fn(c, filtered=True))
    model.fit(filtered, epochs=1, verbose=0)
    out["filtered_fit_steps"] = int(model.optimizer.iterations.numpy()) - before
    return out


def from_function_infinite(rank: int, size: int, addr: str) -> dict:
    """Worker 0's dataset_fn repeats its 4 batches forever, the others' do not: refused."""
    os.environ.update(PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE=str(size), PYTFCOMM_ADDR=addr)
    os.environ.pop("TF_CONFIG", None)
    tf = _tf()
    import keras

    import pytfcomm

    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    x, y = digits(FIT_BATCH * 4)

    def dataset_fn(ctx):
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(FIT_BATCH)
        return ds.repeat() if rank == 0 else ds

    with strategy.scope():
        model = _predict_model(keras)
        model.compile(
            keras.optimizers.SGD(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
    try:
        model.fit(strategy.distribute_datasets_from_function(dataset_fn), steps_per_epoch=6)
        error = "no error"
    except pytfcomm.InvalidArgumentError as e:
        error = str(e)
    # the job goes on: the same model trains on datasets finite everywhere
    even = strategy.distribute_datasets_from_function(
        lambda ctx: tf.data.Dataset.from_tensor_slices((x, y)).batch(FIT_BATCH)
    )
    model.fit(even, epochs=1, verbose=0)
    return {"error": error, "steps": int(model.optimizer.iterations.numpy())}
