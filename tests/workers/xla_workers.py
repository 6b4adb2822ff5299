"""Worker functions of tests/tf/test_tf_xla.py (see tests/_harness.py): XLA across processes."""

from __future__ import annotations

from tf_setup import tf_with_devices


def keras_fit_refused(rank: int, size: int, addr: str) -> dict:
    """One device per process, the communicator across them: XLA refused, plain fit works."""
    tf = tf_with_devices(1)
    import keras
    import numpy as np

    import pytfcomm
    import pytfcomm.tf as ptf

    comm = pytfcomm.init(rank=rank, size=size, addr=addr)
    ptf.set_default_communicator(comm)
    strategy = tf.distribute.MirroredStrategy(["CPU:0"], cross_device_ops=pytfcomm.RingAllReduce())
    x = np.random.default_rng(0).standard_normal((32, 4)).astype(np.float32)
    y = x.sum(axis=1, keepdims=True)
    out: dict = {}
    for jit in (True, False):
        keras.utils.set_random_seed(0)
        with strategy.scope():
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
            model.compile("sgd", "mse", jit_compile=jit)
        try:
            model.fit(x, y, epochs=1, batch_size=8, verbose=0)
            out[str(jit)] = "ok"
        except pytfcomm.InvalidArgumentError as exc:
            out[str(jit)] = str(exc)
    comm.close()
    return out
