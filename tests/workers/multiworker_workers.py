"""Multi-worker training run in separate processes by tests/tf/test_tf_multiworker.py.

Every function trains the same small model on the same data for the same
number of steps at the same global batch, and returns its final weights;
rank 0 also trains the single-process reference (no strategy, whole global
batch) so the test can compare them.
"""

from __future__ import annotations

import json
import os

import numpy as np
from tf_setup import digits

GLOBAL_BATCH = 48  # divisible by every replica count tested (2, 3, 4, 6)
STEPS = 4  # per epoch
EPOCHS = 2
LR = 0.1


def _tf(ndev: int, legacy: bool = False):
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * ndev)
    return tf


def _keras(legacy: bool):
    if legacy:
        import tf_keras

        return tf_keras
    import keras

    return keras


def _data():
    x, y = digits(GLOBAL_BATCH * STEPS)
    return x, y


def _model(k, seed: int = 0):
    k.utils.set_random_seed(seed)
    return k.Sequential([k.Input((64,)), k.layers.Dense(32, activation="relu"), k.layers.Dense(10)])


def _loss(k):
    return k.losses.SparseCategoricalCrossentropy(from_logits=True)


def _weights(model) -> list[np.ndarray]:
    return [np.array(w.numpy()) for w in model.weights]


def _reference(k) -> list[np.ndarray]:
    """One process, no strategy, the whole global batch per step."""
    x, y = _data()
    model = _model(k)
    model.compile(k.optimizers.SGD(LR, momentum=0.9), _loss(k))
    model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    return _weights(model)


def _set_tf_config(rank: int, tf_ports: list[int], addr: str, with_chief: bool = False) -> None:
    hosts = [f"127.0.0.1:{p}" for p in tf_ports]
    if with_chief:  # the chief is rank 0, the workers follow
        cluster = {"chief": hosts[:1], "worker": hosts[1:]}
        task = {"type": "chief", "index": 0} if rank == 0 else {"type": "worker", "index": rank - 1}
    else:
        cluster, task = {"worker": hosts}, {"type": "worker", "index": rank}
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": task})
    os.environ["PYTFCOMM_ADDR"] = addr  # the harness's free port for pytfcomm itself


def mwms(
    rank: int,
    size: int,
    addr: str,
    ndev: int,
    tf_ports: list[int],
    legacy: bool = False,
    with_chief: bool = False,
) -> dict:
    """pytfcomm.MultiWorkerMirroredStrategy: Keras fit, then a custom training loop.

    ``tf_ports=None``: no TF_CONFIG at all, only PYTFCOMM_RANK/SIZE/ADDR (what srun or
    mpirun amount to); the strategy builds TF's cluster through pytfcomm.
    ``with_chief``: TF_CONFIG lists rank 0 as "chief", the others as "worker".
    """
    if tf_ports is None:
        os.environ.update(PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE=str(size), PYTFCOMM_ADDR=addr)
        os.environ.pop("TF_CONFIG", None)
    else:
        _set_tf_config(rank, tf_ports, addr, with_chief)
    tf = _tf(ndev)
    k = _keras(legacy)
    import pytfcomm
    import pytfcomm.tf as ptf

    strategy = pytfcomm.MultiWorkerMirroredStrategy(
        local_devices=[f"CPU:{i}" for i in range(ndev)] if ndev > 1 else None
    )
    assert strategy.num_replicas_in_sync == size * ndev, strategy.num_replicas_in_sync
    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    out: dict = {}

    with strategy.scope():
        model = _model(k)
        model.compile(k.optimizers.SGD(LR, momentum=0.9), _loss(k))
    before = ptf.counters()["cross_worker_ops"]
    model.fit(ds, epochs=EPOCHS, verbose=0)
    out["fit_cross_worker_ops"] = ptf.counters()["cross_worker_ops"] - before
    out["fit"] = _weights(model)

    if not legacy:
        out["loop"] = _custom_loop(tf, k, strategy, ds)
        total = strategy.reduce("SUM", tf.constant([1.0, float(rank)]), axis=None)
        out["reduce"] = total.numpy().tolist()
        nested = strategy.reduce("MEAN", (tf.constant(2.0), {"a": tf.constant([4.0])}), axis=None)
        out["nested"] = [float(nested[0]), nested[1]["a"].numpy().tolist()]
        out.update(_beyond_fit(tf, strategy, model, ds))
    if rank == 0:
        out["reference"] = _reference(k)
    return out


def _beyond_fit(tf, strategy, model, ds) -> dict:
    """evaluate, predict, gather, dataset sharding and a checkpoint, under the strategy."""
    ext = strategy.extended
    out = {
        "devices": list(ext.worker_devices),
        "chief": bool(ext.should_checkpoint),
        "task": (strategy.cluster_resolver.task_type, strategy.cluster_resolver.task_id),
        "between_graph": ext._cross_device_ops._num_between_graph_workers,
    }
    rank = strategy.communicator.rank
    with strategy.scope():  # every worker starts from the chief's values (int16: raw bytes)
        made = [tf.Variable(tf.fill([3], float(rank + 1))), tf.Variable(rank + 1, dtype=tf.int16)]
    out["initial"] = [made[0].numpy().tolist(), int(made[1].numpy())]
    out["evaluate"] = float(model.evaluate(ds, verbose=0))
    out["predict_shape"] = list(model.predict(ds, verbose=0).shape)
    ids = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.fill([1, 2], float(ctx.replica_id_in_sync_group))
    )
    out["gather"] = strategy.gather(ids, axis=0).numpy()[:, 0].tolist()
    # Which elements this worker's replicas get of a globally batched dataset.
    rows = strategy.experimental_distribute_dataset(
        tf.data.Dataset.range(2 * GLOBAL_BATCH).batch(GLOBAL_BATCH)
    )
    out["shard"] = sorted(
        int(v)
        for batch in rows
        for part in strategy.experimental_local_results(batch)
        for v in part.numpy()
    )
    # Every worker writes (the chief where others read it, the rest to their
    # own directory), then all restore the chief's over zeroed weights.
    task_id = strategy.cluster_resolver.task_id
    task_dir = "chief" if ext.should_checkpoint else f"workertemp_{task_id}"
    ckpt = tf.train.Checkpoint(model=model)
    ckpt.write(os.path.join("ckpt", task_dir, "weights"))
    strategy.communicator.barrier(timeout=60)
    saved = _weights(model)
    for v in model.weights:
        v.assign(tf.zeros_like(v))
    ckpt.read(os.path.join("ckpt", "chief", "weights")).assert_existing_objects_matched()
    out["restored"] = all(np.array_equal(a, b) for a, b in zip(saved, _weights(model), strict=True))
    out["ckpt_dirs"] = sorted(os.listdir("ckpt"))
    strategy.communicator.barrier(timeout=60)  # nobody leaves while others still read
    return out


def _custom_loop(tf, k, strategy, ds) -> list[np.ndarray]:
    with strategy.scope():
        model = _model(k)
        opt = k.optimizers.SGD(LR, momentum=0.9)
        opt.build(model.trainable_variables)

    @tf.function
    def step(batch):
        def replica_fn(xb, yb):
            with tf.GradientTape() as tape:
                logits = model(xb, training=True)
                per_example = k.losses.sparse_categorical_crossentropy(yb, logits, from_logits=True)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        return strategy.reduce("SUM", strategy.run(replica_fn, args=batch), axis=None)

    for _ in range(EPOCHS):
        for batch in strategy.experimental_distribute_dataset(ds):
            step(batch)
    return _weights(model)


def _shard(rank: int, size: int):
    """This rank's rows of every global batch, in step order."""
    x, y = _data()
    local = GLOBAL_BATCH // size
    rows = np.concatenate(
        [
            np.arange(s * GLOBAL_BATCH + rank * local, s * GLOBAL_BATCH + (rank + 1) * local)
            for s in range(STEPS)
        ]
    )
    return x[rows], y[rows], local


def horovod(
    rank: int, size: int, addr: str, legacy: bool = False, compression: str | None = None
) -> dict:
    """One process per device: DistributedOptimizer + callbacks (fit), DistributedGradientTape."""
    tf = _tf(1)
    k = _keras(legacy)
    import pytfcomm
    import pytfcomm.tf as ptf

    comm = pytfcomm.init(rank=rank, size=size, addr=addr)
    x, y, local = _shard(rank, size)
    out: dict = {}

    # fit: rank r starts from different weights; the callback broadcasts rank 0's.
    model = _model(k, seed=rank)
    opt = pytfcomm.keras.DistributedOptimizer(
        k.optimizers.SGD(LR, momentum=0.9), compression=compression
    )
    assert isinstance(opt, k.optimizers.SGD)
    model.compile(opt, _loss(k))
    cbs = [
        pytfcomm.keras.callbacks.BroadcastGlobalVariablesCallback(0),
        pytfcomm.keras.callbacks.MetricAverageCallback(),
    ]
    hist = model.fit(x, y, batch_size=local, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=cbs)
    out["fit"] = _weights(model)
    out["loss"] = [float(v) for v in hist.history["loss"]]

    if not legacy:
        out["tape"] = _tape_loop(tf, k, x, y, local, compression)
        # broadcast_variables on its own: every rank ends with rank 1's values.
        vs = [
            tf.Variable(tf.fill([3], float(rank))),
            tf.Variable([rank, rank], dtype=tf.int64),
            tf.Variable(rank == 1),
        ]
        pytfcomm.broadcast_variables(vs, root=1)
        out["broadcast"] = [v.numpy().tolist() for v in vs]
    out["counters"] = ptf.counters()
    if rank == 0:
        out["reference"] = _reference(k)
    comm.close()
    return out


def _tape_loop(tf, k, x, y, local: int, compression: str | None) -> list[np.ndarray]:
    import pytfcomm

    model = _model(k)  # same seed on every rank: no broadcast needed here
    opt = k.optimizers.SGD(LR, momentum=0.9)
    opt.build(model.trainable_variables)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            logits = model(xb, training=True)
            loss = tf.reduce_mean(
                k.losses.sparse_categorical_crossentropy(yb, logits, from_logits=True)
            )
        tape = pytfcomm.DistributedGradientTape(tape, compression=compression)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    for _ in range(EPOCHS):
        for s in range(STEPS):
            step(x[s * local : (s + 1) * local], y[s * local : (s + 1) * local])
    return _weights(model)


def ordering(rank: int, size: int, addr: str, mode: str) -> dict:
    """Many independent cross-process all-reduces, readied in a different order on each rank.

    Op i's input costs a few matmuls on ranks where (i + rank) is even and
    nothing elsewhere, so with 4 inter-op threads each rank finishes inputs
    in a different order.
    """
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(4)
    import pytfcomm
    import pytfcomm.tf as ptf

    comm = pytfcomm.init(rank=rank, size=size, addr=addr)
    n_ops = 48

    def build():
        m = tf.random.stateless_uniform([160, 160], seed=[1, 2]) / 160.0
        outs = []
        for i in range(n_ops):
            x = tf.fill([i * 37 + 1], float(rank + 1) * (i + 1))
            if (i + rank) % 2 == 0:
                heavy = m
                for _ in range(6):
                    heavy = tf.matmul(heavy, m)
                x = x + 0.0 * tf.reduce_sum(heavy)
            outs.append(ptf.allreduce(x, op="sum"))
        return outs

    expect = [float(sum(range(1, size + 1))) * (i + 1) for i in range(n_ops)]
    results = []
    if mode == "function":
        fn = tf.function(build)
        for _ in range(3):
            results.append([float(o.numpy()[-1]) for o in fn()])
    else:
        graph = tf.Graph()
        with graph.as_default():
            outs = build()
        cfg = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=4)
        with tf.compat.v1.Session(graph=graph, config=cfg) as sess:
            for _ in range(3):
                results.append([float(o[-1]) for o in sess.run(outs)])
    comm.close()
    return {"ok": all(r == expect for r in results), "results": results[0][:4]}


def tf_fault(rank: int, size: int, addr: str, fault: str) -> dict:
    """A training loop on every rank; the last rank dies ("crash"), stalls in user
    code ("hang", a 3 s collective deadline), or is stopped ("stop", SIGSTOP, with
    no deadline set: the default 600 s).

    The other ranks must see the matching tf.errors class from the step,
    catch it in their loop, and report how long detection took.
    """
    import signal
    import time

    tf = _tf(1)
    import pytfcomm

    pytfcomm.init(rank=rank, size=size, addr=addr)
    w = tf.Variable(tf.ones([1000]))
    opts = tf.distribute.experimental.CommunicationOptions(
        timeout_seconds=None if fault == "stop" else 3.0
    )

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * w)
        g = pytfcomm.DistributedGradientTape(tape, timeout=opts.timeout_seconds).gradient(
            loss, [w]
        )[0]
        w.assign_sub(0.01 * g)
        return loss

    for _ in range(3):
        step()
    victim = size - 1
    if rank == victim:
        if fault == "crash":
            os._exit(17)
        if fault == "stop":
            # The test kills this rank's process group once the others have their
            # answer; this helper (in the same group) ends it should the test not.
            import subprocess

            subprocess.Popen(["sh", "-c", f"sleep 30; kill -9 {os.getpid()}"])
            os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(30)  # hung: the others give up at the 3 s deadline
        return {"victim": True}
    t0 = time.monotonic()
    try:
        for _ in range(100):
            step()
    except tf.errors.OpError as exc:  # what a training loop catches
        return {
            "error": type(exc).__name__,
            "message": exc.message,
            "seconds": time.monotonic() - t0,
        }
    return {"error": None}
