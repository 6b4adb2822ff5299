"""Time the misuse and fault cases of docs/reliability.md (round 2), several runs each.

    .venv/bin/python scripts/measure_reliability.py [--runs 5]

Reuses the test suite's multi-process harness and workers (tests/); prints one
markdown row per case with the range of detection times over the runs.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from _harness import collect, collect_survivors, run_ranks, start_ranks  # noqa: E402


def span(values: list[float], unit: str) -> str:
    return f"{min(values):.3g}-{max(values):.3g} {unit}" if values else "-"


def mismatches(runs: int) -> None:
    for case in ("kind", "root", "count"):
        for transport in ("tcp", "shm"):
            for n in (10, 300_000):
                ms: list[float] = []
                types, after = set(), set()
                for _ in range(runs):
                    for res in run_ranks(
                        3, "measure_workers:timed_mismatch", case, n, transport, timeout=60
                    ):
                        ms.append(res["ms"])
                        types.add(res["type"])
                        after.add(res["after"])
                print(
                    f"| {case} mismatch, {transport}, {n} float32 | {runs} x 3 ranks | "
                    f"{span(ms, 'ms')} | {sorted(types)} on every rank; next call "
                    f"{sorted(after)} |"
                )


def sigint(runs: int) -> None:
    for transport in ("tcp", "shm"):
        raised, told = [], []
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as tmp:
                wd = Path(tmp)
                procs, results, _ = start_ranks(
                    2,
                    "interrupt_workers:interrupted_collective",
                    1 << 18,
                    workdir=wd,
                    env={"PYTFCOMM_TRANSPORT": transport, "PYTFCOMM_TIMEOUT": "600"},
                )
                while not (wd / "blocked0").exists():
                    time.sleep(0.01)
                time.sleep(0.5)
                t = time.time()
                os.kill(procs[0].pid, signal.SIGINT)
                out = collect(procs, results, wd, 60)
            r0, r1 = out[0][1], out[1][1]
            raised.append((r0["t_raised"] - t) * 1e3)
            told.append(r1["seconds"] * 1e3)
            assert r0["type"] == "KeyboardInterrupt" and r1["type"] == "PeerLostError", out
        print(
            f"| SIGINT in a blocked 1 MiB all-reduce, {transport} | {runs} | "
            f"{span(raised, 'ms')} to KeyboardInterrupt; the peer raises PeerLostError in "
            f"{span(told, 'ms')} |"
        )


def stopped(runs: int) -> None:
    for transport in ("tcp", "shm"):
        for busy in (True, False):
            secs = []
            for _ in range(runs):
                with tempfile.TemporaryDirectory() as tmp:
                    wd = Path(tmp)
                    procs, results, _ = start_ranks(
                        3,
                        "interrupt_workers:stopped_peer",
                        2,
                        busy,
                        workdir=wd,
                        env={"PYTFCOMM_TRANSPORT": transport, "PYTFCOMM_TIMEOUT": "600"},
                    )
                    out = collect_survivors(procs, results, wd, 2, timeout=90)
                for r in (0, 1):
                    want = "PeerLostError" if busy else "CommClosedError"
                    assert out[r][0] and out[r][1]["type"] == want, out
                    secs.append(out[r][1]["seconds"])
            what = (
                "waiting in a collective: PeerLostError"
                if busy
                else "idle: closed in the background, CommClosedError at the next call (12 s later)"
            )
            print(
                f"| SIGSTOP, default deadlines, survivors {what}, {transport} | {runs} x 2 | "
                f"{span(secs, 's')} | naming the stopped rank |"
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--only", choices=["mismatch", "sigint", "stop"])
    a = p.parse_args()
    os.chdir(tempfile.gettempdir())
    print("| case | runs | detection | outcome |\n|---|---|---|---|")
    if a.only in (None, "mismatch"):
        mismatches(a.runs)
    if a.only in (None, "sigint"):
        sigint(a.runs)
    if a.only in (None, "stop"):
        stopped(a.runs)


if __name__ == "__main__":
    main()
