"""benchmarks/ab.py: two builds of pytfcomm in alternating rounds, one markdown table.

One real run compares the installed build with a directory that links to it (the same
build on both sides: every case measured, each side's workers importing its own
directory); the rest checks how sides are resolved and refused."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from _paths import ROOT

sys.path.append(str(ROOT))  # after the installed pytfcomm
from benchmarks import _builds
from benchmarks import ab as bench


def _installed() -> str:
    return subprocess.run(
        [sys.executable, "-c", "import os, pytfcomm; print(os.path.dirname(pytfcomm.__file__))"],
        cwd=tempfile.gettempdir(), capture_output=True, text=True, check=True, timeout=120,
    ).stdout.strip()  # fmt: skip


def test_two_builds_alternate_and_make_one_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    installed = _installed()
    side = tmp_path / "b"
    side.mkdir()
    (side / "pytfcomm").symlink_to(installed, target_is_directory=True)
    out = tmp_path / "ab.json"
    rc = bench.main(
        [
            "installed", str(side), "--np", "2", "--transports", "tcp,shm", "--sizes", "4K,64K",
            "--rounds", "2", "--iters", "3", "--warmup", "1", "--timeout", "120",
            "--json", str(out),
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert rc == 0, captured.out + captured.err
    table = [ln for ln in captured.out.splitlines() if ln.startswith("| 2 |")]
    assert [ln.split(" | ")[1:3] for ln in table] == [
        ["TCP", "4 KiB"], ["TCP", "64 KiB"], ["shared memory", "4 KiB"], ["shared memory", "64 KiB"]
    ]  # fmt: skip
    for ln in table:
        a, b, ratio, spread = (c.strip() for c in ln.strip("|").split("|")[3:7])
        # The table prints ratios with two decimals: 0.006 shows as 0.01 (a loaded machine).
        assert float(ratio) == pytest.approx(float(b.replace(",", "")) / float(a.replace(",", "")),
                                             rel=0.05, abs=0.005)  # fmt: skip
        lo, hi = map(float, spread.split("-"))
        assert lo <= hi
    # The order flips each round: A B, then B A.
    lines = captured.err.splitlines()
    progress = [ln.split()[5].rstrip(":") for ln in lines if ln.startswith("[ab] round")]
    assert progress == ["A", "B", "A", "B", "B", "A", "B", "A"], captured.err
    doc = json.loads(out.read_text())
    assert doc["meta"]["builds"]["B"]["pythonpath"] == str(side)
    for case in ("2/tcp", "2/shm"):
        runs = doc["runs"][case]
        assert len(runs["A"]) == len(runs["B"]) == 2
        assert {r["worker_meta"]["path"] for r in runs["A"]} == {installed}
        assert {r["worker_meta"]["path"] for r in runs["B"]} == {str(side / "pytfcomm")}
    assert all(row["ok"] and len(row["per_round"]) == 2 for row in doc["table"])


def test_a_side_that_is_nothing_known_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench.main(["installed", str(tmp_path)]) == 2
    assert "without a pytfcomm/ package" in capsys.readouterr().err
    assert bench.main(["installed", "no-such-revision-xyz"]) == 2
    assert "nor a git revision" in capsys.readouterr().err


def test_a_run_that_imported_another_pytfcomm_is_a_failure() -> None:
    build = _builds.Build("DIR", "/x/site", "/x/site")
    assert bench._check_build({"worker_meta": {"path": "/x/site/pytfcomm"}}, build) is None
    why = bench._check_build({"worker_meta": {"path": "/venv/pytfcomm"}}, build)
    assert why == "its workers imported pytfcomm from /venv/pytfcomm, not from /x/site"


def test_a_revision_named_twice_is_one_commit_even_if_one_lands_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    landed = []  # a commit lands on HEAD while the first build runs

    def rev_parse(*args: str) -> str:
        return "2" * 40 if landed else "1" * 40

    def install(commit: str, cache: str) -> str:
        landed.append(commit)
        return f"{cache}/{commit}/site"

    monkeypatch.setattr(_builds, "_git", rev_parse)
    monkeypatch.setattr(_builds, "_install_commit", install)
    a, b = _builds.resolve(["HEAD", "HEAD"], "/cache")
    assert a.label == b.label == "1" * 12
    assert a.pythonpath == b.pythonpath == f"/cache/{'1' * 40}/site"


def test_one_build_with_two_settings_each_side_its_own_environment(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = bench.parse_args(["installed", "installed", "--env-b", "PYTFCOMM_AHEAD_BYTES=0, X=a=b"])
    assert args.side_env == {"A": {}, "B": {"PYTFCOMM_AHEAD_BYTES": "0", "X": "a=b"}}
    build = _builds.Build("installed", "installed", "")
    spec = bench._spec("tcp", "B", build, args.side_env["B"])
    assert spec.env == {"PYTFCOMM_TRANSPORT": "tcp", "PYTFCOMM_AHEAD_BYTES": "0", "X": "a=b"}
    with pytest.raises(SystemExit):
        bench.parse_args(["installed", "installed", "--env-a", "NOVALUE"])
    # Only B's ranks get it: a transport nobody has fails B's run and not A's.
    rc = bench.main(
        [
            "installed", "installed", "--np", "2", "--transports", "tcp", "--sizes", "4K",
            "--rounds", "1", "--iters", "2", "--warmup", "0", "--timeout", "120",
            "--env-b", "PYTFCOMM_TRANSPORT=carrier-pigeon",
        ]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert rc != 0
    status = {
        ln.split()[5].rstrip(":"): ln.split()[6]
        for ln in err.splitlines()
        if ln.startswith("[ab] round")
    }
    assert status == {"A": "ok", "B": "failed"}, err
