"""TensorFlow MultiWorkerMirroredStrategy with the RING collective implementation.

What is timed: one call of a ``tf.function`` that runs, inside ``strategy.run``,
``tf.distribute.get_replica_context().all_reduce(SUM, t)`` on a float32 tensor.
Inside a tf.function this lowers to a single ``CollectiveReduceV2`` op (RING, gRPC between
workers), so the measurement is TF's real collective plus one graph-function dispatch.
``strategy.reduce("SUM", per_replica, axis=None)`` was not chosen: in eager mode it goes
through the cross-device-ops Python path on every call (more Python, same collective).
The input tensor is created once per size (untimed); the output is a fresh tensor per call.
One CPU device per worker, so each worker is one replica. TF_CONFIG is built here from the
launcher's ports (``127.0.0.1:<port>`` per worker).
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import tensorflow as tf

from benchmarks.backends import _env, _harness


class TfRing:
    def __init__(self) -> None:
        self.rank, self.size = _env.rank_size()
        workers = [f"127.0.0.1:{p}" for p in _env.ports()[: self.size]]
        os.environ["TF_CONFIG"] = json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": self.rank}}
        )
        impl = tf.distribute.experimental.CommunicationImplementation.RING
        opts = tf.distribute.experimental.CommunicationOptions(implementation=impl)
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=opts)

        def replica_fn(t: tf.Tensor) -> tf.Tensor:
            # The traced input has no device; all_reduce takes its destination from the
            # value's device ("destinations can not be empty"). identity under strategy.run's
            # device scope pins it to this worker's CPU; it forwards the buffer, no copy.
            t = tf.identity(t)
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, t)

        @tf.function
        def step(t: tf.Tensor) -> tf.Tensor:
            return self.strategy.run(replica_fn, args=(t,))

        self._step = step
        self._token = tf.constant([1.0], dtype=tf.float32)

    def _local(self, out: object) -> tf.Tensor:
        return self.strategy.experimental_local_results(out)[0]

    def prepare(self, x: np.ndarray) -> _harness.Op:
        t = tf.constant(x)
        state: dict = {"out": None}

        def run() -> None:
            state["out"] = self._step(t)

        def result() -> np.ndarray:
            return np.asarray(self._local(state["out"]))

        def poison() -> None:
            state["out"] = tf.constant(np.full(x.shape, np.nan, dtype=np.float32))

        return _harness.Op(run=run, result=result, poison=poison)

    def barrier(self) -> None:
        # No public MWMS barrier: a 1-element all-reduce, waited on via .numpy().
        self._local(self._step(self._token)).numpy()

    def close(self) -> None:
        # Peers may still be fetching our last ring chunk over gRPC: linger briefly. The
        # launcher kills a worker that still hangs in TF teardown after reporting done.
        time.sleep(1.0)

    def meta(self) -> dict:
        return {"tensorflow": tf.__version__, "implementation": "RING", "api": "all_reduce"}


if __name__ == "__main__":
    _harness.main(TfRing)
    os._exit(0)  # skip TF/gRPC interpreter teardown, which can hang or race with peers
