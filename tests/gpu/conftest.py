"""Where tests/gpu runs: on a real GPU, else on the CPU stand-ins.

With a GPU (the installed pytfcomm is a CUDA build that sees one, and CuPy
or PyTorch is importable) the tests run on it, as they were written for.
Otherwise they run against tests/gpu/standin: libcuda.so.1 and libnccl.so.2
on host memory, loaded by the session's CUDA build of the core
(tests/conftest.py) through PYTFCOMM_CUDA_DRIVER / PYTFCOMM_NCCL_LIBRARY,
with fake_cuda tensors (PYTFCOMM_TEST_GPU_LIB=fake). PYTFCOMM_TEST_GPU=standin
forces the stand-ins on a GPU machine too; =gpu insists on the GPU.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _gpu_env import GpuEnv

HERE = Path(__file__).resolve().parent
STANDIN = HERE / "standin"


def _real_gpu_reason() -> str | None:
    """None when the installed pytfcomm can run tests/gpu on a real GPU, else why not."""
    import pytfcomm._core as core
    from pytfcomm._dlpack import nccl_candidates

    info = core.gpu_info(nccl_candidates())
    if not info.get("cuda_build"):
        return "the installed pytfcomm was built without CUDA"
    if not info.get("gpus"):
        return f"no GPU: {info.get('gpu_status', 'the CUDA driver sees none')}"
    import importlib.util

    # find_spec, not import: the ranks import the library, this process need not
    # (an import here could warn, and warnings are errors in this suite).
    if any(importlib.util.find_spec(lib) for lib in ("cupy", "torch")):
        return None
    return "neither CuPy nor PyTorch is installed (pip install cupy-cuda13x)"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")) if text and text != "-" else ()


@pytest.fixture(scope="session")
def gpu_env(request: pytest.FixtureRequest) -> GpuEnv:
    want = os.environ.get("PYTFCOMM_TEST_GPU", "")
    why_not = _real_gpu_reason() if want != "standin" else "PYTFCOMM_TEST_GPU=standin"
    if why_not is None:
        import pytfcomm._core as core
        from pytfcomm._dlpack import nccl_candidates

        candidates = nccl_candidates()
        info = core.gpu_info(candidates)
        nccl = info.get("nccl_version", "-")
        found = f"{nccl} from {info.get('nccl', '?')}; candidates {candidates}"
        env = {
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            "NCCL_MULTI_RANK_GPU_ENABLE": "1",
            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0"),
        }
        return GpuEnv(standin=False, env=env, nccl_version=_version(nccl), nccl_found=found)
    if want == "gpu":
        pytest.fail(f"PYTFCOMM_TEST_GPU=gpu but {why_not}")
    libs = request.getfixturevalue("standin_libs")
    package = request.getfixturevalue("cuda_package")
    env = {
        "PYTHONPATH": os.pathsep.join([str(package), str(HERE), str(STANDIN)]),
        "PYTFCOMM_CUDA_DRIVER": str(libs / "libcuda.so.1"),
        "PYTFCOMM_NCCL_LIBRARY": str(libs / "libnccl.so.2"),
        "PYTFCOMM_TEST_GPU_LIB": "fake",
        "PTCSI_GPUS": "2",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }
    return GpuEnv(
        standin=True,
        env=env,
        standin_libs=libs,
        core_build=request.getfixturevalue("cuda_build"),
    )
