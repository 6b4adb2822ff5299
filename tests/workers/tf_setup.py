"""TF set-up shared by the TF tests and their worker processes (not a test module)."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

NUM_DEVICES = 4


def tf_with_devices(n: int = NUM_DEVICES):
    """TensorFlow with the host CPU split into ``n`` logical devices (idempotent)."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * n
        )
    except RuntimeError:  # already initialised: keep what is there
        pass
    if len(tf.config.list_logical_devices("CPU")) < n:
        raise RuntimeError(f"needed {n} logical CPU devices before TF initialised")
    return tf


def devices(n: int = NUM_DEVICES) -> list[str]:
    return [f"/job:localhost/replica:0/task:0/device:CPU:{i}" for i in range(n)]


def digits(n: int = 512):
    """(x, y) of scikit-learn's bundled digits, float32 in [0, 1] and int32."""
    import numpy as np
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return (x[:n] / 16.0).astype(np.float32), y[:n].astype(np.int32)
