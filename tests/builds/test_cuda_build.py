"""The CUDA variant (PYTFCOMM_WITH_CUDA=ON) configures, compiles and links here,
without a GPU: nvcc from the CUDA toolkit, nccl.h from the nvidia-nccl wheel.

The module it builds must not need libcuda, libcudart or libnccl to load, must
import on this GPU-less machine, report "no GPU" cleanly through
``python -m pytfcomm info``, and refuse a CUDA tensor with a ConfigError that
says why. The build is the session's one (tests/conftest.py ``cuda_build``,
shared with tests/builds/test_tf_gpu_build.py and tests/gpu; a few minutes on 2 cores).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Re-exported: other test modules import these from here.
from _gpu_builds import NCCL_INC, NVCC, make_package

__all__ = ["NCCL_INC", "NVCC", "make_package"]


@pytest.fixture
def package(cuda_package: Path) -> Path:
    return cuda_package


def test_configure_finds_cuda_and_nccl(cuda_configure: tuple[Path, str]) -> None:
    _, out = cuda_configure
    assert "pytfcomm: CUDA" in out and "kernels for sm 75;80;90;100;120" in out, out[-2000:]


def _run(package: Path, code: str, **env: str) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, PYTHONPATH=str(package), **env)
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=package,
        env=full_env,
    )


def test_no_cuda_library_is_linked(cuda_build: Path) -> None:
    """libcuda / libcudart / libnccl are dlopen'ed, never DT_NEEDED."""
    for lib in [cuda_build / "libpytfcomm_core.so", *cuda_build.glob("_core*.so")]:
        out = subprocess.run(
            ["readelf", "-d", str(lib)], capture_output=True, text=True, check=True
        )
        needed = [line for line in out.stdout.splitlines() if "(NEEDED)" in line]
        assert needed, out.stdout
        bad = [n for n in needed if any(s in n for s in ("libcuda", "libcudart", "libnccl"))]
        assert not bad, f"{lib.name} links {bad}"
    # The kernels are embedded as a fatbin (built by nvcc).
    fatbin = cuda_build / "generated" / "kernels.fatbin"
    assert fatbin.is_file() and fatbin.stat().st_size > 1000


def test_info_reports_no_gpu_cleanly(package: Path) -> None:
    """`python -m pytfcomm info` in the CUDA build, with no usable driver."""
    r = subprocess.run(
        [sys.executable, "-m", "pytfcomm", "info", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=package,
        env=dict(
            os.environ, PYTHONPATH=str(package), PYTFCOMM_CUDA_DRIVER="/nonexistent/libcuda.so.1"
        ),
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["cuda"] is True
    gpu = data["gpu"]
    assert gpu["cuda_build"] is True, gpu
    assert gpu["gpus"] == 0, gpu
    assert "no CUDA driver" in gpu["gpu_status"], gpu
    assert gpu["cuda_headers"].startswith(("12.", "13.")), gpu
    # NCCL: the wheel's library loads without a GPU, or the reason is given.
    if gpu["nccl"] == "not found":
        assert "NCCL not found" in gpu["nccl_status"], gpu
    else:
        assert gpu["nccl"].endswith("libnccl.so.2"), gpu
        assert gpu["nccl_version"].count(".") == 2, gpu


def test_cuda_tensor_without_gpu_is_a_config_error(package: Path) -> None:
    """A CUDA DLPack tensor on a machine without a driver: ConfigError, no crash, no hang."""
    code = """
import pytfcomm
class FakeCuda:
    shape = (4,)
    def __dlpack_device__(self):
        return (2, 0)
    def __dlpack__(self, stream=None):
        raise AssertionError("must not be exported before the GPU is checked")
comm = pytfcomm.init(rank=0, size=1, addr="127.0.0.1:0")
x = FakeCuda()
try:
    comm.allreduce(x, out=FakeCuda())
except pytfcomm.ConfigError as e:
    print("CONFIG:", e)
else:
    print("NO ERROR")
# The CPU path still works in the CUDA build.
import numpy as np
print("CPU:", comm.allreduce(np.arange(4.0)).tolist())
"""
    r = _run(package, code, PYTFCOMM_CUDA_DRIVER="/nonexistent/libcuda.so.1")
    assert r.returncode == 0, r.stderr
    assert "CONFIG:" in r.stdout and "no CUDA driver" in r.stdout, r.stdout + r.stderr
    assert "CPU: [0.0, 1.0, 2.0, 3.0]" in r.stdout, r.stdout
