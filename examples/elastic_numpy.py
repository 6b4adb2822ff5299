"""Train through a killed worker without restarting: ``pytfcomm-run --elastic``.

Least-squares regression by data-parallel SGD with pytfcomm's NumPy API. Every step,
each rank takes its share of the batch (by its current rank and size), the gradients
are summed with ``allreduce`` and the step is committed in memory. When a rank is
lost, the others catch the recoverable error, re-form with new ranks in the same
processes (``pytfcomm.elastic.reform``), take rank 0's commit and go on
(docs/elastic.md).

    pytfcomm-run -np 3 --elastic --min-np 2 python examples/elastic_numpy.py --kill-at 30

``--kill-at N`` makes the last rank SIGKILL itself at step N, to show it; in real use a
crash, an OOM kill or a lost machine does that.
"""

from __future__ import annotations

import argparse
import os
import signal

import numpy as np

import pytfcomm


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--kill-at", type=int, default=-1, help="the last rank dies at this step")
    args = p.parse_args()

    rng = np.random.default_rng(0)  # the same data on every rank
    x = rng.normal(size=(4096, 8))
    w_true = rng.normal(size=8)
    y = x @ w_true + 0.01 * rng.normal(size=4096)

    comm = pytfcomm.init()
    victim = comm.size - 1 if comm.rank == comm.size - 1 else None
    step, w = 0, np.zeros(8)
    saved = (step, w.copy())
    while step < args.steps:
        try:
            if step == args.kill_at and victim is not None:
                os.kill(os.getpid(), signal.SIGKILL)
            batch = np.arange(step * 256, (step + 1) * 256) % len(x)
            mine = batch[comm.rank :: comm.size]  # this rank's share, by its current rank
            grad = x[mine].T @ (x[mine] @ w - y[mine])
            w = w - 0.05 * comm.allreduce(grad, op="sum") / len(batch)
            step += 1
            saved = (step, w.copy())  # the commit
        except pytfcomm.CommError as exc:
            if not pytfcomm.elastic.recoverable(exc):
                raise
            comm = pytfcomm.elastic.reform()
            print(f"re-formed: rank {comm.rank} of {comm.size}, epoch {pytfcomm.elastic.epoch()}")
            w = comm.broadcast(saved[1].copy(), root=0)
            step = int(comm.broadcast(np.array([saved[0]]), root=0)[0])
    loss = float(np.mean((x @ w - y) ** 2))
    print(
        f"result: rank {comm.rank}/{comm.size} epoch {pytfcomm.elastic.epoch()} "
        f"pid {os.getpid()} steps {step} loss {loss:.6f}"
    )
    comm.close()


if __name__ == "__main__":
    main()
