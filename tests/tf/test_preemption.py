"""TF's PreemptionCheckpointHandler on two workers of pytfcomm.MultiWorkerMirroredStrategy.

Before pytfcomm.tf.preemption, TF's handler constructed, its watcher threads died
("Coordination service is not enabled") and a SIGTERM made the signalled worker fail
with a traceback (no checkpoint) and the other lose its peer. Now a SIGTERM on any
worker makes every worker save before the same step and exit with TF's code, and a
restart resumes there. Jobs run under ``pytfcomm-run -np 2`` on 127.0.0.1, bounded in
time and killed with their process group on failure (tests/launch/test_launcher.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import _paths
import pytest
from _launcher_run import PY, launch, started

pytest.importorskip("tensorflow")

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

WORKERS = str(_paths.WORKERS / "preemption_workers.py")
STEPS = 200  # far more than a test waits for before it signals (step 3)


def _result(out: Path, run: int, rank: int) -> dict:
    return json.loads((out / f"result.{run}.{rank}.json").read_text())


def _sigterm_at_step(
    out: Path, rank: int, proc, step: int = 3, timeout: float = 150, pid: int | None = None
) -> float:
    """SIGTERM rank ``rank`` of the first run (or ``pid``) once that rank has done ``step``
    steps; the time it was sent."""
    progress, deadline = out / f"progress.0.{rank}", time.monotonic() + timeout
    while not (progress.exists() and int(progress.read_text() or "0") >= step):
        assert proc.poll() is None, "the job ended before it was signalled"
        assert time.monotonic() < deadline, f"rank {rank} never reached step {step}"
        time.sleep(0.05)
    os.kill(pid or int((out / f"pid.0.{rank}").read_text()), signal.SIGTERM)
    return time.time()


def _saves(err: str, rank: int) -> list[tuple[int, str]]:
    """(run, directory) of every checkpoint rank ``rank`` says it saved."""
    said = rf"PreemptionCheckpointHandler: worker {rank} saved run (\d+) into (\S+)"
    pattern = rf"^\[{rank}\] .*{said}"
    return [(int(n), d) for n, d in re.findall(pattern, err, re.MULTILINE)]


def test_sigterm_on_one_worker_saves_on_every_worker_exits_42_and_resumes(
    tmp_path: Path,
) -> None:
    ckpt = tmp_path / "ckpt"
    args = ("default", str(tmp_path), str(ckpt), str(STEPS))
    with started("-np", "2", "--restarts", "1", "--kill-timeout", "30", PY, WORKERS, *args,
                 cwd=tmp_path) as proc:  # fmt: skip
        sent = _sigterm_at_step(tmp_path, 1, proc)
        _, err_b = proc.communicate(timeout=240)
    err = err_b.decode()
    assert proc.returncode == 0, err[-4000:]
    assert re.search(r"rank \d exited with code 42; restarting the job \(1 of 1\)", err), err
    first = [_result(tmp_path, 0, r) for r in range(2)]
    assert [f["exit"] for f in first] == [42, 42], err[-4000:]
    at = first[0]["runs"]
    assert first[1]["runs"] == at and 3 <= at < STEPS, (first, err[-4000:])
    # Both saved at that step: the chief into ckpt, worker 1 beside it (TF's rule), once.
    assert _saves(err, 0) == [(at, str(ckpt))], err[-4000:]
    assert _saves(err, 1) == [(at, str(tmp_path / "workertemp_1" / "ckpt"))], err[-4000:]
    # Removed after saving, as TF does (the restarted handler makes the directory again).
    assert list((tmp_path / "workertemp_1").iterdir()) == []
    assert "Traceback" not in err, err[-4000:]
    print(f"SIGTERM to exit of both workers: {max(f['left_at'] for f in first) - sent:.2f} s")

    # The restarted job resumes at that step and ends where an uninterrupted one does.
    second = [_result(tmp_path, 1, r) for r in range(2)]
    assert [(s["start"], s["exit"], s["runs"]) for s in second] == [(at, 0, STEPS)] * 2
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    ref = launch("-np", "2", PY, WORKERS, "default", str(ref_dir), str(ref_dir / "ckpt"),
                 str(STEPS), cwd=tmp_path, timeout=200)  # fmt: skip
    assert ref.returncode == 0, ref.stderr.decode()[-3000:]
    expected = _result(ref_dir, 0, 0)["weights"]
    assert any(expected)
    assert [s["weights"] for s in second] == [expected, expected]


def test_chief_signalled_with_grace_period_and_own_exit_code(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    with started("-np", "2", "--kill-timeout", "30", PY, WORKERS,
                 "config", str(tmp_path), str(ckpt), str(STEPS), cwd=tmp_path) as proc:  # fmt: skip
        _sigterm_at_step(tmp_path, 0, proc)
        _, err_b = proc.communicate(timeout=240)
    err = err_b.decode()
    assert proc.returncode == 7, err[-4000:]
    first = [_result(tmp_path, 0, r) for r in range(2)]
    assert [f["exit"] for f in first] == [7, 7], err[-4000:]
    # A grace period: every worker saves at once, trains on, saves again and exits,
    # at the same steps everywhere.
    chief, other = _saves(err, 0), _saves(err, 1)
    assert [n for n, _ in chief] == [n for n, _ in other], err[-4000:]
    assert len(chief) == 2 and chief[0][0] < chief[1][0] == first[0]["runs"], err[-4000:]
    assert first[1]["runs"] == first[0]["runs"]
    assert "training on for the grace period" in err


def test_sigterm_to_the_launcher_saves_on_every_worker(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    args = ("default", str(tmp_path), str(ckpt), str(STEPS))
    with started("-np", "2", "--kill-timeout", "30", PY, WORKERS, *args,
                 cwd=tmp_path) as proc:  # fmt: skip
        _sigterm_at_step(tmp_path, 1, proc, pid=proc.pid)  # pytfcomm-run forwards it
        _, err_b = proc.communicate(timeout=240)
    err = err_b.decode()
    assert proc.returncode == 128 + signal.SIGTERM, err[-4000:]
    assert "received SIGTERM: forwarding it to all ranks" in err
    first = [_result(tmp_path, 0, r) for r in range(2)]
    assert [f["exit"] for f in first] == [42, 42], err[-4000:]
    at = first[0]["runs"]
    assert first[1]["runs"] == at and 3 <= at < STEPS, (first, err[-4000:])
    assert [n for n, _ in _saves(err, 0)] == [n for n, _ in _saves(err, 1)] == [at], err[-4000:]


def test_tf_keras_fit_saves_before_preemption_and_resumes(tmp_path: Path) -> None:
    pytest.importorskip("tf_keras")
    backup = tmp_path / "backup"
    with started("-np", "2", "--restarts", "1", "--kill-timeout", "30", PY, WORKERS,
                 "tf_keras", str(tmp_path), str(backup), cwd=tmp_path) as proc:  # fmt: skip
        _sigterm_at_step(tmp_path, 1, proc, step=10)  # in the second epoch (8 batches each)
        _, err_b = proc.communicate(timeout=240)
    err = err_b.decode()
    assert proc.returncode == 0, err[-4000:]
    first = [_result(tmp_path, 0, r) for r in range(2)]
    assert [f["exit"] for f in first] == [42, 42], err[-4000:]
    at = first[0]["runs"]
    assert first[1]["runs"] == at and 10 <= at < 24, (first, err[-4000:])
    assert _saves(err, 0) == [(at, str(backup / "chief"))], err[-4000:]
    assert _saves(err, 1) == [(at, str(backup / "workertemp_1"))], err[-4000:]
    # tf-keras resumes in the epoch it was preempted in, and finishes.
    second = [_result(tmp_path, 1, r) for r in range(2)]
    assert [(s["epochs"][0], s["epochs"][-1], s["exit"]) for s in second] == [(at // 8, 2, 0)] * 2


def test_one_worker_saves_once_and_an_exit_fn_that_returns_ends_it(tmp_path: Path) -> None:
    import tensorflow as tf

    import pytfcomm
    from pytfcomm.tf._preemption_handler import Handler

    strategy = pytfcomm.MultiWorkerMirroredStrategy()
    assert strategy.communicator.size == 1
    left: list[int] = []
    config = tf.distribute.experimental.TerminationConfig(
        exit_fn=lambda: left.append(handler.total_run_calls)
    )
    try:
        with strategy.scope():
            v = tf.Variable(0.0)
            handler = tf.distribute.experimental.PreemptionCheckpointHandler(
                None, tf.train.Checkpoint(v=v), str(tmp_path / "c"), config
            )
        assert isinstance(handler, Handler)  # the strategy's scope picks pytfcomm's
        for _ in range(2):
            handler.run(v.assign_add, 1.0)
        os.kill(os.getpid(), signal.SIGTERM)  # only noted by the handler
        for _ in range(3):
            handler.run(v.assign_add, 1.0)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    assert left == [2] and handler.total_run_calls == 5  # saved and left once, before run 3
    key = "checkpointed_runs/.ATTRIBUTES/VARIABLE_VALUE"
    assert tf.train.load_variable(str(tmp_path / "c"), key) == 2
    assert tf.train.load_variable(str(tmp_path / "c"), "v/.ATTRIBUTES/VARIABLE_VALUE") == 2.0


def test_workers_at_different_runs_fail_instead_of_saving_different_steps(
    ranks, tmp_path: Path
) -> None:
    said = ranks(2, "preemption_workers:run_counts_differ", str(tmp_path), timeout=200)
    for r, text in enumerate(said):
        assert "the workers are at different run counts (0 to 5" in text, (r, text)
        assert f"worker {r}: {5 if r == 0 else 0}" in text and "same checkpoint" in text


def test_other_handlers_stay_tensorflows(tmp_path: Path) -> None:
    import tensorflow as tf

    from pytfcomm.tf import _tf_failure_handling as tfh
    from pytfcomm.tf import preemption

    assert preemption.install() and preemption.install()  # idempotent
    ckpt = tf.train.Checkpoint(v=tf.Variable(1.0))
    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        None, ckpt, str(tmp_path / "c")
    )
    assert type(handler) is tfh.handler_class()  # no pytfcomm strategy: TF's own
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # TF's handler took SIGTERM


def test_a_tensorflow_without_the_internals_gets_a_clear_error(monkeypatch) -> None:
    from tensorflow.python.distribute.failure_handling import failure_handling

    from pytfcomm.errors import ConfigError
    from pytfcomm.tf import _tf_failure_handling as tfh

    tfh.check()
    monkeypatch.delattr(failure_handling, "_non_chief_checkpoint_dir")
    with pytest.raises(ConfigError, match=r"lacks _non_chief_checkpoint_dir.*BackupAndRestore"):
        tfh.check()
