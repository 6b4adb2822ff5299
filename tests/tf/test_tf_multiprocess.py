"""TF tests that need their own processes: cross-worker ops, tf-keras with one inter-op thread."""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow")


def test_two_processes_two_devices_each(ranks):
    out = ranks(2, "tf_workers:cross_worker", timeout=240)
    for r in out:
        assert r["counters"]["cross_worker_ops"] >= 6


def test_large_outputs_reuse_cached_buffers_without_aliasing(ranks):
    out = ranks(2, "tf_workers:cached_outputs", timeout=240)
    for r in out:
        before, after = r["before"], r["after"]
        # Six held outputs each needed a buffer of their own ...
        assert before["output_cache_misses"] >= 6, before
        # ... and once released, the next steps reused them instead of mapping new memory.
        assert after["output_cache_hits"] - before["output_cache_hits"] >= 4, (before, after)
        assert after["output_cache_misses"] <= before["output_cache_misses"] + 2, (before, after)


def test_a_tensor_no_one_else_holds_is_reduced_in_place_and_others_stay_intact(ranks):
    out = ranks(2, "tf_workers:in_place_inputs", timeout=240)
    for r in out:
        # Each worker checks every result and that every input it still reads is unchanged.
        assert r["fresh_taken"] == 1, r
        assert r["held_taken"] == 0 and r["reread_taken"] == 0 and r["eager_taken"] == 0, r


def test_tf_keras_fit_with_one_inter_op_thread(ranks):
    pytest.importorskip("tf_keras")
    (out,) = ranks(1, "tf_workers:legacy_keras_fit", timeout=240, env={"TF_USE_LEGACY_KERAS": "1"})
    assert out["keras_module"].startswith("tf_keras")
    assert out["counters"]["allreduce_ops"] > 0
    assert out["diff"] < 1e-5
