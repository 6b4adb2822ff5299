"""Rank functions for tests/horovod/test_horovod_process_sets.py: Horovod's process sets
(even and odd ranks) on pytfcomm sub-communicators, against NumPy references."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from horovod_workers import _close, _run
from reference import error_text as _err


def collectives(rank: int, size: int, addr: str, mode: str) -> dict:
    os.environ.update(PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE=str(size), PYTFCOMM_ADDR=addr)
    import tensorflow as tf

    import pytfcomm.horovod.tensorflow as hvd

    evens = hvd.ProcessSet(range(0, size, 2))
    odds = hvd.ProcessSet(range(1, size, 2))
    hvd.init(process_sets=[evens, odds])
    mine, other = (evens, odds) if rank % 2 == 0 else (odds, evens)
    group = mine.ranks
    out: dict = {
        "ids": [evens.process_set_id, odds.process_set_id],
        "set": [mine.size(), mine.rank(), mine.included(), other.included(), other.rank()],
        "ops": [
            int(hvd.size_op(mine.process_set_id)),
            int(hvd.process_set_included_op(mine.process_set_id)),
            int(hvd.process_set_included_op(other.process_set_id)),
        ],
    }
    x = np.arange(6, dtype=np.float32).reshape(3, 2) + rank
    # all-reduce over the set, interleaved with one over everyone
    got = _run(mode, lambda t: hvd.allreduce(t, op=hvd.Sum, process_set=mine), x)
    _close(got, sum(np.arange(6, dtype=np.float32).reshape(3, 2) + r for r in group))
    got = _run(mode, lambda t: hvd.allreduce(t, op=hvd.Sum), x)
    _close(got, sum(np.arange(6, dtype=np.float32).reshape(3, 2) + r for r in range(size)))
    got = _run(mode, lambda t: hvd.grouped_allreduce([t, t * 2], process_set=mine), x)
    avg = sum(np.arange(6, dtype=np.float32).reshape(3, 2) + r for r in group) / len(group)
    _close(got[0], avg)
    _close(got[1], avg * 2)
    # all-gather with a different first dimension per rank
    rows = np.full((rank + 1, 2), rank, dtype=np.int32)
    got = _run(mode, lambda t: hvd.allgather(t, process_set=mine), rows)
    _close(got, np.concatenate([np.full((r + 1, 2), r, np.int32) for r in group]))
    # broadcast from every member: roots are global ranks
    for root in group:
        got = _run(mode, lambda t, root=root: hvd.broadcast(t, root, process_set=mine), x)
        _close(got, np.arange(6, dtype=np.float32).reshape(3, 2) + root)
    # alltoall with splits: set rank i sends i+1 rows to every member
    me = mine.rank()
    n = mine.size()
    send = np.full(((me + 1) * n, 1), rank, dtype=np.float32)
    splits = np.full(n, me + 1, dtype=np.int32)
    got, recv = hvd.alltoall(send, splits=splits, process_set=mine)
    _close(recv, [i + 1 for i in range(n)])
    _close(got, np.concatenate([np.full((i + 1, 1), r, np.float32) for i, r in enumerate(group)]))
    # reduce-scatter: Horovod's split of dimension 0 over the set
    full = np.arange(4 * n * 2, dtype=np.float32).reshape(4 * n, 2)
    got = hvd.reducescatter(full + rank, op=hvd.Sum, process_set=mine)
    want = sum(full + r for r in group)[4 * me : 4 * me + 4]
    _close(got, want)
    # objects
    out["objects"] = hvd.allgather_object(rank, process_set=mine)
    out["bcast_obj"] = hvd.broadcast_object({"r": rank}, root_rank=group[-1], process_set=mine)
    # variables
    v = tf.Variable(np.full(3, rank, np.float32))
    hvd.broadcast_variables([v], root_rank=group[0], process_set=mine)
    out["var"] = v.numpy().tolist()
    # the distributed tape: members average over the set, others keep their gradient
    w = tf.Variable(float(rank))

    def grad() -> Any:
        with tf.GradientTape() as tape:
            y = w * w
        return hvd.DistributedGradientTape(tape, process_set=evens).gradient(y, [w])[0]

    out["tape"] = float(_run(mode, grad))
    # errors: off the set, a root off the set, an unregistered set, a duplicate
    t = np.ones(4, np.float32)
    out["off_set"] = _err(lambda: hvd.allreduce(t, process_set=other))
    out["root_off_set"] = _err(lambda: hvd.broadcast(t, other.ranks[0], process_set=mine))
    fake = hvd.ProcessSet([0])
    fake.process_set_id = 10
    out["fake"] = _err(lambda: hvd.allreduce(t, process_set=fake))
    out["dup"] = _err(lambda: hvd.add_process_set(list(range(0, size, 2))))
    out["fake_size_op"] = _err(lambda: hvd.size_op(10))
    # dynamic: add the set {0, 1}, use it, remove it, everyone still fine
    pair = hvd.add_process_set([1, 0])
    out["pair_id"] = pair.process_set_id
    if pair.included():
        out["pair_sum"] = float(
            hvd.allreduce(np.array([rank], np.float32), op=hvd.Sum, process_set=pair)[0]
        )
    out["removed"] = hvd.remove_process_set(pair)
    out["pair_after"] = [pair.process_set_id, pair.size()]
    out["removed_again"] = hvd.remove_process_set(pair)
    out["global_after"] = float(hvd.allreduce(np.ones(1, np.float32), op=hvd.Sum)[0])
    hvd.shutdown()
    out["ids_after_shutdown"] = [evens.process_set_id, odds.process_set_id]
    return out
