"""hvd.elastic for Keras (KerasState and its three callbacks) under pytfcomm-run
--restarts (tests/horovod/test_horovod_elastic.py): rank 1 dies in epoch 2 of the first run;
the restarted job resumes at the committed epoch and batch. Writes <out>/rank<r>.json."""

import json
import os
import sys

import numpy as np

import pytfcomm.horovod.tensorflow.keras as hvd
from pytfcomm.tf._which_keras import keras_module

keras = keras_module()
out_dir = sys.argv[1]
hvd.init()
attempt = int(os.environ["PYTFCOMM_RESTART_COUNT"])
rng = np.random.default_rng(hvd.rank())
x = rng.normal(size=(48, 5)).astype(np.float32)
y = (x.sum(axis=1, keepdims=True) > 0).astype(np.float32)
model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
state = hvd.elastic.KerasState(model, batch=0, epoch=0)
starts = []


class Crash(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        if attempt == 0 and self.epoch == 2 and batch == 3:
            # listed after CommitStateCallback: once both are here, rank 0 has committed
            # the state after batch 2 (3 batches of epoch 2 done)
            hvd.allreduce(np.zeros(1, np.float32), name="crash_barrier")
            if hvd.rank() == 1:
                os._exit(3)


@hvd.elastic.run
def train(state):
    starts.append((state.epoch, state.batch))
    callbacks = [
        hvd.elastic.CommitStateCallback(state),
        hvd.elastic.UpdateBatchStateCallback(state),
        hvd.elastic.UpdateEpochStateCallback(state),
        Crash(),
    ]
    model.fit(x, y, batch_size=8, epochs=4 - state.epoch, callbacks=callbacks, verbose=0)


train(state)
with open(os.path.join(out_dir, f"rank{hvd.rank()}.json"), "w") as f:
    json.dump(
        {
            "attempt": attempt,
            "starts": starts,
            "epoch": state.epoch,
            "iterations": int(model.optimizer.iterations.numpy()),
            "w": [v.numpy().tolist() for v in model.trainable_variables],
        },
        f,
    )
