"""pytfcomm-run --restarts N: stop the job when a rank fails and run every rank again.

Every launcher run is bounded (``timeout=``) and killed with its whole process group when
a test fails; ranks run tests/workers/restart_worker.py on 127.0.0.1 only, and each run
of each rank appends a line to ``runs<rank>.jsonl`` so the tests count the runs.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from _launcher_run import FAKE_SSH, PY, _env, alive, launch, started, wait_files
from _paths import WORKERS

from pytfcomm._launch import plan as plan_mod

WORKER = str(WORKERS / "restart_worker.py")
RESTART_LINE = b"restarting the job"


def runs(tmp_path: Path, rank: int) -> list[dict]:
    path = tmp_path / f"runs{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def restart_lines(stderr: bytes) -> list[bytes]:
    return [line for line in stderr.splitlines() if RESTART_LINE in line]


@pytest.mark.parametrize(("how", "said"), [("3", b"rank 1 exited with code 3"),
                                           ("kill", b"rank 1 died (SIGKILL)")])  # fmt: skip
def test_a_rank_failing_once_is_restarted_and_the_job_succeeds(
    tmp_path: Path, how: str, said: bytes
) -> None:
    # A stale PYTFCOMM_RESTART_COUNT in the caller's environment must not reach the ranks.
    env = _env(PYTFCOMM_RESTART_COUNT="7")
    res = launch("-np", "2", "--restarts", "2", PY, WORKER, "once", str(tmp_path), how, "1",
                 cwd=tmp_path, env=env)  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()
    assert restart_lines(res.stderr) == [
        b"pytfcomm-run: " + said + b"; restarting the job (1 of 2)"
    ], res.stderr.decode()
    for r in range(2):
        got = runs(tmp_path, r)
        assert [(g["count"], g["max"]) for g in got] == [(0, 2), (1, 2)]
        assert got[0]["pid"] != got[1]["pid"]
        # A new rendezvous: fresh ports (pytfcomm's and TensorFlow's) and a fresh secret,
        # so nothing of the first run can meet the second.
        assert got[0]["addr"] != got[1]["addr"]
        assert got[0]["tf_config"] != got[1]["tf_config"]
        assert got[0]["secret"] != got[1]["secret"]
    assert runs(tmp_path, 0)[1]["secret"] == runs(tmp_path, 1)[1]["secret"]
    assert sorted(res.stdout.splitlines()) == [
        b"[0] rank 0 run 0",
        b"[0] rank 0 run 1",
        b"[1] rank 1 run 0",
        b"[1] rank 1 run 1",
    ]


def test_a_rank_failing_every_time_ends_the_job_after_n_restarts(tmp_path: Path) -> None:
    t0 = time.monotonic()
    res = launch("-np", "3", "--restarts", "2", PY, WORKER, "always", str(tmp_path), "5", "2",
                 cwd=tmp_path)  # fmt: skip
    assert res.returncode == 5, res.stderr.decode()
    assert [len(runs(tmp_path, r)) for r in range(3)] == [3, 3, 3]
    assert [g["count"] for g in runs(tmp_path, 2)] == [0, 1, 2]
    assert len(restart_lines(res.stderr)) == 2
    assert b"(1 of 2)" in res.stderr and b"(2 of 2)" in res.stderr
    assert b"no restart left" in res.stderr
    assert time.monotonic() - t0 < 30


def test_no_restarts_is_the_default_and_behaves_as_before(tmp_path: Path) -> None:
    res = launch("-np", "2", PY, WORKER, "once", str(tmp_path), "3", "1", cwd=tmp_path)
    assert res.returncode == 3, res.stderr.decode()
    assert b"rank 1 " in res.stderr and b"exited with code 3" in res.stderr
    assert restart_lines(res.stderr) == [] and b"restart" not in res.stderr
    assert [[(g["count"], g["max"]) for g in runs(tmp_path, r)] for r in range(2)] == [
        [(0, 0)],
        [(0, 0)],
    ]
    res = launch("-np", "2", "--restarts", "0", PY, WORKER, "once", str(tmp_path), "kill", "0",
                 cwd=tmp_path)  # fmt: skip
    assert res.returncode == 137 and b"restart" not in res.stderr, res.stderr.decode()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_launcher_never_restarts(tmp_path: Path, sig: signal.Signals) -> None:
    with started("-np", "2", "--restarts", "3", PY, WORKER, "wait", str(tmp_path),
                 cwd=tmp_path) as proc:  # fmt: skip
        wait_files([tmp_path / f"pid{r}" for r in range(2)])
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + sig, err.decode()
    assert [(tmp_path / f"got{r}").read_text() for r in range(2)] == [str(int(sig))] * 2
    assert [len(runs(tmp_path, r)) for r in range(2)] == [1, 1]
    assert b"restart" not in err, err.decode()


def test_ctrl_c_while_a_failed_job_is_stopped_does_not_restart(tmp_path: Path) -> None:
    # Rank 1 fails; rank 0 ignores the SIGTERM that stops the job. Ctrl-C then must kill
    # what is left and end the launcher, not start the job again.
    with started("-np", "2", "--restarts", "3", "--kill-timeout", "30",
                 PY, WORKER, "stubborn", str(tmp_path), "4", cwd=tmp_path) as proc:  # fmt: skip
        wait_files([tmp_path / "got0"])
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
        stop_s = time.monotonic() - t0
    assert proc.returncode == 4, err.decode()
    assert b"received SIGINT while stopping the ranks" in err, err.decode()
    assert restart_lines(err) == [] and [len(runs(tmp_path, r)) for r in range(2)] == [1, 1]
    assert stop_s < 10, f"took {stop_s:.1f} s: the SIGINT did not kill the stubborn rank"
    assert not alive(int((tmp_path / "pid0").read_text()))


def test_timeout_bounds_all_runs_together(tmp_path: Path) -> None:
    # A job that fails after 0.3 s with 100 restarts allowed: --timeout 3 ends it all.
    t0 = time.monotonic()
    res = launch("-np", "2", "--restarts", "100", "--timeout", "3", "--kill-timeout", "2",
                 PY, WORKER, "always", str(tmp_path), "6", "1", "0.3",
                 cwd=tmp_path, timeout=60)  # fmt: skip
    elapsed = time.monotonic() - t0
    assert res.returncode in (6, 124), res.stderr.decode()
    assert 1 <= len(runs(tmp_path, 1)) < 100
    assert elapsed < 15, f"took {elapsed:.1f} s"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--restarts", "-1", "true"], "must not be negative"),
        (["--restarts", "x", "true"], "is not an integer"),
        (["--restarts", "2", "-np", "0", "true"], "must be at least 1"),
        (["--restarts", "2", "-H", "localhost:1", "-np", "2", "true"], "exceeds the 1 slot"),
        (["--restarts", "2", "-x", "PYTFCOMM_RESTART_COUNT=3", "true"], "sets PYTFCOMM_RESTART"),
    ],
)
def test_bad_arguments_never_restart(tmp_path: Path, args: list[str], fragment: str) -> None:
    res = launch(*args, cwd=tmp_path, timeout=30)
    assert res.returncode == 2, res.stderr.decode()
    assert fragment.encode() in res.stderr and b"restart the job" not in res.stderr


def test_a_program_that_cannot_start_is_not_restarted(tmp_path: Path) -> None:
    res = launch("-np", "2", "--restarts", "3", "no-such-program-pytfcomm", cwd=tmp_path,
                 timeout=30)  # fmt: skip
    assert res.returncode == 127 and res.stderr.count(b"cannot start rank 0") == 1
    assert restart_lines(res.stderr) == []


def test_output_dir_keeps_every_run(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    res = launch("-np", "2", "--restarts", "1", "--output-dir", str(logs),
                 PY, WORKER, "once", str(tmp_path), "3", "1", cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()
    assert (logs / "rank.1.stdout").read_text() == "rank 1 run 0\nrank 1 run 1\n"


def test_ssh_ranks_are_restarted_too(tmp_path: Path) -> None:
    port = str(plan_mod._free_ports("127.0.0.1", 1)[0])
    res = launch("-H", "localhost:1,fakehost:2", "--bind", "127.0.0.1", "--port", port,
                 "--ssh-command", FAKE_SSH, "--kill-timeout", "3", "--restarts", "1",
                 PY, WORKER, "once", str(tmp_path), "kill", "2", cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()
    assert len(restart_lines(res.stderr)) == 1
    for r in range(3):
        got = runs(tmp_path, r)
        assert [g["count"] for g in got] == [0, 1]
        assert got[0]["secret"] != got[1]["secret"]  # the new secret went over ssh's stdin
