"""The CUDA variant (PYTFCOMM_WITH_CUDA=ON) configures, compiles and links here,
without a GPU: nvcc from the CUDA toolkit, nccl.h from the nvidia-nccl wheel.

The module it builds must not need libcuda, libcudart or libnccl to load, must
import on this GPU-less machine, report "no GPU" cleanly through
``python -m pytfcomm info``, and refuse a CUDA tensor with a ConfigError that
says why. One configure + build (about a minute on 2 cores) serves every test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BUILD_TIMEOUT = 420  # seconds; the build takes ~60-90 s on the 2-core CI machine


def _nvcc() -> str | None:
    for cand in (os.environ.get("CUDACXX"), "/usr/local/cuda/bin/nvcc", shutil.which("nvcc")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def _nccl_include() -> str | None:
    import importlib.util

    spec = importlib.util.find_spec("nvidia.nccl")
    for root in list(spec.submodule_search_locations or []) if spec else []:
        if (Path(root) / "include" / "nccl.h").is_file():
            return str(Path(root) / "include")
    return "/usr/include" if Path("/usr/include/nccl.h").is_file() else None


NVCC = _nvcc()
NCCL_INC = _nccl_include()
pytestmark = pytest.mark.skipif(
    NVCC is None or NCCL_INC is None,
    reason=f"CUDA compile check needs nvcc (found: {NVCC}) and nccl.h (found: {NCCL_INC}); "
    "install the CUDA toolkit and `pip install nvidia-nccl-cu13`",
)


@pytest.fixture(scope="module")
def cuda_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Configure and build the CUDA variant of _core; return the build directory."""
    import pybind11

    build = tmp_path_factory.mktemp("cuda-build")
    nvcc = Path(NVCC)  # type: ignore[arg-type]
    configure = [
        "cmake", "-S", str(REPO), "-B", str(build), "-G", "Ninja",
        "-DCMAKE_BUILD_TYPE=Release", "-DPYTFCOMM_WITH_CUDA=ON", "-DPYTFCOMM_WITH_TF=OFF",
        f"-DPython_EXECUTABLE={sys.executable}", f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
        f"-DCUDAToolkit_ROOT={nvcc.parent.parent}", f"-DPYTFCOMM_NCCL_INCLUDE_DIR={NCCL_INC}",
    ]  # fmt: skip
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    r = subprocess.run(configure, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, f"configure failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    assert "pytfcomm: CUDA" in r.stdout, r.stdout[-2000:]
    jobs = str(os.cpu_count() or 2)
    r = subprocess.run(
        ["cmake", "--build", str(build), "--target", "_core", "-j", jobs],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        env=env,
    )
    assert r.returncode == 0, f"build failed:\n{r.stdout[-6000:]}\n{r.stderr[-4000:]}"
    return build


@pytest.fixture(scope="module")
def package(cuda_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pytfcomm package made of this checkout's Python files and the CUDA-built libraries."""
    return make_package(
        tmp_path_factory.mktemp("cuda-pkg"),
        [*cuda_build.glob("_core*.so"), cuda_build / "libpytfcomm_core.so"],
    )


def make_package(root: Path, libs: list[Path]) -> Path:
    """root/pytfcomm: this checkout's Python files plus `libs` (built elsewhere); returns root."""
    pkg = root / "pytfcomm"
    shutil.copytree(REPO / "pytfcomm", pkg, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    for lib in libs:
        shutil.copy2(lib, pkg / lib.name)
    return root


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
