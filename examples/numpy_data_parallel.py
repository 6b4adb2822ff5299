"""Data-parallel training with pytfcomm's NumPy API: softmax regression on the
scikit-learn digits set, gradients averaged across ranks with ``allreduce``.

Run it as it is: it starts ``--np`` local ranks itself, through pytfcomm-run
(``pytfcomm.launcher``), and checks at the end that every rank holds
bitwise-identical weights, equal to single-process training on the global
batch.

    python examples/numpy_data_parallel.py --np 2 --epochs 10
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time

import numpy as np


def load_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(x))
    x, y = x[order], y[order]
    split = 1500
    return x[:split], y[:split], x[split:], y[split:]


def loss_and_grad(w: np.ndarray, x: np.ndarray, y: np.ndarray, total: int):
    """Softmax cross-entropy summed over this shard, divided by the global batch size."""
    logits = x @ w[:-1] + w[-1]
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    loss = -np.log(p[np.arange(len(y)), y] + 1e-12).sum() / total
    p[np.arange(len(y)), y] -= 1.0
    g = np.empty_like(w)
    g[:-1] = x.T @ p / total
    g[-1] = p.sum(axis=0) / total
    return loss, g


def train(rank: int, size: int, epochs: int, batch: int, lr: float, comm=None) -> np.ndarray:
    xtr, ytr, xte, yte = load_data()
    w = np.zeros((65, 10), np.float32)
    for epoch in range(epochs):
        t0 = time.perf_counter()
        losses = []
        for start in range(0, len(xtr), batch):
            xb, yb = xtr[start : start + batch], ytr[start : start + batch]
            shard = slice(rank, None, size)  # each rank takes every size-th sample
            loss, g = loss_and_grad(w, xb[shard], yb[shard], len(xb))
            if comm is not None:
                comm.allreduce(g, op="sum", out=g)  # the global-batch gradient
                loss = float(comm.allreduce(np.array([loss]), op="sum")[0])
            w -= lr * g
            losses.append(loss)
        acc = float(((xte @ w[:-1] + w[-1]).argmax(axis=1) == yte).mean())
        if rank == 0 and comm is not None:
            print(
                f"epoch {epoch + 1:2d}  loss {np.mean(losses):.4f}  test acc {acc:.3f}  "
                f"({time.perf_counter() - t0:.2f} s)",
                flush=True,
            )
    return w


def rank_main(epochs: int, batch: int, lr: float) -> int:
    import pytfcomm

    with pytfcomm.init() as comm:
        w = train(comm.rank, comm.size, epochs, batch, lr, comm)
        mine = np.frombuffer(hashlib.sha256(w.tobytes()).digest(), np.uint8)
        rows = comm.allgather(mine).reshape(comm.size, -1)
        identical = all(np.array_equal(row, rows[0]) for row in rows)
        if comm.rank == 0:
            ref = train(0, 1, epochs, batch, lr)
            err = float(np.abs(ref - w).max())
            print(
                f"ranks {comm.size}: weights identical on every rank: {identical}; "
                f"max |w - single-process w| = {err:.2e}"
            )
            if not identical or err > 1e-4:
                return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--np", type=int, default=2, help="number of local ranks")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch", type=int, default=64, help="global batch size")
    parser.add_argument("--lr", type=float, default=0.5)
    args = parser.parse_args()
    if "PYTFCOMM_RANK" in os.environ:
        return rank_main(args.epochs, args.batch, args.lr)
    # Start the ranks as pytfcomm-run does (free ports, every rank stopped when one
    # fails, a deadline): each runs this script again, with PYTFCOMM_RANK set.
    from pytfcomm.launcher import main as pytfcomm_run

    return pytfcomm_run(["-np", str(args.np), "--timeout", "600", sys.executable, *sys.argv])


if __name__ == "__main__":
    sys.exit(main())
