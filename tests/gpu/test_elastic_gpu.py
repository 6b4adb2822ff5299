"""pytfcomm-run --elastic with GPU tensors on the NCCL path: the survivors of a lost rank
go on in the same processes, with a new NCCL communicator (docs/elastic.md).

Three ranks run tests/gpu/elastic_gpu_workers.py through pytfcomm-run (127.0.0.1 only,
the launcher bounded and killed with its process group on failure), each doing
back-to-back NCCL all-reduces of GPU tensors. The test SIGKILLs the last one
mid-stream (or held inside NCCL, or between GPU calls, or in a host collective): the two
others get a recoverable error, re-form with size 2 in the same processes, and their
next GPU all-reduces (on a new NCCL communicator) equal NumPy's, in NCCL's non-blocking
and blocking modes and with an NCCL without ncclCommRevoke. The stand-in's record of
NCCL calls (PTCSI_NCCL_TRACE) shows each survivor's old communicator aborted, never
finalized or destroyed, and one new 2-rank communicator. The time from the SIGKILL to the survivors'
next completed GPU step is printed (docs/elastic.md quotes it), never asserted.

Stand-ins only for now (the fake_cuda tensors); a real GPU would run the same program
with CuPy or PyTorch tensors.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from _gpu_env import GpuEnv
from _launcher_run import PY, _env, started, wait_files

pytestmark = pytest.mark.gpu

WORKER = str(Path(__file__).resolve().parent / "elastic_gpu_workers.py")
AFTER = 5  # GPU steps each survivor does in the new communicator

# The victim's 6th NCCL collective (the step after the one that wrote OUTDIR/victim)
# never reaches the stand-in's barrier: the survivors wait inside NCCL when it dies.
IN_NCCL = {"PTCSI_NCCL_HANG_AT": "6:2"}
BLOCKING = {"PTCSI_NCCL_LAUNCH_WAITS": "1"}  # a blocking launch waits for every peer's
CASES = {
    # name: (stand-in NCCL, PYTFCOMM_GPU_NCCL_MODE, worker mode, extra environment)
    "nonblocking": ("", "nonblocking", "stream", {}),
    "nonblocking-norevoke": ("norevoke", "nonblocking", "stream", {}),
    "blocking": ("", "blocking", "stream", BLOCKING),
    "nonblocking-in-nccl": ("", "nonblocking", "stream", IN_NCCL),
    "blocking-in-nccl": ("", "blocking", "stream", {**BLOCKING, **IN_NCCL}),
    "nonblocking-between": ("", "nonblocking", "between", {}),
    "nonblocking-host": ("", "nonblocking", "host", {}),
    "blocking-host": ("", "blocking", "host", BLOCKING),
}


def _case_env(
    gpu_env: GpuEnv, lib: str, mode: str, extra: dict[str, str], trace: Path
) -> dict[str, str]:
    if not gpu_env.standin:
        pytest.skip("the SIGKILL schedule is written for the stand-ins' fake_cuda tensors")
    assert gpu_env.standin_libs is not None
    nccl = gpu_env.standin_libs / lib / "libnccl.so.2"
    assert nccl.is_file(), nccl
    env = _env(**gpu_env.with_env(PTCSI_NCCL_TRACE=str(trace), **extra))
    env.update(
        PYTFCOMM_NCCL_LIBRARY=str(nccl),
        PYTFCOMM_GPU_TRANSPORT="nccl",
        PYTFCOMM_GPU_NCCL_MODE=mode,
        PYTFCOMM_TRANSPORT="tcp",
        PYTFCOMM_TIMEOUT="20",
    )
    return env


@pytest.mark.parametrize("case", list(CASES))
def test_survivors_rebuild_nccl_and_go_on(gpu_env: GpuEnv, tmp_path: Path, case: str) -> None:
    lib, mode, worker_mode, extra = CASES[case]
    trace = tmp_path / "nccl-calls.txt"
    env = _case_env(gpu_env, lib, mode, extra, trace)
    args = ("-np", "3", "--elastic", "--min-np", "2", "--bind-to", "none")
    cmd = (PY, WORKER, str(tmp_path), str(AFTER), worker_mode)
    with started(*args, *cmd, cwd=tmp_path, env=env) as proc:
        wait_files([tmp_path / "victim"], timeout=120)
        victim = int((tmp_path / "victim").read_text())
        time.sleep(0.3)  # the ranks are in the stream of all-reduces
        t_kill = time.time()
        os.kill(victim, signal.SIGKILL)
        _, err = proc.communicate(timeout=150)
    text = err.decode(errors="replace")
    assert proc.returncode == 0, text[-4000:]
    assert "epoch 1: 2 rank(s) go on" in text and "restarting" not in text, text[-4000:]
    assert not (tmp_path / "result2.json").exists()
    for i in (0, 1):
        res = json.loads((tmp_path / f"result{i}.json").read_text())
        # the package under test, not an installed one
        assert res["package"].startswith(env["PYTHONPATH"].split(os.pathsep)[0]), res["package"]
        assert res["epoch"] == 1, res
        assert res["error"].startswith(("PeerLostError", "CommClosedError")), res["error"]
        steps = res["steps"]
        assert all(ok for _, _, ok in steps), steps
        before = [s for s in steps if s[1] == 3]
        after = [s for s in steps if s[1] == 2]
        assert len(before) >= 4 and before == [[i, 3, True]] * len(before), steps
        assert after == [[i, 2, True]] * AFTER, steps
        assert res["backend"] == "nccl" and res["nccl_mode"] == mode, res
        # The stand-in's record of this process's NCCL communicators: the first (3 ranks)
        # aborted, never finalized or destroyed (its peer is gone: that could wait); the
        # survivors' one (2 ranks) created once and released cleanly at the end.
        lines = [c.split() for c in trace.read_text().splitlines()]
        calls = [c[1:] for c in lines if c[0] == str(res["pid"])]
        assert calls == [
            ["ncclCommInitRankConfig", f"{i}/3"],
            ["ncclCommAbort", f"{i}/3"],
            ["ncclCommInitRankConfig", f"{i}/2"],
            ["ncclCommFinalize", f"{i}/2"],
            ["ncclCommDestroy", f"{i}/2"],
        ], calls
        t = res["times"]
        print(
            f"{case} rank {i} ({res['nccl_reform']}): SIGKILL -> error {t['error'] - t_kill:.3f} s,"
            f" -> new communicator {t['reformed'] - t_kill:.3f} s,"
            f" -> next GPU step done {t['next_step'] - t_kill:.3f} s; {res['error'][:160]}"
        )
