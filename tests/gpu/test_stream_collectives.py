"""The TF GPU kernels' C++ path below the TF boundary, on the CPU stand-ins:
pytfcomm::gpu::enqueue_on_stream (csrc/gpu/stream_collectives.h), which
csrc/tf/gpu_kernels.cc calls with TF's CUDA stream, driven by a small C++
program (tests/gpu/standin/stream/stream_driver.cc) linked against the
session's CUDA build of libpytfcomm_core.so: no TensorFlow, and no test hook
in the core. 2 processes x 2 stand-in GPUs, NCCL and staged: all-reduce as a
group of 1 and of 2 local GPUs (MirroredStrategy's shape), broadcast from
each process, all-gather; done() called exactly once; errors (a bad
argument, a missing group member, processes that disagree, a missing
process) delivered to done().
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from _gpu_env import GpuEnv
from _harness import free_port

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def stream_driver(gpu_env: GpuEnv, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not gpu_env.standin:
        pytest.skip(
            "the driver program is built against the session's CUDA build and the stand-in "
            "driver; on a GPU machine tests/gpu/test_tf_gpu.py runs the real kernels "
            "(PYTFCOMM_TEST_GPU=standin runs this here too)"
        )
    from _gpu_builds import build_stream_driver

    assert gpu_env.core_build and gpu_env.standin_libs
    out = tmp_path_factory.mktemp("stream-driver")
    return build_stream_driver(out, gpu_env.core_build, gpu_env.standin_libs)


def _run(driver: Path, gpu_env: GpuEnv, mode: str, transport: str, **extra: str) -> list[str]:
    """Runs the driver as 2 processes; returns their outputs (asserting both passed)."""
    env = dict(os.environ, **gpu_env.env, PYTFCOMM_GPU_TRANSPORT=transport, **extra)
    env.pop("PYTHONPATH", None)
    port = str(free_port())
    procs = [
        subprocess.Popen(
            [str(driver), mode, str(r), "2", port],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
        for r in range(2)
    ]
    outs, deadline = [], time.monotonic() + 120
    try:
        for p in procs:
            outs.append(p.communicate(timeout=max(1, deadline - time.monotonic()))[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    report = "\n".join(f"--- process {r} (exit {p.returncode}):\n{o}" for r, (p, o) in
                       enumerate(zip(procs, outs, strict=True)))  # fmt: skip
    assert all(p.returncode == 0 for p in procs), report
    assert all("PASSED" in o and "FAIL " not in o for o in outs), report
    return outs


@pytest.mark.parametrize("transport", ["nccl", "staged"])
def test_collectives_on_streams(stream_driver: Path, gpu_env: GpuEnv, transport: str) -> None:
    extra = {"PTCSI_CUDA_DELAY_US": "200"} if transport == "staged" else {}
    outs = _run(stream_driver, gpu_env, "collectives", transport, PYTFCOMM_LOG_LEVEL="2", **extra)
    for o in outs:
        assert "OK all-reduce float32 sum x2 GPUs n=300007" in o, o
        assert "OK broadcast root=1" in o and "OK all-gather 2 pieces" in o, o
        assert "OK missing group member times out" in o, o
        assert "28 done() calls, each exactly once" in o, o
        if transport == "nccl":
            assert "communicator: 2 GPU(s) x 2 process(es)" in o, o
        else:
            assert "staged through host memory" in o, o


@pytest.mark.parametrize("transport", ["nccl", "staged"])
def test_processes_that_disagree_get_mismatch_in_done(
    stream_driver: Path, gpu_env: GpuEnv, transport: str
) -> None:
    outs = _run(stream_driver, gpu_env, "mismatch", transport)
    assert all("OK mismatch: MismatchError" in o for o in outs), outs


@pytest.mark.parametrize("transport", ["nccl", "staged"])
def test_missing_process_times_out_in_done(
    stream_driver: Path, gpu_env: GpuEnv, transport: str
) -> None:
    outs = _run(stream_driver, gpu_env, "missing", transport)
    assert "OK missing process: done() after" in outs[0], outs
