"""pytfcomm.tf.reduce_scatter and pytfcomm.tf.alltoall across processes, run by
tests/tf/test_tf_scatter.py.

Every input is a function of the rank (``data``), so each rank computes what it
must get with NumPy alone and the test compares.
"""

from __future__ import annotations

import time

import numpy as np


def data(rank: int, rows: int, width: int = 3, dtype: str = "float32") -> np.ndarray:
    """``rows`` rows of ``width``: row i of rank r holds 1000 r + width i + column."""
    return (np.arange(rows * width).reshape(rows, width) + 1000 * rank).astype(dtype)


def share(rows: int, size: int, rank: int) -> tuple[int, int]:
    """(first row, rows) of ``rank``'s part of ``rows`` split the Horovod way."""
    base, extra = divmod(rows, size)
    return rank * base + min(rank, extra), base + (1 if rank < extra else 0)


def rs_expected(rank: int, size: int, rows: int, op: str, width: int = 3, dtype: str = "float32"):
    stack = np.stack([data(p, rows, width, dtype) for p in range(size)])
    full = {"sum": stack.sum(0), "mean": stack.mean(0), "max": stack.max(0), "min": stack.min(0)}
    first, count = share(rows, size, rank)
    return full[op].astype(dtype)[first : first + count]


def a2a_splits(rank: int, size: int) -> list[int]:
    """Rows rank sends to each rank: (rank + j) % 3, so some are zero."""
    return [(rank + j) % 3 for j in range(size)]


def a2a_expected(rank: int, size: int, width: int = 3) -> tuple[np.ndarray, list[int]]:
    parts, got = [], []
    for p in range(size):
        splits = a2a_splits(p, size)
        x = data(p, sum(splits), width)
        start = sum(splits[:rank])
        parts.append(x[start : start + splits[rank]])
        got.append(splits[rank])
    return np.concatenate(parts), got


def _error(fn) -> str:
    try:
        fn()
    except Exception as e:  # the test reads the class and message
        return f"{type(e).__name__}: {e}"
    return "no error"


def _two_threads(ptf, rank: int, size: int) -> list[bool]:
    """Thread 'rs' runs 10 reduce-scatters, thread 'a2a' 10 all-to-alls, started in the
    opposite order on odd ranks: calls meet their namesakes' on the other ranks (by
    thread name), whatever order they reach the engine in. Each call's result checked."""
    import threading

    ok = {"rs": [], "a2a": []}

    def rs() -> None:
        for k in range(10):
            got = ptf.reduce_scatter(data(rank, 7) + k).numpy()
            ok["rs"].append(bool(np.array_equal(got, rs_expected(rank, size, 7, "sum") + size * k)))

    def a2a() -> None:
        mine = a2a_splits(rank, size)
        want, got_splits = a2a_expected(rank, size)
        for _ in range(10):
            got, splits = ptf.alltoall(data(rank, sum(mine)), mine)
            ok["a2a"].append(
                bool(np.array_equal(got.numpy(), want)) and splits.numpy().tolist() == got_splits
            )

    threads = [threading.Thread(target=rs, name="rs"), threading.Thread(target=a2a, name="a2a")]
    for t in threads if rank % 2 == 0 else threads[::-1]:
        t.start()
        time.sleep(0.05 * (rank % 2))
    for t in threads:
        t.join(timeout=120)
    return ok["rs"] + ok["a2a"]


def tf_scatter(rank: int, size: int, addr: str, big_rows: int) -> dict:
    """Every case of both ops on this rank; small results as lists, big ones as a check."""
    import tensorflow as tf

    import pytfcomm
    import pytfcomm.tf as ptf

    comm = pytfcomm.init(rank=rank, size=size, addr=addr)
    ptf.set_default_communicator(comm)
    out: dict = {}
    try:
        # -- reduce-scatter ---------------------------------------------------------------
        out["rs_sum_7"] = ptf.reduce_scatter(data(rank, 7)).numpy().tolist()

        @tf.function
        def rs_mean(x):
            return ptf.reduce_scatter(x, op="mean")

        out["rs_mean_even"] = rs_mean(data(rank, 2 * size)).numpy().tolist()
        out["rs_mean_5"] = rs_mean(data(rank, 5)).numpy().tolist()  # retraced: 5 rows
        out["rs_max_int"] = (
            ptf.reduce_scatter(tf.constant(data(rank, 5, dtype="int32")), op="max").numpy().tolist()
        )
        out["rs_one_row"] = ptf.reduce_scatter(data(rank, 1)).numpy().tolist()
        # A list: the float32 tensors packed into one collective, the int32 one apart.
        listed = [
            data(rank, 7),
            data(rank, 2 * size, 5),
            data(rank, 5, dtype="int32"),
            data(rank, 1),
        ]
        out["rs_list"] = [y.numpy().tolist() for y in ptf.reduce_scatter(listed)]
        traced_list = tf.function(lambda *xs: ptf.reduce_scatter(list(xs), op="max"))
        out["rs_list_max"] = [y.numpy().tolist() for y in traced_list(*listed)]
        out["rs_empty"] = list(ptf.reduce_scatter(np.zeros((0, 3), np.float32)).shape)
        big = ptf.reduce_scatter(data(rank, big_rows, 4)).numpy()
        out["rs_big"] = bool(np.array_equal(big, rs_expected(rank, size, big_rows, "sum", 4)))
        # d(sum(w_r * rs(x)))/dx on every rank: each rank's w at that rank's rows.
        for op in ("sum", "mean"):
            x = tf.Variable(data(rank, 7))
            _, count = share(7, size, rank)
            w = tf.fill([count, 3], float(rank + 1))
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(w * ptf.reduce_scatter(x, op=op))
            out[f"rs_grad_{op}"] = tape.gradient(loss, x).numpy().tolist()
        out["rs_shape_mismatch"] = _error(lambda: ptf.reduce_scatter(tf.zeros([4, 3 + rank])))
        out["rs_bool_mean"] = _error(lambda: ptf.reduce_scatter(tf.zeros([4], tf.bool), op="mean"))
        out["rs_after"] = ptf.reduce_scatter(data(rank, 7)).numpy().tolist()

        # -- all-to-all -------------------------------------------------------------------
        got, splits = ptf.alltoall(data(rank, 2 * size))
        out["a2a_even"] = [got.numpy().tolist(), splits.numpy().tolist()]

        @tf.function
        def a2a(x, s):
            return ptf.alltoall(x, s)

        mine = a2a_splits(rank, size)
        got, splits = a2a(data(rank, sum(mine)), tf.constant(mine, tf.int32))
        out["a2a_splits"] = [got.numpy().tolist(), splits.numpy().tolist()]
        got, splits = ptf.alltoall(np.zeros((sum(mine), 0), np.float32), mine)
        out["a2a_no_width"] = [list(got.shape), splits.numpy().tolist()]
        big = ptf.alltoall(data(rank, big_rows * size, 4))[0].numpy()
        want = np.concatenate(
            [
                data(p, big_rows * size, 4)[rank * big_rows : (rank + 1) * big_rows]
                for p in range(size)
            ]
        )
        out["a2a_big"] = bool(np.array_equal(big, want))
        # d(sum(w * a2a(x)[0]))/dx: the rows sent to rank j get rank j's weight.
        x = tf.Variable(data(rank, sum(mine)))
        with tf.GradientTape() as tape:
            y, _ = ptf.alltoall(x, mine)
            loss = tf.reduce_sum(float(rank + 1) * y)
        out["a2a_grad"] = tape.gradient(loss, x).numpy().tolist()
        out["a2a_row_mismatch"] = _error(lambda: ptf.alltoall(tf.zeros([2 * size, 3 + rank])))
        # Rank 0's splits do not add up: it is told why, the others fail at once.
        bad = [2 * size + 1] + [0] * (size - 1) if rank == 0 else [2] * size
        t0 = time.monotonic()
        out["a2a_bad_splits_one"] = _error(lambda: ptf.alltoall(data(rank, 2 * size), bad))
        out["a2a_bad_splits_s"] = time.monotonic() - t0
        out["a2a_bad_splits_all"] = _error(
            lambda: ptf.alltoall(data(rank, 2), [-1, 3] + [0] * (size - 2))
        )
        # The all-gather of rows of no width still learns every rank's row count.
        out["ag_no_width"] = list(ptf.allgather(np.zeros((rank + 1, 0), np.float32)).shape)
        # Checked before anything is sent (every rank raises the same, none waits).
        out["a2a_indivisible"] = _error(lambda: ptf.alltoall(data(rank, 2 * size + 1)))
        out["a2a_float_splits"] = _error(lambda: ptf.alltoall(data(rank, 2), [0.5, 1.5]))
        out["threads"] = _two_threads(ptf, rank, size)
        got, splits = ptf.alltoall(data(rank, 2 * size))
        out["a2a_after"] = [got.numpy().tolist(), splits.numpy().tolist()]
    finally:
        comm.close()
    return out
