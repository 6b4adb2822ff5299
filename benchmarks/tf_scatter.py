"""Reduce-scatter and all-to-all from TF against the same collectives from NumPy.

    python -m benchmarks.tf_scatter [--np 2] [--sizes 1M,4M,16M] [--iters 20] [--rounds 3]

Starts ``--np`` processes on 127.0.0.1 (``PYTFCOMM_TRANSPORT`` as set: auto picks
shared memory on one host) with ``pytfcomm-run``'s ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``
(``--no-malloc-hugepages``: without; then TF's tensors sit on 4 KiB pages while NumPy's
large arrays get huge pages, and a 16 MiB reduce-scatter from TF reads about 1.5x
NumPy's). Per size (the bytes of float32 each rank brings), one call of each path per
iteration, in the same order on every rank, a barrier before each call, every result
checked once per round; the table gives the median over ``--iters`` of rank 0's time,
per round, and each TF path's ratio to NumPy:

* ``numpy``: ``comm.reduce_scatter(x, out=y)`` / ``comm.alltoall(x)``, the core itself;
* ``tf``: ``pytfcomm.tf.reduce_scatter(t)`` / ``pytfcomm.tf.alltoall(t)``, eager;
* ``hvd``: ``pytfcomm.horovod.tensorflow``'s ``reducescatter(op=Sum)`` / ``alltoall``;
* ``composed``: what ``hvd`` ran before these ops existed, rebuilt here from
  ``pytfcomm.tf``'s all-reduce and all-gather: the whole all-reduce then this rank's
  rows; every rank's splits and whole tensor all-gathered, then this rank's rows kept.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._launch import free_ports, local_jobs
from benchmarks._registry import worker_pythonpath
from benchmarks._units import fmt_bytes, parse_sizes
from benchmarks.tf_multiworker import malloc_hugepages

PATHS = ("numpy", "tf", "hvd", "composed")
TIMEOUT_S = 1800  # the whole run, every rank


def _calls(comm, ptf, hvd, x, y, t, composed_rs, composed_a2a) -> dict:
    """Each path's call, per collective."""
    return {
        "reduce_scatter": {
            "numpy": lambda: comm.reduce_scatter(x, out=y),
            "tf": lambda: ptf.reduce_scatter(t),
            "hvd": lambda: hvd.reducescatter(t, op=hvd.Sum),
            "composed": lambda: composed_rs(t),
        },
        "alltoall": {
            "numpy": lambda: comm.alltoall(x)[0],
            "tf": lambda: ptf.alltoall(t)[0],
            "hvd": lambda: hvd.alltoall(t),
            "composed": lambda: composed_a2a(t),
        },
    }


def _worker(rank: int, size: int, port: int, sizes: list[int], iters: int, rounds: int) -> dict:
    import numpy as np
    import tensorflow as tf

    import pytfcomm.horovod.tensorflow as hvd
    import pytfcomm.tf as ptf

    os.environ.update(PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE=str(size))
    os.environ["PYTFCOMM_ADDR"] = f"127.0.0.1:{port}"
    hvd.init()
    from pytfcomm.horovod._basics import communicator

    comm = communicator()
    ptf.set_default_communicator(comm)

    def composed_rs(t):
        full = ptf.allreduce(t)
        rows = t.shape[0] // size
        return full[rank * rows : (rank + 1) * rows]

    def composed_a2a(t):
        splits = tf.fill([size], tf.shape(t, out_type=tf.int64)[0] // size)
        matrix = tf.reshape(ptf.allgather(splits), [size, size])
        data = ptf.allgather(t)
        sent = tf.reduce_sum(matrix, axis=1)
        before = tf.cumsum(matrix, axis=1, exclusive=True)[:, rank]
        starts = tf.cumsum(sent, exclusive=True) + before
        counts = matrix[:, rank]
        return tf.gather(data, tf.ragged.range(starts, starts + counts).flat_values)

    out: dict = {}
    for nbytes in sizes:
        elems = nbytes // 4
        x = (np.arange(elems, dtype=np.float32) % 1024 + rank).reshape(-1, 16)
        t = tf.constant(x)
        y = np.empty((x.shape[0] // size, 16), np.float32)
        rows = x.shape[0] // size
        total = sum(np.arange(elems, dtype=np.float32) % 1024 + p for p in range(size))
        want_rs = total.reshape(-1, 16)[rank * rows : (rank + 1) * rows]
        want_a2a = np.concatenate(
            [
                (np.arange(elems, dtype=np.float32) % 1024 + p).reshape(-1, 16)[
                    rank * rows : (rank + 1) * rows
                ]
                for p in range(size)
            ]
        )
        calls = _calls(comm, ptf, hvd, x, y, t, composed_rs, composed_a2a)
        for kind, fns in calls.items():
            want = want_rs if kind == "reduce_scatter" else want_a2a
            for _ in range(rounds):
                for name, fn in fns.items():  # warm-up and check
                    got = fn()
                    got = got.numpy() if hasattr(got, "numpy") else got
                    if not np.array_equal(got, want):
                        raise AssertionError(f"{kind} {name}: wrong result on rank {rank}")
                times: dict[str, list[float]] = {name: [] for name in fns}
                for _ in range(iters):
                    for name, fn in fns.items():
                        comm.barrier()
                        t0 = time.perf_counter()
                        fn()
                        times[name].append(time.perf_counter() - t0)
                for name, ts in times.items():
                    key = f"{kind}/{nbytes}/{name}"
                    out.setdefault(key, []).append(statistics.median(ts) * 1e3)
    hvd.shutdown()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--sizes", default="1M,4M,16M")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", help="write rank 0's medians here")
    p.add_argument("--no-malloc-hugepages", action="store_true")
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    sizes = parse_sizes(args.sizes)
    if args.rank is not None:
        res = _worker(args.rank, args.np, args.port, sizes, args.iters, args.rounds)
        Path(args.out).write_text(json.dumps(res))
        return 0
    port = free_ports(1)[0]
    with tempfile.TemporaryDirectory(prefix="tf-scatter-") as tmp:
        env = dict(os.environ, PYTHONPATH=worker_pythonpath(os.path.join(tmp, "shim")))
        if not args.no_malloc_hugepages:
            env.update(malloc_hugepages(os.environ))
        cmds = []
        for r in range(args.np):
            cmd = [sys.executable, "-m", "benchmarks.tf_scatter", "--np", str(args.np)]
            cmd += ["--sizes", args.sizes, "--iters", str(args.iters), "--rounds", str(args.rounds)]
            cmd += ["--rank", str(r), "--port", str(port), "--out", os.path.join(tmp, f"{r}.json")]
            cmds.append(cmd)
        job = local_jobs().run(cmds, [env] * args.np, cwd=tmp, timeout_s=TIMEOUT_S, term_grace_s=0)
        if job.status != "ok":
            print(f"a rank failed ({job.reason}): exit codes {job.codes}", file=sys.stderr)
            return 1
        res = json.loads(Path(tmp, "0.json").read_text())
    transport = os.environ.get("PYTFCOMM_TRANSPORT", "auto")
    pages = "4 KiB malloc pages" if args.no_malloc_hugepages else "malloc huge pages"
    print(f"# tf_scatter: N={args.np}, transport {transport}, {pages}; rank 0's median ms")
    ratios = " | tf/numpy | hvd/numpy | composed/hvd |"
    print("| collective | size | round | " + " | ".join(PATHS) + ratios)
    print("|---|---:|---:|" + "---:|" * (len(PATHS) + 3))
    for kind in ("reduce_scatter", "alltoall"):
        for nbytes in sizes:
            for rnd in range(args.rounds):
                ms = {name: res[f"{kind}/{nbytes}/{name}"][rnd] for name in PATHS}
                cells = " | ".join(f"{ms[name]:.2f}" for name in PATHS)
                print(
                    f"| {kind} | {fmt_bytes(nbytes)} | {rnd + 1} | {cells} | "
                    f"{ms['tf'] / ms['numpy']:.2f} | {ms['hvd'] / ms['numpy']:.2f} | "
                    f"{ms['composed'] / ms['hvd']:.2f} |"
                )
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
