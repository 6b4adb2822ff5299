"""Keras 3 `fit` on several workers that survives a lost worker: BackupAndRestore + restarts.

    pytfcomm-run -np 2 --restarts 2 python examples/backup_and_restore.py \\
        --backup-dir /tmp/backup --epochs 6 --out weights_{rank}.npz

`keras.callbacks.BackupAndRestore` is used unchanged: under
`pytfcomm.MultiWorkerMirroredStrategy` the chief writes the backup at the end of each
epoch, the other workers save into a temporary place they remove at once, and every
worker restores from the chief's backup when `fit` starts (docs/multiworker.md,
"BackupAndRestore and restarts"). When a worker dies, `pytfcomm-run --restarts N` stops
the job and starts every worker again; `fit` then resumes at the epoch after the last
backup. Training is deterministic (fixed seeds, data made here, no shuffling), so the
final weights equal those of a run that was never interrupted, bit for bit.

`--test-kill-at RANK:EPOCH:BATCH` is for the tests: in the first run only
(PYTFCOMM_RESTART_COUNT=0) worker RANK SIGKILLs itself when it starts that batch.
"""

from __future__ import annotations

import argparse
import os
import signal

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SAMPLES, FEATURES, CLASSES = 512, 20, 4
GLOBAL_BATCH = 64  # 8 steps per epoch; split between the workers


def make_data():
    import numpy as np

    rng = np.random.default_rng(1234)
    x = rng.standard_normal((SAMPLES, FEATURES)).astype(np.float32)
    w = rng.standard_normal((FEATURES, CLASSES)).astype(np.float32)
    y = np.argmax(x @ w + 0.5 * rng.standard_normal((SAMPLES, CLASSES)), axis=1)
    return x, y.astype(np.int64)


def parse_kill(text: str | None) -> tuple[int, int, int] | None:
    if not text:
        return None
    rank, epoch, batch = (int(v) for v in text.split(":"))
    return rank, epoch, batch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backup-dir", required=True, help="BackupAndRestore's backup_dir")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--out", default="weights_{rank}.npz",
                    help="final weights (np.savez); {rank} becomes the worker's rank")  # fmt: skip
    ap.add_argument("--keep-backup", action="store_true",
                    help="keep the backup after training (delete_checkpoint=False)")  # fmt: skip
    ap.add_argument("--test-kill-at", metavar="RANK:EPOCH:BATCH", help=argparse.SUPPRESS)
    args = ap.parse_args()
    kill = parse_kill(args.test_kill_at)

    import keras
    import numpy as np
    import tensorflow as tf

    import pytfcomm

    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    rank = strategy.communicator.rank
    restart = int(os.environ.get("PYTFCOMM_RESTART_COUNT", "0"))
    if rank == 0 and os.path.isdir(args.backup_dir):
        print(f"run {restart}: backup_dir holds {sorted(os.listdir(args.backup_dir))}", flush=True)

    x, y = make_data()
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.Sequential([
            keras.Input((FEATURES,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(CLASSES),
        ])  # fmt: skip
        model.compile(
            optimizer=keras.optimizers.Adam(1e-2),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )

    class Report(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):  # runs after BackupAndRestore's (listed first)
            start = self.model._initial_epoch or 0
            print(f"worker {rank}, run {restart}: training from epoch {start}", flush=True)

        def on_train_batch_begin(self, batch, logs=None):
            if kill and restart == 0 and (rank, self.epoch, batch) == kill:
                os.kill(os.getpid(), signal.SIGKILL)  # a lost worker, no clean-up

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

    backup = keras.callbacks.BackupAndRestore(args.backup_dir,
                                              delete_checkpoint=not args.keep_backup)  # fmt: skip
    model.fit(train, epochs=args.epochs, shuffle=False, callbacks=[backup, Report()],
              verbose=2 if rank == 0 else 0)  # fmt: skip
    weights = model.get_weights()
    out = args.out.replace("{rank}", str(rank))
    np.savez(out, *weights)
    checksum = sum(float(np.sum(w, dtype=np.float64)) for w in weights)
    print(f"worker {rank}: wrote {out}, weights checksum {checksum:.10f}", flush=True)


if __name__ == "__main__":
    main()
