"""hvd.join in pytfcomm.horovod.tensorflow, run by tests/horovod/test_horovod_join.py: rank r
runs r + 1 training steps, then joins (Horovod's uneven-data pattern)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from horovod_workers import _close, _run


def uneven(rank: int, size: int, addr: str, mode: str) -> dict:
    os.environ.update(PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE=str(size), PYTFCOMM_ADDR=addr)
    import tensorflow as tf

    import pytfcomm.horovod.tensorflow as hvd

    hvd.init()
    w = tf.Variable(np.zeros(3, np.float32))
    grads = []
    for step in range(rank + 1):
        active = range(step, size)
        x = np.full((4, 3), rank + 1, dtype=np.float32)
        got = _run(mode, lambda t: hvd.allreduce(t, op=hvd.Sum), x)
        _close(got, np.full((4, 3), sum(q + 1 for q in active), np.float32))
        got = _run(mode, lambda t: hvd.allreduce(t, op=hvd.Average), x)
        _close(got, np.full((4, 3), sum(q + 1 for q in active) / size, np.float32))
        got = _run(mode, lambda t: hvd.allreduce(t, op=hvd.Max), -x)
        _close(got, np.full((4, 3), -(step + 1), np.float32))
        got = _run(mode, lambda t: hvd.grouped_allreduce([t, 2 * t], op=hvd.Sum), x)
        _close(got[1], np.full((4, 3), 2 * sum(q + 1 for q in active), np.float32))

        def train() -> Any:
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(w * float(rank + 1))
            g = hvd.DistributedGradientTape(tape, op=hvd.Sum).gradient(loss, [w])[0]
            w.assign_sub(g)
            return g

        grads.append(float(_run(mode, train)[0]))
    last = hvd.join()
    out: dict = {"last": int(last), "grads": grads, "w": w.numpy().tolist()}
    out["all_last"] = hvd.allgather_object(int(last))
    # What cannot run with rank 0 joined fails on the others, who then join too;
    # what can runs without it.
    if rank == 0:
        out["last2"] = int(hvd.join())
    else:
        t = np.ones((2, 2), np.float32)
        for name, fn in [("bcast_root_joined", lambda: hvd.broadcast(t, 0))]:
            try:
                _run(mode, fn)
                out[name] = "no error"
            except Exception as exc:
                out[name] = f"{type(exc).__name__}: {exc}"
        out["bcast_ok"] = float(_run(mode, lambda: hvd.broadcast(t * rank, size - 1))[0][0])
        # All-gather, all-to-all and reduce-scatter go on without rank 0: it sends no
        # rows and adds zeros; the rows sent to it go nowhere.
        got = _run(mode, lambda x: hvd.allgather(x), t * rank)
        out["gather_joined"] = np.asarray(got).tolist()
        x = np.full((size, 2), rank + 1.0, np.float32)
        got, recv = _run(mode, lambda t: hvd.alltoall(t, splits=[1] * size), x)
        out["a2a_joined"] = [np.asarray(got).tolist(), np.asarray(recv).tolist()]
        x = np.full((2 * size, 2), rank + 1.0, np.float32)
        out["rs_joined"] = np.asarray(_run(mode, lambda t: hvd.reducescatter(t, op=hvd.Sum), x))
        out["rs_joined"] = out["rs_joined"].tolist()
        out["last2"] = int(hvd.join())
    hvd.shutdown()
    return out
