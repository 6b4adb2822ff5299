"""pytfcomm-run --elastic with GPU tensors on the NCCL path: the survivors of a lost rank
go on in the same processes, with a new NCCL communicator: the old one shrunk
(ncclCommShrink) where NCCL has it, else re-created (docs/elastic.md).

Three ranks run tests/gpu/elastic_gpu_workers.py through pytfcomm-run (127.0.0.1 only,
the launcher bounded and killed with its process group on failure), each doing
back-to-back NCCL all-reduces of GPU tensors. The test SIGKILLs the last one
mid-stream (or held inside NCCL, or between GPU calls, or in a host collective): the two
others get a recoverable error, re-form with size 2 in the same processes, and their
next GPU all-reduces (on a new NCCL communicator) equal NumPy's, in NCCL's non-blocking
and blocking modes, with stand-in NCCLs lacking ncclCommShrink and/or ncclCommRevoke,
and with a shrink that fails. The stand-in's record of NCCL calls (PTCSI_NCCL_TRACE)
shows which way each survivor's 2-rank communicator came: shrunk from the old one
(ncclCommShrink, then the old one aborted), or, without ncclCommShrink or after a
failed one, the old one aborted and a new one created; the old one is never finalized
or destroyed. The time from the SIGKILL to the survivors' next completed GPU step, and
from the new host communicator to it (the NCCL set-up), are printed (docs/elastic.md
quotes them), never asserted.

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
SHRINK_FAILS = {"PTCSI_NCCL_SHRINK_FAIL": "1"}  # old rank 1's ncclCommShrink fails
CASES = {
    # name: (stand-in NCCL, PYTFCOMM_GPU_NCCL_MODE, worker mode, extra environment);
    # "" has ncclCommShrink and ncclCommRevoke, norevoke/ neither (older than 2.27),
    # noshrink/ only ncclCommRevoke, shrink227/ only ncclCommShrink (2.27)
    "nonblocking": ("", "nonblocking", "stream", {}),
    "nonblocking-norevoke": ("norevoke", "nonblocking", "stream", {}),
    "nonblocking-noshrink": ("noshrink", "nonblocking", "stream", {}),
    "blocking-noshrink": ("noshrink", "blocking", "stream", BLOCKING),
    "nonblocking-shrink227": ("shrink227", "nonblocking", "stream", {}),
    "nonblocking-shrink-fails": ("", "nonblocking", "stream", SHRINK_FAILS),
    "blocking": ("", "blocking", "stream", BLOCKING),
    "nonblocking-in-nccl": ("", "nonblocking", "stream", IN_NCCL),
    "blocking-in-nccl": ("", "blocking", "stream", {**BLOCKING, **IN_NCCL}),
    "nonblocking-between": ("", "nonblocking", "between", {}),
    "nonblocking-host": ("", "nonblocking", "host", {}),
    "blocking-host": ("", "blocking", "host", BLOCKING),
}


def _nccl_path(lib: str, extra: dict[str, str]) -> tuple[str, str]:
    """(what ``gpu_info()["nccl_reform"]`` says, the way the survivors' NCCL came)."""
    # shrink227/: a kept communicator's failed work cannot be revoked, so pytfcomm
    # aborts it and re-creates (docs/gpu.md, "After a lost rank").
    offered = "shrink" if lib == "" else "recreate"
    return offered, "recreate" if "PTCSI_NCCL_SHRINK_FAIL" in extra else offered


def _expected_calls(i: int, path: str) -> list[list[str]]:
    """The stand-in's record of survivor ``i``'s NCCL communicators: the first (3 ranks)
    aborted, never finalized or destroyed (its peer is gone: that could wait); the
    survivors' one (2 ranks), shrunk from it (then the first aborted) or created anew,
    released cleanly at the end."""
    old, new = f"{i}/3", f"{i}/2"
    if path == "shrink":
        made = [["ncclCommShrink", new], ["ncclCommAbort", old]]
    else:
        made = [["ncclCommAbort", old], ["ncclCommInitRankConfig", new]]
    return [["ncclCommInitRankConfig", old], *made, ["ncclCommFinalize", new],
            ["ncclCommDestroy", new]]  # fmt: skip


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
        offered, path = _nccl_path(lib, extra)
        assert res["nccl_reform"] == offered, res
        lines = [c.split() for c in trace.read_text().splitlines()]
        calls = [c[1:] for c in lines if c[0] == str(res["pid"])]
        if path == "recreate" and offered == "shrink":
            # Every survivor tried; the one whose shrink was made to fail made no
            # child, the other's child failed (the segment poisoned) and was aborted.
            tried = [["ncclCommShrink", f"{i}/2"], ["ncclCommAbort", f"{i}/2"]]
            assert i == 1 or all(c in calls for c in tried), calls
            calls = [c for c in calls if c not in tried]
            warned = "ncclCommShrink did not make the survivors' NCCL communicator"
            assert warned in text, text[-4000:]
        assert calls == _expected_calls(i, path), calls
        t = res["times"]
        print(
            f"{case} rank {i} ({path}): SIGKILL -> error {t['error'] - t_kill:.3f} s,"
            f" -> new communicator {t['reformed'] - t_kill:.3f} s,"
            f" -> next GPU step done {t['next_step'] - t_kill:.3f} s"
            f" (new communicator -> next GPU step done {t['next_step'] - t['reformed']:.3f} s);"
            f" {res['error'][:160]}"
        )
