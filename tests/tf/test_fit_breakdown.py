"""benchmarks/fit_breakdown.py: a fit step's time split into inside pytfcomm's collectives
and outside them, from each rank's timeline; checked on canned events and on real
timelines (their clock and fields are what the split reads)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _harness import run_ranks
from _paths import ROOT

sys.path.append(str(ROOT))  # after the installed pytfcomm
from benchmarks import fit_breakdown as fb


def _coll(ts: float, dur: float, queue: float = 0.0, nbytes: int = 4, label: str = "") -> dict:
    args = {"bytes": nbytes, "queue_us": queue, "algorithm": "ring", "label": label}
    return {"cat": "collective", "name": "allreduce", "ts": ts, "dur": dur, "args": args}


def test_split_of_canned_steps() -> None:
    events = [
        _coll(50, 20),  # before the first step: not counted
        _coll(110, 30, queue=10, nbytes=400, label="allreduce grads #7"),  # 100..140
        _coll(120, 40, queue=20, nbytes=8),  # 100..160, overlaps the first
        {"cat": "phase", "name": "negotiate", "ts": 120, "dur": 5},
        {"cat": "phase", "name": "ring", "ts": 130, "dur": 5},  # a phase, not a wait
        _coll(190, 50),  # runs past the step's end at 200: clipped
        _coll(300, 10, queue=50),  # in the second step; its queue starts before it
    ]
    first, second = fb.breakdown([(100, 200), (280, 400)], events)
    assert first["step"] == 100
    assert first["inside"] == 60 + 10  # 100..160 once, then 190..200
    assert first["outside"] == 30
    assert first["queued"] == 30 and first["waiting"] == 5
    assert first["collectives"] == 3 and first["bytes"] == 412
    assert first["calls"][0] == "allreduce 400 B (ring; allreduce grads)"  # no "#7"
    assert first["call_us"][0] == (10.0, 30)
    assert second["inside"] == 30  # the queue clipped at the step's start: 280..310
    assert second["collectives"] == 1 and second["outside"] == 90


def test_rows_give_each_rank_and_the_calls_medians(capsys: pytest.CaptureFixture[str]) -> None:
    def rank(step: float, inside: float) -> dict:
        steps = fb.breakdown(
            [(0, step), (1000, 1000 + step)], [_coll(0, inside), _coll(1000, inside)]
        )
        return {"steps": steps}

    rows = {
        "pytfcomm-mwms": fb._row([rank(300, 100), rank(500, 100)]),
        "pytfcomm-horovod": fb._row([rank(200, 50), rank(200, 50)]),
        "tf-mirrored-alone": fb._row([rank(150, 0)]),
        "keras-alone": fb._row([rank(100, 0)]),
    }
    assert rows["pytfcomm-mwms"]["step"] == 400 and rows["pytfcomm-mwms"]["n"] == 4
    assert [r["step"] for r in rows["pytfcomm-mwms"]["ranks"]] == [300, 500]
    fb._print(rows, "t")
    out = capsys.readouterr().out
    assert "| pytfcomm-mwms, rank 1 | 0.50 | 0.10 |" in out
    assert "allreduce 4 B (ring; ): queued 0 us, ran 100 us" in out
    assert "per step: +0.20 ms, of which inside pytfcomm +0.05 ms and outside +0.15 ms" in out
    assert "(TF's strategy alone, no pytfcomm), per step: +0.05 ms (steps/s ratio 0.67)" in out


@pytest.mark.parametrize(
    ("transport", "elems"), [("tcp", 4), ("shm", 4), ("tcp", 1 << 18), ("shm", 1 << 18)]
)
def test_real_timelines_share_the_steps_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, transport: str, elems: int
) -> None:
    monkeypatch.delenv("PYTFCOMM_TIMELINE", raising=False)
    monkeypatch.setenv("PYTFCOMM_TRANSPORT", transport)
    out = run_ranks(2, "fit_breakdown_workers:window", str(tmp_path), elems, timeout=120)
    for o in out:
        (step,) = fb.breakdown([tuple(o["window"])], o["events"])
        # Exactly the three collectives issued inside the window, none before or after.
        assert step["collectives"] == 3 and step["bytes"] == 3 * 4 * elems
        assert 0 < step["inside"] < step["step"]
        assert step["outside"] >= 10_000  # the 10 ms sleep in the window
        assert step["calls"] == [f"allreduce {4 * elems:,} B ({step['calls'][0].split('(')[1]}"] * 3
