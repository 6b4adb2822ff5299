"""A GPU all-reduce in PYTFCOMM_TIMELINE, like a CPU one (docs/timeline.md, docs/gpu.md).

Runs pytfcomm's CUDA build on the CPU stand-ins for libcuda.so.1 and
libnccl.so.2 with fake_cuda tensors; both are built once per session
(tests/conftest.py), and skipped with the reason when nvcc or nccl.h is missing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
STANDIN_SRC = HERE / "standin"


@pytest.fixture(scope="module")
def standin(standin_libs: Path) -> Path:
    """The session's stand-in build (tests/conftest.py): libcuda.so.1, libnccl.so.2."""
    return standin_libs


@pytest.fixture(scope="module")
def package(cuda_package: Path) -> Path:
    """The session's CUDA build of the core as a package (tests/conftest.py)."""
    return cuda_package


def _run(
    standin: Path, package: Path, tmp_path: Path, worker: str = "gpu_then_cpu", **extra: str
) -> list[dict]:
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
    paths = run_ranks(2, f"timeline_workers:{worker}", env=env, timeout=120)
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


def test_a_staged_call_of_one_chunk_is_one_host_collective(
    standin: Path, package: Path, tmp_path: Path
) -> None:
    """Staged, the chunks' host collectives carry the call's digest (the first one checks
    it), so a call of one chunk is one host all-reduce. A call with no elements stages
    nothing: one byte carries the digest instead. Then the CPU all-reduce."""
    seqs = []
    for trace in _run(standin, package, tmp_path, "staged_calls", PYTFCOMM_GPU_TRANSPORT="staged"):
        reduces = [
            e["args"]
            for e in _events(trace)
            if e["cat"] == "collective" and e["name"] == "allreduce"
        ]
        got = [(a["count"], a["dtype"]) for a in reduces]
        assert got == [(1000, "float32"), (1, "uint8"), (1000, "float32")], reduces
        seqs.append([a["seq"] for a in reduces])
    assert seqs[0] == seqs[1]
