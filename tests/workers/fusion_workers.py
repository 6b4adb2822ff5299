"""Rank functions of the tensor-fusion tests (tests/core/test_core_fusion.py)."""

from __future__ import annotations

import numpy as np
import reference as ref

import pytfcomm

# (dtype, count) in list order: empty, single, odd and large tensors, dtypes
# interleaved so that one dtype's fusion buffer stays open across the others.
MIXED = [
    ("float32", 0),
    ("float32", 1),
    ("int32", 3),
    ("float32", 1001),
    ("float16", 7),
    ("float64", 5000),
    ("int8", 33),
    ("float32", 0),
    ("bfloat16", 255),
    ("int64", 17),
    ("uint8", 4097),
    ("bool", 9),
    ("float32", 70_001),
    ("int32", 2),
    ("float32", 3),
    ("float64", 1),
]


def _inputs(op: str, rank: int) -> list[np.ndarray]:
    # seed = list index: every tensor holds different values, so a result that
    # lands in the wrong output (or mixes two tensors) fails the comparison.
    return [
        ref.make_input(dt, op, n, rank, seed=i)
        for i, (dt, n) in enumerate(MIXED)
        if ref.valid(dt, op)
    ]


def _expected(op: str, size: int) -> list[np.ndarray]:
    return [
        ref.expected(dt, op, n, size, seed=i)
        for i, (dt, n) in enumerate(MIXED)
        if ref.valid(dt, op)
    ]


def many_matrix(
    rank: int, size: int, addr: str, fusion_bytes: list[int | None], in_place: bool
) -> dict:
    """Every op x threshold, mixed dtypes/sizes, against NumPy; digests for cross-rank equality."""
    failures, digests = [], {}
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        for fb in fusion_bytes:
            for op in ref.OPS:
                xs = _inputs(op, rank)
                before = [x.copy() for x in xs]
                if in_place:
                    ys = comm.allreduce_many(xs, op, out=xs, fusion_bytes=fb)
                    assert all(y is x for x, y in zip(xs, ys, strict=True))
                else:
                    ys = comm.allreduce_many(xs, op, fusion_bytes=fb)
                    for i, (x, b) in enumerate(zip(xs, before, strict=True)):
                        assert np.array_equal(x.view(np.uint8), b.view(np.uint8)), f"input {i}"
                for i, (y, want) in enumerate(zip(ys, _expected(op, size), strict=True)):
                    problem = ref.compare(y, want, ref.tolerance(str(want.dtype), op, size))
                    key = f"{fb}/{op}/{i}"
                    if problem:
                        failures.append(f"{key}: {problem}")
                    digests[key] = ref.digest(y)
    return {"failures": failures, "digests": digests}


def ordering(rank: int, size: int, addr: str, fusion_bytes: int) -> list[float]:
    """Tensor i holds the constant i + 1 on every rank; returns each result's value / size."""
    n = 40
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        xs = [np.full(5 + 37 * i, i + 1, np.float32) for i in range(n)]
        ys = comm.allreduce_many(xs, "sum", fusion_bytes=fusion_bytes)
        values = []
        for y in ys:
            assert np.all(y == y[0]), "a tensor's result mixes values from different tensors"
            values.append(float(y[0]) / size)
        return values


def mismatched_lists(rank: int, size: int, addr: str, kind: str) -> dict:
    """Rank 1's list differs from the others'; returns the error each rank saw."""
    lists = {
        # same total bytes and dtype, so only the list digest can tell them apart
        "swapped": ([4, 8], [8, 4]),
        "longer": ([16, 16], [16, 16, 16]),
        "dtype": ([np.float32, np.float32], [np.float32, np.int32]),
    }
    mine = lists[kind][1 if rank == 1 else 0]
    if kind == "dtype":
        xs = [np.ones(16, dt) for dt in mine]
    else:
        xs = [np.ones(n, np.float32) for n in mine]
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        try:
            comm.allreduce_many(xs)
        except pytfcomm.CommError as exc:
            after = float(comm.allreduce(np.ones(4, np.float32))[0])  # still usable
            return {"type": type(exc).__name__, "message": str(exc), "after": after}
    return {"type": None}


def async_many(rank: int, size: int, addr: str, rounds: int) -> dict:
    """Async submissions (several rounds, waits in reverse order) against NumPy."""
    failures, digests = [], {}
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        for r in range(rounds):
            op = ref.OPS[r % len(ref.OPS)]
            xs = _inputs(op, rank)
            hs = [comm.allreduce_async(x, op) for x in xs]
            ys = [h.wait(timeout=60) for h in reversed(hs)][::-1]
            assert all(h.done() for h in hs)
            for i, (y, want) in enumerate(zip(ys, _expected(op, size), strict=True)):
                problem = ref.compare(y, want, ref.tolerance(str(want.dtype), op, size))
                if problem:
                    failures.append(f"{r}/{op}/{i}: {problem}")
                digests[f"{r}/{i}"] = ref.digest(y)
    return {"failures": failures, "digests": digests}


def async_mismatch(rank: int, size: int, addr: str) -> dict:
    """Rank 1 submits its two tensors in the other order: every rank's wait raises."""
    counts = [8, 4] if rank == 1 else [4, 8]
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        hs = [comm.allreduce_async(np.ones(n, np.float32)) for n in counts]
        errors = []
        for h in hs:
            try:
                h.wait(timeout=60)
                errors.append(None)
            except pytfcomm.CommError as exc:
                errors.append(type(exc).__name__)
        after = float(comm.allreduce_async(np.ones(4, np.float32)).wait(timeout=60)[0])
        return {"errors": errors, "after": after}
