"""RingAllReduce / HierarchicalAllReduce as tf.distribute.CrossDeviceOps."""

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
SUM, MEAN = tf.distribute.ReduceOp.SUM, tf.distribute.ReduceOp.MEAN
IMPLS = [pytfcomm.RingAllReduce, pytfcomm.HierarchicalAllReduce]


def per_replica(make):
    vals = []
    for i, d in enumerate(DEVS):
        with tf.device(d):
            vals.append(make(i))
    return _pr(vals)


def _pr(vals):
    from tensorflow.python.distribute import values as value_lib

    return value_lib.PerReplica(tuple(vals))


def slices(i):
    return tf.IndexedSlices(
        tf.fill([2, 3], float(i + 1)), tf.constant([i, 0], tf.int64), tf.constant([5, 3], tf.int64)
    )


def dense(v):
    return tf.convert_to_tensor(v).numpy()


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("graph", [False, True])
def test_batch_mixed_dense_and_sparse(impl, graph):
    ops = impl(fusion_threshold_bytes=1024)
    a = per_replica(lambda i: tf.fill([3, 4], float(i)))
    s = per_replica(slices)
    b = per_replica(lambda i: tf.fill([1000], 2.0 * i))

    def run():  # per-device components (a tf.function returns plain structures)
        return [list(o.values) for o in ops.batch_reduce(MEAN, [(a, a), (s, s), (b, b)])]

    before = ptf.counters()
    out = tf.function(run)() if graph else run()
    after = ptf.counters()
    assert after["allreduce_ops"] - before["allreduce_ops"] == 1  # one op for the dense batch
    assert after["allgather_ops"] - before["allgather_ops"] == 2  # values and indices
    want_sparse = sum(dense(slices(i)) for i in range(NUM_DEVICES)) / NUM_DEVICES
    for k, d in enumerate(DEVS):
        assert graph or out[0][k].device == d  # tf.function outputs land on CPU:0
        np.testing.assert_allclose(out[0][k].numpy(), np.full([3, 4], 1.5))
        np.testing.assert_allclose(out[2][k].numpy(), np.full([1000], 3.0))
        assert isinstance(out[1][k], tf.IndexedSlices)
        np.testing.assert_allclose(dense(out[1][k]), want_sparse)
        assert np.array_equal(out[2][k].numpy(), out[2][0].numpy())


def test_sparse_as_dense():
    ops = pytfcomm.RingAllReduce(sparse_as_dense=True)
    s = per_replica(slices)
    out = ops.reduce(SUM, s, s)
    want = sum(dense(slices(i)) for i in range(NUM_DEVICES))
    assert isinstance(out.values[0], tf.Tensor)
    np.testing.assert_allclose(out.values[3].numpy(), want)


@pytest.mark.parametrize("dtype", [tf.int32, tf.int64, tf.bool])
def test_integer_and_bool(dtype):
    v = per_replica(lambda i: tf.cast(tf.constant([i, 1, 0]), dtype))
    out = pytfcomm.RingAllReduce().batch_reduce(SUM, [(v, v)])[0]
    want = [True, True, False] if dtype == tf.bool else [6, 4, 0]
    assert out.values[0].dtype == dtype
    np.testing.assert_array_equal(out.values[2].numpy(), want)


def test_options_bytes_per_pack_and_timeout():
    ops = pytfcomm.RingAllReduce(fusion_threshold_bytes=1 << 20)
    vals = [per_replica(lambda i, k=k: tf.fill([64], float(i + k))) for k in range(8)]
    pairs = [(v, v) for v in vals]
    before = ptf.counters()["fused_packs"]
    ops.batch_reduce(SUM, pairs)
    mid = ptf.counters()["fused_packs"]
    opts = tf.distribute.experimental.CommunicationOptions(bytes_per_pack=512, timeout_seconds=30)
    out = ops.batch_reduce(SUM, pairs, options=opts)
    after = ptf.counters()["fused_packs"]
    assert (mid - before, after - mid) == (1, 4)  # 8 x 256 B: all fused, then 2 per pack
    np.testing.assert_allclose(out[7].values[1].numpy(), np.full([64], 6.0 + 4 * 7))


def test_broadcast_gather_and_other_destinations():
    ops = pytfcomm.HierarchicalAllReduce()
    with tf.device(DEVS[1]):
        t = tf.constant([[1, 2], [3, 4]], tf.float32)
    m = ops.broadcast(t, DEVS[0])
    m = ops.broadcast(t, per_replica(lambda i: tf.zeros([1])))
    assert [v.device for v in m.values] == DEVS
    v = per_replica(lambda i: tf.fill([2, 3], float(i)))
    g = ops._gather(v, v, axis=1)
    want = np.concatenate([np.full([2, 3], float(i)) for i in range(NUM_DEVICES)], axis=1)
    np.testing.assert_array_equal(g.values[2].numpy(), want)
    one = ops.reduce(SUM, v, DEVS[2])  # a destination other than the sources
    np.testing.assert_array_equal(dense(one), np.full([2, 3], 6.0))


def test_under_mirrored_strategy_all_paths():
    strategy = tf.distribute.MirroredStrategy(DEVS, cross_device_ops=pytfcomm.RingAllReduce())

    @tf.function
    def step():
        def replica_fn():
            ctx = tf.distribute.get_replica_context()
            x = tf.cast(ctx.replica_id_in_sync_group, tf.float32) + tf.ones([4])
            return ctx.all_reduce(SUM, x)

        return strategy.run(replica_fn)

    before = ptf.counters()["allreduce_ops"]
    out = step()
    assert ptf.counters()["allreduce_ops"] > before
    for v in out.values:
        np.testing.assert_array_equal(v.numpy(), np.full([4], 10.0))


def test_bad_use():
    with pytest.raises(pytfcomm.InvalidArgumentError, match="fusion_threshold_bytes"):
        pytfcomm.RingAllReduce(fusion_threshold_bytes=-1)
    with pytest.raises(pytfcomm.InvalidArgumentError, match="PerReplica"):
        pytfcomm.RingAllReduce().batch_reduce_implementation(SUM, [([1.0], DEVS[0])], None)
    v = per_replica(lambda i: tf.constant(["a"]))
    with pytest.raises(pytfcomm.InvalidArgumentError, match="dtype string"):
        pytfcomm.RingAllReduce().batch_reduce(SUM, [(v, v)])
    with pytest.raises(pytfcomm.InvalidArgumentError, match=r"SUM or ReduceOp\.MEAN"):
        pytfcomm.RingAllReduce().batch_reduce("max", [(per_replica(lambda i: tf.ones([1])),) * 2])
    mismatched = per_replica(lambda i: tf.ones([i + 1]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="same shapes"):
        pytfcomm.RingAllReduce().batch_reduce(SUM, [(mismatched, mismatched)])
