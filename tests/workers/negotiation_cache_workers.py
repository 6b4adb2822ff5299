"""Rank functions for tests/core/test_negotiation_cache.py: collectives agreed before
(confirmed by cache slot, docs/negotiation.md), new ones and disagreeing ones, mixed."""

from __future__ import annotations

import threading

import numpy as np

import pytfcomm


def mixed_numpy(rank: int, size: int, addr: str, transport: str, n: int, iters: int) -> dict:
    """Two named threads per rank repeat one all-reduce (agreed, then confirmed by
    slot); on the way each makes new calls (a fresh name each), a disagreeing call
    under a new name, and a disagreeing call on its own, cached, stream (rank 1
    passes one element less while the others confirm the agreed call by slot).
    Every result is checked; the disagreements must raise MismatchError on every
    rank, and the calls after them must pair again."""
    wrong: list[str] = []
    errors: dict[str, list[str]] = {}
    with pytfcomm.init(rank=rank, size=size, addr=addr, transport=transport, timeout=60) as comm:

        def work(t: int) -> None:
            mine: list[str] = []
            errors[f"t{t}"] = mine
            base = size * (size - 1) / 2
            for i in range(iters):
                y = comm.allreduce(np.full(n, 100.0 * t + i + rank))
                if not np.all(y == size * (100.0 * t + i) + base):
                    wrong.append(f"thread {t} call {i}: {y[0]}")
                if i % 7 == 3:  # a new collective, under a name never used before
                    z = comm.allreduce(np.full(5, float(rank)), name=f"new-{t}-{i}")
                    if not np.all(z == base):
                        wrong.append(f"thread {t} new {i}: {z[0]}")
                if i in (iters // 3, 2 * iters // 3):
                    short = n - 1 if rank == 1 else n
                    try:
                        if i == iters // 3:  # on a new name
                            comm.allreduce(np.ones(short), name=f"bad-{t}")
                        else:  # on this thread's stream, agreed many times
                            comm.allreduce(np.ones(short))
                        mine.append("none")
                    except pytfcomm.MismatchError as exc:
                        mine.append("disagree" if "disagree" in str(exc) else str(exc))

        threads = [threading.Thread(target=work, args=(t,), name=f"cached-{t}") for t in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        comm.barrier()
    return {"wrong": wrong[:10], "n_wrong": len(wrong), "errors": errors}


def mixed_tf(rank: int, size: int, addr: str, transport: str, steps: int) -> dict:
    """A tf.function of three all-reduces that TF may run in any order, called
    every step (agreed, then confirmed by slot), with a tf.cond that runs a
    different branch's all-reduce on every other step; in the middle step rank 1
    calls a disagreeing eager all-reduce while the others repeat an agreed one.
    Results are checked; the disagreement raises on every rank; steps go on."""
    import tensorflow as tf

    import pytfcomm.tf as ptf

    tf.config.threading.set_inter_op_parallelism_threads(4)
    comm = pytfcomm.init(rank=rank, size=size, addr=addr, transport=transport, timeout=60)
    ptf.set_default_communicator(comm)

    @tf.function
    def step(x, flip):
        a = ptf.allreduce(x)
        b = ptf.allreduce(x * 2.0)
        c = tf.cond(flip, lambda: ptf.allreduce(x * 3.0), lambda: ptf.allreduce(x[:7] * 4.0))
        return a, b, c

    total = float(sum(range(1, size + 1)))
    wrong: list[str] = []
    errors: list[str] = []
    for i in range(steps):
        x = tf.fill([1000], float(rank + 1))
        flip = tf.constant(i % 2 == 0)
        a, b, c = step(x, flip)
        want_c = (3.0 if i % 2 == 0 else 4.0) * total
        if float(a[0]) != total or float(b[-1]) != 2 * total or float(c[0]) != want_c:
            wrong.append(f"step {i}: {float(a[0])} {float(b[-1])} {float(c[0])}")
        if i == steps // 2:
            for _ in range(2):  # agreed once, then by slot on the ranks that agree
                ptf.allreduce(tf.ones([64]))
            try:
                ptf.allreduce(tf.ones([63 if rank == 1 else 64]))
                errors.append("none")
            except tf.errors.OpError as exc:
                errors.append(type(exc).__name__ if "disagree" in exc.message else exc.message)
    comm.close()
    return {"wrong": wrong[:5], "n_wrong": len(wrong), "errors": errors}
