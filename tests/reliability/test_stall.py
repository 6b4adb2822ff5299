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


def _launch(
    n: int, target: str, *args: object, env: dict[str, str], deadline: float = 90
) -> tuple[list, list[str]]:
    """Runs `target` in n ranks; each rank's (ok, result) and its log."""
    with tempfile.TemporaryDirectory(prefix="pytfcomm-stall-") as tmp:
        workdir = Path(tmp)
        procs, results, _ = start_ranks(n, target, *args, env=env, workdir=workdir)
        outcomes = collect(procs, results, workdir, deadline)
        logs = [(workdir / f"rank{r}.log").read_text(errors="replace") for r in range(n)]
    return [outcomes[r] for r in range(n)], logs


def _run(n: int, stall: float, delay: float, transport: str = "auto") -> tuple[list, list[str]]:
    env = {"PYTFCOMM_TIMEOUT": "30", "PYTFCOMM_TRANSPORT": transport}
    return _launch(n, "observe_workers:late_rank", LATE, delay, stall, env=env)


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


# Ranks that wait in different collectives (docs/reliability.md): every rank has
# read every rank's negotiation record, so each one names what each rank waits
# in, long before the deadline; the deadline's error names both calls in full.
SPLIT_STALL = 2.0  # seconds before the first warning
SPLIT_TIMEOUT = 20.0  # the calls' deadline
SPLIT_BOUND = 15.0  # the first warning must come within this (loaded machines are slow)
# Two long names that differ only at the start (a record once kept 39 characters).
LONG = "_model/encoder/layer_norm_17/gradients/shared_embedding_table_update"


def _split_warnings(log: str) -> list[str]:
    return [line for line in log.splitlines() if "stall: this rank has waited" in line]


def _check_split(rank: int, res: dict, log: str, calls: list[str]) -> None:
    """`calls[q]`: how rank q's call is named, in full, in the warning and the error."""
    warnings = _split_warnings(log)
    assert warnings, f"rank {rank} logged no stall warning:\n{log}"
    first = warnings[0]
    assert f"[pytfcomm WARN rank {rank}]" in first, first
    waited = float(re.search(r"has waited ([0-9.]+) s", first).group(1))
    assert SPLIT_STALL - 0.5 <= waited <= SPLIT_BOUND, first
    for q, call in enumerate(calls):
        assert f"rank {q} waits in '{call}' (allreduce(float32 x 1024, op sum" in first, first
    assert "The ranks call different collectives" in first, first
    # Once per interval, not per poll.
    assert len(warnings) <= SPLIT_TIMEOUT / SPLIT_STALL + 1, warnings
    # The deadline's error names this rank's call and the other's, whole.
    assert res["waited"] >= SPLIT_TIMEOUT - 1, res
    assert f"waiting for the other ranks to call '{calls[rank]}'" in res["message"], res
    assert f"rank {1 - rank} asked for '{calls[1 - rank]}'" in res["message"], res
    assert res["after_ok"], res


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_ranks_in_different_collectives_are_named(transport: str) -> None:
    names = ["a" + LONG, "b" + LONG]
    env = {"PYTFCOMM_TRANSPORT": transport}
    outcomes, logs = _launch(
        2, "observe_workers:different_names", names, SPLIT_STALL, SPLIT_TIMEOUT, env=env
    )
    calls = [f"allreduce '{name}' #0" for name in names]
    for r, (ok, res) in enumerate(outcomes):
        assert ok, f"rank {r}: {res}\n{logs[r]}"
        assert res["error"] == "CommTimeoutError", res
        _check_split(r, res, logs[r], calls)


def test_ranks_in_different_tf_functions_are_named() -> None:
    pytest.importorskip("tensorflow")
    fns = ["a" + LONG.replace("/", "_"), "b" + LONG.replace("/", "_")]
    outcomes, logs = _launch(
        2, "observe_workers:different_functions", fns, SPLIT_STALL, SPLIT_TIMEOUT, env={}
    )
    for r, (ok, res) in enumerate(outcomes):
        assert ok, f"rank {r}: {res}\n{logs[r]}"
        assert res["error"] == "DeadlineExceededError", res
        # "allreduce <function>/<node name> #<execution>"
        node = re.search(rf"'allreduce {fns[r]}/([^' ]+) #0'", res["message"])
        assert node, res["message"]
        calls = [f"allreduce {fn}/{node.group(1)} #0" for fn in fns]
        _check_split(r, res, logs[r], calls)
