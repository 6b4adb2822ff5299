"""The in-graph multi-GPU tower trainer (cifar10_multi_gpu_train style), averaged by pytfcomm.

    python examples/migrating/tower_tf1.py [--towers 2] [--steps 20]

Before: a ``tf.compat.v1`` graph with one tower per GPU (``/gpu:i``), the
variables on the CPU and shared by reuse, ``opt.compute_gradients`` per tower
and the script's own ``average_gradients(tower_grads)`` (expand_dims, concat,
reduce_mean per variable) before ``opt.apply_gradients``.

After: the same graph; ``average_gradients`` is ``pytfcomm.average_gradients``
(one fused all-reduce op for every variable and tower). Here the "GPUs" are
logical CPU devices (a session with ``device_count={"CPU": towers}``).

The script trains both from the same initial values on the same batches and
checks that they end equal (rtol 1e-5) and that pytfcomm ran one all-reduce
op per step. The last line starts with ``RESULT``.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from _data import CLASSES, FEATURES, make_data

v1 = tf.compat.v1
HIDDEN = 32
LR = 0.1


def classic_average_gradients(tower_grads):
    """What the tower trainers carried (the "before"): stack each variable's
    gradients from all towers on one device and take their mean."""
    averaged = []
    for pairs in zip(*tower_grads, strict=True):  # one variable, every tower
        grads = tf.stack([g for g, _ in pairs])
        averaged.append((tf.reduce_mean(grads, axis=0), pairs[0][1]))
    return averaged


def tower_loss(x, y):
    """The model; variables on the CPU, created by tower 0 and reused by the others."""
    init = v1.glorot_uniform_initializer(seed=7)
    with tf.device("/device:CPU:0"):
        w1 = v1.get_variable("w1", [FEATURES, HIDDEN], initializer=init)
        b1 = v1.get_variable("b1", [HIDDEN], initializer=v1.zeros_initializer())
        w2 = v1.get_variable("w2", [HIDDEN, CLASSES], initializer=init)
        b2 = v1.get_variable("b2", [CLASSES], initializer=v1.zeros_initializer())
    logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2
    return v1.losses.sparse_softmax_cross_entropy(y, logits)


def train(average, towers: int, steps: int, batch: int) -> tuple[list[np.ndarray], list[float]]:
    x_all, y_all = make_data(steps * batch)
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [batch, FEATURES])
        y = v1.placeholder(tf.int32, [batch])
        opt = v1.train.MomentumOptimizer(LR, 0.9)
        xs, ys = tf.split(x, towers), tf.split(y, towers)
        tower_grads, losses = [], []
        with v1.variable_scope(v1.get_variable_scope()):
            for i in range(towers):
                with tf.device(f"/device:CPU:{i}"), tf.name_scope(f"tower_{i}"):
                    loss = tower_loss(xs[i], ys[i])
                    v1.get_variable_scope().reuse_variables()
                    tower_grads.append(opt.compute_gradients(loss))
                    losses.append(loss)
        train_op = opt.apply_gradients(average(tower_grads))
        mean_loss = tf.add_n(losses) / towers
        weights = v1.trainable_variables()
        config = v1.ConfigProto(device_count={"CPU": towers})  # the logical "GPUs"
        history = []
        with v1.Session(graph=graph, config=config) as sess:
            sess.run(v1.global_variables_initializer())
            for step in range(steps):
                lo = step * batch
                _, loss_value = sess.run(
                    [train_op, mean_loss], {x: x_all[lo : lo + batch], y: y_all[lo : lo + batch]}
                )
                history.append(float(loss_value))
            return sess.run(weights), history


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--towers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=64, help="global batch size")
    args = ap.parse_args()
    if args.batch_size % args.towers:
        ap.error("--batch-size must be a multiple of --towers")

    tf.get_logger().setLevel("ERROR")  # TF's deprecation notices for the v1 API
    v1.disable_v2_behavior()  # the trainer is a TF1 graph
    import pytfcomm

    before, _ = train(classic_average_gradients, args.towers, args.steps, args.batch_size)
    ops_before = pytfcomm.tf.counters()["allreduce_ops"]
    after, losses = train(pytfcomm.average_gradients, args.towers, args.steps, args.batch_size)
    ran = pytfcomm.tf.counters()["allreduce_ops"] - ops_before
    err = max(
        float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-12))
        for a, b in zip(after, before, strict=True)
    )
    ok = err <= 1e-5 and ran == args.steps
    checksum = sum(float(np.sum(w)) for w in after)
    print(
        f"{args.towers} towers: pytfcomm.average_gradients against the classic average: "
        f"max rel diff {err:.1e}; pytfcomm all-reduce ops run: {ran} (one per step)"
    )
    print(
        f"RESULT tower_tf1 {'ok' if ok else 'FAILED'} towers={args.towers} steps={args.steps} "
        f"first_loss={losses[0]:.6f} loss={losses[-1]:.6f} checksum={checksum:.6f}",
        flush=True,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
