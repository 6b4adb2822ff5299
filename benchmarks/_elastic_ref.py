"""The data and the reference results of ``elastic_recovery``'s three training loops.

NumPy only, shared by the workers (``_elastic_worker``), which train on this data, and by
the driver (``elastic_recovery``), which checks the survivors' final values against a
single process computing the same membership schedule: ``members_per_step[s]`` is the
tuple of worker ids (the ranks the processes were started as) that ran step ``s``.

* ``numpy``: ``w -= LR * sum(g) / size``, ``g = (i + 1) * (step + 1) * arange(4)`` of
  each member ``i``, float64. Every sum is of small integers, exact in any order, so the
  survivors must equal the reference **bitwise**.
* ``hvd``: the same update in float32 through ``hvd.allreduce(op=hvd.Average)`` on a
  ``tf.Variable``; TF's float32 arithmetic may round the mean differently than NumPy:
  ``HVD_RTOL``.
* ``strategy``: a Keras ``Dense(1)`` trained by SGD with momentum on fixed global batches
  (:func:`batch`), sharded by the strategy: the result does not depend on the membership,
  and the reference is one process on every whole global batch in float64;
  ``STRATEGY_RTOL`` / ``STRATEGY_ATOL`` (float32 steps, reduction order by size).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

LR = 0.01  # numpy and hvd loops
HVD_RTOL = 1e-6
GLOBAL = 24  # strategy loop: examples per step, 8/8/8 over 3 workers, 6/6/6/6 over 4
S_LR, S_MOMENTUM = 0.05, 0.9
STRATEGY_RTOL, STRATEGY_ATOL = 1e-5, 1e-6


def grad(worker: int, step: int, dtype: type = np.float64) -> np.ndarray:
    """Worker ``worker``'s gradient at ``step`` in the numpy and hvd loops."""
    return (worker + 1) * (step + 1) * np.arange(4, dtype=dtype)


def schedule(n: int, steps: int, at: int) -> list[tuple[int, ...]]:
    """Workers 0..n-1 for ``at`` steps, then without the last one (the one killed)."""
    return [tuple(range(n))] * at + [tuple(range(n - 1))] * (steps - at)


def numpy_reference(members_per_step: Sequence[tuple[int, ...]]) -> np.ndarray:
    """``w`` of the numpy loop after one step per entry (float64, exact sums)."""
    w = np.zeros(4, np.float64)
    for step, members in enumerate(members_per_step):
        total = np.sum([grad(i, step) for i in members], axis=0)
        w = w - LR * (total / len(members))
    return w


def hvd_reference(members_per_step: Sequence[tuple[int, ...]]) -> np.ndarray:
    """``w`` of the hvd loop after one step per entry, in float32 as TF computes it."""
    w = np.zeros(4, np.float32)
    for step, members in enumerate(members_per_step):
        total = np.sum([grad(i, step, np.float32) for i in members], axis=0)
        w = w - np.float32(LR) * (total / np.float32(len(members)))
    return w


def batch(step: int) -> tuple[np.ndarray, np.ndarray]:
    """The strategy loop's global batch of ``step``: fixed float32 values."""
    rng = np.random.default_rng(1000 + step)
    x = rng.normal(size=(GLOBAL, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.25).astype(np.float32)
    return x, y


def strategy_reference(steps: int) -> list[np.ndarray]:
    """Kernel, bias and their momenta after ``steps`` steps of one process on every whole
    global batch (float64): what the strategy loop's survivors must hold."""
    w, b = np.zeros((4, 1)), np.zeros(1)
    mw, mb = np.zeros_like(w), np.zeros_like(b)
    for step in range(steps):
        x, y = (a.astype(np.float64) for a in batch(step))
        err = x @ w + b - y
        gw, gb = 2 * x.T @ err / len(x), 2 * err.sum(axis=0) / len(x)
        mw, mb = S_MOMENTUM * mw - S_LR * gw, S_MOMENTUM * mb - S_LR * gb  # Keras 3 SGD
        w, b = w + mw, b + mb
    return [w.ravel(), b.ravel(), mw.ravel(), mb.ravel()]
