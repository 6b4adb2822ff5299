"""pytfcomm.average_gradients against the classic cifar10_multi_gpu_train function."""

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


def classic_average_gradients(tower_grads):
    """The original (concat + reduce_mean on one device), None grads skipped."""
    average_grads = []
    for grad_and_vars in zip(*tower_grads, strict=True):
        if grad_and_vars[0][0] is None:
            average_grads.append((None, grad_and_vars[0][1]))
            continue
        grads = [tf.expand_dims(tf.convert_to_tensor(g), 0) for g, _ in grad_and_vars]
        grad = tf.reduce_mean(tf.concat(axis=0, values=grads), 0)
        average_grads.append((grad, grad_and_vars[0][1]))
    return average_grads


def tower_grads():
    variables = [tf.Variable(tf.zeros([5, 3]), name=f"v{k}") for k in range(4)]
    towers = []
    for i, d in enumerate(DEVS):
        with tf.device(d):
            rng = np.random.default_rng(i)
            dense = tf.constant(rng.standard_normal((5, 3)).astype(np.float32))
            sparse = tf.IndexedSlices(
                tf.constant(rng.standard_normal((2, 3)).astype(np.float32)),
                tf.constant([i % 5, 4]),
                tf.constant([5, 3]),
            )
            big = tf.constant(rng.standard_normal((5, 3)).astype(np.float32)) * 10.0
            towers.append(
                [
                    (dense, variables[0]),
                    (None, variables[1]),
                    (sparse, variables[2]),
                    (big, variables[3]),
                ]
            )
    return towers


@pytest.mark.parametrize("graph", [False, True])
def test_matches_classic(graph):
    towers = tower_grads()
    fn = tf.function(ptf.average_gradients) if graph else ptf.average_gradients
    before = ptf.counters()["allreduce_ops"]
    got = fn(towers)
    assert ptf.counters()["allreduce_ops"] - before == 1  # one op for all dense grads
    want = classic_average_gradients(towers)
    assert len(got) == len(want) == 4
    for (g, v), (w, wv) in zip(got, want, strict=True):
        assert graph or v is wv  # a tf.function returns variables as values
        if w is None:
            assert g is None
            continue
        assert tuple(tf.convert_to_tensor(g).shape) == tuple(w.shape)
        np.testing.assert_allclose(tf.convert_to_tensor(g).numpy(), w.numpy(), rtol=1e-6, atol=1e-6)
    assert isinstance(got[2][0], tf.IndexedSlices)
    assert pytfcomm.average_gradients is ptf.average_gradients


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("towers", [3, NUM_DEVICES])
def test_dense_mean_is_bitwise_the_classic_one(dtype, towers):
    """Not merely close: the classic function's bits (float16: the sum rounded at every
    step, then divided in float16), so switching a tower trainer changes no result."""
    var = tf.Variable(tf.zeros([4096], dtype))
    grads = []
    for i, d in enumerate(DEVS[:towers]):
        with tf.device(d):
            g = np.random.default_rng(10 + i).standard_normal(4096).astype(dtype)
            grads.append([(tf.constant(g), var)])
    got = tf.convert_to_tensor(ptf.average_gradients(grads)[0][0]).numpy()
    want = classic_average_gradients(grads)[0][0].numpy()
    assert got.dtype == want.dtype == dtype
    assert np.array_equal(got, want), f"{np.mean(got != want):.1%} of elements differ"


def test_bad_use():
    towers = tower_grads()
    with pytest.raises(pytfcomm.InvalidArgumentError, match="same variables"):
        ptf.average_gradients([towers[0], towers[1][:2]])
    towers[1][0] = (None, towers[1][0][1])
    with pytest.raises(pytfcomm.InvalidArgumentError, match="None in others"):
        ptf.average_gradients(towers)
    with pytest.raises(pytfcomm.InvalidArgumentError, match="empty"):
        ptf.average_gradients([])
    with pytest.raises(pytfcomm.InvalidArgumentError, match="not a \\(grad, var\\) pair"):
        ptf.average_gradients([[tf.ones([1])]] * NUM_DEVICES)
