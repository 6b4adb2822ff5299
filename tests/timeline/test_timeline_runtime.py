"""Communicator.start_timeline / stop_timeline (Horovod's start_timeline) at run time,
over TCP and shared memory: the right collectives land in the right files, files stay
valid JSON, start/stop racing with collectives is safe, an unwritable path says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _harness import run_ranks


@pytest.fixture(autouse=True, params=["tcp", "shm"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("PYTFCOMM_TIMELINE", raising=False)
    monkeypatch.setenv("PYTFCOMM_TRANSPORT", request.param)
    return request.param


def _collectives(path: Path) -> list[str]:
    events = json.loads(path.read_text())["traceEvents"]  # complete JSON, not repaired
    return [e["name"] for e in events if e.get("cat") == "collective"]


@pytest.mark.parametrize("elems", [4, 1 << 18])
def test_start_stop_at_run_time(tmp_path: Path, elems: int) -> None:
    out = run_ranks(2, "timeline_runtime_workers:toggle", str(tmp_path), elems, timeout=120)
    for r, o in enumerate(out):
        t = tmp_path / f"t.rank{r}.json"
        u = tmp_path / f"u-{r}.json"
        assert o["before"] == "" and o["stopped"] == ""
        assert o["first"] == str(t) and o["resumed"] == str(t) and o["second"] == str(u)
        assert _collectives(t) == ["allreduce"] * 3 + ["broadcast"]
        assert _collectives(u) == ["allreduce", "allreduce"]
        assert "ConfigError" not in o["bad"] and "cannot write the timeline file" in o["bad"]
        assert o["after_bad"] == str(u)  # a failed start leaves the running one alone
        assert set(_collectives(tmp_path / f"w.rank{r}.json")) <= {"allreduce"}
