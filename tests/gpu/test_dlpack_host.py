"""DLPack tensors that live in host memory take the NumPy path; bad DLPack
inputs raise pytfcomm errors. Runs without a GPU."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from _harness import run_ranks

import pytfcomm._core as core
from pytfcomm._dlpack import nccl_candidates

HERE = Path(__file__).resolve().parent
ENV = {"PYTHONPATH": f"{HERE}:{os.environ.get('PYTHONPATH', '')}"}


def test_host_dlpack_tensors_through_every_collective() -> None:
    out = run_ranks(2, "dlpack_workers:host_collectives", env=ENV)
    x0, x1 = np.arange(6, dtype=np.float32), np.arange(6, dtype=np.float32) + 1
    for res in out:
        assert res["allreduce"] == (x0 + x1).tolist()
        assert res["broadcast"] == x1.tolist()
        assert res["allgather"] == np.concatenate([x0, x1]).tolist()
        assert res["out_is_returned"] is True
        assert res["out"] == x1.tolist()
    assert out[0]["reduce_scatter"] == (x0 + x1)[:3].tolist()
    assert out[1]["reduce_scatter"] == (x0 + x1)[3:].tolist()


def test_bad_dlpack_inputs_raise_clear_errors() -> None:
    said = run_ranks(1, "dlpack_workers:bad_inputs", env=ENV)[0]
    rocm, cuda, cuda_out, complex_in, scalar = said
    assert rocm.startswith("InvalidArgumentError") and "device type 10" in rocm, rocm
    if core.gpu_info(nccl_candidates()).get("cuda_build"):
        # A CUDA build on a machine without a GPU says the GPU is missing.
        assert cuda.startswith("ConfigError") or "cuda" in cuda.lower(), cuda
    else:
        assert cuda.startswith("ConfigError") and "PYTFCOMM_WITH_CUDA" in cuda, cuda
    assert cuda_out.startswith("InvalidArgumentError") and "GPU" in cuda_out, cuda_out
    assert complex_in.startswith("InvalidArgumentError") and "complex64" in complex_in, complex_in
    assert scalar.startswith("InvalidArgumentError") and "dimension" in scalar, scalar


def test_bad_cuda_dlpack_inputs_raise_clear_errors(gpu_env) -> None:
    """On a GPU or the stand-ins: a wrong out= shape, a host out= for a GPU input,
    and (fake_cuda tensors) no out= at all are InvalidArgumentErrors naming the
    problem; a 2-D bfloat16 all-reduce works."""
    out = run_ranks(2, "dlpack_workers:cuda_inputs", env=gpu_env.env, timeout=120)
    for said in out:
        shape, host_out, gather_shape, *rest = said
        assert shape.startswith("InvalidArgumentError") and "shape (3, 4)" in shape, shape
        assert host_out.startswith("InvalidArgumentError") and "CUDA tensor" in host_out, host_out
        assert gather_shape.startswith("InvalidArgumentError") and "(8, 3)" in gather_shape
        if gpu_env.standin:
            no_out = rest.pop(0)
            assert no_out.startswith("InvalidArgumentError") and "pass out=" in no_out, no_out
        assert rest in ([], ["bfloat16 ok=True"]), rest
