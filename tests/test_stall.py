"""The stall inspector (PYTFCOMM_STALL_WARNING, docs/reliability.md): ranks that wait
for a late rank name it, and the collective still completes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from _harness import collect, collect_survivors, start_ranks

LATE = 1
STALL = 1.0  # seconds before the first warning
DELAY = 3.0  # how late rank LATE is: past the threshold, far from the timeout


def _run(n: int, stall: float, delay: float, transport: str = "auto") -> tuple[list, list[str]]:
    with tempfile.TemporaryDirectory(prefix="pytfcomm-stall-") as tmp:
        workdir = Path(tmp)
        procs, results, _ = start_ranks(
            n,
            "observe_workers:late_rank",
            LATE,
            delay,
            stall,
            env={"PYTFCOMM_TIMEOUT": "30", "PYTFCOMM_TRANSPORT": transport},
            workdir=workdir,
        )
        outcomes = collect(procs, results, workdir, 90)
        logs = [(workdir / f"rank{r}.log").read_text(errors="replace") for r in range(n)]
    return [outcomes[r] for r in range(n)], logs


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_waiting_ranks_name_the_late_rank(transport: str) -> None:
    outcomes, logs = _run(3, STALL, DELAY, transport)
    for r, (ok, res) in enumerate(outcomes):
        assert ok, f"rank {r}: {res}\n{logs[r]}"
        assert res["ok"], f"rank {r}: wrong all-reduce result after the stall"
    for r in range(3):
        if r == LATE:
            continue
        # The late rank has not asked for the all-reduce yet: the others wait
        # for it in the negotiation, and name the call they wait in.
        warnings = [
            line
            for line in logs[r].splitlines()
            if "stall: negotiating round" in line and "allreduce #1 of MainThread" in line
        ]
        assert warnings, f"rank {r} logged no stall warning:\n{logs[r]}"
        first = warnings[0]
        assert f"[pytfcomm WARN rank {r}]" in first, first
        # Names the late rank, and only it, as holding the collective back.
        held = first.split("Holding it back:")[1].split(". In it:")[0]
        assert re.search(rf"\brank {LATE} \(", held), first
        assert f"rank {LATE} (" in held and held.count("rank ") == 1, first
        other = 3 - r - LATE
        assert f"In it: rank {other}" in first, first
        assert "allreduce(float32 x 262144, op sum" in first and "shape digest" in first, first
        # Once per interval, not per poll: the 3 s delay allows at most 3.
        assert 1 <= len(warnings) <= 3, warnings
        assert outcomes[r][1]["waited"] >= DELAY - 1.0
    assert "stall:" not in logs[LATE], logs[LATE]


def test_zero_disables_the_warning() -> None:
    outcomes, logs = _run(3, 0.0, 1.5)
    for r, (ok, res) in enumerate(outcomes):
        assert ok and res["ok"], f"rank {r}: {res}"
        assert "stall:" not in logs[r], logs[r]


def test_bad_value_is_a_config_error() -> None:
    code = (
        "import pytfcomm\n"
        "try:\n"
        "    pytfcomm.init(rank=0, size=1, addr='127.0.0.1:0')\n"
        "except pytfcomm.ConfigError as e:\n"
        "    print('CONFIG', e)\n"
    )
    env = dict(os.environ, PYTFCOMM_STALL_WARNING="soon")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd="/"
    )
    assert "CONFIG PYTFCOMM_STALL_WARNING='soon' is not valid" in out.stdout, out


def test_a_stopped_rank_is_named_before_the_timeout() -> None:
    """The hang case of docs/reliability.md: every survivor names the stopped rank
    (not the neighbour it happens to wait on), then fails at its deadline."""
    with tempfile.TemporaryDirectory(prefix="pytfcomm-stall-") as tmp:
        workdir = Path(tmp)
        procs, results, _ = start_ranks(
            3, "observe_workers:stopped_rank", LATE, 1.0, 4.0, workdir=workdir
        )
        outcomes = collect_survivors(procs, results, workdir, LATE)
        logs = [(workdir / f"rank{r}.log").read_text(errors="replace") for r in range(3)]
    for r in (0, 2):
        ok, res = outcomes[r]
        assert ok, f"rank {r}: {res}"
        # Its timeout names the stopped rank too (or, relayed, its neighbour's does).
        assert res["error"] == "CommTimeoutError", res
        assert re.search(rf"rank {LATE} \(127\.0\.0\.1[:,)]", res["message"]), res
        warnings = [line for line in logs[r].splitlines() if "allreduce #1 of MainThread" in line]
        assert warnings, logs[r]
        held = warnings[0].split("Holding it back:")[1].split(". In it:")[0]
        assert f"rank {LATE} (" in held and held.count("rank ") == 1, warnings[0]
