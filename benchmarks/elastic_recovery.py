"""How long the survivors of a SIGKILLed rank take to go on, under ``pytfcomm-run --elastic``.

    python -m benchmarks.elastic_recovery [--np 3,4] [--transports tcp,shm]
        [--loops numpy,hvd,strategy] [--repeat 3] [--out elastic_recovery.json]

Each run is a real job: ``pytfcomm-run -np N --elastic --min-np N-1`` of
``benchmarks._elastic_worker`` (one job of ``pytfcomm._launch.local``: bounded by
``--timeout``, its whole process tree killed on failure). At step ``--kill-at`` the last
rank announces its pid and waits; ``--settle`` seconds later (the others are then waiting
in that step's collective) the driver SIGKILLs it. Per run, over the survivors (the
slowest one counts; each survivor's own figures are in the JSON):

* ``detection``: the SIGKILL -> the survivors' recoverable error;
* ``reform``: that error -> the new communicator (``reform()`` returned; under
  ``hvd.elastic.run`` its reset callback ran);
* ``next step``: the SIGKILL -> the first step completed in the new membership;
* ``beyond detection``: next step - detection, what recovery itself costs.

A run counts only if the job went on in place and computed the right thing: the launcher
exited 0 having gone on without the victim (no restart), every survivor ran in its first
process, re-formed once (epoch 1), saw the expected (rank, size) at every step, and ended
with the values of :mod:`benchmarks._elastic_ref`'s reference for that membership
schedule (bitwise for the NumPy loop, within the stated tolerance for TF, bitwise equal
among the survivors). Anything else is a ``failed`` or ``wrong`` run: it is kept in the
JSON with its reason and never enters a cell's times.

Runs go round-robin over the cells (every cell once, then again), so a slow stretch of
a loaded machine spreads over the cells. Before each run the host's CPU use by others
is sampled (``host_busy``); timings are only comparable on an idle host.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import _elastic_ref as ref
from benchmarks._host import busy_fraction, metadata
from benchmarks._launch import BIND_CHOICES, local_jobs
from benchmarks._registry import REPO_ROOT, import_installed_pytfcomm, worker_pythonpath

LOOPS = ("numpy", "hvd", "hvd-fn", "strategy")
TRANSPORTS = ("tcp", "shm")
METRICS = ("detection_s", "reform_s", "next_step_s", "beyond_s")
METRIC_NAMES = ("detection", "reform", "next step", "beyond detection")
# The strategy loop's rebuild, in order: what each mark follows (docs/elastic.md's recipe).
PHASES = ("error", "reformed", "built", "synced", "data", "resumed", "batch", "next_step")
WORKER = "benchmarks._elastic_worker"
TARGET_BEYOND_S = 2.0  # issue 55's target for recovery beyond detection
TICK_S = 0.02  # how often the driver looks for the victim


def _csv(kind: Callable[[str], Any], allowed: Sequence[Any] | None = None) -> Callable:
    def parse(text: str) -> list[Any]:
        items = [kind(x) for x in text.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        bad = [x for x in items if allowed is not None and x not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(f"{bad} not in {list(allowed or [])}")
        return items

    return parse


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The options; refuses combinations that cannot run (the victim must be lost
    after some steps and before the last, with at least 2 ranks left)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", type=_csv(int), default=[3, 4], help="rank counts (default 3,4)")
    ap.add_argument("--transports", type=_csv(str, TRANSPORTS), default=list(TRANSPORTS))
    ap.add_argument(
        "--loops", type=_csv(str, LOOPS), default=["numpy", "hvd", "strategy"],
        help=f"of {','.join(LOOPS)} (default numpy,hvd,strategy)",
    )  # fmt: skip
    ap.add_argument("--repeat", type=int, default=3, help="runs per cell (default 3)")
    ap.add_argument("--steps", type=int, default=8, help="steps per run (default 8)")
    ap.add_argument("--kill-at", type=int, default=4, help="the step the victim dies in")
    ap.add_argument(
        "--settle", type=float, default=0.3,
        help="seconds between the victim's announcement and its SIGKILL (default 0.3)",
    )  # fmt: skip
    ap.add_argument("--timeout", type=float, default=300, help="limit (s) of one run")
    ap.add_argument("--bind-to", choices=BIND_CHOICES, default="none")
    ap.add_argument("--out", help="write every run and the summary here (JSON)")
    ap.add_argument("--quiet", action="store_true", help="no line per run on stderr")
    args = ap.parse_args(argv)
    if any(n < 3 for n in args.np):
        ap.error(f"--np needs 3 or more ranks (2 or more survive), got {args.np}")
    if args.repeat < 1:
        ap.error(f"--repeat must be at least 1, got {args.repeat}")
    if not 1 <= args.kill_at < args.steps:
        ap.error(f"--kill-at must be in 1..{args.steps - 1} (--steps {args.steps})")
    if args.timeout <= 0 or args.settle < 0:
        ap.error("--timeout must be positive and --settle not negative")
    return args


def cells(args: argparse.Namespace) -> list[tuple[str, int, str]]:
    """(loop, ranks, transport) of every cell, in report order."""
    return [(lp, n, t) for lp in args.loops for n in args.np for t in args.transports]


# --- one run ---------------------------------------------------------------------------


def _launcher() -> list[str]:
    script = Path(sys.executable).with_name("pytfcomm-run")
    return [str(script)] if script.exists() else [sys.executable, "-m", "pytfcomm.launcher"]


def _job_env(transport: str, pythonpath: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTFCOMM_", "SLURM_", "OMPI_", "PMI", "TF_CONFIG"))
    }
    env.update(
        PYTFCOMM_TRANSPORT=transport, PYTHONPATH=pythonpath, TF_CPP_MIN_LOG_LEVEL="2",
        OPENBLAS_NUM_THREADS="1",
    )  # fmt: skip
    return env


def _is_our_worker(pid: int, out: Path) -> bool:
    """Whether ``pid`` is this run's worker (its command line names our scratch dir)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return WORKER.encode() in argv and str(out).encode() in argv


class Killer:
    """``local.run``'s watch: SIGKILLs the announced victim ``settle`` s after it wrote
    its pid, once, and remembers when (``time.time()``, the workers' clock)."""

    def __init__(self, out: Path, settle: float) -> None:
        self.out, self.settle = out, settle
        self.seen_at: float | None = None
        self.t_kill: float | None = None
        self.problem = ""

    def __call__(self) -> str | None:
        if self.t_kill is not None:
            return None
        victim = self.out / "victim"
        if not victim.exists():
            return None
        now = time.monotonic()
        self.seen_at = self.seen_at or now
        if now - self.seen_at < self.settle:
            return None
        pid = int(victim.read_text())
        if not _is_our_worker(pid, self.out):
            self.problem = f"the victim's pid {pid} is not this run's worker; nothing killed"
            return self.problem
        self.t_kill = time.time()
        os.kill(pid, signal.SIGKILL)
        return None


def run_once(
    loop: str, n: int, transport: str, args: argparse.Namespace, scratch: Path
) -> dict[str, Any]:
    """One job of ``loop`` with ``n`` ranks over ``transport``; its record (see check)."""
    out = Path(tempfile.mkdtemp(prefix=f"{loop}-{n}-{transport}-", dir=scratch))
    env = _job_env(transport, worker_pythonpath(str(out / "py")))
    argv = [
        *_launcher(), "-np", str(n), "--elastic", "--min-np", str(n - 1),
        "--bind-to", args.bind_to, sys.executable, "-u", "-m", WORKER, loop, str(out),
        str(args.steps), str(args.kill_at),
    ]  # fmt: skip
    killer = Killer(out, args.settle)
    record: dict[str, Any] = {"loop": loop, "np": n, "transport": transport}
    record["host_busy"] = busy_fraction()
    job = local_jobs().run(
        [argv], [env], cwd=out, timeout_s=args.timeout, logs=[out / "launcher.log"],
        watch=killer, tick_s=TICK_S,
    )  # fmt: skip
    log = (out / "launcher.log").read_text(errors="replace")
    record.update(wall_s=round(job.wall_s, 3), exit_code=job.codes[0] if job.codes else None)
    if killer.problem or job.status != "ok" or killer.t_kill is None:
        why = killer.problem or job.reason or "the victim never announced itself"
        record.update(status="timeout" if job.status == "timeout" else "failed", reason=why)
    else:
        record.update(check(loop, n, args.steps, args.kill_at, out, log, killer.t_kill))
    if record["status"] != "ok":
        record["log_tail"] = "\n".join(log.splitlines()[-40:])
    return record


# --- checks and figures ----------------------------------------------------------------


def _results(out: Path, n: int) -> list[dict[str, Any]]:
    return [json.loads((out / f"result{i}.json").read_text()) for i in range(n - 1)]


def _starts(out: Path, worker: int) -> list[int]:
    lines = (out / f"starts{worker}.jsonl").read_text().splitlines()
    return [json.loads(line)["pid"] for line in lines]


def values_check(loop: str, n: int, steps: int, at: int, values: list[list[Any]]) -> dict[str, Any]:
    """One survivor's final values against the reference of the membership schedule."""
    members = ref.schedule(n, steps, at)
    if loop == "numpy":
        want = [x.hex() for x in ref.numpy_reference(members)]
        ok = values == [want]
        return {"ok": ok, "rule": "bitwise", "got": values[0], "want": want}
    if loop in ("hvd", "hvd-fn"):
        got, want = np.asarray(values[0], np.float32), ref.hvd_reference(members)
        rtol, atol = ref.HVD_RTOL, 0.0
    else:  # kernel, bias, then the optimizer's: iterations, learning rate, two momenta
        if len(values) != 6 or values[2] != [float(steps)]:
            return {"ok": False, "rule": "6 variables, iterations == steps", "got": values}
        got = np.concatenate([np.asarray(values[i], np.float64) for i in (0, 1, 4, 5)])
        want = np.concatenate(ref.strategy_reference(steps))
        rtol, atol = ref.STRATEGY_RTOL, ref.STRATEGY_ATOL
    err = np.abs(got.astype(np.float64) - want)
    ok = bool(np.all(err <= atol + rtol * np.abs(want)))
    return {
        "ok": ok, "rule": f"rtol {rtol:g}, atol {atol:g}", "max_abs_err": float(err.max()),
        "got": got.tolist(), "want": want.tolist(),
    }  # fmt: skip


def check(
    loop: str, n: int, steps: int, at: int, out: Path, log: str, t_kill: float
) -> dict[str, Any]:
    """Whether the job went on in place with the right values, and its figures."""
    if "restarting the job" in log or f"epoch 1: {n - 1} rank(s) go on" not in log:
        return {"status": "failed", "reason": "the launcher did not go on in place"}
    if (out / f"result{n - 1}.json").exists():
        return {"status": "failed", "reason": "the victim finished: it was not killed in time"}
    missing = [i for i in range(n - 1) if not (out / f"result{i}.json").exists()]
    if missing:
        return {"status": "failed", "reason": f"no result from worker(s) {missing}"}
    results = _results(out, n)
    survivors = []
    for i, res in enumerate(results):
        want_seen = [[i, n]] * at + [[i, n - 1]] * (steps - at)
        problems = []
        if _starts(out, i) != [res["pid"]]:
            problems.append("restarted")
        if res["epoch"] != 1:
            problems.append(f"epoch {res['epoch']}")
        if [s[:2] for s in res["seen"]] != want_seen:
            problems.append(f"memberships {[s[:2] for s in res['seen']]}")
        if not {"error", "reformed", "next_step"} <= res["times"].keys():
            problems.append(f"times {sorted(res['times'])}")
        if problems:
            return {"status": "failed", "reason": f"worker {i}: {', '.join(problems)}"}
        survivors.append(_figures(res, t_kill))
    checks = [values_check(loop, n, steps, at, res["values"]) for res in results]
    same = all(res["values"] == results[0]["values"] for res in results)
    record: dict[str, Any] = {"t_kill": t_kill, "survivors": survivors}
    record["check"] = {"survivors_equal": same, "reference": checks}
    slowest = max(survivors, key=lambda s: s["next_step_s"])
    record.update({m: max(s[m] for s in survivors) for m in METRICS[:3]})
    record["beyond_s"] = record["next_step_s"] - record["detection_s"]
    record["phases"] = slowest["phases"]
    if not same or not all(c["ok"] for c in checks):
        record.update(status="wrong", reason="the survivors' values differ from the reference")
    else:
        record["status"] = "ok"
    return record


def _figures(res: dict[str, Any], t_kill: float) -> dict[str, Any]:
    t = res["times"]
    marks = [p for p in PHASES if p in t]
    phases = {f"{a}->{b}": t[b] - t[a] for a, b in itertools.pairwise(marks)}
    durations = [s[2] for s in res["seen"]]
    return {
        "worker": res["worker"], "pid": res["pid"], "error_type": t.get("error_type"),
        "detection_s": t["error"] - t_kill, "reform_s": t["reformed"] - t["error"],
        "next_step_s": t["next_step"] - t_kill, "phases": phases,
        "first_step_s": durations[0], "steady_step_s": statistics.median(durations[1:]),
    }  # fmt: skip


# --- summary and report ----------------------------------------------------------------


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cell: how many runs were ok, and each metric's median, min and max over them."""
    out = []
    keys = sorted({(r["loop"], r["np"], r["transport"]) for r in runs}, key=_cell_order)
    for loop, n, transport in keys:
        mine = [r for r in runs if (r["loop"], r["np"], r["transport"]) == (loop, n, transport)]
        ok = [r for r in mine if r["status"] == "ok"]
        cell: dict[str, Any] = {"loop": loop, "np": n, "transport": transport}
        cell.update(runs=len(mine), ok=len(ok))
        cell["not_ok"] = {r["status"]: sum(x["status"] == r["status"] for x in mine)
                          for r in mine if r["status"] != "ok"}  # fmt: skip
        for m in METRICS:
            vals = [r[m] for r in ok]
            cell[m] = _stats(vals)
        phases = sorted({p for r in ok for p in r.get("phases", {})}, key=_phase_order)
        cell["phases"] = {p: _stats([r["phases"][p] for r in ok if p in r["phases"]])
                          for p in phases}  # fmt: skip
        beyond = cell["beyond_s"]
        cell["meets_target"] = beyond is not None and beyond["max"] < TARGET_BEYOND_S
        out.append(cell)
    return out


def _cell_order(key: tuple[str, int, str]) -> tuple[int, int, int]:
    loop, n, transport = key
    return LOOPS.index(loop), n, TRANSPORTS.index(transport)


def _phase_order(name: str) -> int:
    return PHASES.index(name.split("->")[0])


def _stats(vals: list[float]) -> dict[str, float] | None:
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}


def _fmt(s: dict[str, float] | None) -> str:
    if s is None:
        return "—"
    return f"{s['median']:.3f} ({s['min']:.3f}-{s['max']:.3f})"


LOOP_NAMES = {
    "numpy": "NumPy, `reform()`",
    "hvd": "`hvd.elastic.run`, TF eager",
    "hvd-fn": "`hvd.elastic.run`, `tf.function`",
    "strategy": "`MultiWorkerMirroredStrategy` loop",
}


def table(summary: list[dict[str, Any]]) -> str:
    """The markdown table of docs/benchmarks.md: seconds, median (min-max) over ok runs."""
    head = ("loop", "ranks", "transport", "runs ok", *METRIC_NAMES)
    lines = ["| " + " | ".join(head) + " |", "|---|---:|---|---:|---:|---:|---:|---:|"]
    for c in summary:
        runs = f"{c['ok']}/{c['runs']}"
        if c["not_ok"]:
            runs += " (" + ", ".join(f"{k} {v}" for k, v in sorted(c["not_ok"].items())) + ")"
        cols = [_fmt(c[m]) for m in METRICS]
        lines.append(
            f"| {LOOP_NAMES[c['loop']]} | {c['np']} | {c['transport']} | {runs} | "
            + " | ".join(cols) + " |"
        )  # fmt: skip
    return "\n".join(lines)


def phase_table(summary: list[dict[str, Any]]) -> str:
    """Where the strategy loop's recovery goes (median seconds of each part)."""
    rows = [c for c in summary if c["loop"] == "strategy" and c["phases"]]
    if not rows:
        return ""
    names = [f"{a}->{b}" for a, b in itertools.pairwise(PHASES)]
    lines = ["| ranks | transport | " + " | ".join(names) + " |",
             "|---:|---|" + "---:|" * len(names)]  # fmt: skip
    for c in rows:
        cols = [f"{c['phases'][p]['median']:.3f}" if p in c["phases"] else "—" for p in names]
        lines.append(f"| {c['np']} | {c['transport']} | " + " | ".join(cols) + " |")
    return "\n".join(lines)


def _commit() -> str:
    """This checkout's commit, ``+dirty`` with uncommitted changes to tracked files."""

    def git(*cmd: str) -> str:
        return subprocess.run(
            ["git", "-C", REPO_ROOT, *cmd], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()

    try:
        head, dirty = git("rev-parse", "--short", "HEAD"), git("status", "--porcelain", "-uno")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def _progress(i: int, total: int, r: dict[str, Any]) -> str:
    what = f"[{i}/{total}] {r['loop']} np={r['np']} {r['transport']}: {r['status']}"
    if r["status"] == "ok":
        return (f"{what}, detection {r['detection_s']:.3f} s, next step "
                f"{r['next_step_s']:.3f} s, beyond {r['beyond_s']:.3f} s")  # fmt: skip
    return f"{what} ({r.get('reason', '')})"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    pytfcomm = import_installed_pytfcomm()
    todo = cells(args)
    meta = metadata()
    command = " ".join(["python -m benchmarks.elastic_recovery", *(argv or sys.argv[1:])])
    meta.update(commit=_commit(), pytfcomm=pytfcomm.__file__, command=command)
    runs: list[dict[str, Any]] = []
    total = len(todo) * args.repeat
    with tempfile.TemporaryDirectory(prefix="elastic-recovery-") as scratch:
        for rep in range(args.repeat):  # round-robin: every cell once per repetition
            for loop, n, transport in todo:
                r = run_once(loop, n, transport, args, Path(scratch))
                r["repetition"] = rep
                runs.append(r)
                if not args.quiet:
                    print(_progress(len(runs), total, r), file=sys.stderr, flush=True)
    meta["loadavg_after"] = os.getloadavg()
    summary = summarize(runs)
    text = table(summary)
    print(text)
    phases = phase_table(summary)
    if phases:
        print("\nstrategy loop, where the recovery goes (median s):\n" + phases)
    busy = [r["host_busy"] for r in runs if r.get("host_busy") is not None]
    if busy and max(busy) > 0.15:
        print(f"\nwarning: other processes used up to {max(busy):.0%} of the CPUs before a run; "
              "rerun on an idle host for figures to compare", file=sys.stderr)  # fmt: skip
    if args.out:
        options = {k: v for k, v in vars(args).items() if k not in ("out", "quiet")}
        doc = {"meta": meta, "options": options, "target_beyond_s": TARGET_BEYOND_S,
               "summary": summary, "table": text, "runs": runs}  # fmt: skip
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0 if all(r["status"] == "ok" for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
