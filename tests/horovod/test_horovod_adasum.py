"""``op=hvd.Adasum`` in pytfcomm.horovod.tensorflow against Horovod 0.28.1's semantics.

The reference below is written from Horovod's kernel (horovod/common/ops/adasum/adasum.h)
and its test (test/parallel/test_adasum_tensorflow.py): vectors a, b combine into
``(1 - a.b/(2|a|^2)) a + (1 - a.b/(2|b|^2)) b`` (a coefficient is 1 when its squared norm
is below sqrt(DBL_MIN)), in float64, each level stored in the tensor's dtype; ranks pair
(0, 1), (2, 3), ... then the results pairwise again; every tensor is its own vector;
only power-of-two rank counts run (else NotImplementedError).
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from horovod_adasum_workers import SHAPES, batch, data

SQRT_DBL_MIN = math.sqrt(sys.float_info.min)
TOL = {np.float16: 2e-3, np.float32: 1e-5, np.float64: 1e-12}


def adasum_pair(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    dot = float(np.dot(a.ravel(), b.ravel()))
    anormsq, bnormsq = float(np.dot(a.ravel(), a.ravel())), float(np.dot(b.ravel(), b.ravel()))
    acoeff = 1.0 - dot / anormsq * 0.5 if anormsq >= SQRT_DBL_MIN else 1.0
    bcoeff = 1.0 - dot / bnormsq * 0.5 if bnormsq >= SQRT_DBL_MIN else 1.0
    return acoeff * a + bcoeff * b


def adasum_tree(vectors: list[np.ndarray], dtype: type = np.float64) -> np.ndarray:
    level = [np.asarray(v, dtype) for v in vectors]
    while len(level) > 1:
        level = [adasum_pair(level[i], level[i + 1]).astype(dtype) for i in range(0, len(level), 2)]
    return level[0]


def check_close(got: np.ndarray, want: np.ndarray, dtype: type = np.float64) -> None:
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == np.dtype(dtype), (got.shape, got.dtype)
    tol = TOL[dtype]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


def check_identical(out: list[dict], key: str) -> None:
    """Every rank got the same bits."""

    def as_list(v: object) -> list:
        return list(v) if isinstance(v, (list, tuple)) else [v]

    for o in out[1:]:
        for got, first in zip(as_list(o[key]), as_list(out[0][key]), strict=True):
            assert np.asarray(got).tobytes() == np.asarray(first).tobytes(), key


def test_reference_is_horovods_rule():
    """The reference itself: orthogonal vectors add, equal ones stay, a zero one drops out."""
    e = np.eye(4)
    np.testing.assert_allclose(adasum_tree(list(e)), np.ones(4))
    v = np.array([1.0, -2.0, 3.0])
    np.testing.assert_allclose(adasum_tree([v, v, v, v]), v)
    np.testing.assert_allclose(adasum_tree([v, 0 * v]), v)
    a, b = np.array([1.0, 0.0]), np.array([1.0, 1.0])  # a.b = 1, |a|^2 = 1, |b|^2 = 2
    np.testing.assert_allclose(adasum_tree([a, b]), 0.5 * a + 0.75 * b)


@pytest.mark.parametrize(("n", "mode"), [(2, "eager"), (2, "function"), (4, "function")])
def test_allreduce_matches_numpy_tree(ranks, n, mode):
    out = ranks(n, "horovod_adasum_workers:reductions", mode, timeout=150)
    every = range(n)
    for dt in (np.float16, np.float32, np.float64):
        want = adasum_tree([data(r, "a", dt) for r in every], dt)
        for o in out:
            check_close(o[f"random_{np.dtype(dt).name}"], want, dt)
    for o in out:
        scaled = adasum_tree([0.5 * data(r, "a") for r in every]) * 3.0
        check_close(o["scaled"], scaled)
        # orthogonal: the sum; identical: the vector itself; exactly
        np.testing.assert_array_equal(o["orthogonal"], np.ones(n, np.float32))
        np.testing.assert_array_equal(o["identical"], data(0, "a", np.float32))
        zero_on_1 = [data(r, "a", np.float32) * (0 if r == 1 else 1) for r in every]
        check_close(o["zero_on_1"], adasum_tree(zero_on_1, np.float32), np.float32)
        np.testing.assert_array_equal(o["all_zero"], np.zeros(4, np.float32))
        fp16 = adasum_tree([data(r, "a", np.float16) for r in every], np.float16)
        np.testing.assert_allclose(o["compressed"], fp16.astype(np.float32), rtol=2e-3, atol=2e-3)
        assert o["compressed"].dtype == np.float32
        for name, got in zip(["a", "b", "c", "s"], o["grouped"], strict=True):
            want = adasum_tree([data(r, name, np.float32) for r in every], np.float32)
            check_close(got, want, np.float32)
        check_close(o["grouped_mixed"][1], adasum_tree([data(r, "b") for r in every]))
        # Horovod's gradient: the Adasum of every rank's incoming gradient
        check_close(o["grad"], adasum_tree([data(r + 100, "b") for r in every]))
        assert "float16, float32 and float64" in o["int_error"]
    if n == 2:  # a zero vector on rank 1 leaves rank 0's
        np.testing.assert_array_equal(out[0]["zero_on_1"], data(0, "a", np.float32))
    # per tensor, not one vector for the fused group
    whole = adasum_tree([np.concatenate([data(r, k).ravel() for k in SHAPES]) for r in every])
    assert not np.allclose(out[0]["grouped"][0].ravel(), whole[:15], rtol=1e-3)
    for key in out[0]:
        if key != "int_error":
            check_identical(out, key)


def test_non_power_of_two_raises_on_every_rank(ranks):
    out = ranks(3, "horovod_adasum_workers:not_power_of_two", timeout=120)
    for o in out:
        for key in ("allreduce", "grouped", "function", "tape"):
            # Horovod's message (inside tf.function, after TF's "in user code:" trace)
            assert "Running Adasum with non-power of 2 ranks is not supported yet." in o[key]
            assert "3 ranks" in o[key]
        np.testing.assert_array_equal(o["sum_after"], [3.0, 6.0])


def reference_training(n: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    w, b = np.zeros((3, 1), np.float32), np.zeros((1,), np.float32)
    batches = [batch(r) for r in range(n)]
    for _ in range(steps):
        gws, gbs = [], []
        for x, y in batches:
            err = x @ w + b - y
            gws.append((2.0 / len(x)) * x.T @ err)
            gbs.append((2.0 / len(x)) * err.sum(0))
        w = w - np.float32(0.1) * adasum_tree(gws, np.float32)
        b = b - np.float32(0.1) * adasum_tree(gbs, np.float32)
    return w, b


@pytest.mark.parametrize(("n", "mode"), [(2, "eager"), (4, "function")])
def test_gradient_tape_trains_identically_on_every_rank(ranks, n, mode):
    steps = 5
    out = ranks(n, "horovod_adasum_workers:training", mode, steps, timeout=150)
    check_identical(out, "w")
    check_identical(out, "b")
    check_identical(out, "keras_w")
    w, b = reference_training(n, steps)
    for o in out:
        np.testing.assert_allclose(o["w"], w, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(o["b"], b, rtol=1e-4, atol=1e-5)
        # Adasum is not the mean: with SGD(1.0) one Keras step moves by -Adasum(g)
        g = [data(r, "b", np.float32)[:3] for r in range(n)]
        check_close(o["keras_w"], -adasum_tree(g, np.float32), np.float32)
        assert not np.allclose(o["keras_w"], -np.mean(g, 0), rtol=1e-3)
        assert "op == Adasum is not supported yet with Keras" in o["keras_refused"]
        assert "average_aggregated_gradients" in o["aggregated_refused"]
        assert "sparse_as_dense=True" in o["sparse_error"]
        # each rank's one-hot row: orthogonal, so Adasum adds them
        np.testing.assert_array_equal(o["sparse_as_dense"], np.ones((n, 2), np.float32))


def test_shape_mismatch_is_an_error_on_every_rank(ranks):
    for o in ranks(2, "horovod_adasum_workers:mismatch", timeout=120):
        assert "shapes differ between ranks" in o["shape"]
        np.testing.assert_array_equal(o["sum_after"], [2.0, 2.0])
