"""Training equivalence under Keras 3: pytfcomm vs TF's ReductionToOneDevice vs one device."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow")
from tf_setup import devices, digits, tf_with_devices

tf = tf_with_devices()
import keras  # noqa: E402

import pytfcomm  # noqa: E402
import pytfcomm.tf as ptf  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

DEVS = devices()
GLOBAL_BATCH, STEPS = 64, 5
X, Y = digits(GLOBAL_BATCH * STEPS)
OPS = {
    "ring": pytfcomm.RingAllReduce,
    "hierarchical": pytfcomm.HierarchicalAllReduce,
    "tf-one-device": tf.distribute.ReductionToOneDevice,
}


def make_model():
    keras.utils.set_random_seed(1)
    return keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)]
    )


INITIAL = [w.numpy() for w in make_model().weights]
LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


def single_device_weights():
    model = make_model()
    model.set_weights(INITIAL)
    opt = keras.optimizers.SGD(0.2)
    for k in range(STEPS):
        batch = slice(k * GLOBAL_BATCH, (k + 1) * GLOBAL_BATCH)
        xb, yb = X[batch], Y[batch]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(LOSS(yb, model(xb, training=True)))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    return [w.numpy() for w in model.weights]


def custom_loop_replicas(ops):
    """Per-replica copies of every weight after STEPS steps of strategy.run + apply_gradients."""
    strategy = tf.distribute.MirroredStrategy(DEVS, cross_device_ops=ops)
    with strategy.scope():
        model = make_model()
        model.set_weights(INITIAL)
        opt = keras.optimizers.SGD(0.2)
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).batch(GLOBAL_BATCH)
    dist = strategy.experimental_distribute_dataset(ds)

    def replica_step(xb, yb):
        with tf.GradientTape() as tape:
            per_example = LOSS(yb, model(xb, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))

    @tf.function
    def step(xb, yb):
        strategy.run(replica_step, (xb, yb))

    for xb, yb in dist:
        step(xb, yb)
    return [[v.numpy() for v in w.value.values] for w in model.weights]


def test_custom_loop_equivalence_and_bitwise_replicas():
    single = single_device_weights()
    results = {}
    for name, make in OPS.items():
        before = ptf.counters()["allreduce_ops"]
        results[name] = custom_loop_replicas(make())
        ran = ptf.counters()["allreduce_ops"] - before
        assert (ran >= STEPS) if name != "tf-one-device" else ran == 0, (name, ran)
        for replicas in results[name]:
            for r in replicas[1:]:
                assert np.array_equal(r.view(np.uint8), replicas[0].view(np.uint8)), name
    for name, weights in results.items():
        for w, s in zip(weights, single, strict=True):
            np.testing.assert_allclose(w[0], s, rtol=1e-5, atol=1e-6, err_msg=name)
        for w, ref in zip(weights, results["tf-one-device"], strict=True):
            np.testing.assert_allclose(w[0], ref[0], rtol=1e-6, atol=1e-7, err_msg=name)


def test_keras3_fit_equivalence():
    final = {}
    for name in ("ring", "tf-one-device"):
        strategy = tf.distribute.MirroredStrategy(DEVS, cross_device_ops=OPS[name]())
        with strategy.scope():
            model = make_model()
            model.set_weights(INITIAL)
            model.compile(
                keras.optimizers.SGD(0.2),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            )
        before = ptf.counters()["allreduce_ops"]
        model.fit(X, Y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
        ran = ptf.counters()["allreduce_ops"] - before
        assert (ran >= STEPS) if name == "ring" else ran == 0
        final[name] = [w.numpy() for w in model.weights]
        for w in model.weights:
            vals = [v.numpy() for v in w.value.values]
            assert all(np.array_equal(v, vals[0]) for v in vals)
    for a, b in zip(final["ring"], final["tf-one-device"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_graph_contains_pytfcomm_ops():
    strategy = tf.distribute.MirroredStrategy(DEVS, cross_device_ops=pytfcomm.RingAllReduce())
    with strategy.scope():
        v = tf.Variable(tf.zeros([3]))
        opt = keras.optimizers.SGD(0.1)

    @tf.function
    def step():
        def fn():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(v * 2.0)
            opt.apply_gradients([(tape.gradient(loss, v), v)])

        strategy.run(fn)

    graph = step.get_concrete_function().graph
    types = {op.type for op in graph.get_operations()}
    for f in graph._functions.values():  # strategy.run may nest functions
        types |= {n.op for n in f.cached_definition.node_def}
    assert "PytfcommAllReduce" in types
