"""Horovod's Keras elastic recipe under pytfcomm-run --elastic (3 ranks), unchanged.

Run by tests/reliability/test_elastic_keras.py (Keras 3, or tf-keras with
``TF_USE_LEGACY_KERAS=1``). ``model.fit`` of a linear model (SGD with momentum,
``hvd.DistributedOptimizer``) on a dataset that repeats one fixed batch per worker, under
``hvd.elastic.run`` with ``KerasState`` and the three elastic callbacks. Worker 2 (the
rank it was started as) SIGKILLs itself before batch KILL_BATCH of epoch KILL_EPOCH; the
survivors' step fails, ``run`` restores the commit, re-forms with 2 ranks in the same
processes and calls ``fit`` again for what is left. Writes <out>/rank<i>.json.

Usage: elastic_keras_inplace_script.py OUT EPOCHS STEPS KILL_EPOCH KILL_BATCH
"""

import json
import os
import signal
import sys
import time

import numpy as np
import tensorflow as tf

import pytfcomm
import pytfcomm.horovod.tensorflow.keras as hvd
from pytfcomm.tf._which_keras import keras_module

keras = keras_module()
out_dir = sys.argv[1]
epochs, steps, kill_epoch, kill_batch = (int(a) for a in sys.argv[2:6])
hvd.init()
me = int(os.environ["PYTFCOMM_ELASTIC_ID"])


def batch_of(worker: int) -> tuple[np.ndarray, np.ndarray]:
    """Worker ``worker``'s batch (exact in float32); the test computes the same."""
    x = ((np.arange(24).reshape(8, 3) % 5) - 2) * (worker + 1) / 4.0
    y = x @ np.array([[1.0], [-2.0], [0.5]]) + 1.0 + 0.5 * worker
    return x.astype(np.float32), y.astype(np.float32)


data = tf.data.Dataset.from_tensors(batch_of(me)).repeat()
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, kernel_initializer="zeros")])
opt = keras.optimizers.SGD(0.05, momentum=0.9)
model.compile(optimizer=hvd.DistributedOptimizer(opt), loss="mse")
state = hvd.elastic.KerasState(model, batch=0, epoch=0)
resets = []
state.register_reset_callbacks([lambda: resets.append([hvd.rank(), hvd.size()])])
starts, seen = [], []
next_step_at = None


class Record(keras.callbacks.Callback):
    """The victim's SIGKILL, and every finished batch's rank and size."""

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = state.epoch

    def on_train_batch_begin(self, batch, logs=None):
        if me == 2 and self.epoch == kill_epoch and batch == kill_batch:
            with open(os.path.join(out_dir, "killed_at"), "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)

    def on_train_batch_end(self, batch, logs=None):
        global next_step_at
        seen.append([hvd.rank(), hvd.size()])
        if hvd.size() == 2 and next_step_at is None:
            next_step_at = time.time()


@hvd.elastic.run
def train(state):
    starts.append([state.epoch, state.batch])
    model.fit(
        data,
        steps_per_epoch=steps,
        epochs=epochs - state.epoch,
        callbacks=[
            hvd.elastic.CommitStateCallback(state),
            hvd.elastic.UpdateBatchStateCallback(state),
            hvd.elastic.UpdateEpochStateCallback(state),
            Record(),
        ],
        verbose=0,
    )


train(state)
# A sparse gradient through the optimizer made before the re-forming: its average must
# divide by the new size (rows 0 and 1 hold 1 and 2 from the two survivors: 0.5 and 1).
table = tf.Variable(tf.zeros((3, 2)))
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(tf.gather(table, [hvd.rank()]) * (hvd.rank() + 1.0))
((sparse, _),) = model.optimizer.compute_gradients(loss, [table], tape=tape)
result = {
    "sparse_type": type(sparse).__name__,
    "sparse_average": tf.convert_to_tensor(sparse).numpy().tolist(),
    "pid": os.getpid(),
    "epoch": pytfcomm.elastic.epoch(),
    "starts": starts,
    "resets": resets,
    "seen": seen,
    "state": [state.epoch, state.batch],
    "iterations": int(np.asarray(model.optimizer.iterations.numpy())),
    "weights": [np.asarray(v.numpy(), np.float64).ravel().tolist() for v in model.weights],
    "next_step_at": next_step_at,
}
with open(os.path.join(out_dir, f"rank{me}.json"), "w") as f:
    json.dump(result, f)
