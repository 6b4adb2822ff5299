"""The two ways pytfcomm bounds NCCL's waits (docs/gpu.md, "NCCL path"):
blocking communicators under a watchdog that revokes a stuck launch
(ncclCommRevoke, NCCL 2.28+), and non-blocking ones polled against the deadline
(an NCCL without ncclCommRevoke: the stand-in's norevoke/libnccl.so.2).

Stand-ins only: the stopped peer is the NCCL stand-in's fault knob
PTCSI_NCCL_STOP_AT, the blocking launch PTCSI_NCCL_LAUNCH_WAITS.
"""

from __future__ import annotations

import pytest
from _gpu_env import GpuEnv
from _harness import run_ranks

pytestmark = pytest.mark.gpu

TIMEOUT = 4.0  # init(timeout=...) of every rank
BOUND = 12.0  # the documented bound: the deadline, plus the watchdog's 5 s grace, plus slack


def _env(gpu_env: GpuEnv, nccl: str, **extra: str) -> dict[str, str]:
    """The stand-in environment with the NCCL that has ncclCommRevoke ("revoke") or
    lacks it ("norevoke")."""
    if not gpu_env.standin:
        pytest.skip("PTCSI_NCCL_STOP_AT is a fault knob of the CPU stand-ins")
    assert gpu_env.standin_libs is not None
    lib = gpu_env.standin_libs / ("norevoke" if nccl == "norevoke" else "") / "libnccl.so.2"
    assert lib.is_file(), lib
    return gpu_env.with_env(PYTFCOMM_NCCL_LIBRARY=str(lib), PYTFCOMM_GPU_TRANSPORT="nccl", **extra)


@pytest.mark.parametrize(("nccl", "mode"), [("revoke", "blocking"), ("norevoke", "nonblocking")])
def test_peer_stopped_between_verification_and_launch(
    gpu_env: GpuEnv, nccl: str, mode: str
) -> None:
    """Rank 1 stops after the verification round of the second all-reduce, before
    its NCCL launch (PTCSI_NCCL_STOP_AT=2:1). Rank 0's launch blocks inside NCCL
    (blocking communicator: PTCSI_NCCL_LAUNCH_WAITS=1) or its work waits on the
    GPU (non-blocking): either way it raises CommTimeoutError at its deadline,
    saying NCCL was revoked (blocking) or aborted, and later calls fail at once."""
    env = _env(
        gpu_env, nccl, PYTFCOMM_GPU_NCCL_MODE=mode, PTCSI_NCCL_STOP_AT="2:1",
        PTCSI_NCCL_LAUNCH_WAITS="1",
    )  # fmt: skip
    out = run_ranks(2, "gpu_workers:failing", TIMEOUT, env=env, timeout=90)
    for r, res in enumerate(out):
        assert res["nccl_mode"] == mode, (r, res)
        assert res["call"] == 1, (r, res)
        assert res["outcome"].startswith("CommTimeoutError"), (r, res)
        assert "timed out" in res["outcome"], (r, res)
        assert TIMEOUT - 0.5 < res["took"] < BOUND, (r, res)
        assert "closed" in res["after"] and res["after_took"] < 2, (r, res)
    blocked = out[0]["outcome"]
    if mode == "blocking":
        assert "revoked (ncclCommRevoke), then aborted" in blocked, out[0]
    else:
        assert "NCCL was aborted" in blocked, out[0]


@pytest.mark.parametrize(
    ("nccl", "setting", "mode"),
    [
        ("revoke", "auto", "nonblocking"),
        ("revoke", "blocking", "blocking"),
        ("revoke", "nonblocking", "nonblocking"),
        ("norevoke", "auto", "nonblocking"),
    ],
)
def test_both_modes_match_numpy(gpu_env: GpuEnv, nccl: str, setting: str, mode: str) -> None:
    """Every collective on 2 ranks, blocking and non-blocking
    (PYTFCOMM_GPU_NCCL_MODE), against NumPy; the stand-in delays every stream
    operation so that a launch that returned early is still waited for."""
    env = _env(gpu_env, nccl, PYTFCOMM_GPU_NCCL_MODE=setting, PTCSI_CUDA_DELAY_US="100")
    opts = {"dtypes": ["float32", "int64"], "ops": ["sum", "max"], "big_counts": [300_001]}
    out = run_ranks(2, "gpu_workers:collectives", None, [1000], opts, env=env, timeout=200)
    for r, res in enumerate(out):
        assert res["failures"] == [], (r, res["failures"][:10])
        assert res["backend"] == "nccl" and res["nccl_mode"] == mode, (r, res)


def test_blocking_mode_needs_revoke(gpu_env: GpuEnv) -> None:
    """PYTFCOMM_GPU_NCCL_MODE=blocking with an NCCL lacking ncclCommRevoke is a
    ConfigError naming the variable and what to do, on every rank, not a hang."""
    env = _env(gpu_env, "norevoke", PYTFCOMM_GPU_NCCL_MODE="blocking")
    out = run_ranks(2, "gpu_workers:failing", TIMEOUT, env=env, timeout=90)
    for r, res in enumerate(out):
        assert res["outcome"].startswith("ConfigError"), (r, res)
        assert "PYTFCOMM_GPU_NCCL_MODE=blocking needs ncclCommRevoke" in res["outcome"], (r, res)
