"""All-reduce benchmark CLI: pytfcomm and its peers side by side, nccl-tests style.

    python -m benchmarks.allreduce --np 2 --sizes 4K..256M --json out.json --plot out.png

Each backend runs as its own group of N local processes (see _launch.py); the table has one
row per size and time/busbw (plus the peer/pytfcomm time ratio) per backend. See README.md.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from typing import Any

try:
    from benchmarks import _host, _launch, _limits, _registry, _report
except ModuleNotFoundError:  # run as a file: make the `benchmarks` package importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks import _host, _launch, _limits, _registry, _report
from benchmarks._units import fmt_bytes, parse_bytes, parse_sizes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    names = [s.name for s in _registry.BACKENDS]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="processes per backend (default 2)")
    p.add_argument(
        "--sizes",
        default="4K..256M",
        help="bytes: range LO..HI[:factor] (x4 steps by default) or list 4K,64K,1M",
    )
    p.add_argument(
        "--backends",
        default=",".join(names),
        help=f"comma list from {','.join(names)} (default: all; missing = skipped)",
    )
    p.add_argument(
        "--iters",
        type=int,
        default=20,
        help="timed iterations per size, same for every size (default 20)",
    )
    p.add_argument("--warmup", type=int, default=5, help="untimed iterations per size")
    p.add_argument(
        "--large-warmup",
        type=int,
        default=2,
        help="warm-up iterations for sizes >= --large-size (default 2)",
    )
    p.add_argument("--large-size", default="16M", help="see --large-warmup (default 16M)")
    p.add_argument(
        "--tf-max-size",
        default="64M",
        help="largest size run by tf-ring (default 64M; larger rows show 'skip')",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="hard limit in seconds for each backend's whole run (default 600)",
    )
    p.add_argument(
        "--ref",
        default="pytfcomm",
        help="backend the ratio columns compare against (default pytfcomm)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every backend this many times, alternating (A B, B A, ...); a size's time is "
        "the median over rounds, and each ratio's spread over rounds is printed (default 1)",
    )
    p.add_argument(
        "--baseline",
        metavar="DIR",
        default="",
        help="also run each pytfcomm backend NAME as NAME@base, with the pytfcomm installed in "
        "DIR (pip install --target DIR of another commit): before/after in one sitting",
    )
    p.add_argument(
        "--bind-to",
        choices=_launch.BIND_CHOICES,
        default="core",
        help="core (default): every backend's rank r runs on the CPUs that pytfcomm-run "
        "(default --bind-to core) gives local rank r (benchmarks/_pin.py); none: no "
        "binding for any backend",
    )
    p.add_argument("--json", metavar="PATH", help="write raw medians + metadata here")
    p.add_argument("--plot", metavar="PATH", help="write a busbw-vs-size PNG here")
    p.add_argument("--quiet", action="store_true", help="no per-size progress on stderr")
    args = p.parse_args(argv)
    args.size_list = parse_sizes(args.sizes)
    args.backend_list = [b.strip() for b in args.backends.split(",") if b.strip()]
    if args.baseline:
        if not os.path.isdir(os.path.join(args.baseline, "pytfcomm")):
            p.error(f"--baseline {args.baseline}: no pytfcomm package in it")
        with_base = []
        for b in args.backend_list:
            with_base.append(b)
            if b.startswith("pytfcomm") and not b.endswith(_registry.BASELINE_SUFFIX):
                with_base.append(b + _registry.BASELINE_SUFFIX)
        args.backend_list = with_base
    unknown = [b for b in args.backend_list if _registry.by_name(b, args.baseline) is None]
    if unknown:
        p.error(f"unknown backend(s) {unknown}; known: {names}")
    if args.np < 1 or args.iters < 1 or args.warmup < 0 or args.large_warmup < 0:
        p.error("--np and --iters must be >= 1, warm-ups >= 0")
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    return args


def _invocation() -> list[str]:
    if __package__:
        return ["-m", f"{__package__}.allreduce", *sys.argv[1:]]
    return sys.argv


def run_metadata(args: argparse.Namespace) -> dict[str, Any]:
    return {
        **_host.metadata(),
        "np": args.np,
        "dtype": "float32",
        "op": "sum",
        "iters": args.iters,
        "warmup": args.warmup,
        "large_warmup": args.large_warmup,
        "large_size": parse_bytes(args.large_size),
        "rounds": args.rounds,
        "bind_to": args.bind_to,
        "cpus": [sorted(c) for c in args.cpus] if args.cpus else None,
        "baseline": os.path.abspath(args.baseline) if args.baseline else None,
        "statistic": "median over iterations of the per-iteration max over ranks"
        + (", then the median over rounds" if args.rounds > 1 else ""),
        "command": shlex.join([sys.executable, *_invocation()]),
    }


def _run_backend(
    name: str, args: argparse.Namespace, worker_common: list[str], skipped: dict[str, str], k: int
) -> dict[str, Any] | None:
    """One run of one backend over its sizes; None (and a reason in ``skipped``) if it cannot."""
    spec = _registry.by_name(name, args.baseline)
    assert spec is not None
    reason = _registry.unavailable_reason(spec)
    sizes = args.size_list
    if spec.capped_by_tf_max:
        sizes = [s for s in sizes if s <= parse_bytes(args.tf_max_size)]
    if not reason and not sizes:
        reason = f"no size <= --tf-max-size {args.tf_max_size}"
    if reason:
        skipped[name] = reason
        print(f"== {name}: skipped ({reason})", file=sys.stderr, flush=True)
        return None
    busy = _host.busy_fraction()
    rnd = f" (round {k + 1} of {args.rounds})" if args.rounds > 1 else ""
    print(
        f"== {name}: N={args.np}, {len(sizes)} sizes {fmt_bytes(sizes[0])}.."
        f"{fmt_bytes(sizes[-1])}{rnd}",
        file=sys.stderr,
        flush=True,
    )
    worker_args = ["--sizes", ",".join(map(str, sizes)), *worker_common]
    launch = _launch.run_backend(
        spec, args.np, worker_args, args.timeout, not args.quiet, cpus=args.cpus
    )
    print(
        f"== {name}: {launch.status} in {launch.wall_s:.1f}s {launch.reason}",
        file=sys.stderr,
        flush=True,
    )
    run = _report.summarize(name, launch, args.np, sizes)
    run["host_busy_before"] = busy
    run["host_busy_after"] = _host.busy_fraction()
    return run


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.cpus = _launch.bindings(args.bind_to, args.np)
    worker_common = [
        "--iters", str(args.iters), "--warmup", str(args.warmup),
        "--large-warmup", str(args.large_warmup),
        "--large-bytes", str(parse_bytes(args.large_size)),
    ]  # fmt: skip
    skipped: dict[str, str] = {}
    per_round: dict[str, list[dict[str, Any]]] = {}
    t_all = time.monotonic()
    for k in range(args.rounds):
        # Alternate the order, so that no backend always runs first (or right
        # after a given peer) on a machine whose speed drifts.
        order = args.backend_list if k % 2 == 0 else args.backend_list[::-1]
        for name in order:
            if name in skipped:
                continue
            run = _run_backend(name, args, worker_common, skipped, k)
            if run is not None:
                per_round.setdefault(name, []).append(run)
    names = [n for n in args.backend_list if n in per_round]
    if args.rounds == 1:
        runs = [per_round[n][0] for n in names]
    else:
        runs = [_report.combine_rounds(per_round[n], args.np) for n in names]
    meta = run_metadata(args)
    meta["wall_s"] = round(time.monotonic() - t_all, 1)
    for r in runs:
        if r["name"].startswith("pytfcomm"):
            meta["versions"][r["name"]] = r["worker_meta"]
    print(
        f"# all-reduce float32 sum, N={args.np} processes, {args.iters} iters "
        f"(median of per-iteration max over ranks"
        f"{'; every rank bound to its cores' if args.cpus else ''}"
        f"{f'; median over {args.rounds} alternating rounds' if args.rounds > 1 else ''}), "
        f"busbw in GB/s, "
        f"{meta['hostname']} ({meta['nproc']} cpus, {meta['cpu']})"
    )
    if any(r["name"] == args.ref for r in runs):
        print(f"# ratio = peer time / {args.ref} time (> 1: {args.ref} is faster)")
    print(_report.table(runs, args.size_list, args.ref))
    if args.rounds > 1:
        print(_report.rounds_table(runs, args.size_list, args.ref))
    limits = _limits.measure(args.size_list, kinds=("memcpy", "tcp", "bound"), ranks=args.np)
    kinds = {r["name"]: _registry.by_name(r["name"], args.baseline).limit for r in runs}
    print(_report.limit_table(runs, args.size_list, limits, kinds))
    meta["limits"] = limits.as_json()
    meta["limit_kinds"] = kinds
    extra = _report.notes(runs, skipped)
    if extra:
        print(extra)
    print(f"# total wall time {meta['wall_s']}s")
    if args.json:
        _report.write_json(args.json, meta, runs, skipped)
    if args.plot:
        machine = f"{meta['hostname']} ({meta['nproc']} cpus, {meta['cpu']})"
        _report.plot(args.plot, runs, args.np, machine)
    bad = any(r["status"] != "ok" or any(not row["ok"] for row in r["rows"].values()) for r in runs)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
