"""Tensor-fusion benchmark: many small all-reduces against one large one.

    python benchmarks/fusion.py --np 2 --json out.json

N local ranks (float32 sum) time, in the same run and interleaved iteration by iteration:
  single    one ``allreduce`` of all the bytes in one array (the target),
  many      ``allreduce_many`` of the tensors (fusion),
  async     ``allreduce_async`` of each tensor, then ``wait`` on every handle,
  separate  one ``allreduce`` per tensor (what fusion saves).
The tensors (``--tensors``, default 200) have sizes log-uniform in [--min, --max] (default
4 KiB..1 MiB, fixed --seed). Every variant writes into preallocated outputs, and every
result is checked (tensor i on rank r holds distinct values, so a tensor landing in the
wrong output fails). Time = median over iterations of the slowest rank's time; ratio =
variant time / single time (the issue's target: many / single <= 1.3).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time

import numpy as np

try:
    from benchmarks import _host, _launch, _limits, _registry
except ModuleNotFoundError:  # run as a file: make the `benchmarks` package importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks import _host, _launch, _limits, _registry
from benchmarks._units import fmt_bytes, parse_bytes

VARIANTS = ("single", "many", "async", "separate")
PERIOD = 251  # prime, so a shifted tensor does not line up by accident


def tensor_sizes(n: int, lo: int, hi: int, seed: int) -> list[int]:
    """n float32 element counts, byte sizes log-uniform in [lo, hi]."""
    rng = np.random.default_rng(seed)
    nbytes = np.exp(rng.uniform(np.log(lo), np.log(hi), n))
    return [max(1, int(b) // 4) for b in nbytes]


def make_input(count: int, index: int, rank: int) -> np.ndarray:
    """Small integers (exact in float32), different for every tensor index and rank."""
    base = (np.arange(PERIOD, dtype=np.float32) + 1.0 + index) * np.float32(rank + 1)
    return np.resize(np.roll(base, index), count)


def expected(count: int, index: int, size: int) -> np.ndarray:
    return make_input(count, index, 0) * np.float32(size * (size + 1) // 2)


# --- worker (one rank) ------------------------------------------------------------------


def _worker(args: argparse.Namespace) -> None:
    import pytfcomm
    from benchmarks.backends import _env

    rank, size = _env.rank_size()
    comm = pytfcomm.init(rank=rank, size=size, addr=f"127.0.0.1:{_env.ports()[0]}")
    counts = tensor_sizes(args.tensors, args.min, args.max, args.seed)
    xs = [make_input(c, i, rank) for i, c in enumerate(counts)]
    ys = [np.empty_like(x) for x in xs]
    want = [expected(c, i, size) for i, c in enumerate(counts)]
    big_x, big_y = np.concatenate(xs), np.empty(sum(counts), np.float32)
    big_want = np.concatenate(want)
    fb = args.fusion_bytes or None

    def run_async() -> None:
        hs = [comm.allreduce_async(x, out=y) for x, y in zip(xs, ys, strict=True)]
        for h in hs:
            h.wait()

    runs = {
        "single": lambda: comm.allreduce(big_x, out=big_y),
        "many": lambda: comm.allreduce_many(xs, out=ys, fusion_bytes=fb),
        "async": run_async,
        "separate": lambda: [comm.allreduce(x, out=y) for x, y in zip(xs, ys, strict=True)],
    }

    def check(variant: str) -> str | None:
        pairs = [(big_y, big_want)] if variant == "single" else list(zip(ys, want, strict=True))
        for i, (got, exp) in enumerate(pairs):
            if not np.array_equal(got, exp):
                return f"tensor {i}: {int(np.sum(got != exp))} wrong elements"
        return None

    times: dict[str, list[int]] = {v: [] for v in args.variants}
    errors: dict[str, str | None] = {}
    for v in args.variants:  # correctness pass on poisoned outputs
        big_y.fill(np.nan)
        for y in ys:
            y.fill(np.nan)
        runs[v]()
        errors[v] = check(v)
    for _ in range(args.warmup):
        for v in args.variants:
            runs[v]()
    clock = time.perf_counter_ns
    for _ in range(args.iters):  # interleaved, so every variant sees the same machine
        for v in args.variants:
            comm.barrier()
            t0 = clock()
            runs[v]()
            times[v].append(clock() - t0)
    for v in args.variants:
        runs[v]()
        errors[v] = errors[v] or check(v)
    comm.barrier()
    doc = {"rank": rank, "done": True, "counts": counts, "times_ns": times, "errors": errors}
    path = os.path.join(args.outdir, f"rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f)
    os.replace(path + ".tmp", path)
    comm.close()


# --- driver -------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--tensors", type=int, default=200, help="tensors per batch (default 200)")
    p.add_argument("--min", type=parse_bytes, default=parse_bytes("4K"), help="default 4K")
    p.add_argument("--max", type=parse_bytes, default=parse_bytes("1M"), help="default 1M")
    p.add_argument("--seed", type=int, default=0, help="tensor sizes' seed (default 0)")
    p.add_argument("--iters", type=int, default=20, help="timed iterations (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed iterations (default 3)")
    p.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"comma list of {','.join(VARIANTS)}"
    )
    p.add_argument(
        "--fusion-bytes",
        type=parse_bytes,
        default=0,
        help="fusion_bytes= of allreduce_many (default: PYTFCOMM_FUSION_BYTES)",
    )
    p.add_argument("--transport", default="", help="PYTFCOMM_TRANSPORT for the ranks")
    p.add_argument("--timeout", type=float, default=600.0, help="hard limit in seconds")
    p.add_argument("--json", metavar="PATH", help="write raw times + metadata here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--outdir", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in args.variants if v not in VARIANTS]
    if bad or not args.variants:
        p.error(f"unknown variant(s) {bad}; known: {VARIANTS}")
    if args.np < 1 or args.iters < 1 or args.tensors < 1 or not 4 <= args.min <= args.max:
        p.error("--np, --iters, --tensors must be >= 1 and 4 <= --min <= --max")
    return args


def _worker_argv(args: argparse.Namespace) -> list[str]:
    return [
        "--worker", "--np", str(args.np), "--tensors", str(args.tensors),
        "--min", str(args.min), "--max", str(args.max), "--seed", str(args.seed),
        "--iters", str(args.iters), "--warmup", str(args.warmup),
        "--variants", ",".join(args.variants), "--fusion-bytes", str(args.fusion_bytes),
    ]  # fmt: skip


def summarize(ranks: list[dict], variants: list[str]) -> dict[str, dict]:
    rows = {}
    for v in variants:
        iters = min(len(d["times_ns"][v]) for d in ranks)
        slowest = [max(d["times_ns"][v][k] for d in ranks) / 1e3 for k in range(iters)]
        errs = [f"rank {d['rank']}: {d['errors'][v]}" for d in ranks if d["errors"][v]]
        rows[v] = {
            "time_us": statistics.median(slowest),
            "min_us": min(slowest),
            "max_us": max(slowest),
            "iter_max_us": slowest,
            "errors": errs,
        }
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        _worker(args)
        return 0
    env = {"PYTFCOMM_TRANSPORT": args.transport} if args.transport else {}
    spec = _registry.Spec("pytfcomm-fusion", "benchmarks.fusion", "spawn", env=env)
    busy = _host.busy_fraction()
    launch = _launch.run_backend(spec, args.np, _worker_argv(args), args.timeout)
    if launch.status != "ok" or len(launch.ranks) != args.np:
        print(f"FAILED: {launch.status} {launch.reason}\n{launch.log_tail}", file=sys.stderr)
        return 1
    counts = launch.ranks[0]["counts"]
    total = 4 * sum(counts)
    rows = summarize(launch.ranks, args.variants)
    meta = {
        **_host.metadata(),
        "np": args.np,
        "tensors": args.tensors,
        "tensor_bytes": [4 * c for c in counts],
        "total_bytes": total,
        "transport": args.transport or "default",
        "fusion_bytes": args.fusion_bytes or "default",
        "iters": args.iters,
        "host_busy_before": busy,
        "host_busy_after": _host.busy_fraction(),
        "statistic": "median over iterations of the per-iteration max over ranks",
        "command": shlex.join([sys.executable, *sys.argv]),
    }
    print(
        f"# fusion: {args.tensors} float32 tensors {fmt_bytes(args.min)}..{fmt_bytes(args.max)} "
        f"(log-uniform, seed {args.seed}), {total / 2**20:.1f} MiB in all, N={args.np}, "
        f"{args.iters} iters, {meta['hostname']} ({meta['nproc']} cpus)"
    )
    ref = rows.get("single", {}).get("time_us")
    print("| variant | time (µs) | min | max | algbw (GB/s) | / single | result |")
    print("|---|---|---|---|---|---|---|")
    for v, r in rows.items():
        ratio = f"{r['time_us'] / ref:.2f}" if ref else "-"
        ok = "OK" if not r["errors"] else "WRONG: " + "; ".join(r["errors"])
        print(
            f"| {v} | {r['time_us']:.0f} | {r['min_us']:.0f} | {r['max_us']:.0f} | "
            f"{total / r['time_us'] / 1e3:.2f} | {ratio} | {ok} |"
        )
    print(_limits.summary_line([total], kinds=("memcpy",)))
    for when in ("before", "after"):
        b = meta[f"host_busy_{when}"]
        if b is not None and b > 0.15:
            print(f"# warning: host CPUs {b:.0%} busy (other processes) just {when}: noisy")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return 1 if any(r["errors"] for r in rows.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
