"""From tf.distribute.ParameterServerStrategy to synchronous all-reduce on pytfcomm.

    pytfcomm-run -np 2 python examples/migrating/parameter_server.py --ckpt-dir /tmp/ckpt
    TF_CONFIG='{"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"],
                            "evaluator": ["127.0.0.1:3"]},
                "task": {"type": "evaluator", "index": 0}}' \\
        python examples/migrating/parameter_server.py --ckpt-dir /tmp/ckpt

Before (TF_CONFIG with "chief", "worker" and "ps"; see docs/migrating.md):
the chief builds the model under ``tf.distribute.ParameterServerStrategy``,
variables live on the ps tasks, and a ``ClusterCoordinator`` schedules
``train_step`` on whichever worker is free; each worker's update is applied to
the ps variables on its own (asynchronously).

After: every process is a worker and runs the same loop. The dataset function
and the replica step are the ones the coordinator scheduled; the strategy is
``pytfcomm.MultiWorkerMirroredStrategy`` and ``train_step`` is called
directly. Updates are synchronous: each step averages the gradients of the
whole global batch, and every worker holds all variables.

The script checks itself: the workers' weights are bitwise equal, and equal
(rtol 1e-5) to one process training on the same global batches. With
``--ckpt-dir`` the chief writes a checkpoint there. A process whose TF_CONFIG
task is "evaluator" (or given ``--evaluate``) is the evaluator "sidecar": it
never joins the pytfcomm job, reads the newest checkpoints in ``--ckpt-dir``
and evaluates them. The last line starts with ``RESULT``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

FEATURES, CLASSES = 16, 4
PER_REPLICA_BATCH = 32
LR = 0.1


def make_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic classification data: 4 Gaussian blobs in 16 dimensions."""
    rng = np.random.default_rng(seed)
    centers = np.random.default_rng(99).normal(size=(CLASSES, FEATURES))
    y = rng.integers(0, CLASSES, size=n)
    x = centers[y] + rng.normal(scale=1.5, size=(n, FEATURES))
    return x.astype(np.float32), y.astype(np.int32)


def make_model(keras):
    return keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(CLASSES),
        ]
    )


def max_rel_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    """Largest |a - b| of each array pair relative to the largest |b| of that array."""
    return max(
        float(np.max(np.abs(u - v)) / max(float(np.max(np.abs(v))), 1e-12))
        for u, v in zip(a, b, strict=True)
    )


def eval_loss(model, x, y) -> float:
    import keras

    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return float(loss(y, model(x, training=False)))


def train(args) -> int:
    import keras
    import tensorflow as tf

    import pytfcomm

    # Before: strategy = tf.distribute.ParameterServerStrategy(cluster_resolver)
    #         coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    comm = strategy.communicator
    workers = comm.size
    global_batch = PER_REPLICA_BATCH * strategy.num_replicas_in_sync
    x, y = make_data(global_batch * args.steps, seed=0)

    def dataset_fn(input_context):  # unchanged from the PSS job
        batch = input_context.get_per_replica_batch_size(global_batch)
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return ds.batch(batch, drop_remainder=True)

    # Different seeds per worker on purpose: the strategy gives every worker the
    # chief's initial values (PSS kept one copy, on the ps tasks).
    keras.utils.set_random_seed(comm.rank)
    with strategy.scope():
        model = make_model(keras)
        optimizer = keras.optimizers.SGD(LR, momentum=0.9)
    initial = [w.numpy() for w in model.weights]
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_fn(xb, yb):  # unchanged from the PSS job
        with tf.GradientTape() as tape:
            per_example = loss_fn(yb, model(xb, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def train_step(iterator):  # unchanged from the PSS job
        losses = strategy.run(replica_fn, args=next(iterator))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    # Before: per_worker_dataset = coordinator.create_per_worker_dataset(dataset_fn)
    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
    losses = []
    for _ in range(args.steps):
        # Before: coordinator.schedule(train_step, args=(per_worker_iterator,)), then
        #         coordinator.join(). Here every worker runs every step, in lock step.
        losses.append(float(train_step(iterator)))

    final = [w.numpy() for w in model.weights]
    ok = True
    digest = np.frombuffer(hashlib.sha256(b"".join(w.tobytes() for w in final)).digest(), np.uint8)
    rows = comm.allgather(digest).reshape(workers, -1)
    identical = all(np.array_equal(r, rows[0]) for r in rows)
    ok &= identical

    # Reference: one process, no strategy, the same global batches, the chief's
    # initial weights. Worker w's replica r takes shard (w*R + r) of every batch.
    ref = make_model(keras)
    ref.set_weights(initial)
    ref_opt = keras.optimizers.SGD(LR, momentum=0.9)
    pipes = workers
    shards = [(x[i::pipes], y[i::pipes]) for i in range(pipes)]
    per_pipe = global_batch // pipes
    for s in range(args.steps):
        xb = np.concatenate([sx[s * per_pipe : (s + 1) * per_pipe] for sx, _ in shards])
        yb = np.concatenate([sy[s * per_pipe : (s + 1) * per_pipe] for _, sy in shards])
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(loss_fn(yb, ref(xb, training=True)))
        grads = tape.gradient(loss, ref.trainable_variables)
        ref_opt.apply_gradients(zip(grads, ref.trainable_variables, strict=True))
    err = max_rel_diff(final, ref.get_weights())
    close = err <= 1e-5
    ok &= close

    # Checkpoints: the chief writes the real one; the others write theirs to a
    # scratch directory and delete it (every worker takes part in saving).
    x_eval, y_eval = make_data(512, seed=1)
    held_out = eval_loss(model, x_eval, y_eval)
    ckpt_dir = args.ckpt_dir
    if ckpt_dir is not None:
        chief = strategy.extended.should_checkpoint
        target = ckpt_dir if chief else tempfile.mkdtemp(prefix="ps_migration_")
        ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer)
        manager = tf.train.CheckpointManager(ckpt, target, max_to_keep=1)
        manager.save(checkpoint_number=args.steps)
        if not chief:
            shutil.rmtree(target, ignore_errors=True)

    checksum = sum(float(np.sum(w)) for w in final)
    print(
        f"worker {comm.rank}: weights identical on all {workers} workers: {identical}; "
        f"equal to one-process training on the global batch: {close} (max rel diff {err:.1e})"
    )
    print(
        f"RESULT parameter_server {'ok' if ok else 'FAILED'} workers={workers} "
        f"steps={args.steps} first_loss={losses[0]:.6f} loss={losses[-1]:.6f} "
        f"eval_loss={held_out:.6f} checksum={checksum:.6f}",
        flush=True,
    )
    comm.close()
    return 0 if ok else 1


def evaluate(args) -> int:
    """The evaluator sidecar: no pytfcomm, only the checkpoints the chief writes."""
    import keras
    import tensorflow as tf

    model = make_model(keras)
    ckpt = tf.train.Checkpoint(model=model)
    x_eval, y_eval = make_data(512, seed=1)
    seen = 0
    # Yields each new checkpoint as it appears; gives up after --eval-timeout
    # seconds without one (a real sidecar waits for the training to end).
    for path in tf.train.checkpoints_iterator(args.ckpt_dir, timeout=args.eval_timeout):
        ckpt.read(path).expect_partial()
        seen += 1
        loss = eval_loss(model, x_eval, y_eval)
        print(f"evaluated {os.path.basename(path)}: held-out loss {loss:.6f}", flush=True)
    if not seen:
        print(f"RESULT parameter_server_eval FAILED: no checkpoint in {args.ckpt_dir}")
        return 1
    print(f"RESULT parameter_server_eval ok checkpoints={seen} eval_loss={loss:.6f}")
    return 0


def tf_config_task_type() -> str | None:
    task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task") or {}
    return task.get("type")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument(
        "--ckpt-dir",
        default=None,
        help="the chief writes its checkpoint here; the evaluator reads them",
    )
    ap.add_argument(
        "--evaluate",
        action="store_true",
        help="be the evaluator sidecar (also when TF_CONFIG's task is an evaluator)",
    )
    ap.add_argument(
        "--eval-timeout",
        type=float,
        default=60.0,
        help="seconds the evaluator waits for a new checkpoint",
    )
    args = ap.parse_args()
    if args.evaluate or tf_config_task_type() == "evaluator":
        if args.ckpt_dir is None:
            ap.error("the evaluator needs --ckpt-dir")
        return evaluate(args)  # never pytfcomm.init(): an evaluator is not in the job
    return train(args)


if __name__ == "__main__":
    raise SystemExit(main())
