"""pytfcomm's TF ops: allreduce / broadcast / allgather, gradients, fusion, errors."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow")
from tf_setup import NUM_DEVICES, devices, tf_with_devices

tf = tf_with_devices()
import pytfcomm  # noqa: E402
import pytfcomm.tf as ptf  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

DEVS = devices()
DTYPES = ["float16", "bfloat16", "float32", "float64", "int8", "uint8", "int32", "int64", "bool"]


def per_device(make):
    out = []
    for i, d in enumerate(DEVS):
        with tf.device(d):
            out.append(tf.identity(make(i)))
    return out


def np_of(t):
    return t.numpy() if t.dtype != tf.bfloat16 else tf.cast(t, tf.float32).numpy()


OPS = ["sum", "mean", "min", "max"]
CASES = [(d, o) for d in DTYPES for o in OPS if (d, o) != ("bool", "mean")]


def test_allreduce_bool_mean_is_refused():
    xs = per_device(lambda i: tf.constant([True, False]))
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="bool"):
        ptf.allreduce(xs, op="mean")


@pytest.mark.parametrize(("dtype", "op"), CASES)
def test_allreduce_dtypes_and_ops(dtype, op):
    base = np.arange(12).reshape(3, 4) % 5

    def make(i):
        return tf.cast(base + i, dtype) if dtype != "bool" else tf.constant((base + i) % 2 == 0)

    xs = per_device(make)
    ys = ptf.allreduce(xs, op=op)
    stack = np.stack([np_of(x).astype(np.float64) for x in xs])
    want = {
        "sum": stack.sum(0),
        "mean": stack.sum(0) / NUM_DEVICES,
        "min": stack.min(0),
        "max": stack.max(0),
    }[op]
    if dtype == "bool":
        want = want > 0 if op in ("sum", "max") else want
    if dtype.startswith("int") or dtype.startswith("uint"):
        want = np.trunc(want)
    got = np_of(ys[0]).astype(np.float64)
    np.testing.assert_allclose(got, want.astype(np.float64), rtol=1e-2 if "16" in dtype else 1e-6)
    for y, d in zip(ys, DEVS, strict=True):
        assert y.device == d
        assert y.dtype == xs[0].dtype and y.shape == xs[0].shape
        assert np.array_equal(y.numpy().view(np.uint8), ys[0].numpy().view(np.uint8))


def test_allreduce_in_tf_function_and_single_tensor():
    xs = per_device(lambda i: tf.random.stateless_normal([1000], seed=[i, 1]))
    f = tf.function(lambda xs: ptf.allreduce(xs, op="mean"))
    ys = f(xs)
    want = np.mean([x.numpy().astype(np.float64) for x in xs], axis=0)
    np.testing.assert_allclose(ys[2].numpy(), want, rtol=1e-5, atol=1e-6)
    # One tensor and no communicator: the process is the whole job.
    one = ptf.allreduce(xs[0], op="sum")
    np.testing.assert_array_equal(one.numpy(), xs[0].numpy())
    assert pytfcomm.allreduce is ptf.allreduce


@pytest.mark.parametrize("op,scale", [("sum", 1.0), ("mean", 1.0 / NUM_DEVICES)])
@pytest.mark.parametrize("graph", [False, True])
def test_allreduce_gradient_is_allreduce(op, scale, graph):
    xs = per_device(lambda i: tf.fill([5], float(i + 1)))

    def grads(xs):
        with tf.GradientTape() as tape:
            tape.watch(xs)
            ys = ptf.allreduce(xs, op=op)
            loss = tf.add_n([tf.reduce_sum(y) * (k + 1) for k, y in enumerate(ys)])
        return tape.gradient(loss, xs)

    gs = tf.function(grads)(xs) if graph else grads(xs)
    for g in gs:  # d/dx_j sum_i (i+1) * y_i = scale * (1+2+3+4)
        np.testing.assert_allclose(g.numpy(), np.full(5, 10.0 * scale))


def test_broadcast_and_allgather_with_gradients():
    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    outs = ptf.broadcast(x, devices=DEVS)
    assert [o.device for o in outs] == DEVS
    for o in outs:
        np.testing.assert_array_equal(o.numpy(), x.numpy())
    xs = per_device(lambda i: tf.fill([i + 1, 2], float(i)))  # dim 0 may differ locally
    with tf.GradientTape() as tape:
        tape.watch(xs)
        gathered = ptf.allgather(xs)
        loss = tf.add_n([tf.reduce_sum(g * float(k + 1)) for k, g in enumerate(gathered)])
    want = np.concatenate([x.numpy() for x in xs])
    for g in gathered:
        np.testing.assert_array_equal(g.numpy(), want)
    for gx, xi in zip(tape.gradient(loss, xs), xs, strict=True):
        np.testing.assert_allclose(gx.numpy(), np.full(xi.shape, 10.0))
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.add_n([tf.reduce_sum(o) for o in ptf.broadcast(x, devices=DEVS)])
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), np.full((2, 2), 4.0))


@pytest.mark.parametrize("threshold", [0, 256, 1 << 20])
def test_fusion_many_small_tensors(threshold):
    shapes = [(3,), (7, 5), (1,), (64, 33), (2, 2, 2), (0, 4), (100,)]
    reps = [
        [tf.fill(s, float(i + 1) * (k + 1)) for k, s in enumerate(shapes)]
        for i in range(NUM_DEVICES)
    ]
    for i, d in enumerate(DEVS):
        with tf.device(d):
            reps[i] = [tf.identity(t) for t in reps[i]]
    before = ptf.counters()
    out = ptf.allreduce_replicas(reps, "sum", fusion_threshold_bytes=threshold)
    after = ptf.counters()
    assert after["allreduce_ops"] - before["allreduce_ops"] == 1
    packs = after["fused_packs"] - before["fused_packs"]
    assert packs == {0: 6, 256: 4, 1 << 20: 1}[threshold]
    for i in range(NUM_DEVICES):
        for k, s in enumerate(shapes):
            assert tuple(out[i][k].shape) == s
            np.testing.assert_array_equal(out[i][k].numpy(), np.full(s, 10.0 * (k + 1)))


def test_mixed_dtypes_in_one_op():
    reps = per_device(lambda i: tf.constant([i], tf.int64))
    reps2 = per_device(lambda i: tf.constant([0.5 * i], tf.float64))
    out = ptf.allreduce_replicas([[a, b] for a, b in zip(reps, reps2, strict=True)], "sum")
    assert out[3][0].dtype == tf.int64 and out[3][0].numpy()[0] == 6
    assert out[1][1].numpy()[0] == 3.0


def test_bad_use_is_a_clear_error():
    with pytest.raises(pytfcomm.InvalidArgumentError, match="dtype complex64"):
        ptf.allreduce(per_device(lambda i: tf.constant([1j], tf.complex64)))
    with pytest.raises(pytfcomm.InvalidArgumentError, match="op must be one of"):
        ptf.allreduce(per_device(lambda i: tf.ones([2])), op="avg")
    with pytest.raises(tf.errors.InvalidArgumentError, match="every replica must pass the same"):
        ptf.allreduce(per_device(lambda i: tf.ones([i + 1])))
    with pytest.raises(pytfcomm.InvalidArgumentError, match="timeout"):
        ptf.allreduce(per_device(lambda i: tf.ones([2])), timeout=-1)
    with pytest.raises(pytfcomm.InvalidArgumentError, match="at least one dimension"):
        ptf.allgather(tf.constant(1.0))
    with pytest.raises(tf.errors.InvalidArgumentError, match="only dimension 0 may differ"):
        ptf.allgather(per_device(lambda i: tf.ones([2, i + 1])))


def test_version_check(monkeypatch):
    import tensorflow as tf_mod

    from pytfcomm.tf import _ops

    monkeypatch.setattr(_ops, "_build_info", lambda: ("2.0.0", "v2.0.0-x"))
    with pytest.raises(ptf.TFVersionMismatchError) as info:
        _ops.check_tf_version()
    msg = str(info.value)
    assert "2.0.0" in msg and tf_mod.__version__ in msg and "--no-build-isolation" in msg
    assert isinstance(info.value, ImportError)
    assert ptf.library_path().name == "_tf_ops.so"
