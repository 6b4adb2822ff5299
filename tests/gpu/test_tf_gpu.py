"""pytfcomm's TF GPU kernels on a real GPU: MirroredStrategy, eager ops, Keras, two workers.

Needs a CUDA build of TensorFlow that sees a GPU, and pytfcomm built against
it with PYTFCOMM_WITH_CUDA=ON (so the op library has GPU kernels; see
docs/gpu.md). One GPU is enough: each process splits it into two logical
GPUs, which NCCL >= 2.30 lets share it; the staged path (pinned host memory
and the CPU transports) runs as well. Skipped, with the reason, otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _harness import run_ranks

import pytfcomm._core as core
from pytfcomm._dlpack import nccl_candidates

HERE = Path(__file__).resolve().parent


def _reason() -> str | None:
    try:
        from pytfcomm import _tf_build_info as built
    except ImportError:
        return "pytfcomm was built without its TF op library"
    if not getattr(built, "TF_GPU_KERNELS", False):
        return (
            "the TF op library has no GPU kernels: build pytfcomm with PYTFCOMM_WITH_CUDA=ON "
            "against a CUDA TensorFlow (docs/gpu.md)"
        )
    probe = (
        "import tensorflow as tf; print(int(tf.test.is_built_with_cuda()), "
        "len(tf.config.list_physical_devices('GPU')))"
    )
    r = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
        check=False,
    )
    cuda, gpus = [*r.stdout.split(), "0", "0"][:2] if r.returncode == 0 else ("0", "0")
    if cuda != "1":
        return "TensorFlow is not a CUDA build"
    if gpus == "0":
        return "TensorFlow sees no GPU"
    return None


def _nccl_version() -> tuple[int, ...]:
    v = core.gpu_info(nccl_candidates()).get("nccl_version", "-")
    return tuple(int(p) for p in v.split(".")) if v != "-" else ()


REASON = _reason()
if REASON is not None:
    # tests/gpu/test_stream_collectives.py runs the core below these kernels on the stand-ins.
    REASON = (
        "needs a real GPU and a CUDA TensorFlow: TF creates GPU devices, streams and its "
        "allocator only through the real CUDA runtime, which the CPU stand-ins do not "
        f"replace ({REASON})"
    )
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=REASON or "")]


def _env(transport: str) -> dict[str, str]:
    if transport == "nccl" and _nccl_version() < (2, 30):
        pytest.skip("two logical GPUs on one GPU need NCCL >= 2.30 (NCCL_MULTI_RANK_GPU_ENABLE)")
    return {
        "PYTHONPATH": f"{HERE}:{os.environ.get('PYTHONPATH', '')}",
        "NCCL_MULTI_RANK_GPU_ENABLE": "1",
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0"),
        "PYTFCOMM_GPU_TRANSPORT": transport,
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }


@pytest.mark.parametrize("transport", ["nccl", "staged"])
def test_mirrored_strategy_on_two_gpus(transport: str) -> None:
    out = run_ranks(1, "tf_gpu_workers:mirrored", env=_env(transport), timeout=600)[0]
    assert out["sum"] == [[3.0, 3.0]] * 3, out
    assert out["mean"] == [[1.5, 1.5]] * 3, out
    assert out["ops"] >= 4, out  # two groups of two GPU ops at least: pytfcomm did the reducing
    assert [d.endswith(f"GPU:{i}") for i, d in enumerate(out["devices"])] == [True, True], out
    assert out["eager"] == [[2.0] * 5, [2.0] * 5], out
    assert [d.endswith(f"GPU:{i}") for i, d in enumerate(out["eager_devices"])] == [True] * 2
    assert out["loss"] == out["loss"] and out["loss"] < 1e6, out  # finite


@pytest.mark.parametrize("transport", ["nccl", "staged"])
def test_two_workers_with_two_gpus_each(transport: str) -> None:
    out = run_ranks(2, "tf_gpu_workers:two_workers", env=_env(transport), timeout=600)
    # Replica values 1, 2 on worker 0 and 11, 12 on worker 1.
    for res in out:
        assert res["sum"] == [[26.0, 26.0]] * 3, res
        assert res["mean"] == [[6.5, 6.5]] * 3, res
        assert res["loss"] == res["loss"], res
