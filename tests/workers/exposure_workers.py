"""A multi-worker Keras 3 job kept running while tests/tf/test_tf_exposure.py probes it.

Not a test module: the harness runs :func:`fit_while_probed` in each worker
process (possibly inside a network namespace).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
from tf_setup import digits

GLOBAL_BATCH = 32
STEPS = 4


def fit_while_probed(
    rank: int, size: int, addr: str, hosts: list[str], tf_ports: list[int], max_seconds: float
) -> dict:
    """Keras 3 ``fit`` under pytfcomm.MultiWorkerMirroredStrategy, one epoch after another.

    The job comes from TF_CONFIG (``hosts[i]:tf_ports[i]`` is worker i, as a
    user would write it). After the first epoch this worker writes
    ``ready<rank>`` (its pid) into the working directory, then keeps training
    until the test drops ``stop`` there, or ``max_seconds`` pass. The workers
    agree (through pytfcomm) on when to stop, so both run the same epochs.
    """
    os.environ["TF_CONFIG"] = json.dumps(
        {
            "cluster": {"worker": [f"{h}:{p}" for h, p in zip(hosts, tf_ports, strict=True)]},
            "task": {"type": "worker", "index": rank},
        }
    )
    os.environ["PYTFCOMM_ADDR"] = addr  # the harness's free port for pytfcomm itself
    import keras
    import tensorflow as tf

    import pytfcomm

    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    comm = strategy.communicator
    x, y = digits(GLOBAL_BATCH * STEPS)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((64,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(10)]
        )
        model.compile(
            keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
    losses = [float(model.fit(ds, epochs=1, verbose=0).history["loss"][-1])]
    Path(f"ready{rank}").write_text(str(os.getpid()))
    deadline = time.monotonic() + max_seconds
    while True:
        stop = os.path.exists("stop") or time.monotonic() > deadline
        if comm.allreduce(np.array([int(stop)], np.int32), op="max")[0]:
            break
        losses.append(float(model.fit(ds, epochs=1, verbose=0).history["loss"][-1]))
        time.sleep(0.2)  # leave the probe some CPU on a small machine
    return {"losses": losses, "weights": [np.array(w) for w in model.get_weights()]}
