"""Timeline files are opened safely: never through a symbolic link, never another
user's file or one with other hard links, created with mode 0600; the merge tool
replaces its output instead of writing through a link (docs/timeline.md, "The file")."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from _harness import collect, run_ranks, start_ranks

from pytfcomm.__main__ import main as cli_main

PRECIOUS = "root's data, mode 0600\n"
NOBODY = 65534


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.write_text(PRECIOUS)
    victim.chmod(0o600)
    return victim


def _plant(tmp_path: Path, case: str, victim: Path) -> None:
    """At t.rank0.json and t.rank1.json: what another user could have put there."""
    for r in range(2):
        path = tmp_path / f"t.rank{r}.json"
        if case == "symlink":
            path.symlink_to(victim)
        elif case == "hardlink":
            os.link(victim, path)
        elif case == "other_owner":
            path.write_text("")
            path.chmod(0o666)
            os.chown(path, NOBODY, NOBODY)


WORDS = {
    "symlink": "it is a symbolic link, and pytfcomm does not follow one there",
    "hardlink": "it has other hard links",
    "other_owner": f"it belongs to uid {NOBODY}, not to this process's user",
}


@pytest.mark.parametrize("case", list(WORDS))
def test_planted_timeline_file_is_refused(tmp_path: Path, case: str) -> None:
    if case == "other_owner" and os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    victim = _victim(tmp_path)
    _plant(tmp_path, case, victim)
    work = tmp_path / "work"
    work.mkdir()
    env = {"PYTFCOMM_TIMELINE": str(tmp_path / "t.json")}
    procs, results, _ = start_ranks(2, "observe_workers:no_timeline", env=env, workdir=work)
    outcomes = collect(procs, results, work, 120)
    assert victim.read_text() == PRECIOUS
    assert outcomes == {0: (True, ""), 1: (True, "")}, outcomes  # ran, without a timeline
    for r in range(2):
        log = (work / f"rank{r}.log").read_text()
        assert f"PYTFCOMM_TIMELINE: cannot write {tmp_path}/t.rank{r}.json: " in log, log
        assert WORDS[case] in log and "running without a timeline" in log, log


def test_start_timeline_through_a_link_is_refused(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    _plant(tmp_path, "symlink", victim)
    out = run_ranks(2, "timeline_runtime_workers:start_refused", str(tmp_path / "t.json"))
    assert victim.read_text() == PRECIOUS
    for r, o in enumerate(out):
        assert o["error"].startswith(f"cannot write the timeline file {tmp_path}/t.rank{r}.json"
                                     f": {WORDS['symlink']}"), o  # fmt: skip
        assert o["path"] == "" and o["sum"] == 2.0


def test_timeline_file_is_private_and_merge_replaces_a_link(tmp_path: Path) -> None:
    run_ranks(2, "observe_workers:no_timeline", env={"PYTFCOMM_TIMELINE": str(tmp_path / "t.json")})
    parts = [tmp_path / f"t.rank{r}.json" for r in range(2)]
    for p in parts:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    victim = _victim(tmp_path)
    out = tmp_path / "merged.json"
    out.symlink_to(victim)
    assert cli_main(["timeline", "merge", *map(str, parts), "-o", str(out)]) == 0
    assert victim.read_text() == PRECIOUS
    assert not out.is_symlink() and stat.S_IMODE(out.stat().st_mode) == 0o600
    assert '"traceEvents"' in out.read_text()
