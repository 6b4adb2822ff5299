"""A GPU all-reduce in PYTFCOMM_TIMELINE, like a CPU one (docs/timeline.md, docs/gpu.md).

Runs pytfcomm's CUDA build on the CPU stand-ins for libcuda.so.1 and
libnccl.so.2 with fake_cuda tensors. Needs: a CUDA build of the core
(PYTFCOMM_STANDIN_CORE_BUILD, else build/cuda) and the stand-ins: built
libraries in PYTFCOMM_STANDIN_BUILD, else built here from their sources
(PYTFCOMM_STANDIN_SRC, else tests/gpu/standin, which also holds fake_cuda.py).
Skipped, with the reason, when any is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
STANDIN_SRC = Path(os.environ.get("PYTFCOMM_STANDIN_SRC", HERE / "standin"))
NCCL_INC = Path("/work/main/.venv/lib/python3.11/site-packages/nvidia/nccl/include")


def _nccl_include() -> Path | None:
    try:
        import nvidia.nccl  # type: ignore[import-not-found]

        for root in nvidia.nccl.__path__:
            if (Path(root) / "include" / "nccl.h").is_file():
                return Path(root) / "include"
    except ImportError:
        pass
    return NCCL_INC if (NCCL_INC / "nccl.h").is_file() else None


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the stand-ins' libcuda.so.1 and libnccl.so.2."""
    if not (STANDIN_SRC / "fake_cuda.py").is_file():
        pytest.skip(f"no GPU stand-in (fake_cuda.py) in {STANDIN_SRC}")
    given = os.environ.get("PYTFCOMM_STANDIN_BUILD")
    if given:
        return Path(given)
    inc = _nccl_include()
    if not (STANDIN_SRC / "CMakeLists.txt").is_file() or inc is None:
        pytest.skip("the stand-ins' sources or nccl.h are missing")
    build = tmp_path_factory.mktemp("standin")
    cfg = ["cmake", "-S", str(STANDIN_SRC), "-B", str(build), f"-DNCCL_INCLUDE_DIR={inc}"]
    subprocess.run(cfg, check=True, capture_output=True, timeout=120)
    r = subprocess.run(
        ["cmake", "--build", str(build), "-j2"], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return build


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    build = Path(os.environ.get("PYTFCOMM_STANDIN_CORE_BUILD", REPO / "build" / "cuda"))
    libs = [*build.glob("_core*.so"), build / "libpytfcomm_core.so"]
    if len(libs) < 2 or not libs[-1].is_file():
        pytest.skip(f"no CUDA build of _core in {build} (PYTFCOMM_STANDIN_CORE_BUILD)")
    sys.path.insert(0, str(REPO / "tests"))
    from test_cuda_build import make_package

    return make_package(tmp_path_factory.mktemp("gpu-timeline-pkg"), libs)


def _run(standin: Path, package: Path, tmp_path: Path, **extra: str) -> list[dict]:
    from _harness import run_ranks

    env = {
        "PYTHONPATH": os.pathsep.join([str(package), str(STANDIN_SRC), str(HERE)]),
        "PYTFCOMM_CUDA_DRIVER": str(standin / "libcuda.so.1"),
        "PYTFCOMM_NCCL_LIBRARY": str(standin / "libnccl.so.2"),
        "PYTFCOMM_GPU_TRANSPORT": "nccl",
        "PTCSI_GPUS": "2",
        "PYTFCOMM_TIMELINE": str(tmp_path / "trace.json"),
        **extra,
    }
    paths = run_ranks(2, "timeline_workers:gpu_then_cpu", env=env, timeout=120)
    return [json.loads(Path(p).read_text()) for p in paths]


def _events(trace: dict) -> list[dict]:
    return [e for e in trace["traceEvents"] if e.get("ph") == "X"]


def _gpu_and_cpu(events: list[dict]) -> tuple[dict, dict]:
    reduces = [e for e in events if e["cat"] == "collective" and e["name"] == "allreduce"]
    gpu = [e for e in reduces if e["args"]["algorithm"] == "nccl"]
    cpu = [e for e in reduces if e["args"]["algorithm"] != "nccl"]
    assert len(gpu) == 1 and len(cpu) == 1, reduces
    return gpu[0], cpu[0]


def test_gpu_allreduce_is_a_collective_event(standin: Path, package: Path, tmp_path: Path) -> None:
    """Negotiated like a CPU all-reduce: same seq on every rank, phases inside its span."""
    seqs = []
    for trace in _run(standin, package, tmp_path):
        events = _events(trace)
        gpu, cpu = _gpu_and_cpu(events)
        args = gpu["args"]
        want = (1000, "float32", "sum", 4000)
        assert (args["count"], args["dtype"], args["op"], args["bytes"]) == want
        assert args["requested"] == "auto" and "error" not in args
        assert cpu["args"]["seq"] > args["seq"]
        mine = [e for e in events if e["cat"] == "phase" and e["args"]["seq"] == args["seq"]]
        phases = {e["name"]: e for e in mine}
        assert {"negotiate", "nccl_launch", "gpu_wait"} <= set(phases), phases
        end = gpu["ts"] + gpu["dur"] + 0.002
        for p in phases.values():
            assert gpu["ts"] - 0.002 <= p["ts"] and p["ts"] + p["dur"] <= end, (p, gpu)
            assert p["tid"] == gpu["tid"]
        seqs.append(args["seq"])
    assert seqs[0] == seqs[1]


def test_gpu_allreduce_without_verify_still_traced(
    standin: Path, package: Path, tmp_path: Path
) -> None:
    """PYTFCOMM_GPU_VERIFY=0 launches NCCL without negotiating: one event, no phases."""
    for trace in _run(standin, package, tmp_path, PYTFCOMM_GPU_VERIFY="0"):
        gpu, _ = _gpu_and_cpu(_events(trace))
        assert gpu["args"]["count"] == 1000 and gpu["dur"] > 0
