"""From a TF1 ps/worker job with SyncReplicasOptimizer to pytfcomm, still in graph mode.

    pytfcomm-run -np 2 python examples/migrating/ps_worker_tf1.py [--steps 20]
    python examples/migrating/ps_worker_tf1.py          # one worker works too

Before (one process per task, see docs/migrating.md): a ``tf.train.ClusterSpec``
with "ps" and "worker" jobs, a ``tf.distribute.Server`` in every process,
variables placed on the ps tasks by ``replica_device_setter``, gradients
aggregated on the ps by ``SyncReplicasOptimizer`` (between-graph replication,
synchronous), ``MonitoredTrainingSession`` with the chief initialising the
shared variables.

After: no ps, no server. Every worker builds the same ``tf.compat.v1`` graph
with its own copy of the variables; the optimizer's gradients are averaged by
``pytfcomm.allreduce_gradients`` (one fused all-reduce op per step) between
``compute_gradients`` and ``apply_gradients``; a session hook broadcasts rank
0's initial (or restored) values when the session starts. Every worker
initialises its own variables (``is_chief=True`` everywhere); only rank 0
checkpoints.

The script checks itself: the workers end with bitwise-equal weights, equal
(rtol 1e-5) to one process training on the global batch in a plain
``tf.compat.v1.Session`` (no pytfcomm), and rank 0's checkpoint holds the last
step. The last line starts with ``RESULT``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from _data import CLASSES, FEATURES, make_data

v1 = tf.compat.v1
HIDDEN = 32
LR, MOMENTUM = 0.1, 0.9


def build_model(seed: int):
    """The model exactly as the TF1 job had it (placeholders, get_variable)."""
    v1.set_random_seed(seed)
    x = v1.placeholder(tf.float32, [None, FEATURES], name="x")
    y = v1.placeholder(tf.int32, [None], name="y")
    init = v1.glorot_uniform_initializer()
    w1 = v1.get_variable("w1", [FEATURES, HIDDEN], initializer=init)
    b1 = v1.get_variable("b1", [HIDDEN], initializer=v1.zeros_initializer())
    w2 = v1.get_variable("w2", [HIDDEN, CLASSES], initializer=init)
    b2 = v1.get_variable("b2", [CLASSES], initializer=v1.zeros_initializer())
    logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2
    loss = v1.losses.sparse_softmax_cross_entropy(y, logits)
    return x, y, loss, [w1, b1, w2, b2]


class BroadcastVariablesHook(v1.train.SessionRunHook):
    """Once the session exists (variables initialised or restored), give every
    worker rank 0's values. The op is built in begin(), before the graph is
    finalised."""

    def __init__(self, root: int = 0) -> None:
        self.root = root
        self.op = None

    def begin(self) -> None:
        import pytfcomm

        self.op = pytfcomm.broadcast_variables(v1.global_variables(), root=self.root)

    def after_create_session(self, session, coord) -> None:
        if self.op is not None:  # None in a one-process job
            session.run(self.op)


class FinalValuesHook(v1.train.SessionRunHook):
    """Reads ``tensors`` when the session closes (a MonitoredTrainingSession
    refuses run() once it should stop)."""

    def __init__(self, tensors) -> None:
        self.tensors, self.values = tensors, None

    def end(self, session) -> None:
        self.values = session.run(self.tensors)


def train_workers(steps: int, per_worker: int, ckpt_dir: str | None):
    import pytfcomm

    comm = pytfcomm.init()  # rank and size from pytfcomm-run (or srun, mpirun, TF_CONFIG)
    rank, size = comm.rank, comm.size
    x_all, y_all = make_data(steps * per_worker * size)
    graph = tf.Graph()
    with graph.as_default():
        # Before: with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(
        #             worker_device=f"/job:worker/task:{task}", cluster=cluster)):
        # After: no device function; the variables are this worker's own.
        global_step = v1.train.get_or_create_global_step()
        # A different seed per worker, on purpose: the hook makes them equal.
        x, y, loss, weights = build_model(seed=1000 + rank)
        opt = v1.train.MomentumOptimizer(LR, MOMENTUM)
        # Before: opt = tf.compat.v1.train.SyncReplicasOptimizer(opt,
        #             replicas_to_aggregate=num_workers, total_num_replicas=num_workers)
        #         train_op = opt.minimize(loss, global_step=global_step)
        grads_and_vars = opt.compute_gradients(loss)
        grads = pytfcomm.allreduce_gradients([g for g, _ in grads_and_vars], op="mean")
        train_op = opt.apply_gradients(
            list(zip(grads, [v for _, v in grads_and_vars], strict=True)), global_step=global_step
        )
        mean_loss = pytfcomm.allreduce(loss, op="mean")  # for logging: the global batch's loss

    final = FinalValuesHook(weights)
    hooks = [BroadcastVariablesHook(root=0), v1.train.StopAtStepHook(last_step=steps), final]
    losses: list[float] = []
    with (
        graph.as_default(),
        v1.train.MonitoredTrainingSession(
            is_chief=True,  # every worker initialises its own variables
            checkpoint_dir=ckpt_dir if rank == 0 else None,  # one writer
            hooks=hooks,
            save_checkpoint_secs=None,
            save_checkpoint_steps=steps,
            save_summaries_steps=None,
            save_summaries_secs=None,
            log_step_count_steps=None,
        ) as sess,
    ):
        step = 0
        while not sess.should_stop():
            lo = (step * size + rank) * per_worker  # this worker's shard of the global batch
            feed = {x: x_all[lo : lo + per_worker], y: y_all[lo : lo + per_worker]}
            _, loss_value = sess.run([train_op, mean_loss], feed_dict=feed)
            losses.append(float(loss_value))
            step += 1
    return comm, final.values, losses


def initial_weights(seed: int) -> list[np.ndarray]:
    graph = tf.Graph()
    with graph.as_default():
        v1.train.get_or_create_global_step()
        *_, weights = build_model(seed)
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            return sess.run(weights)


def train_reference(steps: int, global_batch: int, start: list[np.ndarray]) -> list[np.ndarray]:
    """One process, plain tf.compat.v1.Session, the whole global batch per step."""
    x_all, y_all = make_data(steps * global_batch)
    graph = tf.Graph()
    with graph.as_default():
        x, y, loss, weights = build_model(seed=0)
        train_op = v1.train.MomentumOptimizer(LR, MOMENTUM).minimize(loss)
        load = [w.assign(value) for w, value in zip(weights, start, strict=True)]
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            sess.run(load)
            for step in range(steps):
                lo = step * global_batch
                sess.run(
                    train_op, {x: x_all[lo : lo + global_batch], y: y_all[lo : lo + global_batch]}
                )
            return sess.run(weights)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=32, help="per-worker batch size")
    ap.add_argument("--ckpt-dir", default=None, help="rank 0's checkpoints (default: a temp dir)")
    args = ap.parse_args()

    tf.get_logger().setLevel("ERROR")  # TF's deprecation notices for the v1 API
    v1.disable_v2_behavior()  # what a TF1 script runs under on TF 2.x
    ckpt_dir = args.ckpt_dir or tempfile.mkdtemp(prefix="ps_worker_tf1_")
    comm, final, losses = train_workers(args.steps, args.batch_size, ckpt_dir)
    rank, size = comm.rank, comm.size

    digest = np.frombuffer(hashlib.sha256(b"".join(w.tobytes() for w in final)).digest(), np.uint8)
    rows = comm.allgather(digest).reshape(size, -1)
    identical = all(np.array_equal(r, rows[0]) for r in rows)
    ok = identical
    # Rank 0's initial values are what every worker started from (broadcast).
    ref = train_reference(args.steps, args.batch_size * size, initial_weights(seed=1000))
    err = max(
        float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-12))
        for a, b in zip(final, ref, strict=True)
    )
    ok &= err <= 1e-5
    if rank == 0:
        latest = tf.train.latest_checkpoint(ckpt_dir)
        saved_step = int(tf.train.load_variable(latest, "global_step")) if latest else -1
        ok &= saved_step == args.steps
        print(f"rank 0 checkpoint: {latest} (global_step {saved_step})")
        if args.ckpt_dir is None:
            shutil.rmtree(ckpt_dir, ignore_errors=True)
    elif args.ckpt_dir is None:
        shutil.rmtree(ckpt_dir, ignore_errors=True)
    checksum = sum(float(np.sum(w)) for w in final)
    print(
        f"worker {rank}: weights identical on all {size} workers: {identical}; "
        f"max rel diff to one-process training on the global batch: {err:.1e}"
    )
    print(
        f"RESULT ps_worker_tf1 {'ok' if ok else 'FAILED'} workers={size} steps={len(losses)} "
        f"first_loss={losses[0]:.6f} loss={losses[-1]:.6f} checksum={checksum:.6f}",
        flush=True,
    )
    comm.close()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
