"""Two builds of pytfcomm, one sitting: all-reduce times of A and B in alternating rounds.

    python -m benchmarks.ab HEAD~1 HEAD --sizes 4K,64K,1M,16M --rounds 4 --json ab.json

A and B are each ``installed``, a directory holding a ``pytfcomm/`` package, or a git
revision (built once per commit under build/ab/; see benchmarks/_builds.py). Every round
runs benchmarks/allreduce.py's pytfcomm workers for each ``--np`` and ``--transports`` case,
A right beside B, the order flipping each round (A B, B A, ...). The output is a markdown
table for docs/benchmarks.md: per case and size the median over rounds of each side's time,
B / A of those medians, and the spread of B / A within a round (min-max over rounds).

``--env-a``/``--env-b`` add environment variables to one side's ranks, so that one build
with two settings is an A/B too:

    python -m benchmarks.ab installed installed --env-a PYTFCOMM_AHEAD_BYTES=0 \
        --env-b PYTFCOMM_AHEAD_BYTES=1M --np 4 --transports tcp
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from dataclasses import replace
from typing import Any

try:
    from benchmarks import _builds, _host, _launch, _registry, _report
except ModuleNotFoundError:  # run as a file: make the `benchmarks` package importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks import _builds, _host, _launch, _registry, _report
from benchmarks._units import parse_sizes

SIDES = ("A", "B")
TRANSPORTS = {"tcp": "TCP", "shm": "shared memory"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("a", metavar="A", help="installed | DIR with pytfcomm/ | git revision")
    p.add_argument("b", metavar="B", help="the same kinds; ratios are B / A")
    p.add_argument("--np", default="2,4", help="rank counts, comma list (default 2,4)")
    p.add_argument("--transports", default="tcp,shm", help="tcp and/or shm (default both)")
    p.add_argument("--sizes", default="4K,64K,1M,16M", help="as allreduce.py's --sizes")
    p.add_argument("--rounds", type=int, default=4, help="A/B pairs per case (default 4)")
    p.add_argument("--iters", type=int, default=20, help="timed iterations per size")
    p.add_argument("--warmup", type=int, default=5, help="untimed iterations per size")
    p.add_argument("--timeout", type=float, default=600.0, help="limit (s) of one side's run")
    p.add_argument("--bind-to", choices=_launch.BIND_CHOICES, default="core")
    p.add_argument("--cache", default=_builds.DEFAULT_CACHE, help="where revisions are built")
    p.add_argument("--json", metavar="PATH", help="write every round's results here")
    for side in SIDES:
        p.add_argument(
            f"--env-{side.lower()}",
            default="",
            metavar="K=V[,K=V]",
            help=f"environment variables for side {side}'s ranks only",
        )
    args = p.parse_args(argv)
    args.side_env = {}
    for side in SIDES:
        given = getattr(args, f"env_{side.lower()}")
        pairs = [kv.strip() for kv in given.split(",") if kv.strip()]
        if any("=" not in kv or kv.startswith("=") for kv in pairs):
            p.error(f"--env-{side.lower()} {given!r}: give KEY=VALUE pairs, comma-separated")
        args.side_env[side] = dict(kv.split("=", 1) for kv in pairs)
    try:
        args.size_list = parse_sizes(args.sizes)
        args.np_list = [int(n) for n in args.np.split(",")]
    except ValueError as exc:
        p.error(str(exc))
    args.transport_list = [t.strip() for t in args.transports.split(",") if t.strip()]
    bad = [t for t in args.transport_list if t not in TRANSPORTS]
    if bad or not args.transport_list:
        p.error(f"--transports: {bad or 'none'}; choose from {', '.join(TRANSPORTS)}")
    if min(args.np_list) < 1 or args.rounds < 1 or args.iters < 1 or args.warmup < 0:
        p.error("--np, --rounds and --iters must be >= 1, --warmup >= 0")
    return args


def _spec(transport: str, side: str, build: _builds.Build, env: dict[str, str]) -> _registry.Spec:
    base = _registry.by_name(f"pytfcomm-{transport}")
    assert base is not None
    return replace(
        base,
        name=f"pytfcomm-{transport}@{side}",
        pythonpath=build.pythonpath,
        env={**base.env, **env},
    )


def _check_build(run: dict[str, Any], build: _builds.Build) -> str | None:
    """Why this run did not use its side's build, or None: a comparison of two copies of
    one package that claims to compare two builds would be a silent wrong result."""
    path = run.get("worker_meta", {}).get("path")
    if not build.pythonpath or path is None:
        return None
    if os.path.abspath(path) != os.path.join(build.pythonpath, "pytfcomm"):
        return f"its workers imported pytfcomm from {path}, not from {build.pythonpath}"
    return None


def run_rounds(args: argparse.Namespace, builds: dict[str, _builds.Build]) -> dict[str, Any]:
    """Every round of every case; {case key: {side: [summary per round]}}."""
    worker_args = [
        "--sizes", ",".join(map(str, args.size_list)), "--iters", str(args.iters),
        "--warmup", str(args.warmup), "--large-warmup", "2", "--large-bytes", str(16 << 20),
    ]  # fmt: skip
    cpus = {n: _launch.bindings(args.bind_to, n) for n in args.np_list}
    out: dict[str, Any] = {}
    for k in range(args.rounds):
        order = SIDES if k % 2 == 0 else SIDES[::-1]
        for n in args.np_list:
            for t in args.transport_list:
                key = f"{n}/{t}"
                for side in order:
                    spec = _spec(t, side, builds[side], args.side_env[side])
                    launch = _launch.run_backend(spec, n, worker_args, args.timeout, cpus=cpus[n])
                    run = _report.summarize(spec.name, launch, n, args.size_list)
                    wrong = _check_build(run, builds[side])
                    if wrong:
                        run["status"], run["reason"] = "failed", wrong
                    print(
                        f"[ab] round {k + 1}/{args.rounds} N={n} {t} {side}: {run['status']} "
                        f"in {run['wall_s']:.1f} s {run['reason']}",
                        file=sys.stderr,
                        flush=True,
                    )
                    out.setdefault(key, {}).setdefault(side, []).append(run)
    return out


def _num(us: float) -> str:
    """docs/benchmarks.md's style: 3.5, 42.6, 214, 3,065."""
    return f"{us:.1f}" if us < 100 else f"{us:,.0f}"


def _size(n: int) -> str:
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n} B"


def rows(
    runs: dict[str, Any], args: argparse.Namespace
) -> list[tuple[int, str, int, dict[str, Any]]]:
    """(N, transport, size, cells) per table row; cells: each side's median, the ratio of
    the medians and the per-round ratios (empty where a side has no good time)."""
    table = []
    for n in args.np_list:
        for t in args.transport_list:
            per_side = {s: _report.combine_rounds(runs[f"{n}/{t}"][s], n) for s in SIDES}
            for nbytes in args.size_list:
                got = {s: per_side[s]["rows"].get(nbytes) for s in SIDES}
                cells: dict[str, Any] = {"ok": all(r and r["ok"] for r in got.values())}
                if cells["ok"]:
                    a, b = got["A"], got["B"]
                    cells.update(
                        a_us=a["time_us"],
                        b_us=b["time_us"],
                        ratio=b["time_us"] / a["time_us"],
                        per_round=[
                            y / x for x, y in zip(a["round_us"], b["round_us"], strict=True)
                        ],
                    )
                table.append((n, t, nbytes, cells))
    return table


def markdown(
    table: list[tuple[int, str, int, dict[str, Any]]],
    args: argparse.Namespace,
    builds: dict[str, _builds.Build],
    meta: dict[str, Any],
) -> str:
    """The table and its header, as docs/benchmarks.md has them."""
    same = builds["A"].label == builds["B"].label and args.side_env["A"] == args.side_env["B"]
    lines = [
        "| | |",
        "|---|---|",
        *(
            f"| {s} | `{builds[s].given}` ({builds[s].label})"
            + "".join(f", `{k}={v}`" for k, v in args.side_env[s].items())
            + " |"
            for s in SIDES
        ),
        f"| date | {meta['date']} |",
        f"| machine | {meta['hostname']}: {meta['nproc']} CPUs, {meta['cpu']} |",
        f"| command | `{meta['command']}` |",
    ]
    if args.json:
        lines.append(f"| raw | [{os.path.basename(args.json)}]({args.json}) |")
    lines += [
        "",
        f"All-reduce float32 sum, time in µs: the median over {args.rounds} rounds of each "
        f"round's median over {args.iters} iterations of the slowest rank"
        f"{', every rank bound to its cores' if args.bind_to == 'core' else ''}; A and B run "
        "side by side in each round, the order flipping each round. B / A above 1: B is "
        "slower. `per round`: the lowest and highest of each round's B / A."
        + (" A and B are the same build: the spread is the noise." if same else ""),
        "",
        "| N | transport | size | A | B | B / A | per round |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for n, t, nbytes, c in table:
        if not c["ok"]:
            cells = "failed | failed | — | —"
        else:
            pr = c["per_round"]
            cells = (
                f"{_num(c['a_us'])} | {_num(c['b_us'])} | {c['ratio']:.2f} | "
                f"{min(pr):.2f}-{max(pr):.2f}"
            )
        lines.append(f"| {n} | {TRANSPORTS[t]} | {_size(nbytes)} | {cells} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.monotonic()
    try:
        builds = dict(zip(SIDES, _builds.resolve([args.a, args.b], args.cache), strict=True))
    except (ValueError, RuntimeError) as exc:
        print(f"benchmarks.ab: {exc}", file=sys.stderr)
        return 2
    runs = run_rounds(args, builds)
    table = rows(runs, args)
    invocation = ["-m", "benchmarks.ab", *(sys.argv[1:] if argv is None else argv)]
    meta = {
        **_host.metadata(),
        "command": shlex.join(["python", *invocation]),
        "builds": {s: vars(b) for s, b in builds.items()},
        "env": args.side_env,
        "np": args.np_list,
        "transports": args.transport_list,
        "sizes": args.size_list,
        "rounds": args.rounds,
        "iters": args.iters,
        "warmup": args.warmup,
        "bind_to": args.bind_to,
    }
    print(markdown(table, args, builds, meta))
    notes = _report.notes([r for case in runs.values() for s in SIDES for r in case[s]], {})
    if notes:
        print("\n" + notes)
    meta["wall_s"] = round(time.monotonic() - t0, 1)
    if args.json:
        doc = {
            "meta": meta,
            "table": [{"np": n, "transport": t, "bytes": b, **c} for n, t, b, c in table],
            "runs": {
                key: {s: [_report.as_json(r) for r in rs] for s, rs in case.items()}
                for key, case in runs.items()
            },
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    ok = all(c["ok"] for *_, c in table) and all(
        r["status"] == "ok" and not r["reason"]
        for case in runs.values()
        for s in SIDES
        for r in case[s]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
