"""The CUDA build of the core and the CPU stand-ins for libcuda/libnccl, built
once per test session (the fixtures are in tests/conftest.py).

One configure serves tests/builds/test_cuda_build.py, tests/builds/test_tf_gpu_build.py and
tests/gpu: the core does not depend on the TF options (PYTFCOMM_TF_GPU only
changes the op library) and the kernels are compiled for the default
architectures (nvcc takes seconds; the C++ sources take minutes). The build
directory is a fresh temporary one, or PYTFCOMM_TEST_CUDA_BUILD (kept between
runs: rebuilt incrementally).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STANDIN = REPO / "tests" / "gpu" / "standin"
CONFIGURE_TIMEOUT = 240  # seconds; imports TensorFlow once
BUILD_TIMEOUT = 900  # the core on 2 busy cores: 3-5 minutes


def _nvcc() -> str | None:
    for cand in (os.environ.get("CUDACXX"), "/usr/local/cuda/bin/nvcc", shutil.which("nvcc")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def _nccl_include() -> str | None:
    spec = importlib.util.find_spec("nvidia.nccl")
    for root in list(spec.submodule_search_locations or []) if spec else []:
        if (Path(root) / "include" / "nccl.h").is_file():
            return str(Path(root) / "include")
    return "/usr/include" if Path("/usr/include/nccl.h").is_file() else None


NVCC = _nvcc()
NCCL_INC = _nccl_include()
CUDA_INC = str(Path(NVCC).resolve().parent.parent / "include") if NVCC else None

# Why the CUDA build cannot be made here (None: it can).
MISSING: str | None = None
if NVCC is None or NCCL_INC is None:
    MISSING = (
        f"the CUDA build needs nvcc (found: {NVCC}) and nccl.h (found: {NCCL_INC}); "
        "install the CUDA toolkit and `pip install nvidia-nccl-cu13`"
    )
elif not (Path(CUDA_INC) / "cuda.h").is_file():  # type: ignore[arg-type]
    MISSING = f"no cuda.h next to nvcc ({CUDA_INC})"


# The session's steps (fixtures in tests/conftest.py) each fixture needs,
# directly or through another fixture (gpu_env asks for its builds with
# getfixturevalue, which pytest cannot see when it collects, so it is named here).
# Configuring and building are separate steps: a test that only configures
# must not take the build's time, leaving the test that builds without it.
BUILDS_OF: dict[str, set[str]] = {
    "cuda_configure": {"cuda_configure"},
    "cuda_build": {"cuda_configure", "cuda_build"},
    "cuda_package": {"cuda_configure", "cuda_build"},
    "standin_libs": {"standin_libs"},
    "gpu_env": {"cuda_configure", "cuda_build", "standin_libs"},
}
# The most each step may take (the limits _run() gives them).
STEP_SECONDS: dict[str, float] = {
    "cuda_configure": CONFIGURE_TIMEOUT,
    "cuda_build": BUILD_TIMEOUT,
    "standin_libs": CONFIGURE_TIMEOUT + BUILD_TIMEOUT,
}


def first_use_seconds(fixtures_per_test: list[set[str]]) -> list[float]:
    """For tests in run order (each given by its fixture names), the seconds each must
    be given beyond its usual limit: the limits of the steps it is the first to need."""
    seen: set[str] = set()
    extra = []
    for names in fixtures_per_test:
        new = set().union(*(BUILDS_OF.get(n, set()) for n in names)) - seen
        seen |= new
        extra.append(float(sum(STEP_SECONDS[step] for step in new)))
    return extra


def _env() -> dict[str, str]:
    return dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")


def _run(cmd: list[str], what: str, timeout: float) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env())
    assert r.returncode == 0, f"{what} failed:\n{r.stdout[-6000:]}\n{r.stderr[-4000:]}"
    return r


def configure_core(build: Path) -> str:
    """Configure the CUDA variant (with the TF op library's GPU kernels when TF is
    importable) in ``build``; returns CMake's output."""
    import pybind11

    nvcc = Path(NVCC)  # type: ignore[arg-type]
    configure = [
        "cmake", "-S", str(REPO), "-B", str(build), "-G", "Ninja",
        "-DCMAKE_BUILD_TYPE=Release", "-DPYTFCOMM_WITH_CUDA=ON", "-DPYTFCOMM_TF_GPU=ON",
        "-DPYTFCOMM_CUDA_ARCHS=75;80;90;100;120",
        f"-DPython_EXECUTABLE={sys.executable}", f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
        f"-DCUDAToolkit_ROOT={nvcc.parent.parent}", f"-DPYTFCOMM_NCCL_INCLUDE_DIR={NCCL_INC}",
    ]  # fmt: skip
    return _run(configure, "configure", CONFIGURE_TIMEOUT).stdout


def build_targets(build: Path, *targets: str) -> None:
    jobs = str(os.cpu_count() or 2)
    _run(["cmake", "--build", str(build), "--target", *targets, "-j", jobs], "build", BUILD_TIMEOUT)


def core_libs(build: Path) -> list[Path]:
    return [*build.glob("_core*.so"), build / "libpytfcomm_core.so"]


def make_package(root: Path, libs: list[Path]) -> Path:
    """root/pytfcomm: this checkout's Python files plus `libs` (built elsewhere); returns root."""
    pkg = root / "pytfcomm"
    shutil.copytree(REPO / "pytfcomm", pkg, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    for lib in libs:
        shutil.copy2(lib, pkg / lib.name)
    return root


STANDIN_TARGETS = (
    "cuda_standin", "nccl_standin", "nccl_standin_norevoke", "nccl_standin_noshrink",
    "nccl_standin_shrink227", "nccl_standin_test",
)  # fmt: skip


def build_standin(build: Path) -> Path:
    """libcuda.so.1 and libnccl.so.2 of tests/gpu/standin (and its variants without
    optional entry points: norevoke/, noshrink/, shrink227/; the CMakeLists names
    them), and the NCCL stand-in's test program (nccl_standin_test), in ``build``;
    returns it."""
    configure = [
        "cmake", "-S", str(STANDIN), "-B", str(build), "-G", "Ninja",
        "-DCMAKE_BUILD_TYPE=RelWithDebInfo", f"-DCUDA_INCLUDE_DIR={CUDA_INC}",
        f"-DNCCL_INCLUDE_DIR={NCCL_INC}", "-DPTCSI_BUILD_TESTS=ON",
    ]  # fmt: skip
    _run(configure, "configure the stand-ins", CONFIGURE_TIMEOUT)
    _run(
        ["cmake", "--build", str(build), "--target", *STANDIN_TARGETS, "-j2"],
        "build the stand-ins",
        BUILD_TIMEOUT,
    )
    return build


def build_stream_driver(build: Path, core_build: Path, standin: Path) -> Path:
    """tests/gpu/standin/stream (enqueue_on_stream's test program) against the CUDA
    core in ``core_build`` and the stand-in driver; returns the executable."""
    configure = [
        "cmake", "-S", str(STANDIN / "stream"), "-B", str(build), "-G", "Ninja",
        "-DCMAKE_BUILD_TYPE=RelWithDebInfo", f"-DCUDA_INCLUDE_DIR={CUDA_INC}",
        f"-DPYTFCOMM_SOURCE_DIR={REPO}", f"-DPYTFCOMM_CORE_BUILD_DIR={core_build}",
        f"-DCUDA_DRIVER_DIR={standin}",
    ]  # fmt: skip
    _run(configure, "configure the stream driver", CONFIGURE_TIMEOUT)
    _run(["cmake", "--build", str(build), "-j2"], "build the stream driver", BUILD_TIMEOUT)
    return build / "stream_driver"
