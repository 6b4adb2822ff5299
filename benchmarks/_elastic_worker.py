"""One rank of ``elastic_recovery``, run by ``pytfcomm-run --elastic``.

    python -m benchmarks._elastic_worker LOOP OUTDIR STEPS AT

``LOOP`` is ``numpy`` (``pytfcomm.elastic.reform`` around ``comm.allreduce``), ``hvd``
(``hvd.elastic.run`` with ``TensorFlowState``, TF eager), ``hvd-fn`` (the same with the
step in a ``tf.function`` made inside the wrapped function, as docs/elastic.md says) or
``strategy`` (a ``pytfcomm.MultiWorkerMirroredStrategy`` custom loop, docs/elastic.md's
recipe). The data and the references are in :mod:`benchmarks._elastic_ref`.

Every worker (``i``: ``PYTFCOMM_ELASTIC_ID``, the rank it was started as) runs STEPS
steps, committing after each. At step AT the last worker writes OUTDIR/victim (its pid)
and waits, bounded, for the driver's SIGKILL; the others are then in that step's
collective. Each start appends a line to OUTDIR/starts<i>.jsonl; each survivor writes
OUTDIR/result<i>.json: its pid, the (rank, size) and duration of every step, the epoch,
the wall-clock times (``time.time()``, the driver's clock) of the error, of the new
communicator and of the first step completed in it (the strategy loop also of each part
of its rebuild), and its final values.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import _elastic_ref as ref

MAX_WAIT_S = 120.0  # the victim's wait for its SIGKILL


class Run:
    """What every loop records: steps, times, and the victim's handshake."""

    def __init__(self, out: Path, steps: int, at: int) -> None:
        self.out, self.steps, self.at = out, steps, at
        self.me = int(os.environ["PYTFCOMM_ELASTIC_ID"])
        self.victim = self.me == int(os.environ["PYTFCOMM_SIZE"]) - 1
        self.seen: list[list[float]] = []  # [rank, size, seconds] per completed step
        self.times: dict[str, Any] = {}
        with open(out / f"starts{self.me}.jsonl", "a") as f:
            f.write(json.dumps({"pid": os.getpid()}) + "\n")

    def maybe_wait_for_kill(self, step: int) -> None:
        """At step AT the victim announces its pid and waits for the SIGKILL."""
        if not (self.victim and step == self.at):
            return
        tmp = self.out / "victim.tmp"
        tmp.write_text(str(os.getpid()))
        tmp.rename(self.out / "victim")
        time.sleep(MAX_WAIT_S)
        sys.exit(f"the driver never killed this victim within {MAX_WAIT_S:.0f} s")

    def step_done(self, rank: int, size: int, began: float) -> None:
        now = time.time()
        self.seen.append([rank, size, now - began])
        if "reformed" in self.times and "next_step" not in self.times:
            self.times["next_step"] = now

    def error(self, exc: BaseException) -> None:
        self.times.setdefault("error", time.time())
        self.times.setdefault("error_type", type(exc).__name__)

    def mark(self, name: str) -> None:
        self.times.setdefault(name, time.time())

    def finish(self, values: dict[str, Any]) -> None:
        import pytfcomm

        result = {
            "pid": os.getpid(),
            "worker": self.me,
            "seen": self.seen,
            "epoch": pytfcomm.elastic.epoch(),
            "times": self.times,
            **values,
        }
        tmp = self.out / f"result{self.me}.tmp"
        tmp.write_text(json.dumps(result))
        tmp.rename(self.out / f"result{self.me}.json")


def numpy_loop(run: Run) -> None:
    """docs/elastic.md's NumPy loop."""
    import pytfcomm

    comm = pytfcomm.init()
    step, w = 0, np.zeros(4, np.float64)
    saved = (step, w.copy())
    while step < run.steps:
        try:
            run.maybe_wait_for_kill(step)
            began = time.time()
            total = comm.allreduce(ref.grad(run.me, step), op="sum")
            w = w - ref.LR * (total / comm.size)
            step += 1
            saved = (step, w.copy())
            run.step_done(comm.rank, comm.size, began)
        except pytfcomm.CommError as exc:
            if not pytfcomm.elastic.recoverable(exc):
                raise
            run.error(exc)
            comm = pytfcomm.elastic.reform()
            run.mark("reformed")
            w = comm.broadcast(saved[1].copy(), root=0)
            step = int(comm.broadcast(np.array([saved[0]], np.int64), root=0)[0])
            run.mark("synced")
    run.finish({"values": [[float(x).hex() for x in w]]})
    comm.close()


def hvd_loop(run: Run, function: bool) -> None:
    """``hvd.elastic.run`` with ``TensorFlowState``; the step eager, or a ``tf.function``
    made inside the wrapped function (so it binds the communicator of each membership)."""
    import tensorflow as tf

    import pytfcomm
    import pytfcomm.horovod.tensorflow as hvd

    hvd.init()
    w = tf.Variable(np.zeros(4, np.float32))
    state = hvd.elastic.TensorFlowState([w], step=0)
    state.register_reset_callbacks([lambda: run.mark("reformed")])

    def apply(g: Any) -> None:
        w.assign_sub(ref.LR * hvd.allreduce(g, op=hvd.Average))

    @hvd.elastic.run
    def train(state: Any) -> None:
        step_fn: Callable[[Any], Any] = tf.function(apply) if function else apply
        for step in range(state.step, run.steps):
            run.maybe_wait_for_kill(step)
            began = time.time()
            try:
                step_fn(tf.constant(ref.grad(run.me, step, np.float32)))
            except Exception as exc:
                if pytfcomm.elastic.recoverable(exc):
                    run.error(exc)
                raise
            state.step = step + 1
            state.commit()
            run.step_done(hvd.rank(), hvd.size(), began)

    train(state)
    run.finish({"values": [w.numpy().tolist()]})


def strategy_loop(run: Run) -> None:
    """docs/elastic.md's custom loop under ``pytfcomm.MultiWorkerMirroredStrategy``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    import pytfcomm
    from pytfcomm.tf._which_keras import keras_module

    keras = keras_module()
    xs, ys = zip(*(ref.batch(s) for s in range(run.steps)), strict=True)
    dataset = tf.data.Dataset.from_tensor_slices((np.concatenate(xs), np.concatenate(ys)))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = dataset.batch(ref.GLOBAL).with_options(options)

    def make_train_step(strategy: Any, model: Any, opt: Any) -> Any:
        def replica_step(x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.square(model(x) - y)) / ref.GLOBAL
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        @tf.function
        def train_step(x: Any, y: Any) -> Any:
            return strategy.run(replica_step, args=(x, y))

        return train_step

    def build() -> tuple[Any, Any, Any, Any]:
        strategy = pytfcomm.MultiWorkerMirroredStrategy()  # takes the current communicator
        with strategy.scope():
            dense = keras.layers.Dense(1, kernel_initializer="zeros")
            model = keras.Sequential([keras.Input((4,)), dense])
            opt = keras.optimizers.SGD(ref.S_LR, momentum=ref.S_MOMENTUM)
            opt.build(model.trainable_variables)  # its slots exist before loading
        return strategy, model, opt, make_train_step(strategy, model, opt)

    pytfcomm.init()
    strategy, model, opt, train_step = build()

    def variables() -> list[Any]:
        return [*model.trainable_variables, *opt.variables]

    step = 0
    commit = (step, [v.numpy() for v in variables()])
    data = iter(strategy.experimental_distribute_dataset(dataset.skip(step)))
    while step < run.steps:
        try:
            run.maybe_wait_for_kill(step)
            if "data" in run.times:  # the handler left: the old strategy's objects freed
                run.mark("resumed")
            began = time.time()
            x, y = next(data)  # its first waits for every survivor (TF's "has data" reduce)
            if "reformed" in run.times:
                run.mark("batch")
            train_step(x, y)
            step += 1
            commit = (step, [v.numpy() for v in variables()])
            comm = strategy.communicator
            run.step_done(comm.rank, comm.size, began)
        except (pytfcomm.CommError, tf.errors.OpError) as exc:
            if not pytfcomm.elastic.recoverable(exc):
                raise
            run.error(exc)
            pytfcomm.elastic.reform()
            run.mark("reformed")
            strategy, model, opt, train_step = build()
            run.mark("built")
            step, values = pytfcomm.elastic.broadcast_commit(commit)
            for var, value in zip(variables(), values, strict=True):
                var.assign(value)
            run.mark("synced")
            data = iter(strategy.experimental_distribute_dataset(dataset.skip(step)))
            run.mark("data")
    values = [np.asarray(v.numpy(), np.float32).ravel().tolist() for v in variables()]
    run.finish({"values": values})


def main(argv: list[str] | None = None) -> None:
    loop, out, steps, at = (argv or sys.argv[1:])[:4]
    run = Run(Path(out), int(steps), int(at))
    if loop == "numpy":
        numpy_loop(run)
    elif loop in ("hvd", "hvd-fn"):
        hvd_loop(run, function=loop == "hvd-fn")
    elif loop == "strategy":
        strategy_loop(run)
    else:
        sys.exit(f"unknown loop {loop!r}: numpy, hvd, hvd-fn or strategy")


if __name__ == "__main__":
    main()
