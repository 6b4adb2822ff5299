"""scripts/check_commit_msg.py, the commit-msg hook: CONTRIBUTING.md's rule (a subject of
at most 72 characters, a blank second line) holds, with git's comment and scissors lines
ignored, and .pre-commit-config.yaml runs it at the commit-msg stage."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from _paths import ROOT

SCRIPT = ROOT / "scripts" / "check_commit_msg.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_commit_msg", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    msg = tmp_path / "COMMIT_EDITMSG"
    msg.write_text(text, encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(msg)], capture_output=True, text=True, timeout=60
    )


def test_a_good_message_passes(tmp_path: Path) -> None:
    subject = "Bound the stall warning's wait" + "x" * (72 - 30)
    assert len(subject) == 72
    out = _run(tmp_path, f"{subject}\n\nThe problem, the change, what was measured.\n")
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert _run(tmp_path, "Refuse overlapping outputs\n").returncode == 0  # subject only


def test_a_long_subject_fails_saying_how_long(tmp_path: Path) -> None:
    out = _run(tmp_path, "x" * 73 + "\n\nbody\n")
    assert out.returncode == 1
    assert "73 characters, more than 72" in out.stderr and "CONTRIBUTING.md" in out.stderr


def test_a_body_glued_to_the_subject_fails(tmp_path: Path) -> None:
    out = _run(tmp_path, "Fix the ring\nbecause it was wrong\n")
    assert out.returncode == 1 and "second line is not blank" in out.stderr


def test_an_empty_message_fails(tmp_path: Path) -> None:
    out = _run(tmp_path, "\n# Please enter the commit message\n")
    assert out.returncode == 1 and "empty" in out.stderr


def test_lines_git_strips_do_not_count() -> None:
    script = _script()
    text = (
        "\n# a comment git strips, longer than seventy-two characters ....................\n"
        "Fix the ring\n\nbody\n"
        "# ------------------------ >8 ------------------------\n"
        "diff --git a/x b/x with a line far longer than seventy-two characters .........\n"
    )
    assert script.message_lines(text) == ["Fix the ring", "", "body"]
    assert script.problems(text) == []


def test_pre_commit_runs_it_as_the_commit_msg_hook() -> None:
    config = (ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8")
    assert "default_install_hook_types: [pre-commit, commit-msg]" in config
    hook = config[config.index("- id: commit-msg") :]
    assert "scripts/check_commit_msg.py" in hook and "stages: [commit-msg]" in hook
