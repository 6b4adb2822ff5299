"""Every TF entry point after the job's communicator closed (tests/tf/test_tf_closed.py).

Not a test module. Each worker builds the TF-facing calls eagerly and as
``tf.function``s traced (and run once, correctly) while the communicator is
open; then the communicator is closed (``close()``, a mismatch between the
ranks, or a peer that exits), and every call is tried again. Each outcome is
reported as {"raised": class name or None, "message": ...}.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _outcome(fn: Callable[[], Any]) -> dict:
    import tensorflow as tf

    import pytfcomm

    try:
        out = fn()
        for t in tf.nest.flatten(out):  # make sure it really ran
            if hasattr(t, "numpy"):
                t.numpy()
    except pytfcomm.CommError as exc:
        return {"raised": type(exc).__name__, "message": str(exc)}
    except tf.errors.OpError as exc:
        return {"raised": type(exc).__name__, "message": exc.message}
    except Exception as exc:
        return {"raised": type(exc).__name__, "message": str(exc)}
    return {
        "raised": None,
        "message": repr([getattr(t, "numpy", lambda t=t: t)() for t in tf.nest.flatten(out)])[:200],
    }


def _entry_points(tf, keras, rank: int) -> dict[str, Callable[[], Any]]:
    """name -> call, for every TF-facing entry point, each with a fixed signature."""
    from tf_setup import devices

    import pytfcomm
    import pytfcomm.tf as ptf

    x = tf.fill([4], float(rank + 1))
    w = tf.Variable(tf.ones([4]))
    kw = keras.Variable(np.ones(4, np.float32))
    kopt = pytfcomm.keras.DistributedOptimizer(keras.optimizers.SGD(0.1))
    kopt.build([kw])
    bvars = [tf.Variable(tf.fill([2], float(rank)))]
    mirrored = tf.distribute.MirroredStrategy(devices(2), cross_device_ops=pytfcomm.RingAllReduce())
    pair = mirrored.experimental_distribute_values_from_function(lambda ctx: x)
    multi = pytfcomm.MultiWorkerMirroredStrategy()  # the default communicator's job

    def broadcast_vars():  # in a tf.function it returns an op: return the value instead
        ptf.broadcast_variables(bvars, root=0)
        return bvars[0].read_value()

    def tape_grad():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * w)
        return pytfcomm.DistributedGradientTape(tape).gradient(loss, [w])

    return {
        "allreduce": lambda: ptf.allreduce(x, op="sum"),
        "allgather": lambda: ptf.allgather(x),
        "broadcast": lambda: ptf.broadcast(x, root=0),
        "reduce_scatter": lambda: ptf.reduce_scatter(x),
        "reduce_scatter_list": lambda: ptf.reduce_scatter([x, x]),
        "alltoall": lambda: ptf.alltoall(x),
        "allreduce_gradients": lambda: ptf.allreduce_gradients([x]),
        "gradient_tape": tape_grad,
        "keras_optimizer": lambda: kopt.apply([tf.ones([4])], [kw]),
        "broadcast_variables": broadcast_vars,
        "average_gradients": lambda: ptf.average_gradients([[(x, w)]]),
        "cross_device_ops": lambda: mirrored.extended.batch_reduce_to("SUM", [(pair, pair)]),
        "strategy_reduce": lambda: multi.reduce(
            "SUM", multi.run(lambda: tf.identity(x)), axis=None
        ),
    }


def after_close(rank: int, size: int, addr: str, how: str) -> dict:
    """Run every entry point eagerly and traced, close the communicator by ``how``, rerun.

    ``how``: "close" (every rank calls close()), "deadline" (rank 0's collective
    times out waiting for rank 1, which comes too late: an error on every rank
    closes it; a mere disagreement would not, it leaves the communicator
    usable), "peer_exit" (the last rank exits; the others' next collective fails
    and closes it).
    """
    from tf_setup import tf_with_devices

    tf = tf_with_devices(2)
    import keras

    import pytfcomm

    comm = pytfcomm.init(rank=rank, size=size, addr=addr)
    calls = _entry_points(tf, keras, rank)
    traced = {name: tf.function(fn) for name, fn in calls.items()}
    before = {}
    for name in calls:  # both forms work while the communicator is open
        before[f"eager:{name}"] = _outcome(calls[name])
        before[f"traced:{name}"] = _outcome(traced[name])
    comm.barrier()
    if how == "close":
        comm.close()
    elif how == "deadline":
        if rank != 0:
            time.sleep(3.0)
        closed_by = _outcome(lambda: comm.allreduce(np.ones(1000, np.float32), timeout=1.0))
    elif how == "peer_exit":
        if rank == size - 1:
            os._exit(0)
        closed_by = _outcome(lambda: comm.allreduce(np.ones(1000, np.float32)))
    else:
        raise ValueError(how)
    after = {"closed": comm.closed}
    if how != "close":
        after["closed_by"] = closed_by
    for name in calls:
        after[f"eager:{name}"] = _outcome(calls[name])
        after[f"traced:{name}"] = _outcome(traced[name])
    after["eager:new_strategy"] = _outcome(lambda: pytfcomm.MultiWorkerMirroredStrategy())
    # A later init() replaces the default communicator and the old object
    # may be dropped: graphs built on it must still say it is closed.
    pytfcomm._init._default = None
    keep = traced["allreduce"]
    comm = calls = traced = None
    gc.collect()
    after["traced_after_drop:allreduce"] = _outcome(keep)
    return {"before": before, "after": after}


def single_process(rank: int, size: int, addr: str) -> dict:
    """No multi-process communicator (none, then a closed one of size 1): local results."""
    import tensorflow as tf

    import pytfcomm
    import pytfcomm.tf as ptf

    x = tf.fill([3], 2.0)
    out = {"none": ptf.allreduce(x, op="sum").numpy().tolist()}
    comm = pytfcomm.init(rank=0, size=1)
    comm.close()
    out["closed_size1"] = ptf.allreduce(x, op="sum").numpy().tolist()
    out["gradients"] = [g.numpy().tolist() for g in ptf.allreduce_gradients([x])]
    return out
