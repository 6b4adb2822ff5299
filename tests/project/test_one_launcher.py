"""One way to start local ranks: ``pytfcomm._launch.local`` (and ``pytfcomm-run``'s own).

The helper is checked with real processes (a failing rank ends the job and its peers'
process trees, including children that left their group; the time limit holds; ``watch``
ends a job), and the sources are checked for new launchers: a process start outside the
helper must be on the allow-list below, with its reason.
"""

from __future__ import annotations

import ast
import os
import sys
import time
from pathlib import Path

import pytest
from _paths import ROOT

from pytfcomm._launch import local

PY = sys.executable

# Files that may start processes outside the helper, and why.
ALLOWED = {
    "pytfcomm/_launch/local.py": "the one local-job helper",
    "pytfcomm/_launch/procs.py": "pytfcomm-run's supervisor (pipes, signals, remote ranks)",
    "pytfcomm/_launch/discovery.py": "runs the host discovery script for its output, not a rank",
    "pytfcomm/tf/_build.py": "compiler processes, not ranks",
    "tests/_warm.py": "starts the zygote that forks warm test ranks",
    "tests/_zygote.py": "the zygote: forks warm test ranks",
    "tests/_launcher_run.py": "starts pytfcomm-run itself (pipes, signals to its group), not ranks",
    "benchmarks/shm_ceiling.py": "forks two processes that share an anonymous mapping",
    "benchmarks/nccl.py": "GPU ranks under multiprocessing, results through a queue",
    "tests/tf/test_tf_placement.py": "one-question TensorFlow probes run at once, not ranks",
    "tests/gpu/test_stream_collectives.py": "GPU-only driver ranks, not run without a GPU",
    "tests/gpu/test_standin_nccl.py": "GPU-only stand-in ranks, not run without a GPU",
}
# Where any process start counts; in test modules (tests/**/test_*.py) and rank code
# (tests/workers) only starts in a loop or comprehension do: several processes, ranks.
STRICT = ("pytfcomm", "benchmarks", "scripts", "examples")
LOOPS = (ast.For, ast.While, ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)


def _starts(node: ast.AST) -> bool:
    """Whether ``node`` starts a process: ``Popen(...)``, ``os.fork()``, ``os.posix_spawn*``,
    ``os.spawn*`` or a multiprocessing ``Process(...)``."""
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return name in ("Popen", "Process", "fork", "posix_spawn", "posix_spawnp") or (
        name.startswith("spawn") and isinstance(f, ast.Attribute) and _is_os(f.value)
    )


def _is_os(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "os"


def _in_loop(tree: ast.AST) -> set[int]:
    """Line numbers of process starts inside a loop or comprehension."""
    lines: set[int] = set()
    for loop in ast.walk(tree):
        if isinstance(loop, LOOPS):
            lines.update(n.lineno for n in ast.walk(loop) if _starts(n))
    return lines


def process_starts(root: Path = ROOT) -> list[str]:
    """``path:line`` of every process start the rules above count, outside ALLOWED."""
    found = []
    files = [p for d in STRICT for p in (root / d).rglob("*.py")]
    files += [p for p in (root / "tests").rglob("*.py") if p not in files]
    for path in sorted(files):
        rel = path.relative_to(root).as_posix()
        if rel in ALLOWED or "/." in rel or rel.startswith("build/"):
            continue
        tree = ast.parse(path.read_text(), rel)
        strict = rel.startswith(STRICT) or (
            rel.startswith("tests/") and Path(rel).name.startswith("_") and "/" not in rel[6:]
        )
        lines = {n.lineno for n in ast.walk(tree) if _starts(n)} if strict else _in_loop(tree)
        found += [f"{rel}:{line}" for line in sorted(lines)]
    return found


def test_ranks_start_only_through_the_helper() -> None:
    found = process_starts()
    assert not found, (
        "processes started outside pytfcomm._launch.local (start N local ranks with "
        "local.run, one process with local.start, stop them with local.kill_tree), or "
        f"add the file to ALLOWED in {Path(__file__).name} with the reason: {found}"
    )


def test_the_guard_sees_a_new_launcher(tmp_path: Path) -> None:
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "new.py").write_text(
        "import subprocess\np = subprocess.Popen(['true'])\n"
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_new.py").write_text(
        "import subprocess\n"
        "one = subprocess.Popen(['true'])\n"  # a single helper process: not ranks
        "ranks = [subprocess.Popen(['true']) for _ in range(2)]\n"
    )
    assert process_starts(tmp_path) == ["benchmarks/new.py:2", "tests/test_new.py:3"]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


# A rank that starts a grandchild in a session of its own (as `ip netns exec` or mpirun's
# daemons may), writes the grandchild's pid, then sleeps.
_SLEEPER = (
    "import os, subprocess, sys, time\n"
    "g = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
    "open(sys.argv[1], 'w').write(str(g.pid))\n"
    "time.sleep(300)\n"
)


def _wait_for(path: Path, limit_s: float = 60) -> int:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{path} was not written within {limit_s} s")


def test_a_failed_rank_ends_the_job_and_every_process_tree(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild"
    # Rank 1 fails once rank 0 has started its grandchild (60 s at most).
    fail = (
        "import os, sys, time\n"
        "for _ in range(600):\n"
        "    if os.path.exists(sys.argv[1]): break\n"
        "    time.sleep(0.1)\n"
        "print('rank 1 gives up'); sys.exit(3)\n"
    )
    argvs = [[PY, "-c", _SLEEPER, str(pidfile)], [PY, "-c", fail, str(pidfile)]]
    logs = [tmp_path / "r0.log", tmp_path / "r1.log"]
    began = time.monotonic()
    res = local.run(argvs, [dict(os.environ)] * 2, cwd=tmp_path, timeout_s=120, logs=logs,
                    fail_grace_s=1.0, term_grace_s=1.0)  # fmt: skip
    took = time.monotonic() - began

    grandchild = _wait_for(pidfile)
    assert res.status == "failed", res
    assert res.reason == "process 1 exited 3"
    assert res.codes == [None, 3]  # rank 0 still ran when the job ended
    assert took < 60, took  # the failure ended it, not the 120 s limit
    assert "rank 1 gives up" in res.log_tail()
    deadline = time.monotonic() + 10  # SIGTERM was sent; give it a moment to land
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild), "a grandchild in its own session outlived the job"


def test_the_time_limit_holds_and_watch_ends_a_job(tmp_path: Path) -> None:
    forever = [PY, "-c", "import time; time.sleep(300)"]
    began = time.monotonic()
    res = local.run([forever] * 2, [dict(os.environ)] * 2, cwd=tmp_path, timeout_s=2,
                    term_grace_s=0.5)  # fmt: skip
    assert res.status == "timeout" and res.codes == [None, None], res
    assert time.monotonic() - began < 60

    calls = []

    def watch() -> str | None:
        calls.append(1)
        return "seen enough" if len(calls) >= 3 else None

    res = local.run([forever], [dict(os.environ)], cwd=tmp_path, timeout_s=120, watch=watch,
                    tick_s=0.05)  # fmt: skip
    assert (res.status, res.reason, res.codes) == ("ok", "seen enough", [None])
    assert len(calls) == 3


def test_every_rank_that_exits_zero_is_ok(tmp_path: Path) -> None:
    argvs = [[PY, "-c", f"print('rank {r}')"] for r in range(3)]
    res = local.run(argvs, [dict(os.environ)] * 3, cwd=tmp_path, timeout_s=120,
                    logs=[tmp_path / f"{r}.log" for r in range(3)])  # fmt: skip
    assert (res.status, res.reason, res.codes) == ("ok", "", [0, 0, 0])
    assert [(tmp_path / f"{r}.log").read_text() for r in range(3)] == [
        f"rank {r}\n" for r in range(3)
    ]


def test_mismatched_lists_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="one entry per process"):
        local.run([[PY, "-c", "pass"]] * 2, [dict(os.environ)], cwd=tmp_path, timeout_s=5)
