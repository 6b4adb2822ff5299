"""pytfcomm's CrossDeviceOps under XLA (jit_compile=True).

pytfcomm's ops have no XLA kernel. With one replica in one process no collective is
needed: ``MirroredStrategy([one device], cross_device_ops=pytfcomm.RingAllReduce())``
emits none (TF's own CrossDeviceOps do the same) and runs under XLA exactly as TF's
default strategy does; it used to emit ``PytfcommBroadcast`` and fail ("No registered
'PytfcommBroadcast' OpKernel for XLA_CPU_JIT"). Where a collective is needed (several
replicas, or several processes), tracing the op inside an XLA function is refused with
a :class:`pytfcomm.InvalidArgumentError` that says what to do, instead of TF's raw
missing-kernel error at the first step.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow")
from tf_setup import devices, tf_with_devices

tf = tf_with_devices()
import keras  # noqa: E402

import pytfcomm  # noqa: E402
import pytfcomm.tf as ptf  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.timeout(300)]

DEVS = devices()
REFUSED = r"cannot run inside a function compiled with XLA.*jit_compile=False"


def _data() -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)
    return x, x.sum(axis=1, keepdims=True) - 0.5 * x[:, :1]


def _model() -> keras.Model:
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])


def _strategies() -> dict[str, tf.distribute.Strategy]:
    return {
        "tf": tf.distribute.MirroredStrategy(DEVS[:1]),
        "pytfcomm": tf.distribute.MirroredStrategy(
            DEVS[:1], cross_device_ops=pytfcomm.RingAllReduce()
        ),
    }


def _ops_built() -> int:
    c = ptf.counters()
    return sum(v for k, v in c.items() if k.endswith("_ops"))


def _custom_loop(strategy: tf.distribute.Strategy) -> tuple[list[float], list[np.ndarray]]:
    x, y = _data()
    with strategy.scope():
        model = _model()
        opt = keras.optimizers.SGD(0.05)
        opt.build(model.trainable_variables)

    @tf.function(jit_compile=True)
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(xb) - yb) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        ctx = tf.distribute.get_replica_context()
        grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        opt.apply(grads, model.trainable_variables)
        return ctx.all_reduce(tf.distribute.ReduceOp.MEAN, loss)

    losses = []
    for i in range(0, 64, 16):
        out = strategy.run(step, args=(tf.constant(x[i : i + 16]), tf.constant(y[i : i + 16])))
        losses.append(float(strategy.experimental_local_results(out)[0]))
    return losses, [np.array(w) for w in model.get_weights()]


def _fit(strategy: tf.distribute.Strategy) -> tuple[list[float], list[np.ndarray]]:
    x, y = _data()
    with strategy.scope():
        model = _model()
        model.compile(keras.optimizers.SGD(0.05), "mse", jit_compile=True)
    history = model.fit(x, y, epochs=3, batch_size=16, shuffle=False, verbose=0)
    model.evaluate(x, y, batch_size=16, verbose=0)
    return history.history["loss"], [np.array(w) for w in model.get_weights()]


@pytest.mark.parametrize("run", [_custom_loop, _fit], ids=["strategy_run", "keras_fit"])
def test_one_device_runs_under_xla_like_tfs_strategy(run) -> None:
    results = {}
    for name, strategy in _strategies().items():
        before = _ops_built()
        results[name] = run(strategy)
        if name == "pytfcomm":  # one replica, one process: no pytfcomm op at all
            assert _ops_built() == before
    (tf_loss, tf_w), (loss, w) = results["tf"], results["pytfcomm"]
    assert loss == tf_loss and len(loss) >= 3
    assert len(w) == len(tf_w) == 4
    for a, b in zip(w, tf_w, strict=True):
        np.testing.assert_array_equal(a, b)


def test_several_devices_refused_with_what_to_do() -> None:
    a = [tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0])]
    with pytest.raises(pytfcomm.InvalidArgumentError, match="PytfcommAllReduce " + REFUSED):
        # (autograph=False: autograph would wrap the error in its StagingError, whose
        # message starts with this one)
        tf.function(lambda xs: ptf.allreduce(xs), jit_compile=True, autograph=False)(a)
    # The same collective outside XLA works.
    np.testing.assert_array_equal(tf.function(ptf.allreduce)(a)[1].numpy(), [4.0, 6.0])

    strategy = tf.distribute.MirroredStrategy(DEVS[:2], cross_device_ops=pytfcomm.RingAllReduce())
    x, y = _data()
    with strategy.scope():
        model = _model()
        model.compile("sgd", "mse", jit_compile=True)
    with pytest.raises(pytfcomm.InvalidArgumentError, match=REFUSED):
        model.fit(x, y, epochs=1, batch_size=16, verbose=0)


def test_several_processes_refused_with_what_to_do(ranks) -> None:
    out = ranks(2, "xla_workers:keras_fit_refused", timeout=240)
    for r in out:
        assert "PytfcommAllReduce cannot run inside a function compiled with XLA" in r["True"]
        assert "model.compile(jit_compile=False)" in r["True"]
        assert r["False"] == "ok"
