"""All-gather and all-to-all with a different size per rank (Horovod's ``allgather``
and ``alltoall``), run in separate processes by tests/core/test_varcoll.py."""

from __future__ import annotations

import numpy as np
import reference as ref

import pytfcomm

WIDTH = 3  # elements per row


def _rows_of(rank: int, scale: int) -> int:
    """Rows rank ``rank`` contributes to the all-gather: rank 1 none, the others uneven."""
    return 0 if rank == 1 else (2 * rank + 1) * scale


def _split(frm: int, to: int, scale: int) -> int:
    """Rows rank ``frm`` sends rank ``to``: some zero, the rest uneven."""
    return ((frm + 2 * to) % 3) * scale


def _input(dtype: str, rank: int, rows: int) -> np.ndarray:
    return ref.make_input(dtype, "max", rows * WIDTH, rank).reshape(rows, WIDTH)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def matrix(rank: int, size: int, addr: str, scales: list[int]) -> dict:
    """allgather (uneven, zero, equal, out=) and alltoall (splits, None) for every dtype."""
    failures, digests = [], {}
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        for dtype in ref.DTYPES:
            for scale in scales:
                y = comm.allgather(_input(dtype, rank, _rows_of(rank, scale)))
                want = np.concatenate([_input(dtype, r, _rows_of(r, scale)) for r in range(size)])
                if not _same(y, want):
                    failures.append(f"allgather uneven {dtype} {scale}")
                digests[f"agv/{dtype}/{scale}"] = ref.digest(y)
                x = _input(dtype, rank, scale)
                want = np.concatenate([_input(dtype, r, scale) for r in range(size)])
                if not _same(comm.allgather(x), want):
                    failures.append(f"allgather equal {dtype} {scale}")
                out = np.empty_like(want)
                if comm.allgather(x, out=out) is not out or not _same(out, want):
                    failures.append(f"allgather out= {dtype} {scale}")
                splits = [_split(rank, to, scale) for to in range(size)]
                x = _input(dtype, rank, sum(splits))
                got, got_splits = comm.alltoall(x, splits)
                parts, want_splits = [], []
                for frm in range(size):
                    theirs = [_split(frm, to, scale) for to in range(size)]
                    start = sum(theirs[:rank])
                    parts.append(_input(dtype, frm, sum(theirs))[start : start + theirs[rank]])
                    want_splits.append(theirs[rank])
                if not _same(got, np.concatenate(parts)) or got_splits.tolist() != want_splits:
                    failures.append(f"alltoall {dtype} {scale}: splits {got_splits.tolist()}")
                if got_splits.dtype != np.int64:
                    failures.append(f"alltoall splits dtype {got_splits.dtype}")
                x = _input(dtype, rank, size * scale)
                got, got_splits = comm.alltoall(x)
                want = np.concatenate(
                    [
                        _input(dtype, frm, size * scale)[rank * scale : (rank + 1) * scale]
                        for frm in range(size)
                    ]
                )
                if not _same(got, want) or got_splits.tolist() != [scale] * size:
                    failures.append(f"alltoall equal {dtype} {scale}")
        # Rows of no bytes still count as rows.
        y = comm.allgather(np.zeros((rank + 1, 0), np.float32))
        if y.shape != (size * (size + 1) // 2, 0):
            failures.append(f"allgather of empty rows: shape {y.shape}")
        got, got_splits = comm.alltoall(np.zeros((size, 2, 0), np.int8))
        if got.shape != (size, 2, 0) or got_splits.tolist() != [1] * size:
            failures.append(f"alltoall of empty rows: {got.shape} {got_splits.tolist()}")
    return {"failures": failures, "digests": digests}


def errors(rank: int, size: int, addr: str) -> dict:
    """Bad splits on this rank; dtype or row shapes that differ on every rank."""
    out: dict = {}
    with pytfcomm.init(rank=rank, size=size, addr=addr, timeout=30) as comm:
        x = np.zeros((4, 2), np.float32)
        for what, splits in {
            "short": [4] + [0] * (size - 2),
            "negative": [5, -1] + [0] * (size - 2),
            "sum": [1] * size,
            "not_int": [1.5] * size,
        }.items():
            try:
                comm.alltoall(x, splits)
                out[what] = "no error"
            except pytfcomm.InvalidArgumentError as e:
                out[what] = f"InvalidArgumentError: {e}"
        try:
            comm.alltoall(np.zeros((size + 1, 2), np.float32))
            out["indivisible"] = "no error"
        except pytfcomm.InvalidArgumentError as e:
            out["indivisible"] = f"InvalidArgumentError: {e}"
        cases = {
            "ag_dtype": lambda: comm.allgather(
                np.zeros((rank + 1, 3), np.float16 if rank == 0 else np.float32)
            ),
            "ag_row": lambda: comm.allgather(np.zeros((2, 3 + (rank == size - 1)), np.int32)),
            "ag_ndim": lambda: comm.allgather(np.zeros((2, 3, 1) if rank else (2, 3), np.int32)),
            "a2a_dtype": lambda: comm.alltoall(
                np.zeros((size, 2), bool if rank == 0 else np.uint8)
            ),
            "a2a_row": lambda: comm.alltoall(np.zeros((size, 2 + rank), np.int64)),
        }
        for what, call in cases.items():
            try:
                call()
                out[what] = "no error"
            except pytfcomm.MismatchError as e:
                out[what] = f"MismatchError: {e}"
        got, splits = comm.alltoall(np.full((size, 1), rank, np.int32))  # still usable
        out["after"] = (got.ravel().tolist(), splits.tolist())
    return out
