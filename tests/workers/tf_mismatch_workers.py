"""TF ops whose workers disagree (tests/tf/test_tf_mismatch.py): every worker's op fails
with the documented TF status, and the next op on the same communicator works."""

from __future__ import annotations

import numpy as np


def session(rank: int, size: int, addr: str, n: int, transport: str) -> dict:
    import tensorflow as tf

    import pytfcomm
    import pytfcomm.tf as ptf

    comm = pytfcomm.init(rank=rank, size=size, addr=addr, transport=transport, timeout=30)
    ptf.set_default_communicator(comm)
    odd = rank == 1
    f64_if_odd = tf.float64 if odd else tf.float32
    fn_allreduce = tf.function(lambda x: ptf.allreduce(x, op="sum"))
    fn_allreduce_max = tf.function(lambda x: ptf.allreduce(x, op="max"))

    cases = {
        "eager_count": lambda: ptf.allreduce(tf.ones([n - odd])),
        "eager_dtype": lambda: ptf.allreduce(tf.ones([n], f64_if_odd)),
        "eager_shape": lambda: ptf.allreduce(tf.ones([2, n // 2] if odd else [n // 2, 2])),
        "eager_op": lambda: ptf.allreduce(tf.ones([n]), op="max" if odd else "sum"),
        "function_op": lambda: (fn_allreduce_max if odd else fn_allreduce)(tf.ones([n])),
        "broadcast_root": lambda: ptf.broadcast(tf.ones([n]), root=rank),
        "allgather_rows": lambda: ptf.allgather(tf.ones([4, 3 if odd else 2])),
        "allgather_dtype": lambda: ptf.allgather(tf.ones([4, 2], f64_if_odd)),
        # one op, two tensors fused into buffers: worker 1 lists them the other way round
        "fused_list": lambda: ptf.allreduce_replicas(
            [[tf.ones([8]), tf.ones([n])] if odd else [tf.ones([n]), tf.ones([8])]]
        )[0],
        "fused_small": lambda: ptf.allreduce_replicas(
            [[tf.ones([8]), tf.ones([4])] if odd else [tf.ones([4]), tf.ones([8])]]
        )[0],
    }
    out: dict = {}
    s = size * (size + 1) / 2
    for name, call in cases.items():
        res: dict = {}
        try:
            y = call()
            res["type"] = None
            res["value"] = np.asarray(y if not isinstance(y, list) else y[0]).ravel()[:4].tolist()
        except tf.errors.OpError as exc:
            res["type"] = type(exc).__name__
            res["message"] = exc.message
        except pytfcomm.CommError as exc:
            res["type"] = type(exc).__name__
            res["message"] = str(exc)
        res["closed"] = comm.closed
        try:
            a = fn_allreduce(tf.fill([n], float(rank + 1))).numpy()
            b = ptf.allreduce(tf.fill([8], float(rank + 1))).numpy()
            c = ptf.broadcast(tf.fill([n], float(rank + 7)), root=size - 1).numpy()
            g = ptf.allgather(tf.fill([1, 2], float(rank))).numpy()
            ok = (
                np.all(a == s)
                and np.all(b == s)
                and np.all(c == size + 6)
                and g[:, 0].tolist() == [float(r) for r in range(size)]
            )
            res["after"] = None if ok else f"wrong values {a[:2]} {b[:2]} {c[:2]} {g[:, 0]}"
        except Exception as exc:
            res["after"] = f"{type(exc).__name__}: {exc}"
        out[name] = res
    comm.close()
    return out
