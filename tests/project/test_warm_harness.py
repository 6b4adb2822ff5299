"""The test harness's warm start (tests/_warm.py): a TF rank forked from the zygote
behaves as the cold ``python _rank_entry.py`` rank it replaces."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import _warm
import pytest
from _harness import collect, kill_all, run_ranks, start_ranks

pytestmark = pytest.mark.skipif(
    os.environ.get("PYTFCOMM_TEST_COLD") == "1", reason="PYTFCOMM_TEST_COLD=1: every rank cold"
)


def test_warm_ranks_look_like_cold_ones(tmp_path):
    outs = run_ranks(
        3, "warm_workers:describe", str(tmp_path), timeout=120, env={"PYTFCOMM_TIMEOUT": "17"}
    )
    for r, o in enumerate(outs):
        assert o["preloaded"], f"rank {r} started cold: the zygote is not in use"
        assert o["sid"] == o["pgid"] == o["pid"], f"rank {r} is not its own session"
        assert o["argv"][0] == "warm_workers:describe" and o["argv"][1] == str(r)
        assert o["env"]["PYTFCOMM_TIMEOUT"] == "17", "not the environment it was given"
        assert "test_warm_ranks_look_like_cold_ones" in o["env"]["PYTEST_CURRENT_TEST"]
        assert o["stdin"] == b"", "stdin is not /dev/null"
        assert o["sigint"], "Ctrl-C would not raise KeyboardInterrupt"
        assert o["collects"], "the rank's cyclic garbage collector does not free its cycles"
        assert (tmp_path / f"atexit{r}").read_text() == "ran", "atexit handlers did not run"
        assert Path(o["cwd"]).name.startswith("pytfcomm-test-")
    assert len({o["pid"] for o in outs}) == 3
    randoms = [tuple(o["random"]) for o in outs]
    assert len(set(randoms)) == 3, "NumPy's global generator repeats across ranks"


def test_exit_codes_logs_and_kills_reach_the_harness():
    with tempfile.TemporaryDirectory(prefix="pytfcomm-test-") as tmp:
        workdir = Path(tmp)
        procs, results, _ = start_ranks(1, "warm_workers:exit_hard", 7, workdir=workdir)
        assert isinstance(procs[0], _warm.WarmProc)
        assert procs[0].wait(timeout=60) == 7
    with tempfile.TemporaryDirectory(prefix="pytfcomm-test-") as tmp:
        workdir = Path(tmp)
        procs, results, _ = start_ranks(2, "warm_workers:sleep", 600.0, workdir=workdir)
        assert all(isinstance(p, _warm.WarmProc) for p in procs)
        assert procs[0].poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            procs[0].wait(timeout=0.2)
        procs[1].send_signal(signal.SIGTERM)
        assert procs[1].wait(timeout=30) == -signal.SIGTERM
        start = time.monotonic()
        kill_all(procs)
        assert procs[0].returncode == -signal.SIGKILL
        assert time.monotonic() - start < 10
        outcomes = collect(procs, results, workdir, 1)
        assert "exited with code -9" in outcomes[0][1]


def test_environments_the_zygote_did_not_import_under_start_cold(tmp_path):
    (out,) = run_ranks(
        1, "warm_workers:describe", str(tmp_path), timeout=120, env={"TF_ENABLE_ONEDNN_OPTS": "0"}
    )
    assert not out["preloaded"]
    assert _warm._fits({"A": "1", "PYTFCOMM_X": "2", "TF_CONFIG": "{}"}, {"A": "1"})
    assert not _warm._fits({"A": "2"}, {"A": "1"})
    assert not _warm._fits({}, {"LD_PRELOAD": "x"})
    assert _warm._uses_tf("warm_workers:describe")
    assert not _warm._uses_tf("core_workers:allreduce_matrix")


def test_tf_keras_ranks_fork_from_a_zygote_of_their_own(tmp_path, monkeypatch):
    """TF_USE_LEGACY_KERAS=1 changes what ``import tensorflow`` imports (tf-keras, not
    Keras 3): such ranks fork from a zygote that imported TF with it set, and see the
    Keras a cold rank sees."""
    legacy = {"TF_USE_LEGACY_KERAS": "1"}
    (warm,) = run_ranks(1, "warm_workers:describe", str(tmp_path), timeout=120, env=legacy)
    (plain,) = run_ranks(1, "warm_workers:describe", str(tmp_path), timeout=120)
    monkeypatch.setenv("PYTFCOMM_TEST_COLD", "1")
    (cold,) = run_ranks(1, "warm_workers:describe", str(tmp_path), timeout=120, env=legacy)
    assert warm["preloaded"] and plain["preloaded"] and not cold["preloaded"]
    assert warm["keras"] == cold["keras"] and warm["keras"].startswith("tf_keras."), warm
    assert plain["keras"].startswith("keras."), plain
    assert warm["collects"] and (tmp_path / "atexit0").read_text() == "ran"


def test_a_changed_session_environment_gets_a_new_zygote(tmp_path, monkeypatch):
    monkeypatch.setattr(_warm, "_restarts", [0])
    run_ranks(1, "warm_workers:describe", str(tmp_path), timeout=120)
    before = _warm._zygote_instance
    monkeypatch.setenv("PYTFCOMM_WARM_TEST_IMPORT_TIME", "x")  # read after import: no restart
    run_ranks(1, "warm_workers:describe", str(tmp_path), timeout=120)
    assert _warm._restarts == [0] and _warm._zygote_instance is before
    monkeypatch.setenv("WARM_TEST_SESSION_VAR", "1")
    (out,) = run_ranks(1, "warm_workers:describe", str(tmp_path), timeout=120)
    assert out["preloaded"] and _warm._restarts == [1]
    assert _warm._zygote_instance.env["WARM_TEST_SESSION_VAR"] == "1"
