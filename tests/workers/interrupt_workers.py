"""Rank functions for tests/reliability/test_interrupt.py and test_liveness.py: Ctrl-C
in a blocked call, and a peer that stops answering (SIGSTOP)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np

import pytfcomm


def _describe(exc: BaseException) -> dict:
    return {"type": type(exc).__name__, "message": str(exc)}


def _mark(name: str) -> None:
    tmp = Path(f"{name}.{os.getpid()}.tmp")
    tmp.write_text(repr(time.time()))
    os.replace(tmp, name)


def _wait_for(name: str, seconds: float = 30) -> None:
    """Until another rank has _mark()ed ``name`` (or ``seconds`` passed)."""
    deadline = time.time() + seconds
    while not Path(name).exists() and time.time() < deadline:
        time.sleep(0.02)


def _mark_when_a_tf_collective_waits() -> None:
    """Mark "blocked0" once a TF op's collective is pending (not before: a SIGINT while
    TF still traces or dispatches is Python's KeyboardInterrupt, rightly)."""

    def poll() -> None:
        end = time.time() + 120
        while pytfcomm._core.unattended_waits() == 0 and time.time() < end:
            time.sleep(0.005)
        _mark("blocked0")

    threading.Thread(target=poll, daemon=True).start()


def _ctrl_c_raises() -> None:
    """Give SIGINT Python's handler. A shell without job control (a CI runner's script
    started in the background) starts its jobs with SIGINT ignored, and an ignored signal
    stays ignored across exec, so Python installs no handler; at a terminal it has one."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def interrupted_collective(rank: int, size: int, addr: str, n: int) -> dict:
    """Rank 0 blocks in a collective rank 1 joins only much later; the test sends
    rank 0 SIGINT. Rank 0 must raise KeyboardInterrupt about at once, closed; rank 1,
    when it comes, must learn that rank 0 was interrupted."""
    _ctrl_c_raises()
    comm = pytfcomm.init(rank=rank, size=size, addr=addr)
    comm.barrier()
    out: dict = {}
    if rank == 0:
        _mark("blocked0")
        try:
            comm.allreduce(np.ones(n, np.float32))
            out["type"] = None
        except KeyboardInterrupt:
            out["type"] = "KeyboardInterrupt"
        out["t_raised"] = time.time()
        out["closed"] = comm.closed
        _mark("raised")
        return out
    # Rank 1 arrives once rank 0 has given up. Rank 0's input may already be
    # with the others (a small one travels with its negotiation record): then
    # this call completes with the right sum, and the next one learns.
    _wait_for("raised")
    t0 = time.time()
    out["results"] = []
    try:
        for _ in range(2):
            out["results"].append(float(comm.allreduce(np.ones(n, np.float32))[0]))
        out["type"] = None
    except pytfcomm.CommError as exc:
        out.update(_describe(exc))
    out["seconds"] = time.time() - t0
    return out


def interrupted_init(rank: int, size: int, addr: str) -> dict:
    """Rank 0 waits in init() for a rank that never starts; SIGINT ends it."""
    _ctrl_c_raises()
    _mark(f"blocked{rank}")
    try:
        pytfcomm.init(rank=rank, size=size, addr=addr)
        return {"type": None}
    except KeyboardInterrupt:
        return {"type": "KeyboardInterrupt", "t_raised": time.time()}


def stopped_peer(rank: int, size: int, addr: str, victim: int, busy: bool) -> dict:
    """`victim` stops itself (SIGSTOP) with the default deadlines; the others, in a
    collective (busy) or idle at the moment it stops, must name it within the
    liveness timeout, far below PYTFCOMM_TIMEOUT."""
    comm = pytfcomm.init(rank=rank, size=size, addr=addr)
    x = np.ones(1 << 16, np.float32)
    comm.allreduce(x)
    comm.barrier()
    if rank == victim:
        _mark("stopped")
        os.kill(os.getpid(), signal.SIGSTOP)
        return {"victim": True}
    deadline = time.time() + 30
    while not Path("stopped").exists() and time.time() < deadline:
        time.sleep(0.01)
    t_stop = float(Path("stopped").read_text())
    if not busy:
        time.sleep(12)  # idle past the liveness timeout: the background thread notices
    out: dict = {}
    try:
        for _ in range(100_000):
            comm.allreduce(x)
        out["type"] = None
    except pytfcomm.CommError as exc:
        out.update(_describe(exc))
    out["seconds"] = time.time() - t_stop
    out["closed"] = comm.closed
    comm.close()
    return out


def interrupted_tf_op(rank: int, size: int, addr: str, case: str) -> dict:
    """Rank 0 runs a TF op whose collective rank 1 never joins; the test sends rank 0
    SIGINT. TF's caller waits inside TensorFlow, where Python runs no signal handler:
    the op must still fail at once (CancelledError saying so), the communicator
    close and rank 1 learn why. A second SIGINT, with nothing pending, must raise
    KeyboardInterrupt as ever."""
    _ctrl_c_raises()
    import tensorflow as tf

    import pytfcomm.tf as ptf

    comm = pytfcomm.init(rank=rank, size=size, addr=addr)
    ptf.set_default_communicator(comm)
    small, large = tf.fill([16], 1.0), tf.fill([1 << 18], 1.0)
    calls = {
        "eager_small": lambda: ptf.allreduce(small),
        "function_large": tf.function(lambda: ptf.allreduce(large)),
        "reduce_scatter": tf.function(lambda: ptf.reduce_scatter(large)),
        "alltoall": lambda: ptf.alltoall(large),
    }
    ptf.allreduce(tf.fill([4], 1.0))  # loads the op library, warms up
    comm.barrier()
    out: dict = {}
    if rank == 0:
        _mark_when_a_tf_collective_waits()
        try:
            calls[case]()
            out["type"] = None
        except tf.errors.CancelledError as exc:
            out.update(_describe(exc))
        except KeyboardInterrupt:
            out["type"] = "KeyboardInterrupt"
        out["t_raised"] = time.time()
        out["closed"] = comm.closed
        _mark("raised")
        out["second"] = None
        try:
            end = time.time() + 20
            while time.time() < end:
                time.sleep(0.01)
        except KeyboardInterrupt:
            out["second"] = "KeyboardInterrupt"
        return out
    # Rank 1 arrives once rank 0 has given up. Over shared memory rank 0's record
    # of the round it left may still be there: an eager op on the main thread
    # has the key this call has, and differs (MismatchError); the next one learns.
    _wait_for("raised")
    t0 = time.time()
    out["before"] = []
    for _ in range(2):
        try:
            comm.allreduce(np.ones(16, np.float32))
            out["type"] = None
        except pytfcomm.CommError as exc:
            out.update(_describe(exc))
        if out["type"] != "MismatchError":
            break
        out["before"].append(out["message"])
    out["seconds"] = time.time() - t0
    return out


def interrupted_fit(rank: int, size: int, addr: str, tf_ports: list[int]) -> dict:
    """Keras fit under pytfcomm.MultiWorkerMirroredStrategy; rank 1 stalls in a callback
    at the third step of the second epoch (alive, heartbeats going: nothing times out
    for PYTFCOMM_TIMEOUT) and rank 0's step waits in its gradient all-reduce; the test
    sends rank 0 SIGINT. fit must raise at once on rank 0 and, once rank 1 goes on,
    on rank 1 too, each saying why."""
    _ctrl_c_raises()
    from multiworker_workers import GLOBAL_BATCH, _data, _loss, _model, _set_tf_config

    _set_tf_config(rank, tf_ports, addr)
    import keras
    import tensorflow as tf

    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(GLOBAL_BATCH)

    class Stall(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.epoch = 0

        def on_epoch_begin(self, epoch, logs=None) -> None:
            self.epoch = epoch

        def on_train_batch_begin(self, batch, logs=None) -> None:
            if self.epoch != 1 or batch != 2:
                return
            if rank == 0:
                _mark_when_a_tf_collective_waits()  # this step's all-reduce waits for rank 1
                return
            _wait_for("raised", 60)

    with strategy.scope():
        model = _model(keras)
        model.compile(keras.optimizers.SGD(0.1), _loss(keras))
    out: dict = {"type": None}
    t0 = time.time()
    try:
        model.fit(ds, epochs=3, steps_per_epoch=4, verbose=0, callbacks=[Stall()])
    except KeyboardInterrupt:
        out["type"] = "KeyboardInterrupt"
    except Exception as exc:  # whatever fit raised, reported to the test as is
        out.update(_describe(exc))
    out["t_raised"] = time.time()
    out["seconds"] = out["t_raised"] - t0
    if rank == 0:
        _mark("raised")
    return out
