"""PYTFCOMM_TIMELINE: one Chrome-trace JSON file per rank (docs/timeline.md)."""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

import pytest
from _harness import collect, run_ranks, start_ranks

from pytfcomm.__main__ import main as cli_main

EPS = 0.002  # µs: ts/dur are printed with ns precision


def _load(path: str) -> dict:
    text = Path(path).read_text()
    return json.loads(text)  # valid JSON, not merely a repairable prefix


def _check_nesting(events: list[dict]) -> None:
    """Every phase and wait lies inside its collective's span, on the same lane."""
    spans = {e["args"]["seq"]: e for e in events if e.get("cat") == "collective"}
    for e in events:
        if e.get("ph") != "X" or e["cat"] not in ("phase", "wait"):
            continue
        c = spans[e["args"]["seq"]]
        assert e["tid"] == c["tid"], (e, c)
        assert e["ts"] >= c["ts"] - EPS, (e, c)
        assert e["ts"] + e["dur"] <= c["ts"] + c["dur"] + EPS, (e, c)


def _check_lanes(events: list[dict]) -> None:
    """Collectives on one lane follow each other: ts increases, spans do not overlap."""
    lanes = defaultdict(list)
    for e in events:
        if e.get("cat") == "collective":
            lanes[e["tid"]].append(e)
    for spans in lanes.values():
        spans.sort(key=lambda e: e["args"]["seq"])
        for a, b in pairwise(spans):
            assert b["ts"] >= a["ts"] + a["dur"] - EPS, (a, b)


@pytest.mark.parametrize("n", [2, 3])
def test_timeline_per_rank(n: int, tmp_path: Path) -> None:
    pattern = str(tmp_path / "trace.json")
    results = run_ranks(
        n,
        "observe_workers:timeline_run",
        env={"PYTFCOMM_TIMELINE": pattern, "PYTFCOMM_TRANSPORT": "tcp" if n == 2 else "auto"},
        timeout=120,
    )
    for rank, res in enumerate(results):
        assert res["path"] == str(tmp_path / f"trace.rank{rank}.json")
        doc = _load(res["path"])
        events = doc["traceEvents"]
        assert doc["otherData"]["rank"] == rank and doc["otherData"]["size"] == n
        assert all(e["pid"] == rank for e in events)
        colls = sorted(
            (e for e in events if e.get("cat") == "collective"), key=lambda e: e["args"]["seq"]
        )
        assert len(colls) == len(res["calls"]), [c["name"] for c in colls]
        for seq, (got, want) in enumerate(zip(colls, res["calls"], strict=True)):
            assert got["ph"] == "X" and got["dur"] >= 0
            # seq 0 is init()'s job check (pytfcomm/_job_check.py), kept out of the file
            assert got["name"] == want["name"] and got["args"]["seq"] == seq + 1, (got, want)
            assert got["args"]["bytes"] == want["bytes"], (got, want)
            # who asked: the NumPy call's kind, its number, the calling thread
            label = got["args"]["label"]
            assert label.startswith(f"{want['name']} #") and "MainThread" in label, label
            if want["algorithm"]:
                assert got["args"]["algorithm"] == want["algorithm"], (got, want)
            else:
                assert got["args"]["algorithm"] in ("tree", "chain"), got
        # auto says what it picked: small runs within the negotiation round
        # (one-shot, on any transport); large is ring
        small = "oneshot"
        assert colls[0]["args"]["algorithm"] == small
        assert colls[0]["args"]["requested"] == "auto"
        assert colls[1]["args"]["algorithm"] == "ring"
        assert colls[1]["args"]["requested"] == "auto"
        assert colls[2]["args"]["requested"] == "ring"
        assert colls[0]["args"]["dtype"] == "float32" and colls[0]["args"]["op"] == "sum"
        names = defaultdict(set)
        for e in events:
            if e.get("cat") in ("phase", "wait"):
                names[e["args"]["seq"] - 1].add(e["name"])  # by the program's call order
        assert {"negotiate", small} <= names[0]
        assert {"negotiate", "reduce_scatter", "all_gather"} <= names[1]
        assert "oneshot" in names[4] and "reduce_scatter" in names[5]
        assert "negotiation" in names[6]  # every rank asking for it is the barrier
        waits = [e for e in events if e.get("cat") == "wait"]
        everyone = ("wait_all",)  # waits on all peers at once
        assert waits and all("peer" in e["args"] for e in waits if e["name"] not in everyone)
        _check_nesting(events)
        _check_lanes(events)


def test_timeline_hierarchical_phases(tmp_path: Path) -> None:
    """Two simulated hosts of two ranks: auto picks hierarchical; its three phases show."""
    hosts = [{"PYTFCOMM_HOST_ID": f"sim-{r // 2}"} for r in range(4)]
    results = run_ranks(
        4,
        "observe_workers:hierarchical_run",
        env={"PYTFCOMM_TIMELINE": str(tmp_path / "h-%r.json")},
        per_rank_env=hosts,
        timeout=120,
    )
    for rank, res in enumerate(results):
        assert res["algorithm"] == "hierarchical"
        assert res["path"] == str(tmp_path / f"h-{rank}.json")
        events = _load(res["path"])["traceEvents"]
        (coll,) = [e for e in events if e.get("cat") == "collective"]
        assert coll["args"]["algorithm"] == "hierarchical"
        assert coll["args"]["requested"] == "auto"
        phases = [e for e in events if e.get("cat") == "phase"]
        order = [e["name"] for e in sorted(phases, key=lambda e: e["ts"])]
        for name in ("local_reduce_scatter", "cross_host", "local_allgather"):
            assert name in order, order
        assert order.index("local_reduce_scatter") < order.index("cross_host")
        assert order.index("cross_host") < order.index("local_allgather")
        _check_nesting(events)


def test_timeline_off_writes_nothing(tmp_path: Path) -> None:
    paths = run_ranks(2, "observe_workers:no_timeline", env={"PYTFCOMM_TIMELINE": ""})
    assert paths == ["", ""]


def test_unwritable_path_warns_and_runs(tmp_path: Path) -> None:
    bad = str(tmp_path / "no-such-dir" / "t.json")
    paths = run_ranks(2, "observe_workers:no_timeline", env={"PYTFCOMM_TIMELINE": bad})
    assert paths == ["", ""]  # the collectives ran; no timeline


def test_merge_cli(tmp_path: Path) -> None:
    run_ranks(2, "observe_workers:no_timeline", env={"PYTFCOMM_TIMELINE": str(tmp_path / "m.json")})
    parts = [tmp_path / "m.rank0.json", tmp_path / "m.rank1.json"]
    # A crashed rank's file may lack its closing text: merge repairs it.
    torn = parts[1].read_text()
    parts[1].write_text(torn[: torn.rindex("\n],")] + ",\n")
    out = tmp_path / "all.json"
    assert cli_main(["timeline", "merge", *map(str, parts), "-o", str(out)]) == 0
    merged = json.loads(out.read_text())["traceEvents"]
    pids = {e["pid"] for e in merged if e.get("cat") == "collective"}
    assert pids == {0, 1}


def test_auto_logs_its_choice_at_debug_level(tmp_path: Path) -> None:
    procs, results, _ = start_ranks(
        2, "observe_workers:no_timeline", env={"PYTFCOMM_LOG_LEVEL": "3"}, workdir=tmp_path
    )
    outcomes = collect(procs, results, tmp_path, 60)
    assert all(ok for ok, _ in outcomes.values()), outcomes
    log = (tmp_path / "rank0.log").read_text()
    assert "allreduce of 4096 bytes: oneshot (picked by auto)" in log, log
