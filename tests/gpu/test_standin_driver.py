"""The CPU stand-in for the CUDA driver (tests/gpu/standin/cuda) and, on it,
pytfcomm's staged GPU path end to end.

The stand-ins are built once per session (tests/conftest.py standin_libs).
Each driver check runs in a fresh process (the stand-in reads its
environment once, at cuInit): tests/gpu/standin/driver_checks.py. The
end-to-end tests use the session's CUDA build of pytfcomm's core
(tests/conftest.py cuda_package, shared with tests/builds/test_cuda_build.py).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
STANDIN = HERE / "standin"
REPO = HERE.parent.parent
CUDA_INC = Path(os.environ.get("CUDA_INCLUDE_DIR", "/usr/local/cuda/include"))


def _nccl_include() -> Path | None:
    spec = importlib.util.find_spec("nvidia.nccl")
    roots = list(spec.submodule_search_locations or []) if spec else []
    roots.append("/work/main/.venv/lib/python3.11/site-packages/nvidia/nccl")
    for root in roots:
        if (Path(root) / "include" / "nccl.h").is_file():
            return Path(root) / "include"
    return None


NCCL_INC = _nccl_include()
pytestmark = pytest.mark.skipif(
    shutil.which("cmake") is None or not (CUDA_INC / "cuda.h").is_file() or NCCL_INC is None,
    reason="the stand-in needs cmake, cuda.h and nccl.h (types only)",
)


@pytest.fixture(scope="session")
def libcuda(standin_libs: Path) -> Path:
    """The stand-in libcuda.so.1, built once per session (tests/conftest.py)."""
    return standin_libs / "libcuda.so.1"


@pytest.fixture(scope="session")
def fatbin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """kernels.cu compiled as pytfcomm's build compiles it (one architecture)."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not os.access(nvcc, os.X_OK):
        pytest.skip("nvcc is needed to build pytfcomm's kernels")
    out = tmp_path_factory.mktemp("fatbin") / "kernels.fatbin"
    subprocess.run(
        [nvcc, "--fatbin", "-O3", "-std=c++17", "-gencode", "arch=compute_90,code=sm_90",
         "-o", str(out), str(REPO / "csrc" / "gpu" / "kernels.cu")],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return out


def check(libcuda: Path, name: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """Run driver_checks.NAME in a fresh process; fail with its output."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("PTCSI_", "CUDA_VISIBLE"))}
    full.update(env, PYTHONPATH=str(STANDIN))
    r = subprocess.run(
        [sys.executable, str(STANDIN / "driver_checks.py"), name, str(libcuda), *args],
        capture_output=True, text=True, timeout=120, env=full,
    )  # fmt: skip
    assert r.returncode == 0, f"{name}:\n{r.stdout}\n{r.stderr}"
    return r


def test_exports_only_the_driver_api_and_hooks(libcuda: Path) -> None:
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(libcuda)], capture_output=True, text=True, check=True
    ).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    header = (REPO / "csrc" / "gpu" / "cuda_driver.h").read_text()
    wanted = {w.split("(")[1].rstrip(")") for w in header.split() if w.startswith("X(cu")}
    assert len(wanted) > 20 and wanted <= names, wanted - names
    assert {"ptcsi_stream_enqueue", "ptcsi_is_device_range"} <= names
    assert all(n.startswith(("cu", "ptcsi_")) for n in names), sorted(names)


def test_async_completion_and_stream_order(libcuda: Path) -> None:
    check(libcuda, "order", PTCSI_CUDA_DELAY_US="20000")


def test_cross_stream_event_waits(libcuda: Path) -> None:
    check(libcuda, "cross_stream", PTCSI_CUDA_DELAY_US="20000")


def test_fail_copy_is_sticky_on_its_stream(libcuda: Path) -> None:
    r = check(libcuda, "fail_copy", PTCSI_CUDA_FAIL_COPY="3")
    assert "PTCSI_CUDA_FAIL_COPY=3: cuMemcpyDtoDAsync_v2" in r.stderr, r.stderr


def test_out_of_range_copy_is_an_illegal_address(libcuda: Path) -> None:
    r = check(libcuda, "bad_range")
    lines = [x for x in r.stderr.splitlines() if "outside every live allocation" in x]
    assert len(lines) == 2 and "cuMemcpyDtoHAsync_v2" in lines[0], r.stderr


def test_kernels_match_numpy(libcuda: Path, fatbin: Path) -> None:
    pytest.importorskip("ml_dtypes")
    check(libcuda, "kernels", str(fatbin))


def test_stream_enqueue_hook(libcuda: Path) -> None:
    check(libcuda, "enqueue", PTCSI_CUDA_DELAY_US="5000")


def test_fake_cuda_dlpack_capsule(libcuda: Path) -> None:
    check(libcuda, "dlpack", PTCSI_CUDA_DELAY_US="20000")


@pytest.mark.parametrize(
    ("gpus", "visible", "names"),
    [
        ("2", None, ["0", "1"]),
        ("4", "2,0", ["2", "0"]),
        ("4", " 3 , 1", ["3", "1"]),
        ("4", "1,x,0", ["1"]),  # the first invalid entry ends the list
        ("4", "1,1,2", ["1"]),
        ("4", "0,7,1", ["0"]),
        ("4", "7", "none"),
        ("2", "", "none"),
        ("0", None, "none"),
    ],
)
def test_cuda_visible_devices(libcuda: Path, gpus: str, visible: str | None, names) -> None:
    env = {"PTCSI_GPUS": gpus}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    check(libcuda, "visible", *(names if isinstance(names, list) else [names]), **env)


# ---- pytfcomm's staged GPU path on the stand-in --------------------------


def _rank_env(libcuda: Path, package: Path, **extra: str) -> dict[str, str]:
    return {
        "PYTHONPATH": os.pathsep.join([str(package), str(STANDIN), str(HERE)]),
        "PYTFCOMM_CUDA_DRIVER": str(libcuda),
        "PYTFCOMM_GPU_TRANSPORT": "staged",
        "PTCSI_GPUS": "2",
        "PYTFCOMM_GPU_STAGE_BYTES": "65536",
        **extra,
    }


def test_pytfcomm_staged_collectives_on_the_standin(libcuda: Path, cuda_package: Path) -> None:
    from _harness import run_ranks

    env = _rank_env(libcuda, cuda_package, PTCSI_CUDA_DELAY_US="200")
    out = run_ranks(2, "standin_workers:staged", [1, 1000, 40_003], env=env, timeout=240)
    for r, res in enumerate(out):
        assert res["failures"] == [], f"rank {r}: {res['failures']}"
        assert res["backend"] == "staged"


def test_pytfcomm_reports_a_gpu_fault(libcuda: Path, cuda_package: Path) -> None:
    from _harness import run_ranks

    env = _rank_env(libcuda, cuda_package)
    per_rank = [{"PTCSI_CUDA_FAIL_COPY": "1"}, {}]
    out = run_ranks(2, "standin_workers:fault", env=env, per_rank_env=per_rank, timeout=120)
    assert out[0].startswith("CommError") and "illegal memory access" in out[0], out
    assert out[1] != "no error", out
