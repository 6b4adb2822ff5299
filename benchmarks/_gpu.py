"""What the GPU benchmarks (nccl.py, gpu_overhead.py) share."""

from __future__ import annotations


def why_no_gpu() -> str | None:
    """None when PyTorch sees a GPU and pytfcomm is a CUDA build, else what is missing."""
    try:
        import torch
    except ImportError:
        return "needs PyTorch with CUDA: pip install torch"
    if not torch.cuda.is_available():
        return "no GPU visible to PyTorch"
    import pytfcomm._core as core
    from pytfcomm._dlpack import nccl_candidates

    if not core.gpu_info(nccl_candidates()).get("cuda_build"):
        return "pytfcomm was built without CUDA: PYTFCOMM_WITH_CUDA=ON pip install ."
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (pytfcomm._launch.ports)."""
    from pytfcomm._launch.ports import free_port as package_free_port

    return package_free_port()
