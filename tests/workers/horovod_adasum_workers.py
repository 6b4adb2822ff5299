"""Rank functions for tests/horovod/test_horovod_adasum.py: ``op=hvd.Adasum`` in pytfcomm.horovod.

Every rank's data is a function of (rank, name) (:func:`data`), so the test can
rebuild the whole job's inputs and compare with its own NumPy Adasum tree. The
workers return what they got (NumPy arrays); the test does the checking.
``mode`` is "eager" or "function" (each call wrapped in a fresh ``tf.function``).
"""

from __future__ import annotations

import os
import zlib
from typing import Any

import numpy as np

SHAPES = {"a": (3, 5), "b": (7,), "c": (2, 2, 2), "s": ()}


def data(rank: int, name: str, dtype: Any = np.float64) -> np.ndarray:
    """Rank ``rank``'s tensor ``name``: normal values, the same in every process."""
    seed = zlib.crc32(f"{name}:{rank}".encode())
    return np.random.default_rng(seed).normal(size=SHAPES[name]).astype(dtype)


def _init(rank: int, size: int, addr: str) -> Any:
    os.environ.update(PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE=str(size), PYTFCOMM_ADDR=addr)
    import pytfcomm.horovod.tensorflow as hvd

    hvd.init()
    return hvd


def _run(mode: str, fn: Any, *args: Any) -> Any:
    import tensorflow as tf

    out = tf.function(fn)(*args) if mode == "function" else fn(*args)
    return tf.nest.map_structure(lambda t: t.numpy(), out)


def reductions(rank: int, size: int, addr: str, mode: str) -> dict:
    """hvd.allreduce / grouped_allreduce with op=Adasum on data whose answer is known."""
    import tensorflow as tf

    hvd = _init(rank, size, addr)
    out: dict = {}

    def adasum(t: Any, **kw: Any) -> Any:
        return _run(mode, lambda x: hvd.allreduce(x, op=hvd.Adasum, **kw), tf.constant(t))

    for dt in (np.float16, np.float32, np.float64):
        out[f"random_{np.dtype(dt).name}"] = adasum(data(rank, "a", dt))
    out["scaled"] = adasum(data(rank, "a"), prescale_factor=0.5, postscale_factor=3.0)
    out["orthogonal"] = adasum(np.eye(size, dtype=np.float32)[rank])  # one-hot per rank
    out["identical"] = adasum(data(0, "a", np.float32))
    zero_on_1 = data(rank, "a", np.float32) * (0 if rank == 1 else 1)
    out["zero_on_1"] = adasum(zero_on_1)
    out["all_zero"] = adasum(np.zeros(4, np.float32))
    out["compressed"] = adasum(data(rank, "a", np.float32), compression=hvd.Compression.fp16)
    names = ["a", "b", "c", "s"]
    out["grouped"] = _run(
        mode,
        lambda *xs: hvd.grouped_allreduce(list(xs), op=hvd.Adasum),
        *[tf.constant(data(rank, k, np.float32)) for k in names],
    )
    # a float64 tensor in a float32 group: its own all-gather, the same tree
    out["grouped_mixed"] = _run(
        mode,
        lambda x, y: hvd.grouped_allreduce([x, y], op=hvd.Adasum),
        tf.constant(data(rank, "a", np.float32)),
        tf.constant(data(rank, "b", np.float64)),
    )

    # Horovod's gradient of an Adasum all-reduce: the Adasum of the incoming gradients.
    def grad(x: tf.Tensor, dy: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = hvd.allreduce(x, op=hvd.Adasum)
        return tape.gradient(y, x, output_gradients=dy)

    out["grad"] = _run(mode, grad, tf.constant(data(rank, "b")), tf.constant(data(rank + 100, "b")))

    try:
        hvd.allreduce(tf.constant([rank, 1]), op=hvd.Adasum)
    except ValueError as exc:
        out["int_error"] = str(exc)
    hvd.shutdown()
    return out


def not_power_of_two(rank: int, size: int, addr: str) -> dict:
    """Every Adasum entry point raises NotImplementedError, before any communication."""
    import tensorflow as tf

    hvd = _init(rank, size, addr)
    x = tf.constant([1.0, 2.0])
    v = tf.Variable([1.0, 2.0])
    out: dict = {}

    def tape_grad() -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(v * v)
        return hvd.DistributedGradientTape(tape, op=hvd.Adasum).gradient(loss, [v])

    for name, call in [
        ("allreduce", lambda: hvd.allreduce(x, op=hvd.Adasum)),
        ("grouped", lambda: hvd.grouped_allreduce([x, x], op=hvd.Adasum)),
        ("function", lambda: tf.function(lambda t: hvd.allreduce(t, op=hvd.Adasum))(x)),
        ("tape", tape_grad),
    ]:
        try:
            call()
            out[name] = "no error"
        except NotImplementedError as exc:
            out[name] = str(exc)
    # Nothing was left half-sent: the ranks still agree on the next collective.
    out["sum_after"] = hvd.allreduce(x, op=hvd.Sum).numpy()
    hvd.shutdown()
    return out


def training(rank: int, size: int, addr: str, mode: str, steps: int) -> dict:
    """A linear least-squares model, each rank on its own batch, updated with SGD(0.1) on
    DistributedGradientTape(op=Adasum) gradients; plus the optimizer entry points."""
    import keras
    import tensorflow as tf

    import pytfcomm.horovod.tensorflow.keras as hvd_keras

    hvd = _init(rank, size, addr)
    w = tf.Variable(np.zeros((3, 1), np.float32))
    b = tf.Variable(np.zeros((1,), np.float32))
    xb, yb = batch(rank)

    def step() -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(xb, w) + b - yb) ** 2)
        tape = hvd.DistributedGradientTape(tape, op=hvd.Adasum)
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(0.1 * gw)
        b.assign_sub(0.1 * gb)
        return loss

    fn = tf.function(step) if mode == "function" else step
    for _ in range(steps):
        fn()
    out: dict = {"w": w.numpy(), "b": b.numpy()}

    # Horovod's Keras DistributedOptimizer reduces the gradients with Adasum ...
    kw = keras.Variable(np.zeros(3, np.float32))
    opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(1.0), op=hvd.Adasum)
    g = tf.constant(data(rank, "b", np.float32)[:3])
    apply = lambda: opt.apply([g], [kw])  # noqa: E731
    (tf.function(apply) if mode == "function" else apply)()
    out["keras_w"] = kw.numpy()
    # ... hvd.DistributedOptimizer refuses Keras optimizers with Adasum, as Horovod's.
    for name, kwargs in [
        ("keras_refused", {}),
        ("aggregated_refused", {"average_aggregated_gradients": True}),
    ]:
        try:
            hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), op=hvd.Adasum, **kwargs)
        except ValueError as exc:
            out[name] = str(exc)

    # Sparse gradients: NotImplementedError unless sparse_as_dense, as Horovod.
    emb = tf.Variable(np.ones((size, 2), np.float32))

    def sparse(sparse_as_dense: bool) -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(emb, [rank]))
        tape = hvd.DistributedGradientTape(tape, op=hvd.Adasum, sparse_as_dense=sparse_as_dense)
        return tf.convert_to_tensor(tape.gradient(loss, [emb])[0])

    try:
        sparse(False)
    except NotImplementedError as exc:
        out["sparse_error"] = str(exc)
    out["sparse_as_dense"] = _run(mode, lambda: sparse(True))
    hvd.shutdown()
    return out


def batch(rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s training batch: 8 rows of 3 features, y = x.[1, -2, 0.5] + 0.3 + noise."""
    rng = np.random.default_rng(1000 + rank)
    x = rng.normal(size=(8, 3)).astype(np.float32)
    y = x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3
    return x, (y + 0.1 * rng.normal(size=(8, 1))).astype(np.float32)


def mismatch(rank: int, size: int, addr: str) -> dict:
    """Ranks whose tensors differ in shape (same element count) get an error, every one."""
    import tensorflow as tf

    hvd = _init(rank, size, addr)
    shape = (2, 3) if rank == 0 else (3, 2)
    out: dict = {}
    try:
        hvd.allreduce(tf.ones(shape), op=hvd.Adasum)
        out["shape"] = "no error"
    except tf.errors.InvalidArgumentError as exc:
        out["shape"] = str(exc)
    out["sum_after"] = hvd.allreduce(tf.ones([2]), op=hvd.Sum).numpy()
    hvd.shutdown()
    return out
