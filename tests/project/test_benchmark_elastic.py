"""benchmarks/elastic_recovery.py without running a job: its options, its checks of the
survivors' values against the reference (a wrong result never becomes a time), the
summary and table from canned runs, and that it never kills a pid that is not its worker."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
from _paths import ROOT

sys.path.append(str(ROOT))  # after the installed pytfcomm
from benchmarks import _elastic_ref as ref
from benchmarks import elastic_recovery as bench


def test_the_defaults_are_the_issue_matrix_and_bad_options_are_refused() -> None:
    args = bench.parse_args([])
    assert (args.np, args.transports, args.repeat) == ([3, 4], ["tcp", "shm"], 3)
    assert args.loops == ["numpy", "hvd", "strategy"]
    assert len(bench.cells(args)) == 12 and bench.cells(args)[0] == ("numpy", 3, "tcp")
    args = bench.parse_args(["--np", "4", "--loops", "hvd-fn", "--transports", "shm"])
    assert bench.cells(args) == [("hvd-fn", 4, "shm")]
    for bad in (["--np", "2"], ["--loops", "keras"], ["--transports", "ib"], ["--repeat", "0"],
                ["--kill-at", "8"], ["--kill-at", "0"], ["--np", ""]):  # fmt: skip
        with pytest.raises(SystemExit):
            bench.parse_args(bad)


def test_numpy_values_must_equal_the_reference_bitwise() -> None:
    want = ref.numpy_reference(ref.schedule(3, 8, 4))
    good = [[float(x).hex() for x in want]]
    assert bench.values_check("numpy", 3, 8, 4, good)["ok"]
    off = [[float(np.nextafter(want[1], 1.0)).hex() if i == 1 else float(x).hex()
            for i, x in enumerate(want)]]  # fmt: skip
    assert not bench.values_check("numpy", 3, 8, 4, off)["ok"]  # one ulp
    # the schedule matters: the 4-rank reference is another result
    assert not bench.values_check("numpy", 4, 8, 4, good)["ok"]


def test_tf_values_are_checked_within_the_stated_tolerance() -> None:
    want = ref.hvd_reference(ref.schedule(4, 8, 4))
    assert bench.values_check("hvd", 4, 8, 4, [want.tolist()])["ok"]
    assert not bench.values_check("hvd", 4, 8, 4, [(want * 1.001).tolist()])["ok"]
    w, b, mw, mb = ref.strategy_reference(8)
    values = [w.tolist(), b.tolist(), [8.0], [0.05], mw.tolist(), mb.tolist()]
    assert bench.values_check("strategy", 3, 8, 4, values)["ok"]
    assert not bench.values_check("strategy", 3, 8, 4, [*values[:2], [7.0], *values[3:]])["ok"]
    bad = [(w + 1e-3).tolist(), *values[1:]]
    assert not bench.values_check("strategy", 3, 8, 4, bad)["ok"]


def _run(status: str, next_step: float, loop: str = "numpy") -> dict:
    r = {"loop": loop, "np": 3, "transport": "tcp", "status": status}
    if status in ("ok", "wrong"):
        r.update(detection_s=0.01, reform_s=0.05, next_step_s=next_step,
                 beyond_s=next_step - 0.01, phases={"error->reformed": 0.05})  # fmt: skip
    return r


def test_a_cell_takes_only_the_runs_that_were_right() -> None:
    runs = [_run("ok", 0.3), _run("ok", 0.1), _run("wrong", 0.001), _run("timeout", 0)]
    runs += [_run("ok", 2.5, "strategy")]
    numpy_cell, strategy_cell = bench.summarize(runs)
    assert (numpy_cell["ok"], numpy_cell["runs"]) == (2, 4)
    assert numpy_cell["not_ok"] == {"wrong": 1, "timeout": 1}
    assert numpy_cell["next_step_s"] == {"median": 0.2, "min": 0.1, "max": 0.3}
    assert numpy_cell["meets_target"] and not strategy_cell["meets_target"]
    text = bench.table([numpy_cell, strategy_cell])
    assert "| NumPy, `reform()` | 3 | tcp | 2/4 (timeout 1, wrong 1) |" in text
    assert "0.200 (0.100-0.300)" in text and "0.001" not in text
    none_ok = bench.summarize([_run("failed", 0)])[0]
    assert none_ok["next_step_s"] is None and "| 0/1 (failed 1) | — |" in bench.table([none_ok])


def test_the_killer_never_kills_a_process_that_is_not_its_worker(tmp_path: Path) -> None:
    (tmp_path / "victim").write_text(str(os.getpid()))  # this test, not a worker
    killer = bench.Killer(tmp_path, settle=0.0)
    assert "not this run's worker" in (killer() or "")
    assert killer.t_kill is None  # and we are still here
