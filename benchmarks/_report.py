"""Turn per-rank timings into rows (nccl-tests conventions), a text table, JSON and a plot.

time   = median over iterations of (max over ranks of that iteration's wall time)
algbw  = bytes / time                       (GB/s, 1 GB = 1e9 bytes)
busbw  = algbw * 2(n-1)/n                   (all-reduce bus bandwidth, as in nccl-tests)
ratio  = peer_time / ref_time               (> 1: the reference backend, pytfcomm, is faster)
"""

from __future__ import annotations

import json
import statistics
from typing import Any

from benchmarks._launch import LaunchResult
from benchmarks._units import fmt_bytes

BUSY_WARN = 0.15  # host CPU share busy just before/after a backend that earns a warning


def summarize(name: str, launch: LaunchResult, nproc: int, sizes: list[int]) -> dict[str, Any]:
    """Per-size statistics of one backend run; sizes not measured by every rank are absent."""
    ranks = launch.ranks
    rows: dict[int, dict[str, Any]] = {}
    complete = len(ranks) == nproc
    nres = min((len(d["results"]) for d in ranks), default=0) if complete else 0
    for i in range(nres):
        per_rank = [d["results"][i] for d in ranks]
        nbytes = per_rank[0]["bytes"]
        iters = min(len(r["times_ns"]) for r in per_rank)
        iter_max = [max(r["times_ns"][k] for r in per_rank) / 1e3 for k in range(iters)]
        errors = [
            f"rank {d['rank']}: {r['error']}"
            for d, r in zip(ranks, per_rank, strict=True)
            if r["error"]
        ]
        t_us = statistics.median(iter_max)
        algbw = nbytes / (t_us * 1e-6) / 1e9
        rows[nbytes] = {
            "bytes": nbytes,
            "count": per_rank[0]["count"],
            "ok": not errors,
            "errors": errors,
            "time_us": t_us,
            "min_us": min(iter_max),
            "max_us": max(iter_max),
            "algbw_gbs": algbw,
            "busbw_gbs": algbw * 2 * (nproc - 1) / nproc,
            "iters": iters,
            "warmup": per_rank[0]["warmup"],
            "iter_max_us": iter_max,
            "rank0_us": [t / 1e3 for t in per_rank[0]["times_ns"]],
        }
    fatal = next((d["fatal"] for d in ranks if d.get("fatal")), None)
    return {
        "name": name,
        "status": launch.status,
        "reason": launch.reason,
        "wall_s": round(launch.wall_s, 2),
        "command": launch.command,
        "sizes": sizes,
        "setup_s": max((d.get("setup_s", 0.0) for d in ranks), default=None),
        "worker_meta": ranks[0].get("meta", {}) if ranks else {},
        "rank_cpus": [d.get("cpus") for d in ranks],  # each rank's CPUs, as it saw them
        "fatal": fatal,
        "log_tail": launch.log_tail,
        "rows": rows,
    }


def combine_rounds(rounds: list[dict[str, Any]], nproc: int) -> dict[str, Any]:
    """One backend's summaries from ``--rounds`` runs as one summary.

    A size's time is the median over the rounds of each round's time (itself a
    median over iterations); ``round_us`` keeps every round's, in order, for
    :func:`rounds_table`. A size missing from a round, or wrong in any, is not
    ok; a round that failed makes the whole backend's status its status.
    """
    first = rounds[0]
    failed = next((r for r in rounds if r["status"] != "ok" or r["reason"]), None)
    worst = failed or first
    out = {
        **first,
        "status": worst["status"],
        "reason": worst["reason"],
        "fatal": worst["fatal"],
        "log_tail": worst["log_tail"],
        "wall_s": round(sum(r["wall_s"] for r in rounds), 2),
        "rounds": len(rounds),
        "rows": {},
    }
    for nbytes in first["sizes"]:
        per = [r["rows"].get(nbytes) for r in rounds]
        if any(row is None for row in per):
            continue  # a round did not measure it: shown as n/a, the failure in the notes
        errors = [e for row in per for e in row["errors"]]
        times = [row["time_us"] for row in per]
        t_us = statistics.median(times)
        algbw = nbytes / (t_us * 1e-6) / 1e9
        out["rows"][nbytes] = {
            **per[0],
            "ok": not errors,
            "errors": errors,
            "time_us": t_us,
            "min_us": min(row["min_us"] for row in per),
            "max_us": max(row["max_us"] for row in per),
            "algbw_gbs": algbw,
            "busbw_gbs": algbw * 2 * (nproc - 1) / nproc,
            "round_us": times,
            "iter_max_us": [t for row in per for t in row["iter_max_us"]],
            "rank0_us": [t for row in per for t in row["rank0_us"]],
        }
    return out


def rounds_table(runs: list[dict[str, Any]], sizes: list[int], ref: str) -> str:
    """Each peer's time over the reference's, round by round: min / median / max (rounds).

    Round i of a peer is paired with round i of the reference, run seconds
    apart, so a slow stretch of the machine lands in a round rather than in one
    backend's whole run.
    """
    ref_run = next((r for r in runs if r["name"] == ref), None)
    peers = [r for r in runs if r is not ref_run]
    if ref_run is None or not peers:
        return ""
    width = max(18, *(len(r["name"]) for r in peers))
    lines = [
        f"# per round: peer time / {ref} time of the same round, min / median / max (rounds)",
        f"{'size':>13}" + "".join(f" {r['name']:>{width}}" for r in peers),
    ]
    for nbytes in sizes:
        line = f"{nbytes:>9} {fmt_bytes(nbytes):>4}".rjust(13)
        ref_row = ref_run["rows"].get(nbytes)
        for r in peers:
            row = r["rows"].get(nbytes)
            cell = "-"
            if row and ref_row and row["ok"] and ref_row["ok"]:
                xs = [p / q for p, q in zip(row["round_us"], ref_row["round_us"], strict=True)]
                med = statistics.median(xs)
                cell = f"{min(xs):.2f}/{med:.2f}/{max(xs):.2f} ({len(xs)})"
            line += f" {cell:>{width}}"
        lines.append(line)
    return "\n".join(lines)


def _cell(run: dict[str, Any], nbytes: int) -> tuple[str, str, float | None]:
    """(time, busbw, time_us or None) for one backend at one size."""
    row = run["rows"].get(nbytes)
    if row is None:
        return ("skip", "-", None) if nbytes not in run["sizes"] else ("n/a", "-", None)
    if not row["ok"]:
        return "FAILED", "-", None
    return f"{row['time_us']:.1f}", f"{row['busbw_gbs']:.2f}", row["time_us"]


def table(runs: list[dict[str, Any]], sizes: list[int], ref: str | None) -> str:
    """nccl-tests-like text table: one row per size, time/busbw per backend, peer/ref ratios."""
    ref_run = next((r for r in runs if r["name"] == ref), None)
    groups = []  # (name, [(header, width)]) per backend
    for r in runs:
        cols = [("time(us)", 10), ("busbw", 7)]
        if ref_run and r is not ref_run:
            cols.append(("ratio", 6))
        groups.append((r["name"], cols))
    head1 = " " * 24 + "".join(
        "  " + name.center(sum(w + 1 for _, w in cols) - 1, "-") for name, cols in groups
    )
    head2 = f"{'size':>13} {'count':>10}" + "".join(
        "  " + " ".join(h.rjust(w) for h, w in cols) for _, cols in groups
    )
    lines = [head1, head2]
    for nbytes in sizes:
        line = f"{nbytes:>9} {fmt_bytes(nbytes):>4}".rjust(13) + f" {nbytes // 4:>10}"
        ref_t = _cell(ref_run, nbytes)[2] if ref_run else None
        for r, (_, cols) in zip(runs, groups, strict=True):
            t, bw, t_us = _cell(r, nbytes)
            vals = [t, bw]
            if len(cols) == 3:
                vals.append(f"{t_us / ref_t:.2f}" if t_us and ref_t else "-")
            line += "  " + " ".join(v.rjust(w) for v, (_, w) in zip(vals, cols, strict=True))
        lines.append(line)
    return "\n".join(lines)


def limit_table(
    runs: list[dict[str, Any]], sizes: list[int], limits: Any, kinds: dict[str, str]
) -> str:
    """The machine's limits at each size, then each backend's busbw as a fraction of its own.

    ``limits`` is a benchmarks._limits.Limits; ``kinds`` maps a backend to the
    limit its transport is held against ("memcpy" or "tcp"). Shared-memory
    backends are also held against ``bound``, what memory allows an
    all-reduce of this many ranks (benchmarks/_limits.py).
    """
    from benchmarks._limits import fmt_gbs

    # (backend, what its busbw is divided by): its transport's limit, and
    # for shared memory the all-reduce bound too.
    cols = [(r, kinds.get(r["name"], "tcp")) for r in runs]
    cols += [(r, "bound") for r in runs if kinds.get(r["name"], "tcp") == "memcpy"]
    width = max([8, *(len(r["name"]) for r in runs)])
    head = f"{'size':>13} {'memcpy':>8} {'tcp':>8} {'bound':>8}" + "".join(
        f" {r['name'] + '/' + k:>{width + 7}}" for r, k in cols
    )
    lines = [
        "# limit: this machine in the same run, GB/s: one core's memcpy, one loopback TCP "
        "stream between two processes,",
        f"# bound: the most busbw memory allows a {limits.ranks}-rank all-reduce on one host "
        "(every rank reads its input and writes its output; cores copying at once);",
        "# then each backend's busbw / the limit of its transport (shared memory: memcpy, and "
        "the bound)",
        head,
    ]
    for nbytes in sizes:
        line = f"{nbytes:>9} {fmt_bytes(nbytes):>4}".rjust(13)
        mem, tcp = limits.memcpy_gbs.get(nbytes), limits.tcp_gbs.get(nbytes)
        line += f" {fmt_gbs(mem):>8} {fmt_gbs(tcp):>8} {fmt_gbs(limits.bound(nbytes)):>8}"
        for r, k in cols:
            row = r["rows"].get(nbytes)
            lim = limits.bound(nbytes) if k == "bound" else limits.for_kind(k, nbytes)
            frac = row["busbw_gbs"] / lim if row and row["ok"] and lim else None
            line += f" {'-' if frac is None else f'{frac:.2f}':>{width + 7}}"
        lines.append(line)
    lines.extend(f"# {e}" for e in limits.errors)
    return "\n".join(lines)


def notes(runs: list[dict[str, Any]], skipped: dict[str, str]) -> str:
    """Skipped backends, failed/timed-out runs and wrong results, spelled out."""
    out = [f"skipped {name}: {why}" for name, why in skipped.items()]
    for r in runs:
        for when in ("before", "after"):
            busy = r.get(f"host_busy_{when}")
            if busy is not None and busy > BUSY_WARN:
                out.append(
                    f"warning {r['name']}: host CPUs were {busy:.0%} busy (other processes) "
                    f"just {when} it ran; its numbers may be noisy"
                )
        if r["status"] != "ok" or r["reason"]:
            out.append(f"{r['name']}: {r['status'].upper()} {r['reason']} after {r['wall_s']}s")
            if r["fatal"]:
                out.append("  " + r["fatal"].strip().splitlines()[-1])
            if r["status"] != "ok" and r["log_tail"]:
                out.extend("  | " + ln for ln in r["log_tail"].rstrip().splitlines()[-20:])
        for row in r["rows"].values():
            for e in row["errors"]:
                out.append(f"{r['name']} {fmt_bytes(row['bytes'])}: WRONG RESULT {e}")
    return "\n".join(out)


def as_json(run: dict[str, Any]) -> dict[str, Any]:
    """One summary as JSON holds it: its rows a list (JSON keys cannot be sizes)."""
    return {**run, "rows": list(run["rows"].values())}


def write_json(
    path: str, meta: dict[str, Any], runs: list[dict[str, Any]], skipped: dict[str, str]
) -> None:
    doc = {
        "meta": meta,
        "skipped": skipped,
        "backends": {r["name"]: as_json(r) for r in runs},
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


def plot(path: str, runs: list[dict[str, Any]], nproc: int, machine: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    ticks: set[int] = set()
    for r in runs:
        pts = sorted((b, row["busbw_gbs"]) for b, row in r["rows"].items() if row["ok"])
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=r["name"])
            ticks.update(p[0] for p in pts)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")  # small and large sizes differ by orders of magnitude
    ax.set_xticks(sorted(ticks), [fmt_bytes(t) for t in sorted(ticks)])
    ax.set_xlabel("message size (bytes, float32)")
    ax.set_ylabel("busbw (GB/s)  = bytes/time * 2(n-1)/n")
    ax.set_title(f"all-reduce sum, N={nproc} processes, {machine}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
