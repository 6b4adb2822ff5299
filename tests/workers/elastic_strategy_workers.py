"""A rank program for tests/reliability/test_elastic_strategy.py (``pytfcomm-run --elastic``).

``elastic_strategy_workers.py OUTDIR STEPS AT [loop|fit]``. A custom training loop under
``pytfcomm.MultiWorkerMirroredStrategy``: a Keras 3 linear model (``Dense(1)``) trained by
SGD with momentum on a mean-squared error, one tf.function train step run by
``strategy.run``. Every step is one global batch of ``GLOBAL`` fixed examples
(:func:`batch`), split across the workers by the strategy's dataset sharding, so the
result does not depend on how many workers share a step: a reference is one process
training on the whole batch (the test computes it with NumPy).

After each step every rank commits, in memory, the model's and the optimizer's
variables and the step. At step AT the last worker writes OUTDIR/victim and waits
(bounded) for the test's SIGKILL. The survivors catch the recoverable error and follow
docs/elastic.md's recipe: ``pytfcomm.elastic.reform()``, a new strategy, a new model
and optimizer under its scope, rank 0's commit loaded into them
(:func:`pytfcomm.elastic.broadcast_commit`), a new train step and a dataset sharded
for the new size. Then they call the OLD strategy's train step once and record what
it raises (it must fail clearly, not hang or reduce over the old membership).

With ``fit``, each step is instead one Keras ``fit(epochs=1)`` on that step's global
batch (the per-epoch recipe of docs/elastic.md): the model is compiled with a
mean-squared error and the same optimizer, and recovery builds and compiles anew.

Each process start appends a line to OUTDIR/starts<i>.jsonl (``i``: the worker id, the
rank it was started as); survivors write OUTDIR/result<i>.json: pid, the (rank, size)
of every step, the epoch, the times of the error, of the new strategy and of the first
step done in it, the weights and momenta (float32 as hex), the old step's error.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

import pytfcomm
from pytfcomm.tf._which_keras import keras_module

keras = keras_module()
GLOBAL = 12  # examples per step: split 4/4/4 over 3 workers, 6/6 over 2
LR, MOMENTUM = 0.05, 0.9
MAX_WAIT = 60.0


def batch(step: int) -> tuple[np.ndarray, np.ndarray]:
    """The global batch of ``step``: fixed float32 values (the test recomputes them)."""
    rng = np.random.default_rng(1000 + step)
    x = rng.normal(size=(GLOBAL, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.25).astype(np.float32)
    return x, y


class Trainer:
    """A strategy, the model and optimizer in its scope, its train step and dataset."""

    def __init__(self, steps: int, fit: bool = False) -> None:
        self.strategy = pytfcomm.MultiWorkerMirroredStrategy()
        with self.strategy.scope():
            dense = keras.layers.Dense(1, kernel_initializer="zeros")
            self.model = keras.Sequential([keras.Input((4,)), dense])
            self.opt = keras.optimizers.SGD(LR, momentum=MOMENTUM)
            if fit:  # the mean over the global batch, as the loop's loss
                self.model.compile(optimizer=self.opt, loss="mse")
            self.opt.build(self.model.trainable_variables)
        self.steps = steps
        self.train_step = self._make_step()

    def fit_step(self, step: int) -> None:
        """One ``fit`` epoch on ``step``'s global batch, sharded by the strategy."""
        x, y = batch(step)
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA
        )
        self.model.fit(data.with_options(options), epochs=1, verbose=0)

    def variables(self) -> list[tf.Variable]:
        return [*self.model.trainable_variables, *self.opt.variables]

    def _make_step(self):
        model, opt, strategy = self.model, self.opt, self.strategy

        def replica_step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.square(model(x) - y)) / GLOBAL
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        @tf.function
        def train_step(x, y):
            return strategy.run(replica_step, args=(x, y))

        return train_step

    def dataset(self, start: int):
        """Steps ``start``.. as global batches, sharded by the strategy for its size."""
        xs, ys = zip(*(batch(s) for s in range(start, self.steps)), strict=True)
        data = tf.data.Dataset.from_tensor_slices((np.concatenate(xs), np.concatenate(ys)))
        options = tf.data.Options()
        policy = tf.data.experimental.AutoShardPolicy.DATA
        options.experimental_distribute.auto_shard_policy = policy
        return iter(
            self.strategy.experimental_distribute_dataset(data.batch(GLOBAL).with_options(options))
        )


def main() -> None:
    out, steps, at = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    fit = sys.argv[4:] == ["fit"]
    me = int(os.environ["PYTFCOMM_ELASTIC_ID"])
    victim = me == int(os.environ["PYTFCOMM_SIZE"]) - 1
    with open(out / f"starts{me}.jsonl", "a") as f:
        f.write(json.dumps({"pid": os.getpid()}) + "\n")
    pytfcomm.init()
    t = Trainer(steps, fit)
    step = 0
    commit = (step, [v.numpy() for v in t.variables()])
    data = t.dataset(step)
    seen: list[list[int]] = []
    times: dict[str, float] = {}
    old = None
    while step < steps:
        try:
            if victim and step == at:
                (out / "victim").write_text(str(os.getpid()))
                time.sleep(MAX_WAIT)
                sys.exit("the test never killed the victim")
            if fit:
                t.fit_step(step)
            else:
                x, y = next(data)
                t.train_step(x, y)
            comm = t.strategy.communicator
            seen.append([comm.rank, comm.size])
            step += 1
            commit = (step, [v.numpy() for v in t.variables()])
            if "reformed" in times and "next_step" not in times:
                times["next_step"] = time.time()
        except (pytfcomm.CommError, tf.errors.OpError) as exc:
            if not pytfcomm.elastic.recoverable(exc):
                raise
            times.setdefault("error", time.time())
            times.setdefault("error_type", type(exc).__name__)  # type: ignore[arg-type]
            comm = pytfcomm.elastic.reform()
            if not fit:
                old = old or (t, x, y)
            t = Trainer(steps, fit)
            step, values = pytfcomm.elastic.broadcast_commit(commit)
            for var, value in zip(t.variables(), values, strict=True):
                var.assign(value)
            data = t.dataset(step)
            times.setdefault("reformed", time.time())
    stale = {}
    if old is not None:  # the old strategy after reform(): must fail clearly, at once
        t_old, x, y = old
        # traced before (its ops hold the old communicator), then traced anew
        for name, call in (("traced", t_old.train_step), ("retraced", t_old._make_step())):
            try:
                call(x, y)
                stale[name] = {"type": None}
            except Exception as exc:
                stale[name] = {
                    "type": type(exc).__name__,
                    "message": str(exc)[-1500:],
                    "recoverable": pytfcomm.elastic.recoverable(exc),
                }
    result = {
        "pid": os.getpid(),
        "seen": seen,
        "epoch": pytfcomm.elastic.epoch(),
        "times": times,
        "weights": [np.asarray(v.numpy(), np.float32).ravel().tolist() for v in t.variables()],
        "stale": stale,
    }
    (out / f"result{me}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
