"""scripts/check_large_files.py: a file over 1 MiB in git's index fails lint and the
pre-commit hook, naming the file and what to do; the allow-list and the limit itself
pass; the repository as checked out passes."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from _paths import ROOT

SCRIPT = ROOT / "scripts" / "check_large_files.py"
LIMIT = 1 << 20  # the documented limit (CONTRIBUTING.md, "Style")


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_large_files", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--repo", str(repo)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, timeout=60)


def test_a_staged_file_over_the_limit_fails_naming_it(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "small.txt").write_text("small\n")
    (tmp_path / "at_limit.bin").write_bytes(b"\0" * LIMIT)
    _git(tmp_path, "add", "small.txt", "at_limit.bin")
    ok = _run(tmp_path)
    assert ok.returncode == 0 and ok.stderr == "", ok.stderr

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "big.bin").write_bytes(b"\0" * (LIMIT + 1))
    (tmp_path / "untracked.bin").write_bytes(b"\0" * (2 * LIMIT))  # not staged: not checked
    _git(tmp_path, "add", "sub/big.bin")
    bad = _run(tmp_path)
    assert bad.returncode == 1, bad.stderr
    lines = bad.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"sub/big.bin: {LIMIT + 1} bytes, over"), lines
    assert "ALLOWED of scripts/check_large_files.py" in lines[0]

    # The staged content counts, not the working tree's.
    (tmp_path / "sub" / "big.bin").write_bytes(b"")
    assert _run(tmp_path).returncode == 1


def test_not_a_repository_is_exit_2(tmp_path: Path) -> None:
    out = _run(tmp_path / "missing")
    assert out.returncode == 2 and "cannot list the files of" in out.stderr, out.stderr


def test_the_allow_list_and_the_limit() -> None:
    script = _script()
    assert script.MAX_BYTES == LIMIT
    sizes = {"a.bin": LIMIT + 1, "b.bin": 3 * LIMIT, "c.txt": LIMIT}
    assert script.too_large(sizes, allowed={}) == ["b.bin", "a.bin"]
    assert script.too_large(sizes, allowed={"b.bin": "why"}) == ["a.bin"]


def test_the_repository_passes_and_lint_and_pre_commit_run_it() -> None:
    out = _run(ROOT)
    assert out.returncode == 0, out.stderr
    assert "scripts/check_large_files.py" in (ROOT / "scripts" / "lint.sh").read_text()
    config = (ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8")
    hook = config[config.index("- id: large-files") :]
    assert "scripts/check_large_files.py" in hook.split("- id:")[1]
