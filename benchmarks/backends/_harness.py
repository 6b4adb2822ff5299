"""Worker-side measurement loop shared by every backend.

A backend module implements :class:`Backend` (rank/size, ``prepare``, ``barrier``, ``close``)
and calls :func:`main`. The harness owns everything that must be identical across backends:
input pattern, result check, warm-up, per-iteration timing and the per-rank result file.

Per size it does:
  1. one untimed correctness pass with the output poisoned (NaN) beforehand,
  2. ``warmup`` untimed iterations, then a barrier,
  3. ``iters`` back-to-back timed iterations, each timed individually with
     ``time.perf_counter_ns`` around the single all-reduce call (no barrier in between;
     ``reset`` only does work for in-place APIs, which must restore their input),
  4. a check of the last timed iteration's result.
Each rank writes ``rank<r>.json`` into ``--outdir`` after every size (atomic rename), so
the launcher can take the per-iteration max across ranks and keep partial results on timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

PROGRESS_TAG = "#bench rank0 "  # the launcher echoes log lines starting with this
PATTERN_PERIOD = 251  # prime, so a shifted or misplaced chunk does not line up by accident


@dataclass
class Op:
    """One prepared all-reduce of a fixed buffer.

    run: the timed call. result: returns the output as numpy (untimed).
    reset: restores the input before each iteration (in-place APIs only).
    poison: overwrites the output with NaN so a stale buffer cannot pass the check.
    """

    run: Callable[[], None]
    result: Callable[[], np.ndarray]
    poison: Callable[[], None]
    reset: Callable[[], None] = field(default=lambda: None)


class Backend(Protocol):
    rank: int
    size: int

    def prepare(self, x: np.ndarray) -> Op: ...

    def barrier(self) -> None: ...

    def close(self) -> None: ...

    def meta(self) -> dict: ...


def make_input(count: int, rank: int) -> np.ndarray:
    """Rank r holds (r+1) * (1 + i mod 251): small integers, exact in float32."""
    base = (np.arange(PATTERN_PERIOD, dtype=np.float32) + 1.0) * np.float32(rank + 1)
    return np.resize(base, count)


def make_expected(count: int, nranks: int) -> np.ndarray:
    """Closed form of the sum over ranks: (1 + i mod 251) * n(n+1)/2."""
    base = (np.arange(PATTERN_PERIOD, dtype=np.float32) + 1.0) * np.float32(
        nranks * (nranks + 1) // 2
    )
    return np.resize(base, count)


def check(got: np.ndarray, expected: np.ndarray) -> str | None:
    """None if exact, else a short description of the first mismatch."""
    got = np.asarray(got).reshape(-1)
    if got.shape != expected.shape:
        return f"shape {got.shape} != {expected.shape}"
    if np.array_equal(got, expected):
        return None
    bad = np.flatnonzero(got != expected)
    i = int(bad[0])
    return f"{bad.size} wrong elements, first at {i}: got {got[i]!r} expected {expected[i]!r}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="all-reduce benchmark worker (one rank)")
    p.add_argument("--sizes", required=True, help="comma-separated byte counts")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--large-warmup", type=int, default=2)
    p.add_argument("--large-bytes", type=int, default=16 << 20)
    p.add_argument("--outdir", required=True)
    return p.parse_args(argv)


def _write(outdir: str, rank: int, doc: dict) -> None:
    path = os.path.join(outdir, f"rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f)
    os.replace(path + ".tmp", path)


def _log(rank: int, msg: str) -> None:
    if rank == 0:
        print(f"{PROGRESS_TAG}{time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def measure(be: Backend, nbytes: int, args: argparse.Namespace) -> dict:
    count = nbytes // 4
    x = make_input(count, be.rank)
    expected = make_expected(count, be.size)
    op = be.prepare(x)
    op.poison()
    op.reset()
    op.run()
    err = check(op.result(), expected)
    warmup = args.warmup if nbytes < args.large_bytes else min(args.warmup, args.large_warmup)
    for _ in range(warmup):
        op.reset()
        op.run()
    be.barrier()
    times = []
    clock = time.perf_counter_ns
    for _ in range(args.iters):
        op.reset()
        t0 = clock()
        op.run()
        times.append(clock() - t0)
    err = err or check(op.result(), expected)
    return {"bytes": nbytes, "count": count, "warmup": warmup, "times_ns": times, "error": err}


def main(make_backend: Callable[[], Backend], argv: list[str] | None = None) -> None:
    """Entry point of a backend module: set up, measure every size, write results."""
    args = parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    t0 = time.perf_counter()
    be = make_backend()
    doc: dict = {"rank": be.rank, "size": be.size, "done": False, "results": []}
    doc["setup_s"] = time.perf_counter() - t0
    doc["meta"] = be.meta()
    doc["cpus"] = sorted(os.sched_getaffinity(0))  # where it may run (--bind-to)
    _write(args.outdir, be.rank, doc)
    _log(be.rank, f"setup {doc['setup_s']:.2f}s, {be.size} ranks")
    for nbytes in sizes:
        try:
            res = measure(be, nbytes, args)
        except Exception:  # a collective that raises leaves the peers hanging: record, abort
            doc["fatal"] = traceback.format_exc()
            _write(args.outdir, be.rank, doc)
            raise
        doc["results"].append(res)
        _write(args.outdir, be.rank, doc)
        med = sorted(res["times_ns"])[len(res["times_ns"]) // 2] / 1e3
        _log(be.rank, f"{nbytes} B: median {med:.1f} us {'OK' if not res['error'] else 'FAIL'}")
    be.barrier()
    doc["done"] = True
    _write(args.outdir, be.rank, doc)
    be.close()
