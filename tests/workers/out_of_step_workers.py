"""Rank functions for tests/reliability/test_out_of_step.py: one rank skips a collective (an
exception on that rank only, before it calls), the others' call times out, and the
job goes on (docs/negotiation.md "Out of step").

In each run the skipping rank then waits for the others on another stream (a named
barrier, a tf.function's op), as the next test of a one-session suite does; so the
others' call has no partner and times out (PYTFCOMM_TIMEOUT, short here), and the
ranks' next calls on the stream carry different numbers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

import pytfcomm

SKIPPER = 1


def _outcome(call: Callable[[], Any]) -> dict:
    """What `call` did: its value or the error's class and message, and how long it took."""
    import_tf_errors: tuple = ()
    try:
        import tensorflow as tf

        import_tf_errors = (tf.errors.OpError,)
    except ImportError:
        pass
    t0 = time.monotonic()
    out: dict = {}
    try:
        y = call()
        out["value"] = np.asarray(y).ravel().tolist()
        out["type"] = None
    except pytfcomm.CommError as exc:
        out.update(type=type(exc).__name__, message=str(exc))
    except import_tf_errors as exc:
        out.update(type=type(exc).__name__, message=exc.message)
    except ValueError as exc:
        out.update(type="ValueError", message=str(exc))
    out["seconds"] = time.monotonic() - t0
    return out


def numpy_skip(rank: int, size: int, addr: str, transport: str) -> dict:
    """Every rank but SKIPPER all-reduces; SKIPPER raises before it calls."""
    with pytfcomm.init(rank=rank, size=size, addr=addr, transport=transport, timeout=5) as comm:
        res: dict = {"warm": _outcome(lambda: comm.allreduce(np.ones(4, np.float32)))}

        def skipped() -> Any:
            if rank == SKIPPER:
                raise ValueError("an argument check that fails on this rank only")
            return comm.allreduce(np.ones(4, np.float32), timeout=2)

        res["skipped"] = _outcome(skipped)
        comm.barrier(timeout=60, name="next-test")
        res["next"] = _outcome(lambda: comm.allreduce(np.ones(4, np.float32)))
        res["after"] = [
            _outcome(lambda i=i: comm.allreduce(np.full(4, rank + i, np.float32))) for i in range(3)
        ]
        return res


def tf_eager_skip(rank: int, size: int, addr: str) -> dict:
    """The same with TF eager ops: pytfcomm.tf.allreduce and Horovod's alltoall,
    whose splits fail Horovod's argument check on SKIPPER only."""
    import tensorflow as tf

    import pytfcomm.horovod.tensorflow as hvd
    import pytfcomm.tf as ptf

    comm = pytfcomm.init(rank=rank, size=size, addr=addr, timeout=5)
    ptf.set_default_communicator(comm)
    hvd.init()  # shares comm
    res: dict = {"warm": _outcome(lambda: ptf.allreduce(tf.ones([4])))}
    splits = [1] * (size + (rank == SKIPPER))  # a count too many on SKIPPER
    res["skipped"] = _outcome(lambda: hvd.alltoall(tf.ones([size, 2]), splits=splits)[0])
    comm.barrier(timeout=60, name="next-test")
    res["next"] = _outcome(lambda: hvd.alltoall(tf.fill([size, 2], float(rank))))
    res["after"] = [
        _outcome(lambda i=i: ptf.allreduce(tf.fill([4], float(rank + i)))) for i in range(2)
    ] + [_outcome(lambda: hvd.alltoall(tf.fill([size, 2], float(rank)))[:, 0])]
    hvd.shutdown()
    comm.close()
    return res


def session(rank: int, size: int, addr: str) -> dict:
    """A one-session suite in miniature: "tests" run one after another in one
    process per rank; the third fails on SKIPPER only, before its collective; the
    fourth starts with a tf.function's collective (another stream), which SKIPPER
    waits in while the others' third test times out. Returns each test's outcome.
    The thread's calls: #0, (the function's), #1 (not on SKIPPER), #2 / #1, ..."""
    import tensorflow as tf

    import pytfcomm.tf as ptf

    comm = pytfcomm.init(rank=rank, size=size, addr=addr, timeout=5)
    ptf.set_default_communicator(comm)
    fn = tf.function(lambda x: ptf.allreduce(x))

    def ok_eager() -> Any:
        return ptf.allreduce(tf.fill([3], float(rank)))

    def function_call() -> Any:
        return fn(tf.fill([3], float(rank)))

    def fails_on_skipper() -> Any:
        if rank == SKIPPER:
            raise ValueError("a check that fails on this rank only")
        # Shorter than the deadline of SKIPPER's next call, which waits for this rank.
        return comm.allreduce(np.ones(3, np.float32), timeout=2)

    def function_then_eager() -> Any:
        fn(tf.ones([2]))
        return ptf.allreduce(tf.fill([3], float(rank)))

    def numpy_call() -> Any:
        return comm.allreduce(np.full(3, rank, np.float32))

    suite = [ok_eager, function_call, fails_on_skipper, function_then_eager]
    suite += [ok_eager, numpy_call, ok_eager]
    out = [_outcome(t) for t in suite]
    comm.close()
    return {"tests": out}
