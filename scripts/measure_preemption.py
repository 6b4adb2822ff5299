"""What PreemptionCheckpointHandler.run costs per step on pytfcomm's strategy (docs/reliability.md).

    pytfcomm-run -np 2 .venv/bin/python scripts/measure_preemption.py [--steps 300]

Each worker times, in alternating blocks, the training step of
tests/workers/preemption_workers.py called directly and through ``handler.run``, and the
handler's agreement alone (one all-reduce of four int64). Rank 0 prints the quartiles.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--blocks", type=int, default=6)
    args = p.parse_args()

    import tensorflow as tf

    import pytfcomm

    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    with strategy.scope():
        w = tf.Variable(tf.zeros([8, 1]), aggregation=tf.VariableAggregation.MEAN)
        ckpt_dir = os.path.join(tempfile.mkdtemp(), "ckpt")
        handler = tf.distribute.experimental.PreemptionCheckpointHandler(
            strategy.cluster_resolver, tf.train.Checkpoint(w=w), ckpt_dir
        )

    @tf.function
    def train_step(step):
        x = tf.random.stateless_normal([16, 8], seed=tf.stack([step, 0]))

        def replica_fn():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(x @ w - x[:, :1]))
            w.assign_sub(0.05 * tape.gradient(loss, w))
            return loss

        return strategy.run(replica_fn)

    step = tf.constant(0, tf.int64)
    for _ in range(20):  # warm-up: tracing, connections
        handler.run(train_step, step)
    times: dict[str, list[float]] = {"direct": [], "run": [], "agree": []}
    calls = {
        "direct": lambda: train_step(step),
        "run": lambda: handler.run(train_step, step),
        "agree": lambda: handler._agree(False, False),
    }
    for _ in range(args.blocks):
        for name, call in calls.items():
            strategy.communicator.barrier()
            for _ in range(args.steps):
                began = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - began)
    if strategy.communicator.rank == 0:
        q = {k: [round(x * 1e6) for x in statistics.quantiles(v, n=4)] for k, v in times.items()}
        print(
            f"{strategy.communicator.size} workers, {args.blocks * args.steps} calls each, "
            f"quartiles in us: step {q['direct']}, handler.run(step) {q['run']}, "
            f"agreement alone {q['agree']}"
        )


if __name__ == "__main__":
    main()
