"""Deterministic per-rank inputs and NumPy reference results for the core tests.

Float inputs are small integers (or powers of two for prod) so that any
summation order gives the exact answer: results can be compared exactly,
except where a mean divides by a size that is not a power of two.
"""

from __future__ import annotations

import hashlib

import ml_dtypes
import numpy as np

DTYPES = ["float16", "bfloat16", "float32", "float64", "int8", "uint8", "int32", "int64", "bool"]
OPS = ["sum", "mean", "min", "max", "prod"]
FLOATS = {"float16", "bfloat16", "float32", "float64"}


def np_dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def valid(dtype: str, op: str) -> bool:
    return not (dtype == "bool" and op == "mean")


def make_input(dtype: str, op: str, count: int, rank: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng([seed, rank, DTYPES.index(dtype), OPS.index(op), count])
    dt = np_dtype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, count).astype(bool)
    if dtype in FLOATS:
        if op == "prod":
            return rng.choice(np.array([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0]), count).astype(dt)
        return rng.integers(-8, 9, count).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, count, dtype=dt, endpoint=True)


def expected(dtype: str, op: str, count: int, size: int, seed: int = 0) -> np.ndarray:
    dt = np_dtype(dtype)
    stack = np.stack([make_input(dtype, op, count, r, seed) for r in range(size)])
    if dtype == "bool":
        return (stack.any(axis=0) if op in ("sum", "max") else stack.all(axis=0)).astype(bool)
    if op == "min":
        return stack.min(axis=0)
    if op == "max":
        return stack.max(axis=0)
    if dtype in FLOATS:
        wide = stack.astype(np.float64)
        if op == "prod":
            return np.prod(wide, axis=0).astype(dt)
        s = np.sum(wide, axis=0)
        return (s / size if op == "mean" else s).astype(dt)
    if op == "prod":
        return np.prod(stack, axis=0, dtype=dt)
    s = np.sum(stack, axis=0, dtype=dt)  # wraps like the core
    if op == "sum":
        return s
    q = s // size  # floor; the core truncates toward zero
    q = q + ((s % size != 0) & (s < 0)).astype(dt)
    return q.astype(dt)


def tolerance(dtype: str, op: str, size: int) -> float:
    """Relative tolerance: 0 where the answer is exact whatever the order."""
    if op != "mean" or dtype not in FLOATS or (size & (size - 1)) == 0:
        return 0.0
    return {"float16": 1e-3, "bfloat16": 8e-3, "float32": 1e-6, "float64": 1e-15}[dtype]


def compare(got: np.ndarray, want: np.ndarray, rtol: float) -> str | None:
    """None when equal (within rtol), else a short description of the difference."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"shape/dtype {got.shape}/{got.dtype} != {want.shape}/{want.dtype}"
    if rtol == 0:
        bad = np.flatnonzero((got != want) & ~(_isnan(got) & _isnan(want)))
    else:
        g, w = got.astype(np.float64), want.astype(np.float64)
        bad = np.flatnonzero(np.abs(g - w) > rtol * np.maximum(np.abs(w), 1.0))
    if bad.size:
        i = int(bad[0])
        return f"{bad.size} wrong elements, first at {i}: got {got[i]!r}, want {want[i]!r}"
    return None


def _isnan(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f" or a.dtype == np.dtype(ml_dtypes.bfloat16):
        return np.isnan(a.astype(np.float64))
    return np.zeros(a.shape, bool)


def digest(a: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(a).view(np.uint8).tobytes()).hexdigest()


def error_text(fn) -> str:
    """``"ClassName: message"`` of what ``fn()`` raised, or ``"no error"``."""
    try:
        fn()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no error"
