"""benchmarks/allreduce.py --rounds: every backend run several times, alternating, each
size's time the median over rounds and each ratio's spread over rounds paired round by
round (canned summaries), plus one real two-round run of two pytfcomm transports."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from _paths import ROOT

sys.path.append(str(ROOT))  # after the installed pytfcomm
from benchmarks import _report
from benchmarks import allreduce as bench


def _summary(name: str, times: dict[int, float | None], status: str = "ok") -> dict:
    """A summarize()-shaped run: one row per size, None = that size was not measured."""
    rows = {}
    for nbytes, t in times.items():
        if t is None:
            continue
        rows[nbytes] = {
            "bytes": nbytes,
            "count": nbytes // 4,
            "ok": True,
            "errors": [],
            "time_us": t,
            "min_us": t * 0.9,
            "max_us": t * 1.5,
            "algbw_gbs": 0.0,
            "busbw_gbs": 0.0,
            "iters": 2,
            "warmup": 1,
            "iter_max_us": [t, t],
            "rank0_us": [t, t],
        }
    return {
        "name": name,
        "status": status,
        "reason": "" if status == "ok" else "after 5s",
        "wall_s": 1.0,
        "command": "x",
        "sizes": sorted(times),
        "setup_s": 0.1,
        "worker_meta": {},
        "fatal": None,
        "log_tail": "",
        "rows": rows,
    }


def test_a_size_takes_the_median_over_rounds_and_keeps_each_round() -> None:
    rounds = [_summary("a", {4096: t}) for t in (10.0, 30.0, 20.0)]
    got = _report.combine_rounds(rounds, nproc=2)
    row = got["rows"][4096]
    assert row["time_us"] == 20.0
    assert row["round_us"] == [10.0, 30.0, 20.0]
    assert row["min_us"] == pytest.approx(9.0) and row["max_us"] == pytest.approx(45.0)
    assert row["busbw_gbs"] == pytest.approx(4096 / 20e-6 / 1e9)  # n=2: busbw = algbw
    assert got["rounds"] == 3 and got["wall_s"] == 3.0 and got["status"] == "ok"
    assert len(row["iter_max_us"]) == 6


def test_a_failed_round_is_not_hidden_by_the_others() -> None:
    rounds = [_summary("a", {4096: 10.0, 65536: 50.0}), _summary("a", {4096: 12.0, 65536: None})]
    rounds[1]["status"] = "timeout"
    got = _report.combine_rounds(rounds, nproc=2)
    assert got["status"] == "timeout"
    assert 65536 not in got["rows"]  # not measured in every round: n/a, not round 1's value
    assert "n/a" in _report.table([got], [4096, 65536], None)
    bad = _summary("a", {4096: 11.0})
    bad["rows"][4096].update(ok=False, errors=["rank 1: wrong result"])
    got = _report.combine_rounds([_summary("a", {4096: 10.0}), bad], nproc=2)
    assert not got["rows"][4096]["ok"]
    assert got["rows"][4096]["errors"] == ["rank 1: wrong result"]


def test_ratios_pair_each_round_with_the_same_round_of_the_reference() -> None:
    ref = _report.combine_rounds([_summary("ref", {4096: t}) for t in (10, 20, 40)], 2)
    # The peer is 1.5x slower than the reference in each round.
    peer = _report.combine_rounds([_summary("peer", {4096: t}) for t in (15, 30, 60)], 2)
    out = _report.rounds_table([ref, peer], [4096], "ref")
    assert "1.50/1.50/1.50 (3)" in out
    # Paired, a slow round of one backend shows as one bad ratio, not a shift of all.
    peer = _report.combine_rounds([_summary("peer", {4096: t}) for t in (15, 30, 400)], 2)
    line = _report.rounds_table([ref, peer], [4096], "ref").splitlines()[-1]
    assert line.split()[-2] == "1.50/1.50/10.00"
    assert _report.rounds_table([ref], [4096], "ref") == ""  # no peer, no table


def test_rounds_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(["--rounds", "0"])
    assert "--rounds must be >= 1" in capsys.readouterr().err


def test_two_real_rounds_alternate_and_report_every_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    rc = bench.main(
        [
            "--np", "2", "--sizes", "4K,64K", "--backends", "pytfcomm,pytfcomm-tcp",
            "--iters", "3", "--warmup", "1", "--rounds", "2", "--timeout", "120",
            "--json", str(out), "--quiet",
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert rc == 0, captured.out + captured.err
    # Round 1 runs pytfcomm first, round 2 pytfcomm-tcp first.
    starts = [ln.split(":")[0][3:] for ln in captured.err.splitlines() if "(round " in ln]
    assert starts == ["pytfcomm", "pytfcomm-tcp", "pytfcomm-tcp", "pytfcomm"], captured.err
    assert "median over 2 alternating rounds" in captured.out
    assert "# per round: peer time / pytfcomm time" in captured.out
    doc = json.loads(out.read_text())
    assert doc["meta"]["rounds"] == 2
    for name in ("pytfcomm", "pytfcomm-tcp"):
        rows = doc["backends"][name]["rows"]
        assert [r["bytes"] for r in rows] == [4096, 65536]
        for r in rows:
            assert r["ok"] and len(r["round_us"]) == 2
            assert r["time_us"] == pytest.approx(sum(r["round_us"]) / 2)  # median of two


def test_baseline_dir_must_hold_a_pytfcomm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(["--baseline", str(tmp_path)])
    assert "no pytfcomm package in it" in capsys.readouterr().err


def test_baseline_runs_the_other_build_beside_this_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--baseline DIR`` adds NAME@base for each pytfcomm backend, its workers importing
    pytfcomm from DIR first: here a link to the installed build, so the two must agree
    on results while the JSON shows which package each one ran."""
    installed = subprocess.run(
        [sys.executable, "-c", "import os, pytfcomm; print(os.path.dirname(pytfcomm.__file__))"],
        cwd=tempfile.gettempdir(), capture_output=True, text=True, check=True, timeout=120,
    ).stdout.strip()  # fmt: skip
    base = tmp_path / "base"
    base.mkdir()
    (base / "pytfcomm").symlink_to(installed, target_is_directory=True)
    out = tmp_path / "b.json"
    rc = bench.main(
        [
            "--np", "2", "--sizes", "4K", "--backends", "pytfcomm-tcp", "--ref", "pytfcomm-tcp",
            "--baseline", str(base), "--iters", "3", "--warmup", "1", "--timeout", "120",
            "--json", str(out), "--quiet",
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert rc == 0, captured.out + captured.err
    assert "pytfcomm-tcp@base" in captured.out
    doc = json.loads(out.read_text())
    assert sorted(doc["backends"]) == ["pytfcomm-tcp", "pytfcomm-tcp@base"]
    assert doc["meta"]["baseline"] == str(base)
    versions = doc["meta"]["versions"]
    assert versions["pytfcomm-tcp@base"]["path"] == str(base / "pytfcomm")
    assert versions["pytfcomm-tcp"]["path"] == installed
    for name in ("pytfcomm-tcp", "pytfcomm-tcp@base"):
        assert all(r["ok"] for r in doc["backends"][name]["rows"]), doc["backends"][name]
