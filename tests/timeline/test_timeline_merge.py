"""``python -m pytfcomm timeline merge`` on unusable input: one clear line on stderr,
exit 2 (1 when the output cannot be written), bounded in time and memory
(docs/timeline.md, "Merging")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MAX_INPUT_BYTES = 1 << 30  # the documented limit (docs/timeline.md, "Merging")
TORN = '{"traceEvents":[\n{"ph":"M","pid":0,"tid":0,"name":"process_name","args":{}},\n{"ph":"X"'


def _merge(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytfcomm", "timeline", "merge", *args],
        cwd=cwd,  # never the repo root: the installed package
        capture_output=True,
        text=True,
        timeout=120,
    )


def _input(tmp_path: Path, case: str) -> str:
    path = tmp_path / case
    if case == "not_a_timeline":
        path.write_text('{"a": 1}\n')
    elif case == "json_list":
        path.write_text("[1, 2, 3]\n")
    elif case == "bad_json":
        path.write_text("{oops\n")
    elif case == "huge_number":  # valid JSON that json.loads refuses without a position
        path.write_text("1" * 5000 + "\n")
    elif case == "bad_events":
        path.write_text('{"traceEvents": [1, 2]}\n')
    elif case == "binary":
        path.write_bytes(b"\xff\xfe\x00garbage")
    elif case == "too_big":  # sparse: costs no disk
        with open(path, "wb") as f:
            f.truncate(MAX_INPUT_BYTES + 1)
    elif case == "fifo":
        os.mkfifo(path)  # no writer: reading it would wait forever
    elif case == "dev_zero":
        return "/dev/zero"  # reading it would never end
    elif case == "directory":
        path.mkdir()
    return str(path)


CASES = {
    "missing": "cannot open it (No such file or directory)",
    "not_a_timeline": "not a timeline (JSON without a traceEvents list",
    "json_list": "not a timeline (JSON without a traceEvents list",
    "bad_json": "not a timeline (not JSON: Expecting property name",
    "huge_number": "not a timeline (not JSON: Exceeds the limit (4300 digits)",
    "bad_events": "not a timeline (its traceEvents is not a list of event objects)",
    "binary": "not a timeline (not UTF-8 text)",
    "too_big": f"larger than {MAX_INPUT_BYTES} bytes",
    "fifo": "not a regular file",
    "dev_zero": "not a regular file",
    "directory": "not a regular file",
}


@pytest.mark.parametrize("case", list(CASES))
def test_unusable_input_is_one_clear_line_and_exit_2(tmp_path: Path, case: str) -> None:
    path = _input(tmp_path, case)
    out = tmp_path / "merged.json"
    res = _merge(tmp_path, path, "-o", str(out))
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr  # no traceback
    assert lines[0].startswith(f"python -m pytfcomm timeline merge: error: {path}: "), lines
    assert CASES[case] in lines[0], lines
    assert not out.exists() and res.stdout == ""


def test_the_limit_is_the_documented_one() -> None:
    from pytfcomm import timeline

    assert timeline.MAX_INPUT_BYTES == MAX_INPUT_BYTES


def test_torn_file_still_merges_and_unwritable_output_exits_1(tmp_path: Path) -> None:
    torn = tmp_path / "torn.json"
    torn.write_text(TORN)  # a crash cut the last event short: read up to the one before
    res = _merge(tmp_path, str(torn), "-o", str(tmp_path / "m.json"))
    assert res.returncode == 0 and res.stdout.startswith("wrote 1 events"), res
    bad = tmp_path / "no-such-dir" / "m.json"
    res = _merge(tmp_path, str(torn), "-o", str(bad))
    assert res.returncode == 1, res
    assert res.stderr == (
        f"python -m pytfcomm timeline merge: error: cannot write {bad}: No such file or directory\n"
    )
