"""GPU collectives on CUDA tensors (CuPy or PyTorch), 2 ranks sharing GPU 0.

NCCL >= 2.30 lets ranks share a GPU (NCCL_MULTI_RANK_GPU_ENABLE=1); with an
older NCCL the NCCL path runs with 1 rank and the 2-rank runs use staging.
Skipped, with the reason, without a GPU, without CuPy/PyTorch, or when the
installed pytfcomm was built without CUDA.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _harness import run_ranks

import pytfcomm._core as core
from pytfcomm._dlpack import nccl_candidates

HERE = Path(__file__).resolve().parent


def _gpu_reason() -> str | None:
    info = core.gpu_info(nccl_candidates())
    if not info.get("cuda_build"):
        return "pytfcomm was built without CUDA (PYTFCOMM_WITH_CUDA=ON pip install .)"
    if not info.get("gpus"):
        return f"no GPU: {info.get('gpu_status', 'the CUDA driver sees none')}"
    for lib in ("cupy", "torch"):
        try:
            __import__(lib)
            return None
        except ImportError:
            pass
    return "neither CuPy nor PyTorch is installed (pip install cupy-cuda13x)"


REASON = _gpu_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=REASON or "")]


def _nccl_version() -> tuple[int, ...]:
    v = core.gpu_info(nccl_candidates()).get("nccl_version", "-")
    return tuple(int(p) for p in v.split(".")) if v != "-" else ()


def _env() -> dict[str, str]:
    return {
        "PYTHONPATH": f"{HERE}:{os.environ.get('PYTHONPATH', '')}",
        "NCCL_MULTI_RANK_GPU_ENABLE": "1",
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0"),
    }


def _ranks_for_nccl() -> int:
    return 2 if _nccl_version() >= (2, 30) else 1


@pytest.mark.parametrize("transport", ["nccl", "staged"])
def test_collectives_match_cpu_reference(transport: str) -> None:
    n = _ranks_for_nccl() if transport == "nccl" else 2
    env = dict(_env(), PYTFCOMM_GPU_TRANSPORT=transport, PYTFCOMM_GPU_STAGE_BYTES="65536")
    if transport == "nccl" and not _nccl_version():
        pytest.fail("NCCL not found: pip install nvidia-nccl-cu13")
    out = run_ranks(n, "gpu_workers:collectives", None, [1, 1000, 100_003], env=env, timeout=600)
    for r, res in enumerate(out):
        assert res["failures"] == [], f"rank {r}: {res['failures']}"
        assert res["backend"] == transport


def test_init_transport_tcp_stages() -> None:
    out = run_ranks(2, "gpu_workers:collectives", "tcp", [4097], env=_env(), timeout=600)
    assert [r["backend"] for r in out] == ["staged", "staged"]
    assert all(r["failures"] == [] for r in out), out


@pytest.mark.parametrize("transport", ["nccl", "staged"])
def test_mismatch_is_detected(transport: str) -> None:
    if transport == "nccl" and _ranks_for_nccl() < 2:
        pytest.skip("NCCL < 2.30 cannot put 2 ranks on one GPU")
    env = dict(_env(), PYTFCOMM_GPU_TRANSPORT=transport)
    out = run_ranks(2, "gpu_workers:mismatch", None, env=env, timeout=120)
    assert all(o.startswith("MismatchError") for o in out), out


@pytest.mark.parametrize("transport", ["nccl", "staged"])
def test_missing_rank_times_out(transport: str) -> None:
    if transport == "nccl" and _ranks_for_nccl() < 2:
        pytest.skip("NCCL < 2.30 cannot put 2 ranks on one GPU")
    env = dict(_env(), PYTFCOMM_GPU_TRANSPORT=transport)
    out = run_ranks(2, "gpu_workers:one_rank_missing", None, env=env, timeout=120)
    assert out[0].startswith(("CommTimeoutError", "PeerLostError")), out
    seconds = float(out[0].split(" after ")[1].split("s:")[0])
    assert seconds < 12, out
