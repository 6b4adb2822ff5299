"""pytfcomm-run --elastic: the survivors of a lost rank go on in the same processes.

Three ranks run tests/workers/elastic_workers.py through pytfcomm-run (127.0.0.1 only,
free ports, the launcher bounded and killed with its process group on failure). The
test SIGKILLs one mid-loop: the two others re-form with size 2 in the same processes
and end with the result of a reference computed for that membership schedule, bitwise,
over TCP and over shared memory. A rank that is stopped until the others went on
without it, then resumes, is refused. The time from the SIGKILL to the survivors' next
completed step is printed (docs/elastic.md quotes it), never asserted.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from _launcher_run import PY, _env, launch, started, wait_files
from _paths import WORKERS

WORKER = str(WORKERS / "elastic_workers.py")
STEPS, AT = 8, 4  # the victim (started as rank 2) is lost at step AT


def _reference(steps: int, at: int, before: tuple[int, ...] = (0, 1, 2)) -> np.ndarray:
    """``w`` after ``at`` steps of workers ``before``, then the rest with 0 and 1 alone."""
    return _schedule([before] * at + [(0, 1)] * (steps - at))


def _schedule(members_per_step: list[tuple[int, ...]]) -> np.ndarray:
    """``w`` after one step per entry, each among the workers it names."""
    w = np.zeros(4, np.float64)
    for step, members in enumerate(members_per_step):
        g = [(i + 1) * (step + 1) * np.arange(4, dtype=np.float64) for i in members]
        w = w - 0.01 * (np.sum(g, axis=0) / len(members))
    return w


def _result(out: Path, worker: int) -> dict:
    return json.loads((out / f"result{worker}.json").read_text())


def _starts(out: Path, worker: int) -> list[int]:
    lines = (out / f"starts{worker}.jsonl").read_text().splitlines()
    return [json.loads(line)["pid"] for line in lines]


def _check_survivors(out: Path) -> list[dict]:
    want = [x.hex() for x in _reference(STEPS, AT)]
    results = [_result(out, i) for i in (0, 1)]
    for i, res in enumerate(results):
        # the same process all along: started once, never restarted
        assert _starts(out, i) == [res["pid"]]
        assert res["epoch"] == 1
        # old ranks kept their order: 0 and 1 stay 0 and 1, now of 2
        assert res["seen"] == [[i, 3]] * AT + [[i, 2]] * (STEPS - AT), res["seen"]
        assert res["w"] == want
    return results


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_survivors_of_a_sigkill_go_on_in_place(tmp_path: Path, transport: str) -> None:
    # A stale epoch in the caller's environment (a job started from an elastic rank)
    # must not reach the ranks: they would ask after epoch 7 and be refused.
    env = _env(PYTFCOMM_TRANSPORT=transport, PYTFCOMM_ELASTIC_EPOCH="7")
    args = ("-np", "3", "--elastic", "--min-np", "2", "--bind-to", "none")
    with started(*args, PY, WORKER, "kill", str(tmp_path), str(STEPS), str(AT),
                 cwd=tmp_path, env=env) as proc:  # fmt: skip
        wait_files([tmp_path / "victim"], timeout=90)
        victim = int((tmp_path / "victim").read_text())
        time.sleep(0.2)  # the survivors are in the step's all-reduce, waiting for it
        t_kill = time.time()
        os.kill(victim, signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    text = err.decode(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    assert "the job goes on without it (--elastic)" in text, text[-3000:]
    assert "epoch 1: 2 rank(s) go on" in text and "restarting" not in text, text[-3000:]
    results = _check_survivors(tmp_path)
    assert not (tmp_path / "result2.json").exists()
    for i, res in enumerate(results):
        t = res["times"]
        print(
            f"{transport} rank {i}: SIGKILL -> error {t['error'] - t_kill:.3f} s, "
            f"-> new communicator {t['reformed'] - t_kill:.3f} s, "
            f"-> next step done {t['next_step'] - t_kill:.3f} s"
        )
    del out


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_two_losses_one_after_another(tmp_path: Path, transport: str) -> None:
    # 4 ranks: worker 3 is killed at step AT, worker 2 two steps later; 0 and 1 go on.
    env = _env(PYTFCOMM_TRANSPORT=transport)
    args = ("-np", "4", "--elastic", "--min-np", "2", "--bind-to", "none")
    t_kill = []
    with started(*args, PY, WORKER, "kill2", str(tmp_path), str(STEPS), str(AT),
                 cwd=tmp_path, env=env) as proc:  # fmt: skip
        for name in ("victim", "victim2"):
            wait_files([tmp_path / name], timeout=90)
            time.sleep(0.2)  # the others are in the step's all-reduce
            t_kill.append(time.time())
            os.kill(int((tmp_path / name).read_text()), signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    text = err.decode(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    assert "epoch 1: 3 rank(s) go on (started as 0, 1, 2); lost: 3" in text, text[-3000:]
    assert "epoch 2: 2 rank(s) go on (started as 0, 1); lost: 2" in text, text[-3000:]
    want = _schedule([(0, 1, 2, 3)] * AT + [(0, 1, 2)] * 2 + [(0, 1)] * (STEPS - AT - 2))
    for i in (0, 1):
        res = _result(tmp_path, i)
        assert _starts(tmp_path, i) == [res["pid"]] and res["epoch"] == 2
        assert res["seen"] == [[i, 4]] * AT + [[i, 3]] * 2 + [[i, 2]] * (STEPS - AT - 2)
        assert res["w"] == [x.hex() for x in want]
        t = res["times"]  # of the first loss: 4 ranks -> 3
        print(
            f"{transport} 4 ranks, rank {i}: SIGKILL -> error {t['error'] - t_kill[0]:.3f} s, "
            f"-> next step done {t['next_step'] - t_kill[0]:.3f} s"
        )


def test_a_rank_declared_lost_that_comes_back_is_refused(tmp_path: Path) -> None:
    # Stopped (as a partitioned or hung rank looks), it misses the check-in window: the
    # survivors go on without it. When it resumes, its epoch is old: it is refused.
    env = _env(PYTFCOMM_TRANSPORT="tcp", PYTFCOMM_PEER_TIMEOUT="2")
    args = ("-np", "3", "--elastic", "--min-np", "2", "--elastic-window", "5",
            "--bind-to", "none")  # fmt: skip
    with started(*args, PY, WORKER, "stop", str(tmp_path), str(STEPS), str(AT),
                 cwd=tmp_path, env=env) as proc:  # fmt: skip
        wait_files([tmp_path / "victim"], timeout=90)
        victim = int((tmp_path / "victim").read_text())
        os.kill(victim, signal.SIGSTOP)
        try:
            wait_files([tmp_path / "result0.json", tmp_path / "result1.json"], timeout=60)
        finally:
            (tmp_path / "go").write_text("")
            os.kill(victim, signal.SIGCONT)
        _, err = proc.communicate(timeout=60)
    text = err.decode(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    _check_survivors(tmp_path)
    refused = json.loads((tmp_path / "refused.json").read_text())
    assert "declared this process (started as rank 2) lost" in refused["error"], refused
    assert "from membership epoch 0" in refused["error"], refused
    assert "not re-admitted" in refused["error"], refused
    assert "refused rank started as 2" in text, text[-3000:]


def test_ctrl_c_reaches_ranks_waiting_for_the_next_membership(tmp_path: Path) -> None:
    # The victim is stopped and the window is long: the survivors wait in reform().
    # A SIGINT to the launcher must still end the job at once, as without --elastic.
    env = _env(PYTFCOMM_TRANSPORT="tcp", PYTFCOMM_PEER_TIMEOUT="2")
    args = ("-np", "3", "--elastic", "--elastic-window", "300", "--kill-timeout", "5",
            "--bind-to", "none")  # fmt: skip
    with started(*args, PY, WORKER, "stop", str(tmp_path), str(STEPS), str(AT),
                 cwd=tmp_path, env=env) as proc:  # fmt: skip
        wait_files([tmp_path / "victim"], timeout=90)
        os.kill(int((tmp_path / "victim").read_text()), signal.SIGSTOP)
        wait_files([tmp_path / "lost0", tmp_path / "lost1"], timeout=60)
        time.sleep(0.5)  # inside reform(), waiting for the launcher
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    assert proc.returncode == 128 + signal.SIGINT, err.decode(errors="replace")[-3000:]
    assert b"received SIGINT: forwarding it to all ranks" in err
    assert not (tmp_path / "result0.json").exists()
    print(f"SIGINT -> launcher exit: {took:.2f} s")


def test_fewer_than_min_np_left_falls_back_to_restarting(tmp_path: Path) -> None:
    # Two ranks, --min-np 2: losing one leaves too few, so the whole job restarts.
    res = launch("-np", "2", "--elastic", "--min-np", "2", "--restarts", "1",
                 "--bind-to", "none", PY, WORKER, "kill-self", str(tmp_path), str(STEPS),
                 str(AT), cwd=tmp_path, timeout=120)  # fmt: skip
    text = res.stderr.decode(errors="replace")
    assert res.returncode == 0, text[-3000:]
    assert "rank 1 died (SIGKILL); restarting the job (1 of 1)" in text, text[-3000:]
    assert "goes on without it" not in text, text[-3000:]
    res0 = _result(tmp_path, 0)
    assert len(_starts(tmp_path, 0)) == 2 and _starts(tmp_path, 0)[1] == res0["pid"]
    assert res0["epoch"] == 0 and res0["w"] == [x.hex() for x in _reference(STEPS, 0)]


def test_elastic_needs_local_ranks_and_a_sane_min_np(tmp_path: Path) -> None:
    res = launch("-np", "2", "--elastic", "--min-np", "3", PY, "-c", "pass", cwd=tmp_path)
    assert res.returncode == 2 and b"--min-np 3 is more than the 2 rank(s)" in res.stderr
    res = launch("-np", "2", "--min-np", "1", PY, "-c", "pass", cwd=tmp_path)
    assert res.returncode == 2 and b"--min-np needs --elastic" in res.stderr


def test_hvd_elastic_run_recovers_in_place(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    env = _env(PYTFCOMM_TRANSPORT="tcp")
    res = launch("-np", "3", "--elastic", "--min-np", "2", "--bind-to", "none", PY,
                 str(WORKERS / "elastic_hvd_script.py"), str(tmp_path),
                 cwd=tmp_path, env=env, timeout=240)  # fmt: skip
    text = res.stderr.decode(errors="replace")
    assert res.returncode == 0, text[-3000:]
    assert "was killed by SIGKILL (exit code 137); the job goes on without it" in text, text
    assert "restarting" not in text, text[-3000:]
    w = np.zeros(4, np.float32)
    for step in range(8):  # float32, as TF computes it
        members = (0, 1, 2) if step < 5 else (0, 1)
        g = [np.arange(4, dtype=np.float32) * (step + 1) * (i + 1) for i in members]
        w = w - np.float32(0.01) * (np.sum(g, axis=0) / np.float32(len(members)))
    for i in (0, 1):
        o = json.loads((tmp_path / f"rank{i}.json").read_text())
        # one process: func ran from step 0, then again from the commit after step 4
        assert o["starts"] == [0, 5] and o["resets"] == [[5, i, 2]], o
        assert o["seen"] == [[i, 3]] * 5 + [[i, 2]] * 3, o["seen"]
        np.testing.assert_allclose(o["w"], w, rtol=1e-6)
        killed_at = float((tmp_path / "killed_at").read_text())
        print(f"hvd rank {i}: SIGKILL -> next step done {o['next_step_at'] - killed_at:.3f} s")
    assert not (tmp_path / "rank2.json").exists()


def test_the_example_trains_through_a_killed_worker(tmp_path: Path) -> None:
    example = str(WORKERS.parent.parent / "examples" / "elastic_numpy.py")
    res = launch("-np", "3", "--elastic", "--min-np", "2", "--bind-to", "none", PY, example,
                 "--kill-at", "30", cwd=tmp_path, timeout=120)  # fmt: skip
    out = res.stdout.decode(errors="replace")
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-3000:]
    assert sorted(line.split("] ", 1)[1] for line in out.splitlines() if "re-formed" in line) == [
        "re-formed: rank 0 of 2, epoch 1",
        "re-formed: rank 1 of 2, epoch 1",
    ], out
    results = [line for line in out.splitlines() if "result:" in line]
    assert len(results) == 2 and all("/2 epoch 1 " in r and "steps 100" in r for r in results)
    assert all(float(r.rsplit("loss ", 1)[1]) < 1e-3 for r in results), results
