"""pytfcomm.horovod.tensorflow in 2 and 3 processes, eager and in tf.function: every
collective against NumPy, gradients against Horovod 0.28.1's conventions (its
test/parallel/test_tensorflow.py)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow")


def test_basics_two_ranks(ranks):
    out = ranks(2, "horovod_workers:basics", timeout=120)
    for r, o in enumerate(out):
        assert o["before"] is False and o["after"] is False
        assert o["uninit"] == "Horovod has not been initialized; use hvd.init()."
        assert (o["size"], o["rank"], o["local_size"], o["local_rank"]) == (2, r, 2, r)
        assert (o["cross_size"], o["cross_rank"], o["homogeneous"]) == (1, 0, True)
        assert o["mpi_threads"] is False and o["built"] == [False, False, False, False]
        assert o["ops"] == [r, 2, r]
        assert (o["ps_size"], o["ps_rank"]) == (2, r)
        assert o["timeline"] == ["allreduce"]  # started and stopped at run time
        assert "duplicate process set" in o["process_set"]
        assert o["adasum"] == [1.0, 1.0]  # Adasum of equal vectors: the vector
        assert o["objects"] == [0, 1]
        assert o["bcast_obj"] == {"from": 1, "list": [1, 1, 1]}
        assert o["bcast_fn"] == ("a", 0)


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("n", [2, 3])
def test_collectives_match_numpy(ranks, n, mode):
    assert ranks(n, "horovod_workers:collectives", mode, timeout=240) == ["ok"] * n


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("n", [2, 3])
def test_gradients_follow_horovod(ranks, n, mode):
    out = ranks(n, "horovod_workers:gradients", mode, timeout=240)
    mean_rank = (n - 1) / 2
    for r, o in enumerate(out):
        ones = np.ones((4, 2))
        np.testing.assert_allclose(o["allreduce_sum"], ones * n)  # Sum of ones: size
        np.testing.assert_allclose(o["allreduce_avg"], ones)
        np.testing.assert_allclose(o["broadcast"], ones * (1 if r == 1 else 0))
        rows = 4 // n + (1 if r < 4 % n else 0)
        np.testing.assert_allclose(o["reducescatter_sum"], ones * n)
        np.testing.assert_allclose(o["reducescatter_avg"], ones)
        assert rows >= 1
        np.testing.assert_allclose(o["allgather"], np.full((r + 1, 2), float(r)))
        np.testing.assert_allclose(o["allreduce_sum_dy"], np.full((4, 2), n * mean_rank))
        # rank r sent row j (value j + 10r) to rank j, whose incoming gradient for it is
        # 100*r + j: r's gradient for row j is 100*r + j.
        np.testing.assert_allclose(o["alltoall"], np.arange(n)[:, None] + 100 * r)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_tape_and_optimizer_options(ranks, mode):
    out = ranks(2, "horovod_workers:tape_and_optimizer", mode, timeout=240)
    for o in out:
        assert all(o[k] for k in ("avg", "sum", "predivide", "fp16", "bf16"))
        assert o["after_one"] == [0.0]  # accumulated only
        # (0 + 2) / 2 on rank 0, (1 + 3) / 2 on rank 1, averaged: 1.5
        assert o["after_two"] == [-1.5]


def test_init_shares_a_communicator_the_script_made(ranks):
    for o in ranks(2, "horovod_workers:shares_pytfcomm_communicator", timeout=120):
        assert o == {"same": True, "total": 3.0, "open_after": True, "numpy_after": 2.0}


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_sync_batch_norm_uses_every_ranks_batch(ranks, mode):
    assert ranks(3, "horovod_workers:sync_batch_norm", mode, timeout=180) == [{"ok": True}] * 3


@pytest.mark.parametrize("mode", ["eager", "function", "graph"])
def test_sync_batch_norm_under_tf_keras(ranks, mode):
    # tf-keras' BatchNormalization (TF_USE_LEGACY_KERAS=1): Horovod's tests read its
    # moving statistics in a TF1 session, which a Keras 3 layer's variables cannot be.
    out = ranks(
        2, "horovod_workers:sync_batch_norm", mode, timeout=180, env={"TF_USE_LEGACY_KERAS": "1"}
    )
    assert out == [{"ok": True, "tf_keras": True}] * 2


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_dtypes_the_core_lacks_move_bit_for_bit(ranks, mode):
    for r, o in enumerate(ranks(2, "horovod_dtype_workers:dtypes", mode, timeout=240)):
        assert o and all(o.values()), (r, {k: v for k, v in o.items() if not v})
