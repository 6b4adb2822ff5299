"""Worker program for tests/tf/test_preemption.py, run under ``pytfcomm-run -np 2``.

``python preemption_workers.py MODE OUTDIR CKPT_DIR STEPS``: a custom training loop of
``STEPS`` steps on ``pytfcomm.MultiWorkerMirroredStrategy`` (a linear model, the same
deterministic batch on every worker at each step), every step through
``tf.distribute.experimental.PreemptionCheckpointHandler.run``. The handler restores
from ``CKPT_DIR`` and the loop starts at ``handler.total_run_calls``.

* ``default``: the handler is made in the strategy's scope with TF's default
  termination config (SIGTERM; ``sys.exit(42)``);
* ``config``: made outside the scope from a fresh ``TFConfigClusterResolver``, with
  ``TerminationConfig(exit_fn=lambda: sys.exit(7), grace_period=GRACE)``.

* ``tf_keras``: tf-keras ``fit`` (3 epochs of 8 batches) with
  ``BackupAndRestore(save_before_preemption=True)``, which makes the handler itself
  (tf-keras turns it on only on Google Cloud: its check is made to say yes here).

Each worker writes ``OUTDIR/pid.<run>.<rank>`` (its pid) when the handler is ready,
``OUTDIR/progress.<run>.<rank>`` (steps done) after every step, and
``OUTDIR/result.<run>.<rank>.json`` when it leaves (``exit``: 0 or the ``SystemExit``
code, ``runs``: the handler's run count then, ``start``, ``weights``, ``left_at``:
time.time() at exit). ``<run>`` is ``PYTFCOMM_RESTART_COUNT``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

GRACE = 4.0  # seconds of grace period in the ``config`` mode
STEP_PAUSE = 0.05  # seconds between steps: room for the test to signal mid-training


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(mode: str, out: Path, ckpt_dir: str, steps: int) -> None:
    import tensorflow as tf

    import pytfcomm

    run = int(os.environ.get("PYTFCOMM_RESTART_COUNT", "0"))
    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    rank = strategy.communicator.rank
    with strategy.scope():
        w = tf.Variable(tf.zeros([8, 1]), aggregation=tf.VariableAggregation.MEAN)
        checkpoint = tf.train.Checkpoint(w=w)
        if mode == "default":
            handler = tf.distribute.experimental.PreemptionCheckpointHandler(
                strategy.cluster_resolver, checkpoint, ckpt_dir
            )
    if mode == "config":
        config = tf.distribute.experimental.TerminationConfig(
            exit_fn=lambda: sys.exit(7), grace_period=GRACE
        )
        handler = tf.distribute.experimental.PreemptionCheckpointHandler(
            tf.distribute.cluster_resolver.TFConfigClusterResolver(),
            checkpoint,
            ckpt_dir,
            termination_config=config,
        )
    true_w = tf.reshape(tf.range(8, dtype=tf.float32) / 8.0, [8, 1])

    @tf.function
    def train_step(step):
        x = tf.random.stateless_normal([16, 8], seed=tf.stack([step, 0]))
        y = x @ true_w

        def replica_fn():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(x @ w - y))
            w.assign_sub(0.05 * tape.gradient(loss, w))
            return loss

        return strategy.run(replica_fn)

    start = int(handler.total_run_calls)
    _write(out / f"pid.{run}.{rank}", str(os.getpid()))
    result = {"run": run, "rank": rank, "start": start, "exit": None}  # None: raised
    try:
        for step in range(start, steps):
            handler.run(train_step, tf.constant(step, tf.int64))
            _write(out / f"progress.{run}.{rank}", str(step + 1))
            time.sleep(STEP_PAUSE)
        result["exit"] = 0
    except SystemExit as exc:
        result["exit"] = exc.code
        raise
    finally:
        result.update(runs=int(handler.total_run_calls), left_at=time.time())
        result["weights"] = w.numpy().ravel().tolist()
        _write(out / f"result.{run}.{rank}.json", json.dumps(result))


def tf_keras_fit(out: Path, backup_dir: str) -> None:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import numpy as np
    import tensorflow as tf
    import tf_keras as k
    from tf_keras.src.distribute import distributed_file_utils

    import pytfcomm

    distributed_file_utils._on_gcp = lambda: True
    run = int(os.environ.get("PYTFCOMM_RESTART_COUNT", "0"))
    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    rank = strategy.communicator.rank
    x = np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)
    with strategy.scope():
        k.utils.set_random_seed(0)
        model = k.Sequential([k.Input((4,)), k.layers.Dense(1)])
        model.compile(k.optimizers.SGD(0.05), "mse")
    result: dict = {"run": run, "rank": rank, "epochs": [], "exit": None}

    class Progress(k.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            result["epochs"].append(epoch)

        def on_train_batch_end(self, batch, logs=None):
            done = int(model._preemption_handler.total_run_calls)
            _write(out / f"progress.{run}.{rank}", str(done))
            time.sleep(STEP_PAUSE)

    backup = k.callbacks.BackupAndRestore(backup_dir, save_before_preemption=True)
    _write(out / f"pid.{run}.{rank}", str(os.getpid()))
    data = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True))).batch(8)
    try:
        model.fit(data, epochs=3, verbose=0, callbacks=[backup, Progress()])
        result["exit"] = 0
    except SystemExit as exc:
        result["exit"] = exc.code
        raise
    finally:
        handler = getattr(model, "_preemption_handler", None)
        result["runs"] = None if handler is None else int(handler.total_run_calls)
        _write(out / f"result.{run}.{rank}.json", json.dumps(result))


def run_counts_differ(rank: int, size: int, addr: str, tmp: str) -> str:
    """Through tests/_harness.run_ranks: the chief restores run 5, worker 1 nothing (its
    checkpoint directory is another, as on storage that is not shared); the first
    ``run()`` must fail on both. Returns the error message."""
    os.environ.update(PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE=str(size), PYTFCOMM_ADDR=addr)
    os.environ.pop("TF_CONFIG", None)
    import tensorflow as tf

    import pytfcomm

    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    ckpt_dir = os.path.join(tmp, f"ckpt{rank}")
    if rank == 0:
        runs = tf.Variable(tf.constant(5, tf.int64))
        tf.train.Checkpoint(checkpointed_runs=runs).save(os.path.join(ckpt_dir, "ckpt"))
    # Outside the scope: restoring a mirrored variable from one worker's files only
    # would wait in the chief's broadcast of its value instead.
    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver, tf.train.Checkpoint(), ckpt_dir
    )
    try:
        handler.run(lambda: None)
    except pytfcomm.MismatchError as exc:
        return str(exc)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return "no error"


if __name__ == "__main__":
    if sys.argv[1] == "tf_keras":
        tf_keras_fit(Path(sys.argv[2]), sys.argv[3])
    else:
        main(sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
