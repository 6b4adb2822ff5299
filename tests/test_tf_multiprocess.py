"""TF tests that need their own processes: cross-worker ops, tf-keras with one inter-op thread."""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow")


def test_two_processes_two_devices_each(ranks):
    out = ranks(2, "tf_workers:cross_worker", timeout=240)
    for r in out:
        assert r["counters"]["cross_worker_ops"] >= 6


def test_tf_keras_fit_with_one_inter_op_thread(ranks):
    pytest.importorskip("tf_keras")
    (out,) = ranks(1, "tf_workers:legacy_keras_fit", timeout=240,
                   env={"TF_USE_LEGACY_KERAS": "1"})
    assert out["keras_module"].startswith("tf_keras")
    assert out["counters"]["allreduce_ops"] > 0
    assert out["diff"] < 1e-5
